"""Run a program against test cases and compare outputs: :func:`run_tests` -> :class:`TestReport`.

Case formats (mixable in one list):

- stdin/stdout: ``{"input": "1 2\\n", "output": "3\\n"}`` or a tuple ``("1 2\\n", "3\\n")``.
  Each case is one sandbox run (cases run concurrently with ``run_many``).
- call-based (LeetCode style): ``{"fn": "add", "args": [1, 2], "kwargs": {}, "expected": 3}``.
  ``fn`` names a top-level function, or ``"Class.method"``; a bare name that is not
  top-level but is a method of a top-level ``Solution`` class is found there too (the
  class is instantiated once per case). All call cases of one program run in ONE sandbox
  run: a harness loads the program from ``solution.py`` (its top level runs once, its
  prints are discarded), calls each case and prints one JSON line per case, which the
  host parses with :mod:`json` (program output is never ``eval``-ed). Arguments and
  expected values must be JSON-serialisable. Expected values never enter the sandbox
  (the host compares), so a program that forges result lines still has to produce the
  right values.

Comparison rules (stdin/stdout):

1. normalise line ends (``\\r\\n`` and ``\\r`` -> ``\\n``), strip trailing whitespace on every
   line and drop trailing blank lines;
2. the two outputs must have the same number of lines, and each line the same number of
   whitespace-separated tokens;
3. tokens are equal when identical strings; when the expected token is an integer
   (``-?\\d+``), the actual token must be the same number exactly (``3.0`` is ``3``,
   ``999999000`` is not ``999999937``); otherwise, when both are numbers (decimal or
   scientific notation, ``inf``/``nan``), ``math.isclose(a, b, rel_tol=1e-6,
   abs_tol=1e-9)`` (``rel_tol``/``abs_tol`` options change it). ``nan`` equals ``nan``.

Comparison rules (call-based): values compare structurally: lists and tuples are the
same (JSON has no tuples), dicts by keys and values, an ``int`` expected value exactly
(a float result must equal it exactly), other numbers with the same float tolerance
(``True`` is not ``1``), everything else with ``==``. A raised exception fails the case
(its ``actual`` is ``"<ExceptionName: message>"``). Every harness line is validated: a
line that is not a result record (forged by the program, nested too deeply, not JSON)
fails its case with an ``error``; :func:`run_tests` never raises for program output.
"""

from __future__ import annotations

import dataclasses
import decimal
import json
import math
import re
from typing import Any, Iterable, Mapping, Protocol, Sequence

from . import programs
from .records import ExecutionResult, Program


class ProgramRunner(Protocol):
    """What :func:`run_tests` needs of a sandbox: :meth:`Sandbox.run <sandboxes.base.Sandbox.run>` and
    :meth:`~sandboxes.base.Sandbox.run_many` (every :class:`~sandboxes.base.Sandbox` is one; ``base`` imports this
    module, so this module names the two methods instead of importing ``base``)."""

    def run(self, code: str, stdin: str = "", timeout_s: float | None = None, memory_mb: int | None = None,
            files: Mapping[str, str | bytes] | None = None) -> ExecutionResult: ...

    def run_many(self, programs: Iterable[Program | str | tuple[str, str]],
                 max_workers: int | None = None) -> list[ExecutionResult]: ...

_NUMBER = re.compile(r"^[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|inf|infinity|nan)$", re.IGNORECASE)
_INTEGER = re.compile(r"^[+-]?\d+$")
_MARK = "\x1e__SBX_CASE__"


@dataclasses.dataclass
class CaseResult:
    """One case: whether it passed, what was expected, what the program produced."""

    passed: bool
    expected: Any
    actual: Any
    status: str
    kind: str  # "io" or "call"
    stderr: str = ""
    error: str | None = None


@dataclasses.dataclass
class TestReport:
    """All cases of one :func:`run_tests` call, in input order."""

    __test__ = False  # not a pytest class

    cases: list[CaseResult]

    @property
    def passed(self) -> int:
        return sum(c.passed for c in self.cases)

    @property
    def total(self) -> int:
        return len(self.cases)

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.cases else 0.0

    @property
    def all_passed(self) -> bool:
        return bool(self.cases) and self.passed == self.total


def normalize_output(text: str) -> list[str]:
    """Rule 1: line ends to ``\\n``, trailing whitespace per line stripped, trailing blank lines dropped."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def tokens_match(actual: str, expected: str, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> bool:
    """Rule 3: identical, or the same number (exactly when ``expected`` is an integer)."""
    if actual == expected:
        return True
    if _INTEGER.match(expected):  # "answer mod 1e9+7" must not pass within +-1000
        if not _NUMBER.match(actual):
            return False
        try:
            return decimal.Decimal(actual) == decimal.Decimal(expected)
        except (decimal.InvalidOperation, ValueError):
            return False
    if _NUMBER.match(actual) and _NUMBER.match(expected):
        a, e = float(actual), float(expected)
        if math.isnan(a) or math.isnan(e):
            return math.isnan(a) and math.isnan(e)
        return math.isclose(a, e, rel_tol=rel_tol, abs_tol=abs_tol)
    return False


def outputs_match(actual: str, expected: str, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> bool:
    """The stdin/stdout comparison rules of this module (see the module docstring)."""
    a_lines, e_lines = normalize_output(actual), normalize_output(expected)
    if len(a_lines) != len(e_lines):
        return False
    for a_line, e_line in zip(a_lines, e_lines, strict=True):
        a_tok, e_tok = a_line.split(), e_line.split()
        if len(a_tok) != len(e_tok):
            return False
        if not all(tokens_match(a, e, rel_tol, abs_tol) for a, e in zip(a_tok, e_tok, strict=True)):
            return False
    return True


def values_match(actual: Any, expected: Any, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> bool:
    """The call-based comparison rules (structural, tuples == lists, float tolerance)."""
    if isinstance(actual, bool) or isinstance(expected, bool):
        return isinstance(actual, bool) and isinstance(expected, bool) and actual == expected
    if isinstance(actual, (int, float)) and isinstance(expected, (int, float)):
        if isinstance(expected, int):
            return actual == expected  # exact: float(10562230626000) is not 10562230626642
        try:
            a, e = float(actual), float(expected)
        except OverflowError:  # an int past float's range (10**400) is within no tolerance of a float
            return False
        if math.isnan(a) or math.isnan(e):
            return math.isnan(a) and math.isnan(e)
        return math.isclose(a, e, rel_tol=rel_tol, abs_tol=abs_tol)
    if isinstance(actual, (list, tuple)) and isinstance(expected, (list, tuple)):
        return len(actual) == len(expected) and all(
            values_match(a, e, rel_tol, abs_tol) for a, e in zip(actual, expected, strict=True))
    if isinstance(actual, dict) and isinstance(expected, dict):
        return actual.keys() == expected.keys() and all(
            values_match(actual[k], expected[k], rel_tol, abs_tol) for k in actual)
    return actual == expected


HARNESS = programs.source("call_harness.py")  # the program run_tests runs for call-based cases


def parse_answer(text: str) -> dict[str, Any] | str:
    """One harness line: ``{"ok": True, "value": v}`` or ``{"ok": False, "error": str}``, else
    a string saying why the line is malformed. Never raises: the line is program output."""
    try:
        ans = json.loads(text)
    except (ValueError, RecursionError):
        return "malformed result line: not JSON (or nested too deeply)"
    if not isinstance(ans, dict) or not isinstance(ans.get("ok"), bool):
        return "malformed result line: not a result record"
    if ans["ok"] and "value" not in ans:
        return "malformed result line: no value"
    if not ans["ok"] and not isinstance(ans.get("error"), str):
        return "malformed result line: no error message"
    return ans


def _classify_case(case: Any) -> tuple[str, Any]:
    if isinstance(case, (tuple, list)) and len(case) == 2 and all(isinstance(x, str) for x in case):
        return "io", {"input": case[0], "output": case[1]}
    if isinstance(case, dict):
        if "fn" in case:
            if "expected" not in case:
                raise ValueError(f"call-based test case {case!r} needs an 'expected' value")
            return "call", case
        if "output" in case:
            return "io", {"input": case.get("input", ""), "output": case["output"]}
    raise ValueError(f"unknown test case format {case!r}: use {{'input': str, 'output': str}}, (stdin, expected) "
                     "or {'fn': name, 'args': [...], 'kwargs': {...}, 'expected': value}")


def run_tests(sandbox: ProgramRunner, code: str, cases: Sequence[Any], *, rel_tol: float = 1e-6, abs_tol: float = 1e-9,
              timeout_s: float | None = None, memory_mb: int | None = None,
              max_workers: int | None = None) -> TestReport:
    """Run ``code`` against ``cases`` in ``sandbox``; see the module docstring for formats and rules."""
    parsed = [_classify_case(c) for c in cases]
    results: list[CaseResult | None] = [None] * len(parsed)
    io_idx = [i for i, (kind, _) in enumerate(parsed) if kind == "io"]
    call_idx = [i for i, (kind, _) in enumerate(parsed) if kind == "call"]
    if io_idx:
        progs = [Program(code, parsed[i][1]["input"], timeout_s, memory_mb) for i in io_idx]
        for i, res in zip(io_idx, sandbox.run_many(progs, max_workers=max_workers), strict=True):
            expected = parsed[i][1]["output"]
            ok = res.status == "ok" and outputs_match(res.stdout, expected, rel_tol, abs_tol)
            results[i] = CaseResult(ok, expected, res.stdout, res.status, "io", res.stderr[-4000:])
    if call_idx:
        calls = [{"fn": parsed[i][1]["fn"], "args": list(parsed[i][1].get("args", [])),
                  "kwargs": dict(parsed[i][1].get("kwargs", {}))} for i in call_idx]
        res = sandbox.run(HARNESS, stdin=json.dumps({"mark": _MARK, "cases": calls}), timeout_s=timeout_s,
                          memory_mb=memory_mb, files={"solution.py": code})
        answers = [parse_answer(line[len(_MARK):]) for line in res.stdout.split("\n") if line.startswith(_MARK)]
        for n, i in enumerate(call_idx):
            expected = parsed[i][1]["expected"]
            ans = answers[n] if n < len(answers) else None
            if isinstance(ans, str):  # a line the harness cannot have written
                results[i] = CaseResult(False, expected, None, "error", "call", res.stderr[-4000:], error=ans)
            elif ans is not None:
                if ans["ok"]:
                    why = None
                    try:
                        ok = values_match(ans["value"], expected, rel_tol, abs_tol)
                    except Exception as exc:  # noqa: BLE001 - a returned value never makes run_tests raise
                        ok, why = False, f"cannot compare the returned value: {type(exc).__name__}: {exc}"[:500]
                    results[i] = CaseResult(ok, expected, ans["value"], "ok", "call", res.stderr[-4000:], error=why)
                else:
                    results[i] = CaseResult(False, expected, f"<{ans.get('error')}>", "error", "call",
                                            res.stderr[-4000:], error=ans.get("error"))
            else:  # the program died (or never got to this case)
                status = res.status if res.status != "ok" else "error"
                results[i] = CaseResult(False, expected, None, status, "call", res.stderr[-4000:],
                                        error=f"no result: run ended with status {res.status}")
    return TestReport([r for r in results if r is not None])
