"""Agreement of the answer checker with other graders' verdicts, beside math-verify alone.

    python3 benchmarks/math_agreement.py [--data grader_pairs.jsonl model_replies.jsonl] [--by-source] [--misses]

The table is ``tests/llm_marl_envs/math/data/grader_pairs.jsonl`` (pairs from public graders'
test suites, source ``owner/repo@commit:path``) and ``model_replies.jsonl`` (real replies of
SmolLM2-135M-Instruct and the tiny random model to Math-v0 problems, labelled by reading them;
source ``model:<name>``; written by ``benchmarks/math_model_replies.py``).
For every scored pair of the table: this project's ``is_equivalent(prediction, reference)``
(10 s deadline, as the test uses) and math-verify 0.9.0 alone with its defaults
(``verify(parse(reference), parse(prediction))``, default extraction configs). Prints the
agreement with the source's verdict and the false "equal" count of each, overall and per
source repository (``--by-source``), as Markdown rows, and the pairs where ours disagrees
(``--misses``).
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parents[1] / "tests" / "llm_marl_envs" / "math" / "data"
DATA = [DATA_DIR / "grader_pairs.jsonl", DATA_DIR / "model_replies.jsonl"]


def load_table(paths: list[str | Path]) -> list[dict]:
    """Scored rows of the table files as ``prediction``, ``reference``, ``equal``, ``source``: a model
    reply's prediction is the whole reply and its source ``model:<name>``."""
    rows = []
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            r = json.loads(line)
            if "reply" in r:
                r = {**r, "prediction": r["reply"], "source": f"model:{r['model']}"}
            if not isinstance(r["equal"], bool):
                raise ValueError(f"{path}: a row has no verdict yet (label it by reading the reply): {line[:200]}")
            if r.get("scored", True):
                rows.append(r)
    return rows


def math_verify_alone(prediction: str, reference: str) -> bool:
    """math-verify 0.9.0 with its defaults, gold = the reference."""
    from math_verify import parse, verify

    try:
        return bool(verify(parse(reference), parse(prediction)))
    except Exception:  # noqa: BLE001 - math-verify alone, as a user would call it: an error is "not equal"
        return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", nargs="+", default=[str(p) for p in DATA])
    parser.add_argument("--by-source", action="store_true")
    parser.add_argument("--misses", action="store_true")
    parser.add_argument("--labels", action="store_true", help="print the model replies' labels per model and turn")
    args = parser.parse_args()
    if args.labels:
        counts: dict[tuple[str, int], list[int]] = collections.defaultdict(lambda: [0, 0])
        for r in load_table(args.data):
            if "reply" in r:
                counts[(r["model"], r["turn"])][0] += 1
                counts[(r["model"], r["turn"])][1] += r["equal"]
        for (model, turn), (n, right) in sorted(counts.items()):
            print(f"{model} turn {turn}: {right} of {n} scored replies labelled equal")
        return
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    from llm_marl_envs.math import configure, is_equivalent

    configure(timeout_s=10.0)
    rows = load_table(args.data)
    per: dict[str, list[tuple[bool, bool, bool]]] = collections.defaultdict(list)
    for r in rows:
        ours = is_equivalent(r["prediction"], r["reference"])
        mv = math_verify_alone(r["prediction"], r["reference"])
        per[r["source"].split("@")[0]].append((r["equal"], ours, mv))
        if args.misses and ours != r["equal"]:
            print(f"MISS ours={ours} mv={mv} want={r['equal']} {r['prediction'][-300:]!r} | {r['reference']!r} "
                  f"| {r['source'].split('@')[0]}")

    def line(name: str, items: list[tuple[bool, bool, bool]]) -> str:
        n = len(items)
        ours = sum(want == got for want, got, _ in items)
        mv = sum(want == got for want, _, got in items)
        fp_ours = sum(got and not want for want, got, _ in items)
        fp_mv = sum(got and not want for want, _, got in items)
        return (f"| {name} | {n} | {ours} ({100 * ours / n:.1f}%) | {fp_ours} | {mv} ({100 * mv / n:.1f}%) | "
                f"{fp_mv} |")

    print("| source | pairs | ours agree | ours false equal | math-verify alone agree | math-verify false equal |")
    print("|---|---|---|---|---|---|")
    if args.by_source:
        for name in sorted(per, key=lambda k: (-len(per[k]), k)):
            print(line(name, per[name]))
    print(line("all", [x for items in per.values() for x in items]))


if __name__ == "__main__":
    main()
