"""Where the answer is in a model's text: ``\\boxed{}`` contents and "the answer is" phrases.

Three modes, chosen per env with ``answer_extraction=`` (see ``docs/math.md``):

- ``"last_boxed"`` (default): the content of the last well-formed ``\\boxed{...}``.
- ``"all_boxed"``: every boxed answer, in order, repeats dropped, joined as a comma
  list (``\\boxed{2} and \\boxed{3}`` gives ``2, 3``; one box gives that box).
- ``"answer_phrase"``: the last ``\\boxed{}`` if there is one, otherwise the answer after the
  last "the (final) answer is" / "answer:" phrase or "Answer" followed by math (``Answer $9$``):
  the math span right after it, else the text up to the end of its line or sentence (the value
  it states, if that is prose). The phrase is read by the same code as in :func:`final_answer`.

:func:`final_answer` is what :func:`~llm_marl_envs.math.is_equivalent` reads from a whole
reply, in the order math-verify's extraction tries (the answer at the end first): reasoning
in ``<think>...</think>`` and chat-template tokens (``<|im_end|>``, ``</s>``) are dropped;
then the last ``\\boxed{}``; then an "answer" phrase (``Final Answer: ...``, ``Answer $9$``,
``Answer \\[ 9 \\]``); then, for prose, the value its last sentence states (``... is 34.``),
else its last ``$...$`` span (a number after an answer phrase, never a bare number in prose);
otherwise the whole text. A number read from prose is a whole token (a sentence's ``.`` or ``,``
after it is no part of it): never the ``3`` of ``3abc``, ``3x``, ``3_000`` or ``3-4``, nor the
``5`` of ``1e5`` or ``10^5``; a stated value that is no whole number (``is 3abc``) gives none.
"""

from __future__ import annotations

import re
from typing import Literal

__all__ = ["extract_boxed", "extract_all_boxed", "extract_answer", "final_answer", "final_boxes", "EXTRACTION_MODES",
           "ExtractionMode", "MAX_INPUT_CHARS"]

MAX_INPUT_CHARS = 20_000  # longer texts are cut to their last MAX_INPUT_CHARS characters

ExtractionMode = Literal["last_boxed", "all_boxed", "answer_phrase"]
EXTRACTION_MODES: tuple[str, ...] = ("last_boxed", "all_boxed", "answer_phrase")

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\b")


def _boxed_spans(text: str) -> list[tuple[int, str]]:
    """(start, content) of every well-formed ``\\boxed{...}``/``\\fbox{...}``/``\\boxed 5``, in order."""
    found: list[tuple[int, str]] = []
    stack: list[int] = []  # for each open brace: start of a boxed content, or -1
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            m = _BOX_RE.match(text, i)
            if m:
                j = m.end()
                while j < n and text[j] == " ":
                    j += 1
                if j < n and text[j] == "{":
                    stack.append(j + 1)
                    i = j + 1
                    continue
                if j < n and (j > m.end() or not text[j].isalpha()):
                    tail = re.match(r"[^\s$]+", text[j:j + 200])
                    if tail:
                        found.append((i, tail.group(0)))
                i = j
                continue
            i += 2
            continue
        if c == "{":
            stack.append(-1)
        elif c == "}" and stack:
            start = stack.pop()
            if start >= 0:
                found.append((start, text[start:i]))
        i += 1
    found.sort(key=lambda item: item[0])
    # a box nested in another box is part of the outer answer, not an answer of its own
    outer: list[tuple[int, str]] = []
    for start, content in found:
        if outer and start < outer[-1][0] + len(outer[-1][1]):
            continue
        outer.append((start, content))
    return outer


def extract_boxed(text: str) -> str | None:
    """Content of the last well-formed ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``.

    Braces inside are balanced (``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``); the
    brace-less form ``\\boxed 5`` gives ``5``. Returns None when there is none.
    """
    if not isinstance(text, str):
        return None
    spans = _boxed_spans(text[-MAX_INPUT_CHARS:])
    return spans[-1][1] if spans else None


def extract_all_boxed(text: str) -> list[str]:
    """Contents of every boxed answer in ``text``, in order, exact repeats dropped."""
    if not isinstance(text, str):
        return []
    out: list[str] = []
    for _, content in _boxed_spans(text[-MAX_INPUT_CHARS:]):
        content = content.strip()
        if content and content not in out:
            out.append(content)
    return out


# "the (final) answer is", "answer:", or "Answer" right before a math span (``Answer $ 9 $``, ``Answer \[ 9 \]``)
_PHRASE_RE = re.compile(r"(?:\bthe\s+)?(?:\bfinal\s+)?\banswer\s*(?:is\b|:|(?=\$|\\\[|\\\())\s*:?\s*", re.I)
# "answer" owned by someone else ("the tool agent's answer is", "your answer is", "the previous answer is"):
# a report of another answer, not the reply's own
_REPORTED_RE = re.compile(r"(?:\b\w+['’]s|\b(?:your|their|his|her|its|previous|latest|other))\s+(?:final\s+)?$", re.I)


def extract_answer(text: str, mode: str = "last_boxed") -> str | None:
    """The answer in ``text`` under extraction ``mode`` (see the module docstring); None if none."""
    if mode not in EXTRACTION_MODES:
        raise ValueError(f"unknown answer extraction mode {mode!r}; choose one of {list(EXTRACTION_MODES)}")
    if not isinstance(text, str):
        return None
    text = text[-MAX_INPUT_CHARS:]
    if mode == "all_boxed":
        boxes = extract_all_boxed(text)
        return ", ".join(boxes) if boxes else None
    boxed = extract_boxed(text)
    if boxed is not None and boxed.strip():
        return boxed.strip()
    if mode == "answer_phrase":
        return _phrase_answer(_clean_reply(text)) or None
    return None


# ------------------------------------------------------------------------------------------
# the final answer of a whole reply (what is_equivalent reads)

_THINK_RE = re.compile(r"<think>.*?(?:</think>|$)", re.S)
_CHAT_TOKEN_RE = re.compile(r"<\|[^|<>\s]{1,40}\|>|<｜[^｜<>]{1,40}｜>|</?s>|<eos>|<end_of_turn>|\[/?INST\]")
_MATH_SPAN_RE = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\[(.+?)\\\]|\\\((.+?)\\\)", re.S)
_PROSE_WORD_RE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")
_PROSE_SKIP = {"and", "sin", "cos", "tan", "cot", "sec", "csc", "log", "exp", "sqrt", "infty", "inf", "arcsin",
               "arccos", "arctan", "sinh", "cosh", "tanh", "abs", "floor", "ceil", "max", "min", "gcd", "lcm", "mod",
               "frac", "cdot", "times", "pmatrix", "bmatrix", "text", "mathrm", "cup", "cap", "leq", "geq", "neq"}
_STATES_RE = re.compile(r"\b(?:is|are|equals|was|be|gives|get|obtain)\b\s*:?\s*", re.I)
_NUMBER_RE = re.compile(r"[-+−]?(?:\d+(?:[.,]\d+)*(?:/\d+)?|\.\d+)")
# a number that is a whole token of prose: not the leading digits of 3.5e2, 3abc, 3_000, 3-4, 3*4 or 10^5,
# nor the tail of x2, 1e5, --3, 5-3 or 10^5 (a sentence's full stop or comma after it is no part of it)
_WHOLE_NUMBER_RE = re.compile(r"(?<![\w.+\-−/^])(?<![\w)]\*)" + _NUMBER_RE.pattern + r"(?![\w/^]|[-+−*.,]\d)")
_NUMBER_START_RE = re.compile(r"[-+−]*\.?\d")


def _is_prose(text: str) -> bool:
    """Two or more words (three letters or more, not LaTeX commands or function names) outside math spans."""
    plain = _MATH_SPAN_RE.sub(" ", text)
    plain = re.sub(r"\\[A-Za-z]+(?:\s*\{[^{}]*\})?", " ", plain)  # \text{cm}, \mathrm{m}: units, not prose
    words = [w for w in _PROSE_WORD_RE.findall(plain) if w.lower() not in _PROSE_SKIP]
    return len(words) >= 2


def _span_content(m: re.Match[str]) -> str:
    return next(g for g in m.groups() if g is not None).strip()


def _stated_value(sentence: str, last_number: bool = True) -> str | None:
    """The value a prose sentence states: after its last "is"/"equals"/..., a math span or a number;
    else its last math span; else (``last_number``) its last number."""
    states = list(_STATES_RE.finditer(sentence))
    if states:
        tail = sentence[states[-1].end():].strip().strip("*_").strip()
        m = _MATH_SPAN_RE.match(tail)
        if m:
            return _span_content(m)
        m = _WHOLE_NUMBER_RE.match(tail)
        if m:
            return m.group(0).rstrip(".,")
        if _NUMBER_START_RE.match(tail):
            return None  # it states 3abc, 1e5 or --3: no number of it is the answer, nor one before it
    spans = list(_MATH_SPAN_RE.finditer(sentence))
    if spans:
        return _span_content(spans[-1])
    numbers = _WHOLE_NUMBER_RE.findall(sentence) if last_number else []
    return numbers[-1].rstrip(".,") if numbers else None


def _last_sentence(text: str) -> str:
    """The last sentence (or line) that has a digit or a math span."""
    pieces = [p for p in re.split(r"\n+|(?<=[.!?])\s+(?=[A-Z])", text) if p.strip()]
    for piece in reversed(pieces):
        if re.search(r"\d|\$|\\\[|\\\(", piece):
            return piece
    return text


def _clean_reply(text: str) -> str:
    """Without ``<think>`` reasoning (when an answer follows it) and chat-template tokens."""
    if "<think>" in text or "</think>" in text:
        after = text.rsplit("</think>", 1)[-1] if "</think>" in text else _THINK_RE.sub(" ", text)
        if after.strip():
            text = after
    return _CHAT_TOKEN_RE.sub(" ", text).strip()


def _phrase_answer(text: str) -> str | None:
    """What follows the last answer phrase (see ``_PHRASE_RE``): the math span right after it, else the
    rest of its line up to the end of the sentence, and if that is prose (``The largest $n$ is 34``), the
    value it states. A phrase whose answer is someone else's (``the tool agent's answer is 3``, ``your
    answer is``, ``the previous answer is``) reports that answer and is skipped. None without a phrase;
    ``""`` for a phrase with nothing after it, or when every phrase reports another's answer. The one
    reading of a phrase, for :func:`final_answer` and the ``"answer_phrase"`` mode of :func:`extract_answer`."""
    phrases = list(_PHRASE_RE.finditer(text))
    if not phrases:
        return None
    own = [m for m in phrases if not _REPORTED_RE.search(text[max(0, m.start() - 40):m.start()])]
    if not own:  # only others' answers are reported ("The tool agent's answer is 3"): no answer of its own
        return ""
    rest = text[own[-1].end():].strip()
    m = _MATH_SPAN_RE.match(rest)
    if m:
        return _span_content(m)
    rest = rest.split("\n", 1)[0]
    rest = re.split(r"\.(?:\s|$)", rest, maxsplit=1)[0].strip().strip("*_").strip()
    if not _is_prose(rest):
        return rest
    return _stated_value(rest) or rest


# what may stand between two boxes of one answer list: math delimiters, spacing, commas, "and"/"or" (plain
# or in \\text{}), and a name before the next box (x = \\boxed{2} or x = \\boxed{3}); any other word is prose
_JOINER_RE = re.compile(r"\$|\\[\[\]()]|\\q?quad(?![A-Za-z])|\\[,;: !]|~|[\s,;&]|\\\\|"
                        r"\\(?:text|textrm|mbox|mathrm)\s*\{\s*(?:and|or|,)?\s*\}|\b(?:and|or)\b|"
                        r"(?:\b[A-Za-z]|\\[A-Za-z]+)(?:_\{?\w+\}?)?'*\s*=")
_BOX_OPEN_RE = re.compile(r"\\(?:boxed|fbox)\s*\{?$")


def _joins_a_list(between: str) -> bool:
    """True when the text between two boxes (from the first's closing brace to the second's ``\\boxed{``)
    only joins them: no prose, no sentence end, no line break."""
    gap = _BOX_OPEN_RE.sub("", between[1:] if between.startswith("}") else between)
    return "\n" not in gap and len(gap) <= 60 and not _JOINER_RE.sub("", gap).strip()


def final_boxes(text: str) -> list[str]:
    """Every boxed answer of the line that holds the last box, when they are joined only by
    "and"/"or", commas, spacing and math delimiters (``x = \\boxed{2} or x = \\boxed{3}``,
    ``$\\boxed{1}$, $\\boxed{2}$``): math-verify reads these as one answer list. Boxes with prose between them
    (``\\boxed{2} is wrong, \\boxed{3}``) are separate answers: the last one counts."""
    if not isinstance(text, str):
        return []
    text = _clean_reply(text[-MAX_INPUT_CHARS:])
    spans = _boxed_spans(text)
    if len(spans) < 2:
        return []
    out = [spans[-1]]
    for start, content in reversed(spans[:-1]):
        if not _joins_a_list(text[start + len(content):out[-1][0]]):
            break
        out.append((start, content))
    items: list[str] = []
    for _, content in reversed(out):
        if content.strip() and content.strip() not in items:
            items.append(content.strip())
    return items if len(items) > 1 else []


def final_answer(text: str) -> str:
    """The final answer of a whole reply, read the way math-verify's extraction reads it (see the
    module docstring). A short answer without prose is returned whole."""
    if not isinstance(text, str):
        return ""
    text = _clean_reply(text[-MAX_INPUT_CHARS:])
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed.strip()
    phrase = _phrase_answer(text)
    if phrase is not None:
        return phrase
    if not _is_prose(text):
        return text
    return _stated_value(_last_sentence(text), last_number=False) or text  # a bare number in prose is no answer
