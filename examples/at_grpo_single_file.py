"""AT-GRPO in one file, in the style of CleanRL: the whole algorithm on one screen, no Ray.

Trains the embedded default team (``llm_marl/PlanPath-v0`` 3x3: a ``tool`` role that writes a path-finding
program run in the sandbox, and an ``executor`` role that moves) with one tiny model per role (L3), using
only the Ray-free core (``rllib_integration.core``). One iteration reads top to bottom:

    sample   K candidates per (env, turn, agent); the best one continues the episode   (collect_tree)
    group    candidates of the same (env, turn, agent) form a group                     (group_ids)
    advantage  each reward minus its group's mean, over the group's std                 (compute_advantages)
    filter   groups whose K rewards are equal carry no signal                          (dynamic_sampling_mask)
    loss     token-level PPO-clip on each role's own samples                           (policy_loss)
    step     one Adam step per role, gradient norm clipped
    evaluate greedy episodes on the held-out eval split                                (collect_parallel)

The RLlib algorithm (``ATGRPO``, ``llm-marl train``) runs the same steps, spread over rollout actors and
learners, with checkpoints, metrics files and more estimators. Run it:

    python examples/at_grpo_single_file.py --iterations 24

Defaults follow ``llm-marl show-default`` (k 8, 4 envs per iteration, temperature 1, lr per role, 16 warm-start
episodes x 30 epochs); the printed numbers are this script's own, not the CLI's (different seeds per iteration).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import llm_marl_envs
from rllib_integration.core import (HFBackend, LossConfig, RolloutSampler, SamplingParams, build_tiny_model,
                                    collate_samples, collect_demonstrations, compute_advantages, dynamic_sampling_mask,
                                    group_ids, load_model, policy_loss, sequence_token_logprobs)
from rllib_integration.core.warm_start import warm_start

ENV = "llm_marl/PlanPath-v0"
ENV_CONFIG = dict(size=3, obstacle_density=0.25, prompt_style="compact", max_turns=2)
ROLES = ("tool", "executor")
LR = {"tool": 1e-4, "executor": 1e-3}  # per role (the default config's policies.<role>.lr)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=24)
    p.add_argument("--envs-per-iteration", type=int, default=4)
    p.add_argument("--k", type=int, default=8, help="candidates per (env, turn, agent)")
    p.add_argument("--max-new-tokens", type=int, default=360)
    p.add_argument("--warm-start-episodes", type=int, default=16)
    p.add_argument("--warm-start-epochs", type=int, default=30)
    p.add_argument("--eval-episodes", type=int, default=64)
    p.add_argument("--eval-every", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def evaluate(backend: HFBackend, n: int, max_new_tokens: int) -> float:
    """Greedy team success on eval-split seeds 0..n-1 (never trained on)."""
    envs = [llm_marl_envs.make(ENV, split="eval", **ENV_CONFIG) for _ in range(n)]
    sampler = RolloutSampler(backend, {r: r for r in ROLES},
                             SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens, seed=0), k=1, chat=False)
    sampler.collect_parallel(envs, seeds=list(range(n)))
    return float(np.mean([ep.success for ep in sampler.last_episodes]))


def main() -> dict:
    args = parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()

    # one tiny Llama per role (built from a config, cached), all behind one generation backend
    path = build_tiny_model()
    models = {role: load_model(path) for role in ROLES}
    pad_id = models[ROLES[0]][1].pad_token_id
    backend = HFBackend(models, device="cpu")
    mapping = {role: role for role in ROLES}

    # supervised warm start on the task's expert demonstrations (train split)
    demos = collect_demonstrations(ENV, ENV_CONFIG, num_episodes=args.warm_start_episodes, seed=args.seed)
    warm_start(backend, demos, mapping, epochs=args.warm_start_epochs, lr=5e-3, batch_size=8, chat=False,
               seed=args.seed, progress=False)
    curve = [(0, evaluate(backend, args.eval_episodes, args.max_new_tokens))]
    print(f"iter 0: eval success {curve[-1][1]:.3f} (after the warm start)", flush=True)

    optimizers = {r: torch.optim.Adam(models[r][0].parameters(), lr=LR[r]) for r in ROLES}
    loss_cfg = LossConfig(clip_low=0.2, clip_high=0.28)
    sampler = RolloutSampler(backend, mapping, SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens,
                                                              seed=args.seed), k=args.k, chat=False)
    for it in range(1, args.iterations + 1):
        # sample: K candidates at every (env, turn, agent); the best continues the episode
        envs = [llm_marl_envs.make(ENV, split="train", **ENV_CONFIG) for _ in range(args.envs_per_iteration)]
        samples = sampler.collect_tree(envs, seeds=rng.integers(0, 2**31 - 1, size=len(envs)).tolist())
        rewards = [s.reward for s in samples]
        # group + advantage: AT-GRPO normalises each reward within its (env, turn, agent) group
        gid = group_ids(samples)
        adv = compute_advantages(rewards, gid, "at_grpo")
        keep = dynamic_sampling_mask(rewards, gid)
        # loss + step: each role trains on its own samples only
        losses = {}
        for role, (model, _) in models.items():
            idx = [i for i, s in enumerate(samples) if keep[i] and s.policy_id == role]
            if not idx:
                continue  # no informative group for this role: no step (Adam would move on a zero gradient)
            batch = collate_samples([samples[i] for i in idx], pad_id)
            model.train()
            logp = sequence_token_logprobs(model, batch["input_ids"], batch["attention_mask"])
            loss, _ = policy_loss(logp, batch["old_logprobs"], torch.tensor(adv[idx], dtype=torch.float32),
                                  batch["completion_mask"], loss_cfg)
            optimizers[role].zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizers[role].step()
            model.eval()
            losses[role] = float(loss)
        tree_success = float(np.mean([ep.success for ep in sampler.last_episodes]))
        line = f"iter {it}: train success {tree_success:.3f} samples {len(samples)} kept {int(keep.sum())}"
        line += "".join(f" {role}_loss {v:+.4f}" for role, v in losses.items())  # roles that took a step
        if it % args.eval_every == 0 or it == args.iterations:
            curve.append((it, evaluate(backend, args.eval_episodes, args.max_new_tokens)))
            line += f" | eval success {curve[-1][1]:.3f}"
        print(line, flush=True)
    print(f"eval success {curve[0][1]:.3f} -> {curve[-1][1]:.3f} in {time.perf_counter() - t0:.0f} s", flush=True)
    return {"curve": curve}


if __name__ == "__main__":
    main()
