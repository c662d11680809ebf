"""Numbers for the answer checker, in plain Python: exact values and float values.

- **Exact** (:func:`parse_number`, :func:`numbers_equal`): integers, decimals, ``a/b``,
  ``\\frac{a}{b}``, mixed numbers (``6\\frac{1}{4}`` = 25/4), scientific notation, read as
  :class:`fractions.Fraction`; decimals compare within 1e-6 relative. This is the fast
  path that decides most numeric answers without sympy.
- **Float values for disproof** (:func:`approx_value`, :func:`values_differ`): constant
  expressions (``2\\sqrt{3}``, ``\\frac{4\\pi}{3}``, ``sqrt(2)/2``) get a float; two clearly
  different values are "not equal" without asking the worker. Floats never prove equality.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["Num", "parse_number", "numbers_equal", "approx_value", "values_differ"]


# ------------------------------------------------------------------------------------------
# exact numbers (fast path)

_NUM = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)"
_PLAIN_RE = re.compile(rf"^({_NUM})(?:[eE]([+-]?\d+))?$")
_SCI_RE = re.compile(rf"^({_NUM})(?:\\times|\\cdot|\*|x)10(?:\^|\*\*)(?:\{{([+-]?\d+)\}}|([+-]?\d+))$")
_POW10_RE = re.compile(r"^([+-]?)10(?:\^|\*\*)(?:\{([+-]?\d+)\}|([+-]?\d))$")
_FRAC_RE = re.compile(rf"^([+-]?)\\frac\{{({_NUM})\}}\{{({_NUM})\}}$")
_FRAC_SHORT_RE = re.compile(r"^([+-]?)\\frac(\d)(\d)$")
_MIXED_RE = re.compile(r"^([+-]?)(\d+)\\frac(?:\{(\d+)\}|(\d))(?:\{(\d+)\}|(\d))$")
_SLASH_RE = re.compile(rf"^\(?({_NUM})\)?/\(?({_NUM})\)?$")
_MAX_EXP = 400


@dataclass(frozen=True)
class Num:
    """A number read by the fast path; ``exact`` is False when it was written with a decimal point."""

    value: Fraction
    exact: bool
    places: int = 0  # digits after the decimal point of a plain decimal (``2.6667``: 4), else 0


def _scaled(mantissa: str, exp: int) -> Num | None:
    if abs(exp) > _MAX_EXP:
        return None
    return Num(Fraction(mantissa) * Fraction(10) ** exp, "." not in mantissa)


def parse_number(s: str) -> Num | None:
    """The value of a plain number (``-3``, ``.5``, ``1e5``, ``\\frac{1}{2}``, ``3/4``,
    ``1\\times10^{5}``, the mixed number ``6\\frac{1}{4}`` = 25/4), or None."""
    s = s.replace(" ", "")
    if not s or len(s) > 60:
        return None
    m = _PLAIN_RE.match(s)
    if m:
        plain = _scaled(m.group(1), int(m.group(2) or 0))
        if plain is not None and m.group(2) is None and "." in m.group(1):
            plain = Num(plain.value, False, len(m.group(1).split(".")[1]))
        return plain
    m = _SCI_RE.match(s)
    if m:
        return _scaled(m.group(1), int(m.group(2) or m.group(3)))
    m = _POW10_RE.match(s)
    if m:
        exp = int(m.group(2) or m.group(3))
        if abs(exp) > _MAX_EXP:
            return None
        return Num((-1 if m.group(1) == "-" else 1) * Fraction(10) ** exp, True)
    m = _MIXED_RE.match(s)
    if m:  # a whole number written before a fraction of integers is a mixed number, not a product
        part_num, part_den = int(m.group(3) or m.group(4)), int(m.group(5) or m.group(6))
        if part_den == 0:
            return None
        return Num((-1 if m.group(1) == "-" else 1) * (int(m.group(2)) + Fraction(part_num, part_den)), True)
    m = _FRAC_RE.match(s) or _FRAC_SHORT_RE.match(s)
    if m:
        num, den = Fraction(m.group(2)), Fraction(m.group(3))
        if den == 0:
            return None
        return Num((-1 if m.group(1) == "-" else 1) * num / den, "." not in m.group(2) + m.group(3))
    m = _SLASH_RE.match(s)
    if m:
        num, den = Fraction(m.group(1)), Fraction(m.group(2))
        if den == 0:
            return None
        return Num(num / den, "." not in m.group(1) + m.group(2))
    return None


MIN_ROUNDED_PLACES = 2  # 0.33 may stand for 1/3; 0.3 may not


def numbers_equal(a: Num, b: Num) -> bool:
    """Exact values compare exactly; with a decimal point on either side, within 1e-6 relative.
    A decimal shown with two or more places also equals an exact value that rounds to it at that
    precision (``0.33`` = 1/3, ``2.6667`` = 8/3; ``0.3`` != 1/3, ``0.34`` != 1/3): math-verify's
    rounding of the reference to the reply's precision."""
    if a.exact and b.exact:
        return a.value == b.value
    for dec, ref in ((a, b), (b, a)):
        if dec.places >= MIN_ROUNDED_PLACES and ref.exact and dec.value != 0 and \
                abs(ref.value - dec.value) * 2 * 10 ** dec.places <= 1:
            return True
    diff = abs(a.value - b.value)
    return diff == 0 or diff <= Fraction(1, 10 ** 6) * max(abs(a.value), abs(b.value))


# ------------------------------------------------------------------------------------------
# fast disproof: a float value for constant expressions (no variables)

_VAL_TOKEN = re.compile(r"\s*(\d+\.?\d*|\.\d+|\\[A-Za-z]+|\*\*|[A-Za-z]+|.)")


class _Unsure(Exception):
    """The expression is outside the small grammar, or floats cannot be trusted on it."""


class _Value:
    """Recursive-descent float evaluator for constant answers: numbers, ``+ - * /``,
    ``\\cdot``, ``\\times``, juxtaposition, ``^``/``**``, ``\\frac``, ``\\sqrt``, ``\\sqrt[n]``,
    ``\\pi``, brackets (LaTeX or plain ``sqrt(2)``, ``pi``). Anything else is unsure."""

    def __init__(self, s: str) -> None:
        self.toks = [t for t in _VAL_TOKEN.findall(s) if t.strip()]
        self.i = 0
        if len(self.toks) > 200:
            raise _Unsure

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise _Unsure
        self.i += 1
        return tok

    def expr(self, depth: int = 0) -> float:
        if depth > 30:
            raise _Unsure
        terms = [self.term(depth)]
        while self.peek() in ("+", "-"):
            sign = -1.0 if self.take() == "-" else 1.0
            terms.append(sign * self.term(depth))
        total = sum(terms)
        if len(terms) > 1 and abs(total) < 1e-6 * max(abs(t) for t in terms):
            raise _Unsure  # cancellation: floats cannot decide
        return total

    def term(self, depth: int) -> float:
        value = self.unary(depth)
        while True:
            tok = self.peek()
            if tok in ("*", "/", "\\cdot", "\\times", "\\div"):
                self.take()
                rhs = self.unary(depth)
                if tok in ("/", "\\div"):
                    if rhs == 0:
                        raise _Unsure
                    value /= rhs
                else:
                    value *= rhs
            elif tok is not None and (tok[0].isdigit() or tok[0] == "." or tok in ("(", "{", "\\frac", "\\sqrt",
                                                                                     "\\pi", "pi", "sqrt")):
                value *= self.power(depth)
            else:
                return value

    def unary(self, depth: int) -> float:
        if self.peek() in ("-", "+"):
            sign = -1.0 if self.take() == "-" else 1.0
            return sign * self.unary(depth + 1)
        return self.power(depth)

    def power(self, depth: int) -> float:
        base = self.atom(depth)
        if self.peek() in ("^", "**"):
            self.take()
            if self.peek() == "{":
                exp = self.group(depth)
            elif self.peek() in ("-", "+", "("):
                exp = self.unary(depth + 1)
            else:
                tok = self.take()
                if not tok[0].isdigit():
                    raise _Unsure
                exp = float(tok)
            if abs(exp) > 64 or (base < 0 and exp != int(exp)) or (base == 0 and exp < 0):
                raise _Unsure
            try:
                return float(base ** exp)
            except (OverflowError, ZeroDivisionError):
                raise _Unsure from None
        return base

    def group(self, depth: int) -> float:
        if self.peek() == "{":
            self.take()
            value = self.expr(depth + 1)
            self.take("}")
            return value
        tok = self.take()  # \frac12: one digit
        if not tok[0].isdigit():
            raise _Unsure
        if len(tok) > 1:
            self.toks[self.i - 1:self.i] = [tok[0], tok[1:]]
        return float(tok[0])

    def atom(self, depth: int) -> float:
        tok = self.take()
        if tok[0].isdigit() or tok[0] == ".":
            return float(tok)
        if tok in ("\\pi", "pi"):
            return 3.141592653589793
        if tok in ("(", "{"):
            value = self.expr(depth + 1)
            self.take(")" if tok == "(" else "}")
            return value
        if tok == "\\frac":
            num = self.group(depth)
            den = self.group(depth)
            if den == 0:
                raise _Unsure
            return num / den
        if tok in ("\\sqrt", "sqrt"):
            index = 2.0
            if tok == "\\sqrt" and self.peek() == "[":
                self.take()
                index = self.expr(depth + 1)
                self.take("]")
            if tok == "sqrt":
                self.take("(")
                radicand = self.expr(depth + 1)
                self.take(")")
            else:
                radicand = self.group(depth)
            if radicand < 0 or index <= 0:
                raise _Unsure
            return float(radicand ** (1.0 / index))
        raise _Unsure


def approx_value(s: str) -> float | None:
    """A float for a constant answer (``2\\sqrt{3}``, ``\\frac{4\\pi}{3}``, ``sqrt(2)/2``), or None
    when it has variables, unknown notation, or cancellation that floats cannot decide."""
    if len(s) > 200:
        return None
    try:
        parser = _Value(s)
        value = parser.expr()
        if parser.peek() is not None:
            return None
    except (_Unsure, ValueError, RecursionError, OverflowError):
        return None
    return value if value == value and abs(value) != float("inf") else None


def values_differ(a: float, b: float) -> bool:
    """Clearly different: more than 1e-5 relative (looser than any equality rule of the checker)."""
    return abs(a - b) > 1e-5 * max(1.0, abs(a), abs(b))
