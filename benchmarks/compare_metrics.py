"""Are two runs' metrics the same? Compares two metrics.jsonl files row by row, every key except timings and
host facts (``perf/*``, ``timers/*``, keys ending ``_s`` or starting ``time_``, timestamp, date, hostname, pid,
node_ip), and prints the counts and the first differences. Exit status 0 when nothing differs.

    python benchmarks/compare_metrics.py BEFORE/metrics.jsonl AFTER/metrics.jsonl

Used for "the main job's metrics identical before/after" (benchmarks/RESULTS.md, issue 34).
"""

from __future__ import annotations

import json
import sys
from typing import Any

HOST_KEYS = frozenset({"timestamp", "date", "hostname", "pid", "node_ip"})


def is_timing(key: str) -> bool:
    leaf = key.rsplit("/", 1)[-1]
    return (key.startswith(("perf/", "timers/")) or leaf.endswith("_s") or leaf.startswith("time_")
            or leaf in HOST_KEYS)


def rows_of(path: str) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def compare(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> tuple[int, list[tuple], set[str]]:
    """(equal values, differences as (iteration, key, before, after), keys not compared)."""
    equal, diffs, skipped = 0, [], set()
    if len(before) != len(after):
        diffs.append((None, "rows", len(before), len(after)))
    for a, b in zip(before, after, strict=False):  # a row count that differs is reported above
        for key in sorted(set(a) | set(b)):
            if is_timing(key):
                skipped.add(key)
            elif a.get(key) == b.get(key):
                equal += 1
            else:
                diffs.append((a.get("training_iteration"), key, a.get(key), b.get(key)))
    return equal, diffs, skipped


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().split("\n\n")[1].strip(), file=sys.stderr)
        return 2
    before, after = rows_of(argv[0]), rows_of(argv[1])
    equal, diffs, skipped = compare(before, after)
    print(f"rows {len(before)} / {len(after)}; values equal {equal}, different {len(diffs)}; "
          f"timing and host keys not compared: {len(skipped)}")
    for d in diffs[:20]:
        print("  iteration {}: {} {!r} -> {!r}".format(*d))
    return 1 if diffs else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
