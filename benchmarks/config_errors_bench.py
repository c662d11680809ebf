"""How long a bad run configuration takes to fail, in process with imports warm (goal: under 1 s).

    python3 benchmarks/config_errors_bench.py [--repeats 5]

The tests assert what these errors do (exit 2 or ``ConfigError``, the message, no Ray started, no model
loaded: ``tests/rllib_integration/test_user_tasks.py``, ``test_cli_messages.py``); this script keeps
their speed goal. Each input runs once untimed (imports), then ``--repeats`` times; prints one Markdown
row per input with the median and the worst. The whole-process numbers (a fresh interpreter, imports
included) are under "Bad input before Ray" in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: bad CLI input -> the failure a user sees (exit 2, one line)
CLI_CASES = [
    ["--set", "env.id=llm_marl/Sudok-v0"],
    ["--set", "env.config.sizee=4"],
    ["--set", "training.lr=-1e-3"],
    ["--set", "model.path=/nope"],
    ["--num-cpus", "1", "--set", "rollout.num_rollout_actors=2"],
]


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    fn()  # imports and caches
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), max(times)


def cli_case(args: list[str], out: str) -> Callable[[], object]:
    from rllib_integration.cli import main

    def run() -> None:
        with contextlib.redirect_stderr(io.StringIO()) as err:
            rc = main(["train", "--output-dir", out, "--quiet", *args])
        assert rc == 2 and "config error" in err.getvalue(), err.getvalue()
    return run


def build_algo_case(model: str) -> Callable[[], object]:
    from rllib_integration import ATGRPOConfig
    from rllib_integration.settings import ConfigError

    def run() -> None:
        config = (ATGRPOConfig().environment("llm_marl/PlanPath-v0", env_config={"sizee": 4}).llm(model_path=model)
                  .rollouts(num_rollout_actors=0))
        try:
            config.build_algo()
        except ConfigError:
            return
        raise AssertionError("no ConfigError")
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    from rllib_integration.core.models import build_tiny_model

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        for case in CLI_CASES:
            rows.append((f"`llm-marl train {' '.join(case)}`", *timed(cli_case(case, out), args.repeats)))
        rows.append(("`ATGRPOConfig().environment(..., env_config={'sizee': 4}).build_algo()`",
                     *timed(build_algo_case(str(build_tiny_model())), args.repeats)))
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs, load average "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}\n")
    print(f"| bad input (in process, imports warm) | median of {args.repeats} (s) | worst (s) |\n|---|---:|---:|")
    for name, med, worst in rows:
        print(f"| {name} | {med:.3f} | {worst:.3f} |")


if __name__ == "__main__":
    main()
