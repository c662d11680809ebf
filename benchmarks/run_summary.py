"""One line per iteration of a run directory's metrics.jsonl: wall time, success, sampler drift per policy.

Usage: python benchmarks/run_summary.py RUN_DIR/metrics.jsonl
Reads only the rows llm-marl train writes (no Ray, no torch); used by `benchmarks/gpu_session.sh resume`.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def rows_of(path: str) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def line_of(row: dict[str, Any]) -> str:
    it = row.get("training_iteration")
    parts = [f"iter {it:>3}" if isinstance(it, int) else f"iter {it}"]
    if "time_this_iter_s" in row:
        parts.append(f"wall {row['time_this_iter_s']:.1f}s")
    for key in ("success_rate", "evaluation/success_rate", "timers/generate_s", "timers/update_s"):
        if isinstance(row.get(key), (int, float)):
            parts.append(f"{key} {row[key]:.3g}")
    for key in sorted(row):
        if key.startswith("learner/") and key.endswith(("sampler_logp_diff_max", "sampler_k3_kl")):
            parts.append(f"{key.removeprefix('learner/')} {row[key]:.3g}")
    return "  ".join(parts)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    for row in rows_of(argv[0]):
        print(line_of(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
