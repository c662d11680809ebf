"""``llm-marl eval`` wall time: through Ray (a local Ray + the run's rollout actor, as before issue 33) vs in the
CLI's own process (``cli.evaluates_in_process``), each a fresh ``llm-marl eval`` process, alternated, with the
results compared (everything but timings must be equal).

    python3 benchmarks/eval_startup.py [--run RUN_DIR] [--reps 2]

Without ``--run`` it trains a tiny run like the embedded default's shape first (L3, warm start, one rollout worker,
8 eval episodes; ~1 min) in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: ``llm-marl eval`` with the old path forced (a local Ray and the run's rollout actor)
THROUGH_RAY = ("import sys; from rllib_integration import cli; cli.evaluates_in_process = lambda c: False; "
               "sys.exit(cli.main(sys.argv[1:]))")
TINY = ["--iterations", "1", "--quiet", "--num-cpus", "2", "--set", "rollout.envs_per_iteration=2", "--set",
        "sampling.k=2", "--set", "sampling.max_new_tokens=8", "--set", "warm_start.episodes=4", "--set",
        "warm_start.epochs=2", "--set", "evaluation.num_episodes=8", "--set", "evaluation.interval=1"]
TIMING = ("time", "_s", "per_s", "throughput", "timers", "perf")


def _eval(run: Path, through_ray: bool) -> tuple[float, dict]:
    cmd = [sys.executable, "-c", THROUGH_RAY] if through_ray else [sys.executable, "-m", "rllib_integration.cli"]
    t0 = time.perf_counter()
    proc = subprocess.run([*cmd, "eval", str(run)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "RAY_ADDRESS": ""})
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    return wall, json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", type=Path)
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    run = args.run
    if run is None:
        run = Path(tempfile.mkdtemp(prefix="eval-startup-")) / "run"
        subprocess.run([sys.executable, "-m", "rllib_integration.cli", "train", "--output-dir", str(run), *TINY],
                       check=True, capture_output=True, timeout=900)
    results = {}
    for _ in range(args.reps):
        for mode, through_ray in (("through Ray", True), ("in process", False)):
            wall, res = _eval(run, through_ray)
            print(f"{mode:12s} wall {wall:5.1f} s, evaluate() {res['time_s']:.2f} s, "
                  f"success {res['success_rate']:.3f}, {res['episodes']} episodes", flush=True)
            results[mode] = {k: v for k, v in res.items() if not any(t in k for t in TIMING) and v == v}
    print("same results:", results["through Ray"] == results["in process"], "| load", os.getloadavg()[0])


if __name__ == "__main__":
    main()
