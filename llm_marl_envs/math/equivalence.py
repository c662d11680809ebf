"""Math answer equivalence: ``is_equivalent(prediction, reference) -> bool``.

The check runs cheapest first:

1. **Rules** (pure Python, this process): extraction of the answer
   (:mod:`~llm_marl_envs.math.extraction`), normalization and the answer's shape (choice
   letter, set, tuple or interval, comma list, equation, inequality, scalar;
   :mod:`~llm_marl_envs.math.rules`), exact numbers with :class:`fractions.Fraction` and a
   float disproof of constants (:mod:`~llm_marl_envs.math.numbers`). Most pairs are
   decided here in well under a millisecond.
2. **Slow path** (:mod:`llm_marl_envs.math.pool`): scalars the rules cannot decide go to a
   worker process where math-verify (Hugging Face's checker, latex2sympy) parses and
   verifies them, under a hard deadline (the worker is killed and replaced when it
   overruns). Results are memoized in an LRU cache.

Errors are visible: an exception inside the checker is counted (:func:`checker_stats`),
logged on the ``llm_marl_envs.math`` logger, and re-raised under tests (pytest sets
``PYTEST_CURRENT_TEST``; ``LLM_MARL_MATH_STRICT=1``/``0`` forces it on or off). Outside
tests the pair counts as not equal. The full rules are in ``docs/math.md``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import threading
import time

from . import pool
from .extraction import extract_all_boxed, extract_answer, extract_boxed, final_boxes
from .pool import configure, shutdown_workers
from .numbers import approx_value, numbers_equal, parse_number, values_differ
from .rules import (MAX_ANSWER_CHARS, MAX_LIST_ITEMS, Shape, canon, depth_ok, is_base_numeral, normalize_answer,
                    normalize_with_unit, parse_shape, too_costly, unit_key, words_equal)

__all__ = ["is_equivalent", "extract_boxed", "extract_all_boxed", "extract_answer", "normalize_answer", "configure",
           "shutdown_workers", "checker_stats", "CheckerStats", "CheckerError"]

log = logging.getLogger("llm_marl_envs.math")


class CheckerError(RuntimeError):
    """An exception inside the answer checker (re-raised in strict mode, e.g. under tests)."""


@dataclasses.dataclass
class CheckerStats:
    """Counters of this process's checks (a snapshot from :func:`checker_stats`)."""

    checks: int = 0          # is_equivalent calls
    slow_checks: int = 0     # comparisons sent to a worker (cache misses)
    unreadable: int = 0      # worker could not read an answer, or ran out of time: counted as not equal
    errors: int = 0          # exceptions in the checker's own code (in this process or a worker)
    worker_kills: int = 0    # workers killed for overrunning the deadline or breaking


_stats = CheckerStats()
_stats_lock = threading.Lock()


def checker_stats() -> CheckerStats:
    """A copy of the counters: checks, slow-path comparisons, unreadable answers, errors, worker kills."""
    with _stats_lock:
        return dataclasses.replace(_stats, worker_kills=pool.kills())


def _count(field: str) -> None:
    with _stats_lock:
        setattr(_stats, field, getattr(_stats, field) + 1)


def _strict() -> bool:
    flag = os.environ.get("LLM_MARL_MATH_STRICT")
    if flag is not None:
        return flag.strip().lower() not in ("", "0", "false", "no")
    return "PYTEST_CURRENT_TEST" in os.environ


def _checker_error(exc: BaseException, prediction: str, reference: str) -> None:
    _count("errors")
    log.warning("answer checker error on (%.80r, %.80r): %s: %s", prediction, reference, type(exc).__name__, exc)
    if _strict():
        raise CheckerError(f"answer checker failed on ({prediction[:80]!r}, {reference[:80]!r}): "
                           f"{type(exc).__name__}: {exc}") from exc


# ------------------------------------------------------------------------------------------
# slow path

_local = threading.local()


def _slow(a: str, b: str) -> bool:
    """A worker comparison, unless this ``is_equivalent`` call has spent its time budget."""
    deadline = getattr(_local, "deadline", None)
    if deadline is not None and time.monotonic() > deadline:
        return False
    x, y = sorted((a, b))
    try:
        return _slow_cached(x, y)
    except pool.NoVerdict:  # a timeout or a dead worker: not equal this time, and not cached (the next call retries)
        _count("unreadable")
        return False


@functools.lru_cache(maxsize=65536)
def _slow_cached(a: str, b: str) -> bool:
    """The cached verdicts: only those the answers decide. NoVerdict (timeout, dead worker) and WorkerError (an
    error, not a verdict) propagate, and lru_cache keeps no result of a call that raised."""
    _count("slow_checks")
    result = pool.compare_verdict(a, b)
    if result is None:
        _count("unreadable")
    return bool(result)


# ------------------------------------------------------------------------------------------
# comparison by shape: the rules answer EQUAL, NOT_EQUAL (proven) or UNKNOWN; UNKNOWN goes to
# math-verify in the worker, whose verdict stands

EQUAL, NOT_EQUAL, UNKNOWN = True, False, None
Verdict = bool | None

_DECIMAL_COMMA_RE = re.compile(r"^[-+]?\d+,\d+$")
_DECIMAL_RE = re.compile(r"^[-+]?\d*\.\d+$")


def _scalar_rules(a: str, b: str) -> Verdict:
    if canon(a) == canon(b) or words_equal(a, b):
        return EQUAL
    if is_base_numeral(a) or is_base_numeral(b):
        return NOT_EQUAL  # 4343_0 is a numeral in base 0, not 4343.0
    na, nb = parse_number(a), parse_number(b)
    if na is not None and nb is not None:
        return numbers_equal(na, nb)  # exact numbers (or a decimal at its shown precision): proven either way
    if too_costly(a) or too_costly(b):
        return NOT_EQUAL  # compared as text only: sympy could run without bound
    va, vb = approx_value(a), approx_value(b)
    if va is not None and vb is not None and values_differ(va, vb):
        return NOT_EQUAL  # two constants with clearly different values: no need to ask the worker
    return UNKNOWN


def _scalar_equal(a: str, b: str) -> bool:
    verdict = _scalar_rules(a, b)
    return _slow(a, b) if verdict is UNKNOWN else verdict


def _is_number(x: Shape) -> bool:
    return x.kind == "scalar" and (parse_number(x.text) is not None or approx_value(x.text) is not None)


def _dedup(xs: tuple[Shape, ...]) -> tuple[Shape, ...]:
    """A set's elements with exact repeats dropped (``\\{1, 1\\}`` is ``\\{1\\}``, as for math-verify)."""
    seen: dict[str, Shape] = {}
    for x in xs:
        seen.setdefault(x.label + "=" + canon(x.text) if x.text else repr(x), x)
    return tuple(seen.values())


def _unordered(xs: tuple[Shape, ...], ys: tuple[Shape, ...]) -> Verdict:
    """A perfect matching between the two lists under ``_equal`` (multiset equality, exact repeats dropped)."""
    xs, ys = _dedup(xs), _dedup(ys)
    if len(xs) > MAX_LIST_ITEMS or len(ys) > MAX_LIST_ITEMS:
        return NOT_EQUAL  # compared as text only
    if len(xs) != len(ys):
        # distinct numbers cannot pair up; anything else (x = 1 and 1.0, ...) is math-verify's call
        return NOT_EQUAL if all(_is_number(x) for x in xs + ys) else UNKNOWN
    n = len(xs)
    adj: list[list[int]] = []
    for x in xs:
        row = [j for j, y in enumerate(ys) if _equal(x, y)]
        if not row:
            return NOT_EQUAL  # an element with no partner: no need to compare the rest
        adj.append(row)
    match_of: list[int] = [-1] * n  # Kuhn's augmenting paths: O(n^3) at most, no backtracking blow-up

    def augment(i: int, seen: list[bool]) -> bool:
        for j in adj[i]:
            if not seen[j]:
                seen[j] = True
                if match_of[j] < 0 or augment(match_of[j], seen):
                    match_of[j] = i
                    return True
        return False

    return all(augment(i, [False] * n) for i in range(n))


def _ordered(xs: tuple[Shape, ...], ys: tuple[Shape, ...]) -> Verdict:
    return len(xs) == len(ys) and all(_equal(x, y) for x, y in zip(xs, ys, strict=True))


def _rules(a: Shape, b: Shape) -> Verdict:
    """The rules' verdict on two shapes; element comparisons inside lists may ask the worker."""
    if a.label and b.label and a.label != b.label:
        return NOT_EQUAL  # x = 3 is not y = 3: each names a different unknown (math-verify: x=1 != y=1)
    if a.kind == "union" and len(a.items) == 1:
        a = a.items[0]
    if b.kind == "union" and len(b.items) == 1:
        b = b.items[0]
    kinds = {a.kind, b.kind}
    if "choice" in kinds:
        return a.kind == b.kind and a.text == b.text  # a choice letter equals only the same letter
    if a.kind == b.kind == "scalar":
        return _scalar_equal(a.text, b.text)
    if a.kind == b.kind == "eq":
        return EQUAL if canon(a.text) == canon(b.text) else UNKNOWN
    if a.kind == b.kind == "union" or kinds <= {"set", "bare"}:
        return _unordered(a.items, b.items)  # a set, a union, a bare comma list of answers: no order
    if a.kind == b.kind == "seq":
        if (a.open, a.close) != (b.open, b.close):
            return NOT_EQUAL  # (1, 2] is not (1, 2): bracket types matter
        return _ordered(a.items, b.items)
    if a.kind == b.kind == "matrix":
        return _ordered(a.items, b.items)  # rows in order, entries in order
    if kinds == {"seq", "bare"}:
        return _ordered(a.items, b.items)  # a tuple written without its parentheses keeps its order
    if kinds == {"seq", "set"}:
        return NOT_EQUAL  # a tuple is not a set: (3, 1) != {1, 3}
    if "eq" in kinds and a.kind != b.kind and not (b if a.kind == "eq" else a).label:
        # an equation (2x = 6, 7 = 11a+c, \\sin(x) = a) is not the bare value on its right side; against an
        # assignment (y = -\\frac12x + \\frac34) math-verify compares the two equations
        return NOT_EQUAL
    if kinds & {"seq", "set", "bare", "matrix", "union"} and (_is_number(a) or _is_number(b)):
        return NOT_EQUAL  # a number is not a collection
    if canon(a.text) == canon(b.text) or words_equal(a.text, b.text):
        return EQUAL
    return UNKNOWN


def _whole(x: Shape) -> str:
    return f"{x.label}={x.text}" if x.label and x.kind != "eq" else x.text


def _equal(a: Shape, b: Shape) -> bool:
    verdict = _rules(a, b)
    if verdict is UNKNOWN:
        if "eq" in (a.kind, b.kind):  # an equation against an assignment: both whole
            return _slow(_whole(a), _whole(b))
        return bool(a.text and b.text) and _slow(a.text, b.text)
    return verdict


def _decimal_comma(p: str, r: str) -> Verdict:
    """``1000,99`` against the decimal ``1000.99``: a decimal comma (only when the other side is a decimal)."""
    for x, y in ((p, r), (r, p)):
        if _DECIMAL_COMMA_RE.match(x) and _DECIMAL_RE.match(y):
            nx, ny = parse_number(x.replace(",", ".")), parse_number(y)
            if nx is not None and ny is not None and numbers_equal(nx, ny):
                return EQUAL
    return UNKNOWN


def _compare(p: str, r: str) -> bool:
    if _decimal_comma(p, r) is EQUAL:
        return True
    verdict = _rules(parse_shape(p), parse_shape(r))
    if verdict is UNKNOWN:
        return _slow(p, r)  # the whole answers, as math-verify reads them
    return verdict


def _is_equivalent(prediction: str, reference: str) -> bool:
    (p, p_unit), (r, r_unit) = normalize_with_unit(prediction), normalize_with_unit(reference)
    if not p or not r:
        return False
    p_unit, r_unit = unit_key(p_unit), unit_key(r_unit)
    if p_unit and r_unit and p_unit != r_unit:
        return False  # 5 cm is not 5 m; against a bare number the unit is dropped (MATH's references omit it)
    if p == r:
        return True
    if len(p) > MAX_ANSWER_CHARS or len(r) > MAX_ANSWER_CHARS or not depth_ok(p) or not depth_ok(r):
        return canon(p) == canon(r)  # too long or too nested to read: text only
    # one call may need several worker comparisons (lists, sets): they share one budget
    _local.deadline = time.monotonic() + 2 * pool.settings.timeout_s
    try:
        if _compare(p, r):
            return True
        # several boxes on the final line ("x = \\boxed{2} or x = \\boxed{3}") are also read as one list
        p_list, r_list = final_boxes(prediction), final_boxes(reference)
        if p_list or r_list:
            p2 = normalize_answer(", ".join(p_list)) if p_list else p
            r2 = normalize_answer(", ".join(r_list)) if r_list else r
            return bool(p2 and r2) and _compare(p2, r2)
        return False
    finally:
        _local.deadline = None


def is_equivalent(prediction: str, reference: str) -> bool:
    """True when ``prediction`` and ``reference`` denote the same mathematical answer.

    Either string may be a full solution: the last ``\\boxed{}`` is used if present.
    Non-strings are False. Never hangs (the slow path runs in a worker process under a
    hard deadline, see :func:`configure`). An internal error is counted and logged and the
    pair counts as not equal; in strict mode (under tests) it raises :class:`CheckerError`.
    See docs/math.md for the rules.
    """
    if not isinstance(prediction, str) or not isinstance(reference, str):
        return False
    _count("checks")
    try:
        return _is_equivalent(prediction, reference)
    except Exception as exc:  # never raise on model output, but never hide a bug either
        _checker_error(exc, prediction, reference)
        return False
