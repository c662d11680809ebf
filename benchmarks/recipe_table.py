"""The learning table of a recipe over seeds, with the valid-reply decomposition (issue 40).

    python3 benchmarks/recipe_table.py ROWS.jsonl [--role checker]            # benchmarks/ablation.py's rows
    python3 benchmarks/recipe_table.py RUN_DIR/metrics.jsonl ... [--role ...]  # llm-marl train runs, one per seed

Per variant (an ablation's variants; llm-marl runs are grouped by ``training.flip_advantages`` in their
config.yaml: AT-GRPO or its control): held-out greedy success after the warm start and at the last evaluation,
the gain, ``--role``'s valid ratio (the role whose answer decides the episode: Arithmetic-v0's checker) and the
success among that role's valid replies (success / valid ratio: the skill part of the gain; the valid ratio's
change is the format part). Mean and 95% interval over seeds (Student t: benchmarks/ablation.py's formatting).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ablation import _fmt as _ci  # noqa: E402  (mean ± 95% interval over seeds, "-" for none)


def from_ablation(path: Path, role: str) -> dict[str, list[dict[str, float]]]:
    """Per variant, per seed: first and last evaluation of an ablation's rows.jsonl."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    out: dict[str, list[dict[str, float]]] = {}
    for variant in dict.fromkeys(r["variant"] for r in rows):
        for seed in sorted({r["seed"] for r in rows if r["variant"] == variant}):
            mine = sorted((r for r in rows if r["variant"] == variant and r["seed"] == seed), key=lambda r: r["point"])
            if len(mine) < 2:
                continue  # a trial that never trained (failed at its start)
            first, last = mine[0], mine[-1]
            out.setdefault(variant, []).append({
                "seed": seed, "ws": first["eval_success"], "end": last["eval_success"],
                "valid_ws": first.get(f"eval_valid_{role}", math.nan),
                "valid_end": last.get(f"eval_valid_{role}", math.nan),
                "iterations": last["iterations"], "tokens": last["tokens"]})
    return out


def from_runs(paths: Sequence[Path], role: str) -> dict[str, list[dict[str, float]]]:
    """Per variant (AT-GRPO / control), per run: the evaluation after the warm start (iteration 0) and the last."""
    import yaml

    out: dict[str, list[dict[str, float]]] = {}
    for path in paths:
        evals = [r for r in map(json.loads, path.read_text().splitlines())
                 if "evaluation/success_rate" in r and r["training_iteration"] >= 0]
        cfg = yaml.safe_load((path.parent / "config.yaml").read_text())
        if len(evals) < 2:
            continue
        first, last = evals[0], evals[-1]
        variant = "control (sign flipped)" if cfg["training"].get("flip_advantages") else "AT-GRPO"
        tokens = sum(r.get("throughput/tokens_generated", 0) for r in map(json.loads, path.read_text().splitlines()))
        out.setdefault(variant, []).append({
            "seed": cfg["training"]["seed"], "ws": first["evaluation/success_rate"],
            "end": last["evaluation/success_rate"],
            "valid_ws": first.get(f"evaluation/agents/{role}/valid_ratio", math.nan),
            "valid_end": last.get(f"evaluation/agents/{role}/valid_ratio", math.nan),
            "iterations": last["training_iteration"], "tokens": tokens})
    return out


def _among_valid(success: float, valid: float) -> float:
    return success / valid if valid > 0 else math.nan


def table(data: dict[str, list[dict[str, Any]]], role: str) -> str:
    lines = [f"| variant | seeds | after warm start | end | gain | {role} valid: after WS -> end | success among "
             f"{role}'s valid replies: after WS -> end | its gain (skill) | iterations | tokens (k) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for variant, runs in data.items():
        skill_ws = [_among_valid(r["ws"], r["valid_ws"]) for r in runs]
        skill_end = [_among_valid(r["end"], r["valid_end"]) for r in runs]
        skill_gain = [b - a for a, b in zip(skill_ws, skill_end, strict=True)]
        iterations = sum(r["iterations"] for r in runs) / len(runs)
        tokens = sum(r["tokens"] for r in runs) / len(runs) / 1000
        lines.append(
            f"| {variant} | {len(runs)} ({', '.join(str(r['seed']) for r in runs)}) | {_ci([r['ws'] for r in runs])} | "
            f"{_ci([r['end'] for r in runs])} | {_ci([r['end'] - r['ws'] for r in runs], signed=True)} | "
            f"{_ci([r['valid_ws'] for r in runs])} -> {_ci([r['valid_end'] for r in runs])} | "
            f"{_ci(skill_ws)} -> {_ci(skill_end)} | {_ci(skill_gain, signed=True)} | {iterations:.1f} | {tokens:.0f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, help="an ablation's rows.jsonl, or llm-marl runs' metrics.jsonl")
    ap.add_argument("--role", default="checker", help="the role whose valid replies decide the episode")
    args = ap.parse_args(argv)
    if len(args.paths) == 1 and args.paths[0].name == "rows.jsonl":
        data = from_ablation(args.paths[0], args.role)
    else:
        data = from_runs(args.paths, args.role)
    print(table(data, args.role))
    for variant, runs in data.items():
        for r in runs:
            print(f"- {variant} seed {r['seed']}: {r['ws']:.3f} -> {r['end']:.3f}; {args.role} valid "
                  f"{r['valid_ws']:.3f} -> {r['valid_end']:.3f}; {r['iterations']} iterations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
