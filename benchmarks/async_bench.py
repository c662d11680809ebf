"""Synchronous vs one-step-off (and k-step-off) vs streaming ATGRPO on the embedded default, same seeds.

    python3 benchmarks/async_bench.py [CONFIG.yaml] [--staleness 0 1] [--streaming 1] [--iterations 24]
        [--num-cpus 2] [--set key=value ...] [--out benchmarks/async]

For each ``training.max_staleness`` in ``--staleness`` (0 = synchronous), then for each in ``--streaming``
with ``training.streaming: true`` (streaming episodes; ``--streaming`` alone: none), one run of CONFIG
(default: the embedded default, ``rllib_integration.settings.DEFAULT_CONFIG``: warm start, then RL on
PlanPath-v0 3x3 with one rollout actor beside the learner's process; on a GPU: ``benchmarks/gpu_session.sh async`` with
configs/gpu/planpath_smollm2_warm.yaml), in this order, with the same seeds. Printed (and written to
``<out>/async.md``): per run the median time of a training step (waiting for the batch + advantages +
update + weight sync, without the evaluation; iterations 2.. : the first one has no batch in flight yet,
and not those right after an evaluation, which has waited for the batch in flight),
its parts, the ratio to the synchronous run, and the held-out greedy success after the warm start and at
every evaluation (the learning curves, side by side). ``--set`` takes the same dotted keys as
``llm-marl train --set`` (e.g. ``training.num_epochs=3`` for an update about as long as generation).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from rllib_integration.settings import load_config  # noqa: E402


def run_config(args: argparse.Namespace, max_staleness: int, *, streaming: bool = False,
               check_paths: bool = True) -> dict[str, Any]:
    """The validated run config of one run (``--set`` applied, then the staleness, streaming and iterations)."""
    return load_config(args.config, [*args.sets, f"training.max_staleness={max_staleness}",
                                     f"training.streaming={str(streaming).lower()}",
                                     f"run.iterations={args.iterations}"], check_paths=check_paths)


def run_configs(args: argparse.Namespace, *, check_paths: bool = True) -> list[dict[str, Any]]:
    """The runs of one command, in order: ``--staleness`` (synchronous, one-step-off, ...), then ``--streaming``."""
    return ([run_config(args, s, check_paths=check_paths) for s in args.staleness]
            + [run_config(args, s, streaming=True, check_paths=check_paths) for s in args.streaming])


def run_one(cfg: dict[str, Any]) -> dict[str, Any]:
    from rllib_integration import ATGRPOConfig

    iterations, max_staleness = int(cfg["run"]["iterations"]), int(cfg["training"]["max_staleness"])
    streaming = bool(cfg["training"]["streaming"])
    config = ATGRPOConfig.from_run_config(cfg).evaluation(evaluation_final_iteration=iterations)
    algo = config.build_algo()
    rows = []
    try:
        for _ in range(iterations):
            t0 = time.perf_counter()
            r = algo.train()
            step_s = sum(r["timers"][k] for k in ("rollout_s", "advantage_s", "update_s", "weight_sync_s"))
            rows.append({"wall_s": time.perf_counter() - t0, "timers": r["timers"], "step_s": step_s,
                         "evaluation": r.get("evaluation", {}).get("success_rate"), "warm_start": r.get("warm_start"),
                         "async": r.get("async", {})})
    finally:
        algo.stop()
    ws = rows[0]["warm_start"] or {}
    # the first iteration has no batch in flight yet; after an evaluation (which waits for the batch in flight)
    # the next iteration's wait is short: both left out, so neither mode gains from when evaluation runs
    steady = [r for i, r in enumerate(rows) if i > 0 and rows[i - 1]["evaluation"] is None]
    median = (lambda key: statistics.median(r["timers"][key] for r in steady)) if steady else (lambda key: 0.0)
    return {"max_staleness": max_staleness, "streaming": streaming,
            "iteration_s": statistics.median(r["step_s"] for r in steady) if steady else float("nan"),
            "wait_batch_s": median("rollout_s"), "update_s": median("update_s"), "sync_s": median("weight_sync_s"),
            "after_warm_start": (ws.get("eval_after") or {}).get("success_rate"),
            "curve": [(i + 1, r["evaluation"]) for i, r in enumerate(rows) if r["evaluation"] is not None],
            "staleness_max": max((r["async"].get("staleness_max", 0) for r in rows), default=0),
            "dropped_stale": sum(r["async"].get("dropped_stale", 0) for r in rows)}


def mode(run: dict[str, Any]) -> str:
    """How a run trains: synchronous, k-step-off or streaming (with its max_staleness)."""
    if run["streaming"]:
        return f"streaming (max_staleness {run['max_staleness']})"
    return {0: "synchronous", 1: "one-step-off"}.get(run["max_staleness"], f"{run['max_staleness']}-step-off")


def table(runs: list[dict[str, Any]]) -> str:
    base = next((r["iteration_s"] for r in runs if r["max_staleness"] == 0 and not r["streaming"]), None)
    lines = ["| mode | iteration (s, median) | x sync | waiting for the batch (s) | update (s) | "
             "weight sync (s) | staleness max | dropped | held-out success: after warm start -> at iterations |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        ratio = f"{r['iteration_s'] / base:.2f}" if base else "-"
        curve = ", ".join(f"{i}: {s:.2f}" for i, s in r["curve"])
        aws = "-" if r["after_warm_start"] is None else f"{r['after_warm_start']:.2f}"
        lines.append(f"| {mode(r)} | {r['iteration_s']:.2f} | {ratio} | {r['wait_batch_s']:.2f} | "
                     f"{r['update_s']:.2f} | {r['sync_s']:.2f} | {r['staleness_max']} | {r['dropped_stale']} | "
                     f"{aws} -> {curve} |")
    return "\n".join(lines)


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default=None, help="a run config (default: the embedded default)")
    parser.add_argument("--staleness", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--streaming", type=int, nargs="*", default=[1], metavar="MAX_STALENESS",
                        help="streaming runs, one per max_staleness (default: 1; none: --streaming alone)")
    parser.add_argument("--iterations", type=int, default=24)
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", default="benchmarks/async")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    configs = run_configs(args)  # every error before Ray starts
    import platform

    import ray

    ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    t0 = time.perf_counter()
    try:
        runs = [run_one(cfg) for cfg in configs]
    finally:
        ray.shutdown()
    text = table(runs)
    load = os.getloadavg()
    head = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Ray num_cpus={args.num_cpus}, "
            f"load {load[0]:.1f}; {args.config or 'embedded default'}, {args.iterations} iterations; "
            f"--set {args.sets or '-'}; "
            f"{time.perf_counter() - t0:.0f} s in all")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "async.md").write_text(head + "\n\n" + text + "\n")
    print(head)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
