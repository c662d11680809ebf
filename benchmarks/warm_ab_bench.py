"""The warm bwrap pool, before and after a change, in ONE run; and what a parked run costs.

    git worktree add /tmp/before <old commit>
    python3 benchmarks/warm_ab_bench.py --before /tmp/before [--runs 200] [--programs 200] [--rounds 3]
    python3 benchmarks/warm_ab_bench.py --costs [--docker] [--memory]

A/B: four server processes, two importing ``sandboxes`` from the ``--before`` checkout and two
from this checkout (started before, after, after, before: a later-started server measured ~10%
slower than an identical earlier one), each with a warm pool of the same shape as
``benchmarks/sandbox_bench.py``'s warm row (2 zygotes, numpy+sympy preloaded). The parent
takes them in turn in small batches (latency: sequential ``print(1)``, 10 at a time, the order
rotated every batch; throughput: half of ``--programs`` short programs through
``run_many(max_workers=2)`` on each server every round), so load from other users of the
machine hits both sides alike.

``--costs`` (this checkout only): what a run that parks its scratch space or memory in the
kernel costs, with the default ``reclaim_wait_s`` (the zygote waits for the kernel's collector)
and with ``reclaim_wait_s=0`` (the worker is recycled at once), against an ordinary run and a
worker's start; ``--docker`` adds the Docker warm pool. ``--memory``: the most a program
allocates under ``memory_mb=256``, cold and on warm pools with different preloads.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def programs(n: int) -> list[str]:
    return [f"print(sum(range({i})))" for i in range(n)]


def serve() -> None:
    """Child: a warm pool of whatever ``sandboxes`` this interpreter imports; JSON lines in and out."""
    import sandboxes

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        sb = sandboxes.make("bwrap", warm=True, pool_size=2)
    sb.warmup()
    for _ in range(3):
        assert sb.run("print(1)").stdout == "1\n"
    print(json.dumps({"ready": sandboxes.__file__}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "lat":
            times = []
            for _ in range(cmd["n"]):
                t = time.perf_counter()
                r = sb.run("print(1)")
                times.append(time.perf_counter() - t)
                assert r.status == "ok", r
            out: dict = {"times": times}
        elif cmd["op"] == "tput":
            t = time.perf_counter()
            results = sb.run_many(programs(cmd["n"]), max_workers=2)
            out = {"seconds": time.perf_counter() - t, "bad": sum(r.status != "ok" for r in results)}
        else:
            break
        out["faults"] = sb.fault_counts() if hasattr(sb, "fault_counts") else {}
        print(json.dumps(out), flush=True)
    sb.close()


class Server:
    def __init__(self, checkout: str) -> None:
        env = dict(os.environ, PYTHONPATH=checkout)
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve"], cwd=checkout, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.where = self._read()["ready"]

    def _read(self) -> dict:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the bench server exited ({self.proc.wait()})")
        return json.loads(line)

    def ask(self, **cmd) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def ab(before: str, runs: int, n_programs: int, rounds: int) -> None:
    load0 = os.getloadavg()
    uptime0 = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    # Two servers a side, started before, after, after, before: a server started later measured
    # ~10% slower than an identical earlier one here (an A/A run), so each side gets one early
    # and one late position. The order of the batches rotates.
    servers = [(k, Server(path)) for k, path in (("before", os.path.abspath(before)), ("after", HERE),
                                                   ("after", HERE), ("before", os.path.abspath(before)))]
    for i, (k, s) in enumerate(servers):
        print(f"server {i} ({k}): sandboxes from {s.where}", flush=True)
    per_server: list[list[float]] = [[] for _ in servers]
    tput: dict[str, list[float]] = {"before": [], "after": []}
    order = list(range(len(servers)))
    batches = max(1, runs // rounds // 20)  # each batch: 10 runs on each of a side's two servers
    for rnd in range(rounds):
        for _ in range(batches):
            for i in order:
                per_server[i] += servers[i][1].ask(op="lat", n=10)["times"]
            order = order[1:] + order[:1]
        for i in order:
            k, s = servers[i]
            got = s.ask(op="tput", n=n_programs // 2)
            assert got["bad"] == 0, (k, got)
            tput[k].append(n_programs // 2 / got["seconds"])
        order = order[1:] + order[:1]
        print(f"round {rnd + 1}: median latency ms per server " + ", ".join(
            f"{servers[i][0]} {statistics.median(v) * 1000:.2f}" for i, v in enumerate(per_server)), flush=True)
    faults = {f"{k} {i}": s.ask(op="lat", n=1)["faults"] for i, (k, s) in enumerate(servers)}
    for _, s in servers:
        s.close()
    load1 = os.getloadavg()
    uptime1 = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    lat = {k: [t for i, v in enumerate(per_server) if servers[i][0] == k for t in v] for k in tput}
    med = {k: statistics.median(v) * 1000 for k, v in lat.items()}
    tp = {k: statistics.median(v) for k, v in tput.items()}
    print()
    print("| warm bwrap pool (2 zygotes, numpy+sympy) | before | after | after / before |")
    print("|---|---:|---:|---:|")
    print(f"| median latency of `print(1)` (ms), {len(lat['after'])} runs a side | {med['before']:.2f} | "
          f"{med['after']:.2f} | {med['after'] / med['before']:.3f} |")
    print(f"| throughput, {n_programs // 2} programs, 2 workers (programs/s, median of {len(tput['after'])} batches a "
          f"side) | {tp['before']:.1f} | {tp['after']:.1f} | {tp['after'] / tp['before']:.3f} |")
    print()
    print("per server, in start order: " + ", ".join(
        f"{servers[i][0]} {statistics.median(v) * 1000:.2f} ms" for i, v in enumerate(per_server)))
    print(f"{os.cpu_count()} cores; load average (1 min) before/after: {load0[0]:.2f} / {load1[0]:.2f}")
    print(f"uptime before: {uptime0}\nuptime after:  {uptime1}")
    print(f"fault counters at the end: {faults}")


# -- what a parked run costs --------------------------------------------------------------
NEXT = "x = bytearray(200 << 20)\nprint(len(x) >> 20)"  # fine on its own under memory_mb=512


def check_costs() -> None:
    """What the give-back checks of one warm run cost: the zygote's (timed inside a worker, on the
    scratch file systems a zygote checks) and the host's memory check."""
    import sandboxes
    from sandboxes import programs

    sb = sandboxes.make("bwrap", warm=True, pool_size=1)
    timed = programs.source("wipe.py") + (
        "\nimport time\nwant = space(('/tmp', '/dev/shm', '/dev/mqueue'))\nt = time.perf_counter()\n"
        "for _ in range(2000):\n    assert given_back(want, 0.5)\nprint((time.perf_counter() - t) / 2000)\n")
    r = sb.run(timed, timeout_s=60)
    assert r.status == "ok", r
    (w,) = list(sb._all)
    t = time.perf_counter()
    for _ in range(2000):
        assert w.memory_given_back()
    host = (time.perf_counter() - t) / 2000
    t = time.perf_counter()
    for _ in range(200):
        sb.run("print(1)")
    run = (time.perf_counter() - t) / 200
    sb.close()
    print(f"checks of one warm run: zygote {float(r.stdout) * 1e6:.0f} us, host {host * 1e6:.0f} us "
          f"(mean of 2,000 each); a warm `print(1)` run: {run * 1000:.2f} ms (mean of 200)\n", flush=True)


def costs(docker: bool, repeats: int) -> None:
    import sandboxes
    from tests.sandboxes.parking import parking_program

    def median_ms(xs: list[float]) -> str:
        return f"{statistics.median(xs) * 1000:.1f}"

    check_costs()

    print("| pool | the next program, ordinarily (ms) | the same run without parking (ms) | parking run (ms) | "
          "the next program after it (ms) | workers recycled | worker start (ms) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    configs: list[tuple[str, dict]] = [("bwrap warm, default reclaim_wait_s", {}),
                                       ("bwrap warm, reclaim_wait_s=0 (recycle at once)", {"reclaim_wait_s": 0})]
    if docker:
        configs.append(("docker warm", {"docker": True}))
    for label, opts in configs:
        if opts.get("docker"):
            sb = sandboxes.make("docker", warm=True, memory_mb=512)
        else:
            sb = sandboxes.make("bwrap", warm=True, pool_size=1, memory_mb=512, **opts)
        sb.run("print(1)")
        ordinary, unparked, park, nxt, start = [], [], [], [], []
        for _ in range(repeats):
            for _ in range(3):
                t = time.perf_counter()
                assert sb.run(NEXT, timeout_s=30).status == "ok"
                ordinary.append(time.perf_counter() - t)
            t = time.perf_counter()
            r = sb.run(parking_program(memfd_mb=192, park=False), timeout_s=30)
            unparked.append(time.perf_counter() - t)
            assert r.status == "ok", r
            t = time.perf_counter()
            r = sb.run(parking_program(memfd_mb=192), timeout_s=30)
            park.append(time.perf_counter() - t)
            assert r.status == "ok", r
            t = time.perf_counter()
            r = sb.run(NEXT, timeout_s=30)
            nxt.append(time.perf_counter() - t)
            assert r.status == "ok", r
        if not opts.get("docker"):
            for _ in range(repeats):
                fresh = sandboxes.make("bwrap", warm=True, pool_size=1, memory_mb=512)
                t = time.perf_counter()
                fresh.warmup()
                start.append(time.perf_counter() - t)
                fresh.close()
        print(f"| {label} | {median_ms(ordinary)} | {median_ms(unparked)} | {median_ms(park)} | {median_ms(nxt)} | "
              f"{sb.fault_counts()['workers_recycled']} of {repeats} | {median_ms(start) if start else 'n/a'} |",
              flush=True)
        sb.close()
    print(f"\nmedians of {repeats} parking runs (scratch filled + 192 MB of memfds parked in flight); the next "
          f"program allocates 200 MB under memory_mb=512; "
          f"load average (1 min) {os.getloadavg()[0]:.2f}")


def memory() -> None:
    """The most a program allocates (1 MB at a time) under memory_mb=256, cold and warm."""
    import sandboxes
    from tests.sandboxes.parking import MEASURE

    pools = [("bwrap cold", lambda: sandboxes.make("bwrap"))] + [
        (f"bwrap warm, preload {'+'.join(p) or 'none'}",
         (lambda p=p: sandboxes.make("bwrap", warm=True, pool_size=1, preload=p)))
        for p in (("numpy", "sympy"), ("numpy",), ())]
    print("| sandbox | MB a program allocates under memory_mb=256 | the same after `import numpy` |")
    print("|---|---:|---:|")
    for label, factory in pools:
        sb = factory()
        got = [sb.run(pre + MEASURE, memory_mb=256, timeout_s=30) for pre in ("", "import numpy\n")]
        assert all(r.status == "ok" for r in got), got
        print(f"| {label} | {got[0].stdout.strip()} | {got[1].stdout.strip()} |", flush=True)
        sb.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--before", help="a checkout of the code to compare against (git worktree add DIR COMMIT)")
    ap.add_argument("--runs", type=int, default=200, help="latency runs per side")
    ap.add_argument("--programs", type=int, default=200, help="programs per throughput round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--costs", action="store_true", help="what a parking run costs (this checkout)")
    ap.add_argument("--docker", action="store_true", help="with --costs: the Docker warm pool too")
    ap.add_argument("--repeats", type=int, default=5, help="with --costs: parking runs per pool")
    ap.add_argument("--memory", action="store_true", help="what a program can allocate, cold and warm (this checkout)")
    args = ap.parse_args()
    if args.serve:
        serve()
    elif args.costs or args.memory:
        sys.path.insert(0, HERE)
        if args.memory:
            memory()
        if args.costs:
            costs(args.docker, args.repeats)
    elif args.before:
        if not os.path.isdir(os.path.join(args.before, "sandboxes")):
            ap.error(f"--before {args.before!r} is not a checkout of this project (no sandboxes/ in it)")
        ab(args.before, args.runs, args.programs, args.rounds)
    else:
        ap.error("give --before DIR (A/B) or --costs")


if __name__ == "__main__":
    main()
