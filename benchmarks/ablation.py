"""The paper's ablation on the embedded task, through ``tune.Tuner``: after the same warm start, does
AT-GRPO's tree sampling with (task, env, turn, agent) groups beat the faithful baselines (the paper's
parallel-sampling baseline, DrMAS per-agent GRPO, GRPO with one shared policy), and does a policy per
role (L3) beat one shared policy (L1)? The variants and their settings: ``VARIANTS`` below and
docs/training_core.md "Baselines by name".

    python3 benchmarks/ablation.py [--seeds 0 1 2] [--iterations 24] [--variants at_grpo_l3 ...]
        [--out benchmarks/ablation] [--num-cpus 2] [--set key=value ...]

Every variant starts from the embedded default (``rllib_integration.settings.DEFAULT_CONFIG``: the
warm start, then RL on PlanPath-v0 3x3) and changes only what the variant is about; the budget is
the same (iterations, envs per iteration, K generations per (env, turn, agent) node in tree mode or
K episodes per env in parallel mode). One Tune trial per (variant, seed); a trial builds the
algorithm (its warm start and the greedy held-out evaluations before/after it are in the first
result) and trains ``--iterations`` iterations with a greedy held-out evaluation at the end.

Output: ``<out>/ablation.md`` (one Markdown table: held-out greedy success after the warm start and
at the end of RL, mean and spread (sample std, min-max) over seeds, valid ratios, time per trial) and
``<out>/ablation.png`` (end-of-RL success per variant, one dot per seed). The table is printed too;
copy it into benchmarks/RESULTS.md "Ablation".
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from rllib_integration.settings import DEFAULT_CONFIG, apply_overrides, validate_config  # noqa: E402

#: variant -> its overrides of the embedded default (dotted keys as for ``--set``); the baselines are those of
#: docs/training_core.md "Baselines by name"
VARIANTS: dict[str, dict[str, Any]] = {
    # AT-GRPO: tree sampling, groups (task, env, turn, agent), a policy per role (the default)
    "at_grpo_l3": {},
    # the paper's parallel-sampling baseline: AT-GRPO's groups (task, env, turn, agent) over K independent
    # episodes per env instead of a tree (PettingLLMs' uid = (env_id // N, turn, agent))
    "at_grpo_parallel_l3": {"sampling.mode": "parallel"},
    # DrMAS per-agent GRPO: every step of an agent valued at its episode's return, per agent over the K episodes
    "drmas_grpo_l3": {"sampling.mode": "parallel", "training.estimator": "drmas_grpo",
                      "training.group_by": ["task_id", "env_idx", "agent"]},
    # AT-GRPO with one shared policy for both roles (one lr: `training.lr`, the executor's of L3)
    "at_grpo_l1": {"specialization": "L1", "policies": {}},
    # GRPO with one shared policy: episode returns, roles pooled, over the K episodes per env
    "grpo_shared_l1": {"specialization": "L1", "policies": {}, "sampling.mode": "parallel",
                       "training.estimator": "episode_grpo", "training.group_by": ["task_id", "env_idx"]},
    # each step's own reward grouped per (task, agent), turns and envs pooled (this project's earlier
    # "per-agent GRPO"; not DrMAS's estimator, kept to compare with earlier results)
    "grpo_parallel_l3": {"sampling.mode": "parallel", "training.estimator": "grpo_per_agent",
                         "training.group_by": ["task_id", "agent"]},
}
DESCRIPTIONS = {
    "at_grpo_l3": "AT-GRPO, tree, groups (task, env, turn, agent), L3 (policy per role)",
    "at_grpo_parallel_l3": "paper's parallel baseline: AT-GRPO groups (task, env, turn, agent), parallel sampling, L3",
    "drmas_grpo_l3": "DrMAS per-agent GRPO: episode return, per (task, env, agent) over K episodes, L3",
    "at_grpo_l1": "AT-GRPO, tree, groups (task, env, turn, agent), L1 (one shared policy)",
    "grpo_shared_l1": "GRPO, one shared policy: episode return per (task, env) over K episodes, L1",
    "grpo_parallel_l3": "step rewards grouped per (task, agent), parallel sampling, L3 (not DrMAS)",
}


def _set(cfg: dict, dotted: str, value: Any) -> None:
    node = cfg
    parts = dotted.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = copy.deepcopy(value)


def variant_config(variant: str, seed: int, iterations: int, sets: Sequence[str] = (),
                   base: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """The validated run config of one trial: the embedded default (or ``base``), the variant's
    overrides, the seed (RL sampling and problems; ``warm_start.seed`` is left alone, so every trial
    starts from the same demonstrations), evaluation at the end only, then ``sets``."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; known: {sorted(VARIANTS)}")
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    cfg = copy.deepcopy(dict(base if base is not None else DEFAULT_CONFIG))
    for key, value in VARIANTS[variant].items():
        _set(cfg, key, value)
    _set(cfg, "training.seed", int(seed))
    _set(cfg, "evaluation.interval", int(iterations))
    _set(cfg, "run.iterations", int(iterations))
    return validate_config(apply_overrides(cfg, list(sets)), check_paths=False)


def _trial(config: dict) -> None:
    """One Tune trial: build ATGRPO from the run config, train, report every iteration."""
    import torch
    from ray import tune

    from rllib_integration import ATGRPOConfig

    torch.set_num_threads(1)
    run_cfg = config["trial"]["run_config"]
    algo = ATGRPOConfig.from_run_config(run_cfg).build_algo()
    t0 = time.perf_counter()
    try:
        ws = algo.warm_start_metrics or {}
        for _ in range(run_cfg["run"]["iterations"]):
            r = algo.train()
            ev = r.get("evaluation", {})
            tune.report({"training_iteration_": r["training_iteration"],
                         "eval_before_ws": ws.get("eval_before", {}).get("success_rate", float("nan")),
                         "eval_after_ws": ws.get("eval_after", {}).get("success_rate", float("nan")),
                         "eval_success": ev.get("success_rate", float("nan")),
                         **{f"valid_{a}": m["valid_ratio"] for a, m in ev.get("agents", {}).items()},
                         "train_success": r.get("success_rate", 0.0), "trial_s": time.perf_counter() - t0,
                         "warm_start_s": ws.get("time_s", 0.0)})
    finally:
        algo.stop()


def param_space(variants: Sequence[str], seeds: Sequence[int], iterations: int,
                sets: Sequence[str] = ()) -> dict[str, Any]:
    """Tune's param space: a grid over (variant, seed), each with its full run config."""
    from ray import tune

    configs = [{"variant": v, "seed": s, "run_config": variant_config(v, s, iterations, sets)}
               for v in variants for s in seeds]
    return {"trial": tune.grid_search(configs)}


def _summary(rows: list[dict[str, Any]]) -> str:
    def stats(xs: list[float]) -> str:
        if not xs:
            return "-"
        sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
        return f"{statistics.mean(xs):.2f} ± {sd:.2f} ({min(xs):.2f}-{max(xs):.2f})"

    lines = ["| variant | seeds | held-out success after warm start | end of RL | gain | valid at end (tool, "
             "executor) | time per trial |", "|---|---|---|---|---|---|---|"]
    for v in dict.fromkeys(r["variant"] for r in rows):
        rs = [r for r in rows if r["variant"] == v]
        after = [r["eval_after_ws"] for r in rs]
        end = [r["eval_success"] for r in rs]
        gain = [e - a for e, a in zip(end, after, strict=True)]
        valid = (f"{statistics.mean(r.get('valid_tool', 0.0) for r in rs):.2f}, "
                 f"{statistics.mean(r.get('valid_executor', 0.0) for r in rs):.2f}")
        lines.append(f"| {DESCRIPTIONS.get(v, v)} | {len(rs)} | {stats(after)} | {stats(end)} | {stats(gain)} | "
                     f"{valid} | {statistics.mean(r['trial_s'] for r in rs):.0f} s |")
    return "\n".join(lines)


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(r["variant"] for r in rows))
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for i, v in enumerate(variants):
        rs = [r for r in rows if r["variant"] == v]
        ax.scatter([i - 0.1] * len(rs), [r["eval_after_ws"] for r in rs], marker="v", color="grey",
                   label="after warm start" if i == 0 else None)
        ax.scatter([i + 0.1] * len(rs), [r["eval_success"] for r in rs], marker="o", color="C0",
                   label="end of RL" if i == 0 else None)
        ax.plot([i - 0.25, i + 0.25], [statistics.mean(r["eval_success"] for r in rs)] * 2, color="C0")
    ax.set_xticks(range(len(variants)), variants)
    ax.set_ylabel("held-out greedy success")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--iterations", type=int, default=int(DEFAULT_CONFIG["run"]["iterations"]))
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="override a run-config key of every trial")
    ap.add_argument("--out", default="benchmarks/ablation")
    ap.add_argument("--num-cpus", type=int, default=None)
    ap.add_argument("--concurrent", type=int, default=1, help="trials at once (default 1: fair timings)")
    args = ap.parse_args(argv)

    import ray
    from ray import tune

    space = param_space(args.variants, args.seeds, args.iterations, args.sets)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
                 [os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.environ.get("PYTHONPATH", "")])}})
    # the trial's own process (algorithm + learner) and its rollout workers
    from rllib_integration import ATGRPO, ATGRPOConfig

    first = space["trial"]["grid_search"][0]["run_config"]
    resources = ATGRPO.default_resource_request(ATGRPOConfig.from_run_config(first))
    tuner = tune.Tuner(tune.with_resources(_trial, resources), param_space=space,
                       tune_config=tune.TuneConfig(max_concurrent_trials=args.concurrent),
                       run_config=tune.RunConfig(storage_path=str(out / "tune"), name="ablation", verbose=1))
    t0 = time.perf_counter()
    results = tuner.fit()
    rows = []
    for res in results:
        if res.error:
            print(f"trial {res.config['trial']['variant']} seed {res.config['trial']['seed']} failed: {res.error}")
            continue
        m = res.metrics
        rows.append({"variant": res.config["trial"]["variant"], "seed": res.config["trial"]["seed"], **m})
    rows.sort(key=lambda r: (list(VARIANTS).index(r["variant"]), r["seed"]))
    table = _summary(rows)
    (out / "ablation.md").write_text(
        f"{args.iterations} iterations, seeds {args.seeds}, {time.perf_counter() - t0:.0f} s in all\n\n{table}\n\n"
        + "\n".join(f"- {r['variant']} seed {r['seed']}: after warm start {r['eval_after_ws']:.2f}, end "
                    f"{r['eval_success']:.2f}" for r in rows) + "\n")
    _plot(rows, out / "ablation.png")
    print(table)
    print(f"-> {out / 'ablation.md'}, {out / 'ablation.png'}")
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
