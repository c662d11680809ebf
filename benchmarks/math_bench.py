"""Answer-checker speed: checks/s and latency percentiles of ``is_equivalent``.

    python3 benchmarks/math_bench.py [--n 300] [--label new]

Three workloads, each a fresh set of strings so the cache does not help (the worker is
started before timing):

- ``generated``: the env_bench workload, answers of difficulty-2 generated problems
  against themselves (with a trailing space) and against ``0``;
- ``numeric``: plain numbers, decimals and fractions only (the fast path; no worker);
- ``graders``: the pairs of ``tests/llm_marl_envs/math/data/grader_pairs.jsonl`` (LaTeX,
  plain CAS text, sets, intervals, matrices; many go to the worker).

To compare two versions of the checker under the same load, run the script twice with
``PYTHONPATH`` pointing at each checkout, interleaved. Prints one Markdown row per workload.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "tests" / "llm_marl_envs" / "math" / "data" / "grader_pairs.jsonl"


def timed(pairs: list[tuple[str, str]]) -> dict[str, float]:
    from llm_marl_envs.math import is_equivalent

    times = []
    start = time.perf_counter()
    for a, b in pairs:
        t = time.perf_counter()
        is_equivalent(a, b)
        times.append(time.perf_counter() - t)
    total = time.perf_counter() - start
    times.sort()
    return {"checks": len(pairs), "checks_per_s": len(pairs) / total, "p50_ms": 1e3 * statistics.median(times),
            "p99_ms": 1e3 * times[min(len(times) - 1, int(0.99 * len(times)))], "max_ms": 1e3 * times[-1]}


def workloads(n: int) -> dict[str, list[tuple[str, str]]]:
    from llm_marl_envs.math.generator import generate_problems

    problems = generate_problems(n, split="all", difficulty=2, start=50_000)
    generated = [(p["answer"], p["answer"] + " ") for p in problems] + [(p["answer"], "0") for p in problems]
    rng = random.Random(0)
    numeric = []
    for i in range(2 * n):
        a, b = rng.randint(1, 999), rng.randint(1, 99)
        numeric.append(rng.choice([(f"{a}", f"{a}.0 "), (f"\\frac{{{a}}}{{{b}}}", f"{a / b:.6f}"),
                                   (f"{a}/{b}", f"\\dfrac{{{a}}}{{{b + 1}}}"), (f"-{a}", f"{a}"),
                                   (f"{a}{i}", f"{a}{i}.5")]))
    pairs = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    graders = [(p["prediction"], p["reference"]) for p in pairs]
    return {"generated": generated, "numeric": numeric, "graders": graders}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=300, help="generated problems (2n pairs)")
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    import llm_marl_envs.math as m
    from llm_marl_envs.math import is_equivalent

    is_equivalent("x+1", "1+x")  # start the worker: start-up is not what is timed
    label = args.label or os.path.dirname(os.path.dirname(m.__file__))
    for name, pairs in workloads(args.n).items():
        r = timed(pairs)
        print(f"| {label} | {name} | {r['checks']} | {r['checks_per_s']:,.0f} | {r['p50_ms']:.3f} | "
              f"{r['p99_ms']:.2f} | {r['max_ms']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
