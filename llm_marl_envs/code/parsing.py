"""Reading the coder's program and the tester's test cases out of model text.

Nothing here raises on any input, runs model text, or calls ``eval``: programs are only
extracted (and syntax-checked with :func:`ast.parse`, which builds a tree and executes
nothing); test values are read with :func:`json.loads`, falling back to
:func:`ast.literal_eval` (literals only) on short text.

Program (:func:`extract_program`), first rule that yields non-empty code:

1. the last fenced block tagged ``python``/``py``/``python3``, else the last untagged
   fenced block (:func:`llm_marl_envs.base.extract_code_block`);
2. the last fenced block with any other tag (`` ```py3``, `` ```code``...);
3. an unclosed fence (output cut off mid-block): everything after the last opening fence;
4. raw code: the whole text when it parses as Python and looks like code (has a ``def``,
   ``import``, ``print(``, ``input(`` or an assignment), else the longest tail of lines
   starting at a code-looking line (``def``/``class``/``import``/``from``) that parses.

Tests (:func:`parse_tests`), written by the tester in one of two formats:

- JSON: a list of objects (a single object is also read), preferably in a fenced block
  (`` ```json``). For stdio problems ``{"input": "...", "output": "..."}``; for call
  problems ``{"args": [...], "expected": value}`` (``kwargs`` optional; ``"input"`` may
  stand for ``args`` and ``"output"`` for ``expected``). Numbers given for a stdio
  ``input``/``output`` are turned into text; a list of lines is joined with newlines.
- Text pairs: ``Input:`` followed by the input, then ``Output:`` (or ``Expected Output:``)
  followed by the output, repeated. For a call problem the input text is the argument list
  (``[1, 2], 3``, ``rotate([1, 2], 3)`` or LeetCode's ``nums = [1, 2], k = 3``, read as
  keyword arguments) and the output one value, as JSON or Python literals, read whole (``3abc``
  or ``3 apples`` is no value, never 3). Digits grouped by thousands (``3,000``, ``-1,234.5``)
  are refused as an output: Python reads them as the tuple ``(3, 0)``, and which number (or
  tuple) the tester meant is not guessed.

At most ``max_tests`` tests are kept (default 10) and a test whose input or output text is
longer than ``max_chars`` (default 4000) is dropped and reported in ``errors``.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import warnings
from typing import Any

from llm_marl_envs.base import extract_code_block

from .problems import CodeTest

__all__ = ["ParsedTests", "extract_program", "parse_tests", "syntax_ok"]

#: Model text longer than this is cut before any parsing (bounds the work per action).
MAX_TEXT_CHARS = 200_000
#: Longest text handed to :func:`ast.literal_eval` (bounds its time and memory).
LITERAL_MAX_CHARS = 20_000

_ANY_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
_OPEN_FENCE = re.compile(r"```[^\n`]*\n")
_CODE_START = re.compile(r"^(def |class |import |from \S+ import |async def |@)", re.MULTILINE)
_CODE_HINT = re.compile(r"(^|\n)\s*(def |class |import |from \S+ import )|\bprint\(|\binput\(|^\s*[A-Za-z_]\w*\s*=[^=]",
                        re.MULTILINE)


def _parse(source: str, mode: str = "exec") -> ast.AST:
    """:func:`ast.parse` without its warnings (invalid escapes, ``is`` with a literal...):
    model text must neither spam logs nor fail under ``-W error``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(source, mode=mode)


def _literal_eval(node_or_text: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.literal_eval(node_or_text)


def syntax_ok(code: str | None) -> bool:
    """``True`` when ``code`` is non-empty Python that :func:`ast.parse` accepts (nothing runs)."""
    if not code or not code.strip():
        return False
    try:
        _parse(code)
    except Exception:  # SyntaxError, ValueError (NUL bytes), RecursionError, MemoryError
        return False
    return True


def extract_program(text: Any) -> str | None:
    """The coder's program in ``text`` (see the module docstring), or ``None``. Never raises."""
    try:
        return _extract_program(text)
    except Exception:
        return None


def _extract_program(text: Any) -> str | None:
    if not isinstance(text, str) or not text.strip():
        return None
    text = text[:MAX_TEXT_CHARS]
    code = extract_code_block(text)
    if code and code.strip():
        return code
    blocks = [m.group(1) for m in _ANY_FENCE.finditer(text) if m.group(1).strip()]
    if blocks:
        return blocks[-1]
    if text.count("```") % 2 == 1:
        opens = list(_OPEN_FENCE.finditer(text))
        if opens:
            tail = text[opens[-1].end():]
            if tail.strip():
                return tail
    if "```" in text:
        return None
    if _CODE_HINT.search(text) and syntax_ok(text):
        return text
    for m in _CODE_START.finditer(text):
        tail = text[m.start():]
        if syntax_ok(tail):
            return tail
    return None


@dataclasses.dataclass(frozen=True)
class ParsedTests:
    """What :func:`parse_tests` read: the tests, the format it found, problems met."""

    tests: tuple[CodeTest, ...] = ()
    format: str = "none"  # "json" | "text" | "none"
    errors: tuple[str, ...] = ()
    dropped: int = 0

    @property
    def ok(self) -> bool:
        return bool(self.tests)


def parse_tests(text: Any, kind: str = "stdio", max_tests: int = 10, max_chars: int = 4000) -> ParsedTests:
    """Read the tester's tests for a ``kind`` (``"stdio"``/``"call"``) problem. Never raises."""
    try:
        return _parse_tests(text, kind, max_tests, max_chars)
    except Exception as exc:  # a bug here must not reach the env
        return ParsedTests(errors=(f"could not read tests: {type(exc).__name__}",))


def _parse_tests(text: Any, kind: str, max_tests: int, max_chars: int) -> ParsedTests:
    if not isinstance(text, str) or not text.strip():
        return ParsedTests(errors=("no tests found",))
    text = text[:MAX_TEXT_CHARS]
    raw_items, fmt = _json_items(text), "json"
    if raw_items is None:
        raw_items, fmt = _text_pairs(text, kind), "text"
    if not raw_items:
        return ParsedTests(errors=("no tests found: give a JSON list of tests in a ```json block, "
                                   "or Input:/Output: pairs",))
    tests: list[CodeTest] = []
    errors: list[str] = []
    dropped = 0
    for i, item in enumerate(raw_items):
        if len(tests) >= max_tests:
            dropped += len(raw_items) - i
            errors.append(f"only the first {max_tests} tests are kept")
            break
        test, err = _to_test(item, kind, max_chars, fmt)
        if test is None:
            dropped += 1
            errors.append(f"test {i + 1}: {err}")
        else:
            tests.append(test)
    return ParsedTests(tuple(tests), fmt if tests else "none", tuple(errors[:20]), dropped)


def _loads(s: str) -> Any:
    return json.loads(s)


def _json_items(text: str) -> list[Any] | None:
    """Candidates in order: fenced blocks (last first), then the whole text, then the last
    ``[...]`` span. The first that is JSON (a list, or an object) wins."""
    candidates = [m.group(1) for m in _ANY_FENCE.finditer(text)][::-1]
    candidates.append(text)
    start, end = text.find("["), text.rfind("]")
    if 0 <= start < end:
        candidates.append(text[start:end + 1])
    for cand in candidates:
        cand = cand.strip()
        if not cand or cand[0] not in "[{":
            continue
        try:
            value = _loads(cand)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            value = value.get("tests", [value]) if isinstance(value.get("tests"), list) else [value]
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            return value
    return None


_PAIR = re.compile(
    r"(?:^|\n)[ \t]*(?:#+[ \t]*|\*\*|-[ \t]*)?(?:test[ \t]*\d*[ \t]*[:.-]?[ \t]*)?input[ \t]*\d*[ \t]*(?:\*\*)?[ \t]*:"
    r"[ \t]*(?:\*\*)?(?P<inp>.*?)"
    r"\n[ \t]*(?:#+[ \t]*|\*\*|-[ \t]*)?(?:expected[ \t]+)?output[ \t]*\d*[ \t]*(?:\*\*)?[ \t]*:"
    r"[ \t]*(?:\*\*)?(?P<out>.*?)"
    r"(?=\n[ \t]*(?:#+[ \t]*|\*\*|-[ \t]*)?"
    r"(?:test[ \t]*\d*[ \t]*[:.-]?[ \t]*)?input[ \t]*\d*[ \t]*(?:\*\*)?[ \t]*:|\Z)",
    re.IGNORECASE | re.DOTALL)


#: an output of digits grouped by thousands, which Python would read as a tuple of ints (3,000 is (3, 0))
_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")


def _strip_fence(s: str) -> str:
    s = s.strip("\n")
    m = re.fullmatch(r"\s*```[^\n`]*\n(.*?)\n?```\s*", s, re.DOTALL)
    if m:
        return m.group(1)
    return s


def _text_pairs(text: str, kind: str) -> list[dict[str, Any]]:
    items = []
    for m in _PAIR.finditer(text):
        inp, out = _strip_fence(m.group("inp")), _strip_fence(m.group("out"))
        if not out.strip():
            continue  # an Input: without an Output: is not a test
        if kind == "stdio":
            inp, out = inp.lstrip(" \t").strip("\n"), out.strip()
            items.append({"input": inp + "\n" if inp and not inp.endswith("\n") else inp, "output": out,
                          "_text": True})
        else:
            items.append({"input": inp.strip(), "output": out.strip(), "_text": True})
    return items


def _as_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        return "\n".join(str(v) for v in value) + "\n"
    return None


def _literal(s: str) -> tuple[bool, Any]:
    """A JSON value, or a Python literal (short text only). ``(ok, value)``."""
    s = s.strip()
    if not s:
        return False, None
    try:
        return True, _loads(s)
    except (ValueError, RecursionError):
        pass
    if len(s) > LITERAL_MAX_CHARS:
        return False, None
    try:
        value = _literal_eval(s)
    except Exception:
        return False, None
    ok, value = _jsonable(value)
    return ok, value


def _jsonable(value: Any, depth: int = 0) -> tuple[bool, Any]:
    """Tuples become lists; anything JSON cannot hold (sets, bytes, complex) fails."""
    if depth > 50:
        return False, None
    if value is None or isinstance(value, (bool, int, str)):
        return True, value
    if isinstance(value, float):
        return (value == value and value not in (float("inf"), float("-inf"))), value
    if isinstance(value, (list, tuple)):
        out = []
        for v in value:
            ok, v = _jsonable(v, depth + 1)
            if not ok:
                return False, None
            out.append(v)
        return True, out
    if isinstance(value, dict):
        out_d = {}
        for k, v in value.items():
            ok, v = _jsonable(v, depth + 1)
            if not ok or not isinstance(k, str):
                return False, None
            out_d[k] = v
        return True, out_d
    return False, None


def _keyword_call(s: str) -> tuple[bool, list[Any], dict[str, Any]]:
    """``[1, 2], k=3`` / ``nums = [1, 2], k = 3`` read as the arguments of a call: the text is
    parsed (:func:`ast.parse`, nothing runs) as ``f(<text>)`` and every argument must be a
    literal (:func:`ast.literal_eval` on its node)."""
    if len(s) > LITERAL_MAX_CHARS:
        return False, [], {}
    try:
        tree = _parse("f(" + s + ")", mode="eval")
        assert isinstance(tree, ast.Expression)  # what mode="eval" returns
        node = tree.body
        if not isinstance(node, ast.Call) or any(isinstance(a, ast.Starred) for a in node.args) \
                or any(k.arg is None for k in node.keywords):
            return False, [], {}
        args = [_literal_eval(a) for a in node.args]
        kwargs = {k.arg: _literal_eval(k.value) for k in node.keywords}
    except Exception:
        return False, [], {}
    ok, args = _jsonable(args)
    ok_k, kwargs = _jsonable(kwargs)
    return (ok and ok_k), (args or []), (kwargs or {})


def _call_args(s: str) -> tuple[bool, list[Any], dict[str, Any]]:
    """Arguments from text: ``[1, 2], 3``, ``f([1, 2], 3)``, ``nums = [1, 2], k = 3`` (LeetCode's
    way: keyword arguments) or one value per line (LiveCodeBench's functional input)."""
    s = s.strip().rstrip(";")
    m = re.fullmatch(r"[A-Za-z_]\w*\s*\((.*)\)", s, re.DOTALL)
    if m:
        s = m.group(1)
        if not s.strip():
            return True, [], {}
        ok, value = _literal("[" + s + "]")
        return (True, value, {}) if ok else _keyword_call(s)
    if re.match(r"[A-Za-z_]\w*\s*=(?!=)", s):
        return _keyword_call(re.sub(r"\s*\n\s*(?=[A-Za-z_]\w*\s*=(?!=))", ", ", s))
    if "\n" in s:
        values = []
        for line in s.splitlines():
            if not line.strip():
                continue
            ok, v = _literal(line)
            if not ok:
                break
            values.append(v)
        else:
            return True, values, {}
    ok, value = _literal("[" + s + "]")
    if ok:
        return True, value, {}
    return _keyword_call(s)  # positional then keyword arguments: ``[1], k=2``


def _to_test(item: Any, kind: str, max_chars: int, fmt: str) -> tuple[CodeTest | None, str]:
    if not isinstance(item, dict):
        return None, "not an object"
    if kind == "stdio":
        inp, out = _as_text(item.get("input")), _as_text(item.get("output", item.get("expected")))
        if inp is None or out is None:
            return None, 'needs "input" and "output" text'
        if len(inp) > max_chars or len(out) > max_chars:
            return None, f"input or output longer than {max_chars} characters"
        return CodeTest.stdio(inp, out), ""
    # call problems
    if item.get("_text"):
        if _THOUSANDS.fullmatch(item.get("output", "").strip()):
            return None, "output groups digits by thousands: write 3000 for a number, (3, 0) for a tuple"
        ok_a, args, kwargs = _call_args(item.get("input", ""))
        ok_e, expected = _literal(item.get("output", ""))
        if not (ok_a and ok_e):
            return None, "input must be the argument list and output one value (JSON or Python literals)"
    else:
        if "args" in item:
            args = item["args"]
        elif "input" in item:
            args = item["input"]
            if isinstance(args, str):
                ok_a, args, text_kwargs = _call_args(args)
                if not ok_a:
                    return None, '"input" text is not an argument list'
                if text_kwargs and not item.get("kwargs"):
                    item = {**item, "kwargs": text_kwargs}
        else:
            return None, 'needs "args" (a list) and "expected"'
        if "expected" in item:
            expected = item["expected"]
        elif "output" in item:
            expected = item["output"]
        else:
            return None, 'needs "expected"'
        if not isinstance(args, list):
            args = [args]
        kwargs = item.get("kwargs") or {}
        if not isinstance(kwargs, dict):
            return None, '"kwargs" must be an object'
    try:
        test = CodeTest.call(args, expected, kwargs)
    except (TypeError, ValueError):
        return None, "values must be JSON values"
    if len(test.args_json) + len(test.kwargs_json) > max_chars or len(test.expected_json) > max_chars:
        return None, f"arguments or expected value longer than {max_chars} characters"
    return test, ""
