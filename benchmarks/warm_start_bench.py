"""Warm start then AT-GRPO, Ray-free, on a small task: how good is greedy held-out success?

    python3 benchmarks/warm_start_bench.py --task PlanPath-v0 --size 3 --episodes 8 --epochs 3 \
        --rl-iters 10 [--sign -1] [--hidden 64 --layers 2] [--eval-episodes 16]

Steps (all real parts, CPU): build the tiny model from a config (one copy per role: L3);
greedy held-out success (eval split) and per-role valid ratios *before* the warm start;
:func:`rllib_integration.core.warm_start.collect_demonstrations` (train split) +
:func:`~rllib_integration.core.warm_start.warm_start`; greedy held-out success after it; then
``--rl-iters`` AT-GRPO iterations as in tests/rllib_integration/core/test_learning.py (``collect_tree``
with K candidates on ``--envs`` fresh train seeds, ``at_grpo`` advantages times ``--sign``,
zero-variance groups dropped, PPO-clip loss, Adam, gradient norm clipped at 1) with a greedy
held-out evaluation every ``--eval-every`` iterations. Prints one line per evaluation and a
final summary line (Markdown table row for benchmarks/RESULTS.md "Warm start").
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import llm_marl_envs  # noqa: E402
from rllib_integration.core.advantages import compute_advantages, dynamic_sampling_mask  # noqa: E402
from rllib_integration.core import seeding  # noqa: E402
from rllib_integration.core.backends import HFBackend, SamplingParams  # noqa: E402
from rllib_integration.core.loss import LossConfig, collate_samples, policy_loss, sequence_token_logprobs  # noqa: E402
from rllib_integration.core.models import build_tiny_model, load_model  # noqa: E402
from rllib_integration.core.rollout import RolloutSampler, group_ids  # noqa: E402
from rllib_integration.core.warm_start import collect_demonstrations, warm_start  # noqa: E402


def evaluate(backend, mapping, env_id: str, config: dict, episodes: int, max_new_tokens: int, chat: bool) -> dict:
    """Greedy team success on the eval split (seeds 0..episodes-1) and each role's valid ratio."""
    envs = [llm_marl_envs.make(env_id, split="eval", **config) for _ in range(episodes)]
    sampler = RolloutSampler(backend, mapping, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens),
                             k=1, chat=chat)
    samples = sampler.collect_parallel(envs, seeds=list(range(episodes)))
    out = {"success": float(np.mean([ep.success for ep in sampler.last_episodes]))}
    for agent in envs[0].possible_agents:
        mine = [s.valid for s in samples if s.agent == agent]
        out[f"valid_{agent}"] = float(np.mean(mine)) if mine else 0.0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="PlanPath-v0")
    ap.add_argument("--size", type=int, default=3)
    ap.add_argument("--density", type=float, default=0.25)
    ap.add_argument("--max-turns", type=int, default=2)
    ap.add_argument("--episodes", type=int, default=8, help="demonstration episodes (train split)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--ws-lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--rl-iters", type=int, default=10)
    ap.add_argument("--rl-lr", type=float, default=1e-4)
    ap.add_argument("--first-role-lr", type=float, default=None,
                    help="RL lr of the first role (the grid tasks' tool, whose long program drifts); default --rl-lr")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--envs", type=int, default=4)
    ap.add_argument("--sign", type=float, default=1.0, help="-1: the flipped-advantage control")
    ap.add_argument("--eval-episodes", type=int, default=16)
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=640)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    env_id = args.task
    config: dict = {"prompt_style": "compact", "max_turns": args.max_turns}
    if env_id == "PlanPath-v0":
        config.update(size=args.size, obstacle_density=args.density)
    elif env_id == "Sudoku-v0":
        config.update(size=4)
    roles = llm_marl_envs.make(env_id, **config).possible_agents
    mapping = {r: r for r in roles}
    path = build_tiny_model(hidden=args.hidden, layers=args.layers)
    models = {r: load_model(path) for r in roles}
    backend = HFBackend(models, device="cpu")
    chat = False

    def ev(label: str) -> dict:
        t = time.perf_counter()
        r = evaluate(backend, mapping, env_id, config, args.eval_episodes, args.max_new_tokens, chat)
        print(f"[{time.perf_counter() - t0:6.1f}s] {label}: greedy held-out success {r['success']:.2f}, valid "
              + ", ".join(f"{a} {r['valid_' + a]:.2f}" for a in roles) + f" (eval {time.perf_counter() - t:.1f}s)",
              flush=True)
        return r

    before = ev("before warm start")
    demos = collect_demonstrations(env_id, config, args.episodes, seed=seeding.demo_seed(args.seed))
    ws = warm_start(backend, demos, mapping, epochs=args.epochs, lr=args.ws_lr, batch_size=args.batch_size,
                    chat=chat, progress=False, seed=args.seed)
    print(f"[{time.perf_counter() - t0:6.1f}s] warm start: {ws.num_demonstrations} demonstrations, "
          f"{ws.completion_tokens} completion tokens, loss per epoch "
          + " ".join(f"{x:.3f}" for x in ws.epoch_losses) + f" ({ws.seconds:.1f}s)", flush=True)
    after_ws = ev("after warm start")
    curve = [(0, after_ws)]
    lrs = {r: args.rl_lr for r in roles}
    if args.first_role_lr is not None:
        lrs[roles[0]] = args.first_role_lr
    opt = {r: torch.optim.Adam(models[r][0].parameters(), lr=lrs[r]) for r in roles}
    cfg = LossConfig(clip_low=0.2, clip_high=0.28)
    sampler = RolloutSampler(backend, mapping, SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens,
                                                              seed=args.seed), k=args.k, chat=chat)
    for it in range(1, args.rl_iters + 1):
        seeds = [seeding.train_env_seed(args.seed, (it - 1) * args.envs + i) for i in range(args.envs)]
        envs = [llm_marl_envs.make(env_id, **config) for _ in seeds]
        samples = sampler.collect_tree(envs, seeds=seeds)
        rewards = [s.reward for s in samples]
        gid = group_ids(samples)
        adv = args.sign * compute_advantages(rewards, gid, "at_grpo")
        keep = dynamic_sampling_mask(rewards, gid)
        for r in roles:
            idx = [i for i, s in enumerate(samples) if keep[i] and s.policy_id == r]
            if not idx:
                continue
            model, tok = models[r]
            batch = collate_samples([samples[i] for i in idx], tok.pad_token_id)
            model.train()
            logp = sequence_token_logprobs(model, batch["input_ids"], batch["attention_mask"])
            loss, _ = policy_loss(logp, batch["old_logprobs"], torch.tensor(adv[idx], dtype=torch.float32),
                                  batch["completion_mask"], cfg)
            opt[r].zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt[r].step()
            model.eval()
        tree = np.mean([ep.success for ep in sampler.last_episodes])
        print(f"[{time.perf_counter() - t0:6.1f}s] iter {it}: tree success {tree:.2f}, kept {int(keep.sum())}/"
              f"{len(samples)}", flush=True)
        if it % args.eval_every == 0 or it == args.rl_iters:
            curve.append((it, ev(f"iter {it}")))
    end = curve[-1][1]
    print(f"| {env_id} {config} | {args.episodes} ep x {args.epochs} epochs | {before['success']:.2f} | "
          f"{after_ws['success']:.2f} | {end['success']:.2f} ({args.rl_iters} iters, sign {args.sign:+.0f}) | "
          + ", ".join(f"{a} {end['valid_' + a]:.2f}" for a in roles) + f" | {time.perf_counter() - t0:.0f} s |")


if __name__ == "__main__":
    main()
