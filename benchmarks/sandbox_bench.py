"""Sandbox latency and throughput, all backends in one run.

    python3 benchmarks/sandbox_bench.py [--runs 40] [--programs 200] [--write]

Latency: median wall time of ``print(1)`` (sequential, after warm-up runs) for a plain
``python3 -c`` subprocess (the real interpreter binary, not a pyenv shim), ``local``,
``bwrap``, the warm bwrap pool and ``docker``. Throughput: 200 short programs through
``run_many(max_workers=2)`` (plain: a 2-thread pool of subprocesses). ``--write`` replaces
the "## Sandboxes" section of benchmarks/RESULTS.md with the table.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import sandboxes  # noqa: E402
from sandboxes import _proc  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")


def programs(n: int) -> list[str]:
    return [f"print(sum(range({i})))" for i in range(n)]


class Plain:
    """A plain ``python3 -c`` subprocess, the reference (``flags`` e.g. ``("-I", "-S")``)."""

    name = "plain"

    def __init__(self, flags: tuple[str, ...] = ()) -> None:
        self.exe = _proc.python_executable()
        self.flags = list(flags)

    def run(self, code: str) -> sandboxes.ExecutionResult:
        out = subprocess.run([self.exe, *self.flags, "-c", code], capture_output=True)
        return sandboxes.ExecutionResult("ok" if out.returncode == 0 else "error", out.stdout.decode(),
                                         out.stderr.decode(), out.returncode)

    def run_many(self, progs: list[str], max_workers: int) -> list[sandboxes.ExecutionResult]:
        with ThreadPoolExecutor(max_workers) as pool:
            return list(pool.map(self.run, progs))

    def close(self) -> None:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--programs", type=int, default=200)
    ap.add_argument("--write", action="store_true", help="record the table in benchmarks/RESULTS.md")
    ap.add_argument("--only", default="", help="comma-separated backend labels to run (prefix match, e.g. "
                    "'plain,bwrap'); default all. For before/after runs of the same script on two checkouts")
    args = ap.parse_args()
    load_before = os.getloadavg()

    factories: list[tuple[str, Callable[[], object]]] = [
        ("plain `python3 -c` subprocess", Plain),
        # The sandboxes start their interpreter with -I -S (no site/.pth hooks): this row
        # shows how much of their time is the bare interpreter.
        ("plain `python3 -I -S -c` subprocess (no site)", lambda: Plain(("-I", "-S"))),
        ("local", lambda: sandboxes.make("local")),
        ("bwrap", lambda: sandboxes.make("bwrap")),
        ("bwrap warm pool (2 zygotes, numpy+sympy preloaded)", lambda: sandboxes.make("bwrap", warm=True, pool_size=2)),
        ("docker", lambda: sandboxes.make("docker")),
    ]
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        factories = [(label, f) for label, f in factories if any(label.startswith(w) for w in wanted)]
        if not factories:
            ap.error(f"--only {args.only!r} matches no backend label")
    live: list[tuple[str, object]] = []
    skipped: dict[str, str] = {}
    for label, factory in factories:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                t = time.perf_counter()
                sb = factory()
                if hasattr(sb, "warmup"):
                    sb.warmup()
                for _ in range(3):  # warm-up runs (docker builds its image on first use)
                    r = sb.run("print(1)")
                    assert r.status == "ok" and r.stdout == "1\n", r
            print(f"{label}: ready in {time.perf_counter() - t:.2f} s", flush=True)
            live.append((label, sb))
        except Exception as exc:  # noqa: BLE001 - a backend that cannot run is reported, not fatal
            print(f"{label}: skipped: {type(exc).__name__}: {exc}", flush=True)
            skipped[label] = f"{type(exc).__name__}: {str(exc)[:150]}"

    # Latency: round-robin over the backends, so load from other users of the machine
    # hits all of them alike.
    times: dict[str, list[float]] = {label: [] for label, _ in live}
    for _ in range(args.runs):
        for label, sb in live:
            t = time.perf_counter()
            r = sb.run("print(1)")
            times[label].append(time.perf_counter() - t)
            assert r.status == "ok", (label, r)
    lat = {label: statistics.median(v) * 1000 for label, v in times.items()}

    rates: dict[str, float] = {}
    for label, sb in live:
        t = time.perf_counter()
        results = sb.run_many(programs(args.programs), max_workers=2)
        rates[label] = args.programs / (time.perf_counter() - t)
        bad = [r for r in results if r.status != "ok"]
        assert not bad, (label, bad[:3])
        print(f"{label}: {lat[label]:.1f} ms, {rates[label]:.1f} programs/s", flush=True)
        sb.close()
    load_after = os.getloadavg()

    base = lat[factories[0][0]]
    table = ["| backend | median latency of `print(1)` (ms) | vs plain | throughput, 200 programs, 2 workers "
             "(programs/s) |", "|---|---:|---:|---:|"]
    for label, _ in factories:
        if label in lat:
            table.append(f"| {label} | {lat[label]:.1f} | {lat[label] / base:.2f}x | {rates[label]:.1f} |")
        else:
            table.append(f"| {label} | skipped | | {skipped[label]} |")
    note = (f"{os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()} {platform.release()}; "
            f"median of {args.runs} sequential `print(1)` runs per backend, interleaved round-robin. Load average "
            f"(1 min) before/after: {load_before[0]:.1f} / {load_after[0]:.1f}: other engineers share these 2 "
            "cores, so absolute numbers are noisy; the ratios within one run are the meaningful part.")
    text = "\n".join(table)
    print()
    print(text)
    print()
    print(note)
    if args.write:
        section = ("## Sandboxes (`benchmarks/sandbox_bench.py`)\n\n"
                   f"Command: `python3 benchmarks/sandbox_bench.py --write` ({time.strftime('%Y-%m-%d')}).\n\n"
                   f"{text}\n\n{note}\n\n")
        with open(RESULTS) as f:
            content = f.read()
        # the section's own text only: from its heading (at a line start) to its first subsection or the next section
        # (its ### subsections, the history of earlier rounds, stay)
        pattern = re.compile(r"^## Sandboxes \(`benchmarks/sandbox_bench\.py`\).*?(?=^##)", re.S | re.M)
        if pattern.search(content):
            content = pattern.sub(lambda _m: section, content, count=1)
        else:
            content += "\n" + section
        with open(RESULTS, "w") as f:
            f.write(content)
        print(f"recorded in {RESULTS}")


if __name__ == "__main__":
    main()
