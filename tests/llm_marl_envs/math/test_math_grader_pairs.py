"""The answer checker against other graders' verdicts: tests/llm_marl_envs/math/data/grader_pairs.jsonl.

Each line is one pair from a public grader's test suite, with the verdict that suite
expects and its source (``owner/repo@commit:path``, with ``#Lnnn`` for the STACK rows):
STACK's AlgEquiv fixtures (Moodle's CAS grader) and the math-reward / evaluation tests of
lm-evaluation-harness, verl, rllm, open-r1 and 20 other RL and evaluation projects.
None comes from math-verify's, Hendrycks MATH's, MARIO_EVAL's or NeMo-Skills' tests.

How the pairs were taken: every labelled (prediction, reference) pair of each file, as
written, except pairs whose verdict is about the source's own output format (``####``,
``<answer>`` or ``<SOLUTION>`` tags) rather than equivalence, pairs the source marks as
a deliberate form rule (``\\boxed{2+2}`` vs ``4``, "unreduced fractions must match
exactly"), STACK rows with options, Maxima-only functions, floats (STACK compares them
at full precision) or equations and inequalities (STACK reads them as logical
statements: ``2=3`` equals ``1=4``). Maxima's ``%pi``/``%e``/``%i`` are written
``pi``/``e``/``i``. Three pairs stay in the file with ``"scored": false`` and a note:
two that STACK's fixture itself says it does not simplify, and one float-noise pair
that contradicts this checker's documented decimal tolerance.

Issue 22 added the math-verify reward tests of AReaL (replies in prose, ``expr = result``,
rounded decimals) and SkyRL's AIME env tests (``Answer: ...``), skipping rows the source marks
as its own format rule (``\\boxed{0.5}`` must be written ``\\frac{1}{2}``, end-of-sequence
tokens) or as a known bad case, and the Geometry3K rows that read the source's own ``[answer]``
bracket format.

``model_replies.jsonl`` holds real replies (``benchmarks/math_model_replies.py`` writes them):
SmolLM2-135M-Instruct's and the tiny random model's answers to the env's reasoner prompt on
Math-v0 eval problems, greedy and sampled, each with the reference answer and a verdict given by
reading the reply, never by running a checker. Turn-2 replies answer the prompt that shows the
tool's (correct) answer, so some are right. The labelling rule: the reply's final answer is the
last ``\\boxed{}``, else what the reply's last "answer" phrase or closing sentence states as its
own result; "equal" only when that answer is, as mathematics, the reference answer (any correct
form: ``\\frac{1}{2}`` or ``0.5``, ``x = 3`` for ``3``). A reply that ends mid-reasoning without
stating a result, states several different results as final, keeps its own result beside the
tool's ("The reasoner's answer is 2, and the tool agent's answer is 3"), gives the right number
only in passing (an intermediate step, a restated problem) or is gibberish is "not equal". A
reply that only reports the tool's answer is a judgment call: ``"scored": false`` with a note.
In the table each model is its own source (``model:<name>``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from llm_marl_envs.math import configure, is_equivalent

DATA = Path(__file__).parent / "data" / "grader_pairs.jsonl"
REPLIES = Path(__file__).parent / "data" / "model_replies.jsonl"
SOURCE_RE = re.compile(r"^[\w.-]+/[\w.-]+@[0-9a-f]{7,40}:[\w./-]+(#L\d+)?$")


def load_pairs() -> list[dict]:
    return [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_replies() -> list[dict]:
    return [json.loads(line) for line in REPLIES.read_text(encoding="utf-8").splitlines() if line.strip()]


def scored_table() -> list[dict]:
    """The scored table: the graders' pairs and the model replies (prediction = the whole reply)."""
    replies = [{**r, "prediction": r["reply"], "source": f"model:{r['model']}"} for r in load_replies()]
    return [p for p in load_pairs() + replies if p.get("scored", True)]


def test_table_is_large_cited_and_independent():
    pairs = load_pairs()
    scored = [p for p in pairs if p.get("scored", True)]
    assert len(scored) >= 300
    assert sum(p["equal"] for p in scored) >= 100 and sum(not p["equal"] for p in scored) >= 100
    for p in pairs:
        assert SOURCE_RE.match(p["source"]), p["source"]
        assert isinstance(p["equal"], bool) and isinstance(p["prediction"], str) and isinstance(p["reference"], str)
        assert p.get("scored", True) or p.get("note"), "an unscored pair says why"
    held_out = ("huggingface/math-verify", "hendrycks/math", "mario-math-reasoning/", "nvidia/nemo-skills")
    assert not any(p["source"].lower().startswith(held_out) for p in pairs)
    assert len({p["source"].split("@")[0] for p in pairs}) >= 10


def test_model_replies_are_real_and_labelled():
    """Every reply answers the problem its row names (regenerated from its seed), and carries a label."""
    from llm_marl_envs.math.generator import generate_problem

    rows = load_replies()
    assert len(rows) >= 48
    assert {r["model"] for r in rows} == {"smollm2-135m-instruct", "tiny-random"}
    assert {r["decoding"] for r in rows} == {"greedy", "sample"} and {r["turn"] for r in rows} == {1, 2}
    assert sum(r["equal"] for r in rows if r.get("scored", True)) >= 5, "some replies are right"
    for r in rows:
        assert isinstance(r["equal"], bool), f"unlabelled reply: {r['id']} {r['model']} {r['decoding']}"
        assert r.get("scored", True) or r.get("note"), "an unscored reply says why"
        p = generate_problem(r["problem_seed"], "eval", r["difficulty"])
        assert (p["id"], p["problem"], p["answer"]) == (r["id"], r["problem"], r["reference"])
    assert len({(r["id"], r["model"], r["turn"], r["decoding"], r["seed"]) for r in rows}) == len(rows)


def _verdicts(pairs: list[dict]) -> list[tuple[dict, bool]]:
    configure(timeout_s=10.0)  # measure what the checker decides, not how loaded the test machine is
    try:
        return [(p, is_equivalent(p["prediction"], p["reference"])) for p in pairs]
    finally:
        configure(timeout_s=3.0)


@pytest.mark.slow
def test_agreement_with_other_graders():
    """>= 95% agreement, and never "equal" where the source says "not equal"."""
    verdicts = _verdicts(scored_table())
    agreement = sum(got == p["equal"] for p, got in verdicts) / len(verdicts)
    false_positives = [(p["prediction"], p["reference"], p["source"]) for p, got in verdicts if got and not p["equal"]]
    assert not false_positives
    assert agreement >= 0.95, f"agreement {agreement:.3f}"


@pytest.mark.slow
def test_not_below_math_verify_alone_on_any_source():
    """On every source, the checker agrees at least as often as math-verify 0.9.0 alone with its defaults
    (``verify(parse(reference), parse(prediction))``), the layer it falls back to."""
    math_verify = pytest.importorskip("math_verify")
    verdicts = _verdicts(scored_table())
    ours: dict[str, int] = {}
    alone: dict[str, int] = {}
    for p, got in verdicts:
        repo = p["source"].split("@")[0]
        try:
            mv = bool(math_verify.verify(math_verify.parse(p["reference"]), math_verify.parse(p["prediction"])))
        except Exception:  # noqa: BLE001 - as a user calling math-verify sees it: an error is "not equal"
            mv = False
        ours[repo] = ours.get(repo, 0) + (got == p["equal"])
        alone[repo] = alone.get(repo, 0) + (mv == p["equal"])
    assert {repo: (ours[repo], alone[repo]) for repo in ours if ours[repo] < alone[repo]} == {}
