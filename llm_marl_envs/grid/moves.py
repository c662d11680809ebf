"""Extract a list of grid moves (``U``/``D``/``L``/``R``) from free-form model text.

Shared by the Sokoban and Plan-path tasks. Pure Python, no dependencies.

What is accepted
----------------
A *move token* is, case-insensitively, one of

* a direction word: ``up``, ``down``, ``left``, ``right`` (also ``north``/``south``/
  ``west``/``east``);
* a single letter ``U``, ``D``, ``L``, ``R`` (either case);
* an arrow ``↑ ↓ ← →``;
* an upper-case run of move letters such as ``UDLR`` or ``RRDL`` (lower-case runs are
  not accepted, because ordinary words like ``dull`` are made only of move letters).

A *move segment* is a piece of text that, after removing separators (whitespace,
``, ; | / [ ] ( ) { } ' " ` * - >``, ``->``, ``=>``) and the filler words ``then``,
``and``, ``move``/``moves``, ``go``, ``step``/``steps``, consists **only** of move tokens
(at least one). Anything else in the segment ("I think", "box", digits) rejects it, so a
sentence is never half-read as moves.

The segment is searched for in this order, and the first kind that yields a segment wins:

1. the last ``<answer>...</answer>`` element (its content is a segment, or holds a
   labelled line as in 2.);
2. the last labelled line whose text after the label is a move segment. A label is one
   of the words ``answer``, ``moves``, ``move``, ``solution``, ``plan``, ``actions``,
   ``action`` (any case, anywhere in the line, optionally followed by ``is``), then
   ``:`` or ``=``; markdown ``**``/``_`` around it are fine: ``Answer: ...``,
   ``**Final answer:** ...``, ``So the answer is: ...``, ``moves = [...]``. The text
   after the label is the segment; if it is empty, the next non-empty line is used.
   When a line has several labels, the last (of at most 4) whose segment parses is used;
3. the last fenced code block (```` ``` ````) whose content (all lines joined) is a move
   segment;
4. the last line of the text that is a move segment.

Only the last :data:`MAX_INPUT_CHARS` characters of the text are examined (answers come
at the end), so the work is linear in a bounded size. :func:`parse_moves` never raises
for any ``str`` input and returns ``None`` when no move segment is found.
"""

from __future__ import annotations

import re

__all__ = ["MOVE_DELTAS", "MOVES", "MAX_INPUT_CHARS", "parse_moves", "moves_to_string"]

#: The canonical moves, in the fixed order used everywhere (solvers, BFS tie-breaks).
MOVES: tuple[str, ...] = ("U", "D", "L", "R")

#: ``(d_row, d_col)`` of each canonical move; row 0 is the top row.
MOVE_DELTAS: dict[str, tuple[int, int]] = {
    "U": (-1, 0),
    "D": (1, 0),
    "L": (0, -1),
    "R": (0, 1),
}

#: Only this many trailing characters of the model text are parsed.
MAX_INPUT_CHARS = 20_000

_WORDS: dict[str, str] = {
    "up": "U", "down": "D", "left": "L", "right": "R",
    "north": "U", "south": "D", "west": "L", "east": "R",
    "u": "U", "d": "D", "l": "L", "r": "R",
    "↑": "U", "↓": "D", "←": "L", "→": "R",
}
_MAX_LABELS_PER_LINE = 4  # bounds the work on lines like "Answer:Answer:Answer:..."
_FILLER = frozenset({"then", "and", "move", "moves", "go", "step", "steps"})
_SEPARATORS = re.compile(r"(?:->|=>|[\s,;|/\[\](){}'\"`*>\-.])+")
_UPPER_RUN = re.compile(r"[UDLR]+")
_LABEL = re.compile(
    r"\b(?:answer|moves?|solution|plan|actions?)(?:\s+is)?[\s*_]*[:=][\s*_]*",
    re.IGNORECASE,
)


def moves_to_string(moves: list[str]) -> str:
    """Join canonical moves into a compact string: ``["U", "R"] -> "UR"``."""
    return "".join(moves)


def _parse_segment(segment: str) -> list[str] | None:
    """Parse one segment that must consist only of move tokens; None otherwise."""
    out: list[str] = []
    for tok in _SEPARATORS.split(segment):
        if not tok:
            continue
        low = tok.lower()
        if low in _WORDS:
            out.append(_WORDS[low])
        elif low in _FILLER:
            continue
        elif _UPPER_RUN.fullmatch(tok):
            out.extend(tok)
        elif all(ch in "↑↓←→" for ch in tok):
            out.extend(_WORDS[ch] for ch in tok)
        else:
            return None
    return out or None


def _from_labels(lines: list[str]) -> list[str] | None:
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i]
        for m in list(_LABEL.finditer(line))[-_MAX_LABELS_PER_LINE:][::-1]:
            rest = line[m.end():].strip()
            if not rest:
                for nxt in lines[i + 1:]:
                    if nxt.strip() and not nxt.strip().startswith("```"):
                        rest = nxt
                        break
            parsed = _parse_segment(rest)
            if parsed is not None:
                return parsed
    return None


def _fenced_blocks(text: str) -> list[str]:
    """Contents of the closed ``` fenced blocks, without the opening info line."""
    parts = text.split("```")
    blocks = []
    for i in range(1, len(parts) - 1, 2):
        body = parts[i]
        nl = body.find("\n")
        blocks.append(body[nl + 1:] if nl >= 0 else body)
    return blocks


def parse_moves(text: str) -> list[str] | None:
    """Extract a canonical move list (``["U", "R", ...]``) from model text.

    See the module docstring for exactly what is accepted and in which order the text
    is searched. Returns ``None`` when nothing parseable is found; never raises for a
    ``str`` (a non-``str`` argument also gives ``None``).

    >>> parse_moves("Let me think... Answer: up, right, right")
    ['U', 'R', 'R']
    >>> parse_moves("Moves: UDLR")
    ['U', 'D', 'L', 'R']
    >>> parse_moves("no idea") is None
    True
    """
    if not isinstance(text, str) or not text:
        return None
    text = text[-MAX_INPUT_CHARS:]
    low = text.lower()
    end = low.rfind("</answer>")
    start = low.rfind("<answer>", 0, end) if end >= 0 else -1
    if start >= 0:
        inner = text[start + len("<answer>"):end]
        parsed = _parse_segment(inner) or _from_labels(inner.splitlines())
        if parsed is not None:
            return parsed
    lines = text.splitlines()
    parsed = _from_labels(lines)
    if parsed is not None:
        return parsed
    for block in reversed(_fenced_blocks(text)):
        parsed = _parse_segment(block) or _from_labels(block.splitlines())
        if parsed is not None:
            return parsed
    for line in reversed(lines):
        if line.strip().startswith("```"):
            continue
        parsed = _parse_segment(line)
        if parsed is not None:
            return parsed
    return None
