"""The router task (llm_marl/Router-v0, an orchestrated team) learns to delegate with ATGRPO on CPU.

The router is asked the value of a key it cannot see; it answers with a guess (right 1 time in 4) or calls
the lookup agent, who sees the table. Delegating pays nothing now, only through the lookup agent's answer,
so the settings are the ones docs/environments.md ("Orchestrated teams") gives for that:
``sampling.mode: parallel`` (K whole episodes per env, each action as the policy samples it) and an episode
estimator (``episode_grpo``: every step of an episode is scored by the episode's return).

A model per role (L3), one token per reply, temperature 1: the lookup agent is a competent reader from the
start (the tiny model fine-tuned on the lookup expert's steps only, as a retrieval agent would be), the
router is the untrained tiny model, so whether it calls is what RL has to find. It starts calling in about
one episode of four (a digit is a call); the delegation rate and the success (both over the training
rollouts, K * envs episodes per iteration) rise, and the same run with the advantage sign flipped (an
estimator registered for the test: minus ``episode_grpo``) stops calling. ``python3
tests/rllib_integration/test_router_learns.py SEED...`` prints the curves (``TREE=1``: also tree sampling).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

import llm_marl_envs.examples.router  # noqa: F401  (registers llm_marl/Router-v0)
from rllib_integration.core import advantages as adv_mod

FLIPPED = "flipped_episode_grpo"
ITERS = 24


def _register_flipped() -> None:
    """``-episode_grpo``: the control that must not learn."""
    base = adv_mod.get_estimator("episode_grpo")

    @adv_mod.register_estimator(FLIPPED, formula="minus episode_grpo (a control)", options=base.options[:-4],
                                episodes=True, normalised=True)
    def flipped(r, codes, n_groups, *, eps, **options):
        return -base.fn(r, codes, n_groups, eps=eps, **options)


def lookup_model(out_dir) -> str:
    """A lookup agent that reads its table: the tiny model fine-tuned on the lookup expert's steps (the
    router's are left out: its policy starts from the untrained model and must find delegation itself)."""
    from rllib_integration.core.models import build_tiny_model
    from rllib_integration.core.warm_start import collect_demonstrations, warm_start

    demos = [d for d in collect_demonstrations("llm_marl/Router-v0", num_episodes=64, seed=1)
             if d.agent == "lookup"]
    warm_start({"lookup": str(build_tiny_model())}, demos, {"lookup": "lookup"}, epochs=10, lr=5e-3,
               chat=False, save_dir=out_dir, progress=False)
    return str(Path(out_dir) / "lookup")


def train(lookup: str, estimator: str = "episode_grpo", iters: int = ITERS, seed: int = 0, envs: int = 4,
          k: int = 8, lr: float = 1e-2, lookup_lr: float = 1e-4,
          sampling: dict | None = None) -> tuple[list[tuple[float, float]], float]:
    """Train Router-v0 (L3: the router from the tiny model, the lookup agent from ``lookup``); returns per
    iteration (delegation rate, success rate) of the training rollouts, and the seconds taken."""
    from rllib_integration import ATGRPOConfig
    from rllib_integration.settings import validate_config

    run = {"env": {"id": "llm_marl/Router-v0", "config": {"invalid_penalty": 0.0}},
           "model": {"path": "tiny"},
           "specialization": "L3", "policies": {"router": {}, "lookup": {"model": lookup, "lr": lookup_lr}},
           "sampling": {"k": k, "max_new_tokens": 1, "chat": False, **(sampling or {"mode": "parallel"})},
           "rollout": {"num_rollout_actors": 0, "envs_per_iteration": envs},
           "training": {"lr": lr, "estimator": estimator, "seed": seed},
           "evaluation": {"interval": 0}}
    config = ATGRPOConfig.from_run_config(validate_config(run))
    t0 = time.perf_counter()
    algo = config.build_algo()
    curve = []
    try:
        for _ in range(iters):
            r = algo.train()
            # parallel: one lookup sample per delegated episode; tree: K (the candidates of its node)
            calls = r["samples_per_role"]["lookup"] / (k if run["sampling"]["mode"] == "tree" else 1)
            curve.append((calls / r["env_runners"]["num_episodes"], float(r["success_rate"])))
    finally:
        algo.stop()
    return curve, time.perf_counter() - t0


def _mean(curve, part: slice, column: int) -> float:
    return float(np.mean([row[column] for row in curve[part]]))


@pytest.mark.slow
# the flipped control stops calling, so its lookup role goes without samples: the watch's warning is expected
@pytest.mark.filterwarnings("ignore::rllib_integration.results.RoleWithoutSamplesWarning")
def test_the_router_learns_to_delegate_and_a_flipped_sign_does_not(ray_session, tmp_path, monkeypatch):
    import torch

    torch.set_num_threads(1)
    monkeypatch.setattr(adv_mod, "_REGISTRY", dict(adv_mod._REGISTRY))   # the control's estimator: this test's
    _register_flipped()
    lookup = lookup_model(tmp_path)
    curve, _ = train(lookup)
    flipped, _ = train(lookup, FLIPPED)
    first, last = slice(0, 4), slice(-4, None)
    start, end = _mean(curve, first, 0), _mean(curve, last, 0)
    assert start < 0.35, curve                    # the untrained router calls in ~1 episode of 4 (a digit)
    assert end > 0.6 and end > start + 0.4, curve  # ... and learns to call (seeds 0-4: see RESULTS.md)
    assert _mean(curve, last, 1) > _mean(curve, first, 1) + 0.25, curve   # the team succeeds more
    assert flipped[0] == curve[0]                 # the same first iteration
    assert _mean(flipped, last, 0) < min(0.1, start), flipped             # the control stops calling
    assert _mean(flipped, last, 1) < _mean(flipped, first, 1), flipped    # and does worse


if __name__ == "__main__":  # python3 tests/rllib_integration/test_router_learns.py SEED...: curves and summary
    import os
    import sys
    import tempfile

    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    _register_flipped()
    t0 = time.perf_counter()
    lookup = lookup_model(tempfile.mkdtemp())
    print(f"lookup model {time.perf_counter() - t0:.0f}s")
    runs = {"parallel episode_grpo": ("episode_grpo", None), "parallel flipped": (FLIPPED, None)}
    if os.environ.get("MORE"):  # the other episode estimators and tree sampling
        runs.update({"parallel drmas_grpo": ("drmas_grpo", None), "parallel gigpo": ("gigpo", None),
                     "tree best at_grpo": ("at_grpo", {"mode": "tree", "tree_select": "best"}),
                     "tree sample at_grpo": ("at_grpo", {"mode": "tree", "tree_select": "sample"})})
    seeds = [int(a) for a in sys.argv[1:]] or [0]
    ends: dict[str, list[np.ndarray]] = {name: [] for name in runs}
    for s in seeds:
        for name, (est, sampling) in runs.items():
            curve, secs = train(lookup, est, seed=s, sampling=sampling)
            d = np.array(curve)
            ends[name].append(np.r_[d[:4].mean(0), d[-4:].mean(0)])
            print(f"seed={s} {name} {secs:.0f}s deleg " + " ".join(f"{x:.2f}" for x in d[:, 0]))
            print(f"seed={s} {name} succ " + " ".join(f"{x:.2f}" for x in d[:, 1]), flush=True)
    print(f"mean +- std over seeds {seeds} (first 4 iterations -> last 4; min..max of the last 4):")
    for name, rows in ends.items():
        a = np.array(rows)
        cells = [f"{what} {a[:, i].mean():.2f} +- {a[:, i].std():.2f} -> {a[:, i + 2].mean():.2f} +- "
                 f"{a[:, i + 2].std():.2f} ({a[:, i + 2].min():.2f}..{a[:, i + 2].max():.2f})"
                 for i, what in enumerate(("delegation", "success"))]
        print(f"  {name}: " + "; ".join(cells))
