"""What counts as equal, in plain Python: the rules of the answer checker.

Used by :func:`llm_marl_envs.math.equivalence.is_equivalent` before (and instead of) the
slow path:

1. **Normalization** (:func:`normalize_answer`): take the last ``\\boxed{...}`` if present,
   strip LaTeX noise (``$``, ``\\left``, spacing, ``\\text{}`` wrappers, units, degrees,
   ``\\$``) and put the answer in a canonical text form.
   The unit dropped is kept aside (:func:`normalize_with_unit`, :func:`unit_key`): two answers
   with different units are different; a number word is a factor (``5 thousand`` is 5000).
2. **Shape** (:func:`parse_shape`): a multiple-choice letter, a set, a tuple or interval, a
   bare comma list, an assignment ``x = 3`` (its value, labelled with the name), an equation,
   an inequality (read as an interval), a percentage or a scalar.
3. **Text comparison** (:func:`canon`, :func:`words_equal`, :func:`is_base_numeral`).
4. **Guards** (:func:`too_costly`): answers that would make sympy build enormous objects
   are compared as text only.

Numbers (the exact fast path and the float disproof) are in :mod:`llm_marl_envs.math.numbers`.
Nothing here imports sympy or starts a process. The full rules are in ``docs/math.md``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from .extraction import MAX_INPUT_CHARS, final_answer
from .numbers import parse_number

__all__ = ["normalize_answer", "normalize_with_unit", "unit_key", "parse_shape", "Shape", "too_costly", "depth_ok",
           "canon", "words_equal", "is_base_numeral", "MAX_ANSWER_CHARS", "MAX_LIST_ITEMS"]

MAX_ANSWER_CHARS = 1_000  # an answer (after extraction) longer than this is only compared as text
MAX_NESTING = 30
MAX_LIST_ITEMS = 32


# ------------------------------------------------------------------------------------------
# normalization

_TEXT_CMDS = ("text", "textbf", "textit", "textrm", "mathrm", "mathbf", "mathit", "mbox", "operatorname", "textnormal",
              "mathsf", "texttt", "hbox")
_TEXT_RE = re.compile(r"\\(?:" + "|".join(_TEXT_CMDS) + r")\s*\{([^{}]*)\}")
_MATH_WORDS = {"sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "exp", "sqrt", "pi", "and", "or", "infty",
               "oo", "inf", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "abs", "floor", "ceil", "max",
               "min", "gcd", "lcm", "mod", "binomial", "Rational", "root", "Abs", "ceiling"}
_THOUSANDS_RE = re.compile(r"^[-+]?[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?$")  # 0,111 is a decimal comma, not 111
_CHOICE_RE = re.compile(r"^\(?([A-J])\)?$")
_MATRIX_ENV_RE = re.compile(r"\\(begin|end)\{(?:bmatrix|Bmatrix|matrix|smallmatrix)\}")
_ARRAY_RE = re.compile(r"[\[(]\s*\\begin\{array\}\s*\{[^{}]*\}(.*?)\\end\{array\}\s*[\])]", re.S)
_CURRENCY_RE = re.compile(r"^(?:[€£¥₹₽]|USD|EUR|GBP|RUB)\s*|\s*(?:[€£¥₹₽]|\b(?:USD|EUR|GBP|RUB|rubles?|euros?|"
                          r"dollars?|yuan|rupees?))$")
_GLUED_UNIT_RE = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*(cm|mm|km|kg|mg|ml|mL|cm\^?2|m\^?2|km/h|mph|kph|hrs?|"
                            r"min|sec|ft|yd|lbs?|oz)$")


def _strip_units(s: str) -> tuple[str, str]:
    """Drop trailing unit words (``10 square units`` -> ``10``); a linear scan, no regex backtracking.
    Returns the rest and the unit words dropped (``""`` when none)."""
    tokens = s.split(" ")
    if len(tokens) < 2:
        return s, ""
    power = re.search(r"\^\{?[23]\}?$", tokens[-1])
    tokens[-1] = tokens[-1][:power.start()] if power else tokens[-1]
    k = len(tokens)
    while k > 1:
        word = tokens[k - 1].rstrip(".")
        if len(word) >= 2 and word.isascii() and word.isalpha() and word not in _MATH_WORDS:
            k -= 1
        else:
            break
    if k == len(tokens):
        return s, ""
    body = " ".join(tokens[:k]).strip()
    if body and any(c.isdigit() for c in body) and (body[-1].isalnum() or body[-1] in ")]}._"):
        return body, " ".join(tokens[k:]) + (power.group(0) if power else "")
    return s, ""


# ------------------------------------------------------------------------------------------
# units: a number word is a factor (5 thousand = 5000); two different units are different answers

_FACTORS = {"hundred": 100, "thousand": 1000, "million": 10 ** 6, "billion": 10 ** 9, "trillion": 10 ** 12,
            "dozen": 12}
_UNIT_NAMES = {  # spelling -> one name; plurals are made singular before the lookup
    "centimeter": "cm", "centimetre": "cm", "millimeter": "mm", "millimetre": "mm", "kilometer": "km",
    "kilometre": "km", "meter": "m", "metre": "m", "gram": "g", "kilogram": "kg", "milligram": "mg",
    "second": "s", "sec": "s", "minute": "min", "hour": "h", "hr": "h", "day": "day", "week": "week",
    "year": "yr", "foot": "ft", "feet": "ft", "inch": "in", "yard": "yd", "mile": "mi", "liter": "l",
    "litre": "l", "milliliter": "ml", "millilitre": "ml", "pound": "lb", "ounce": "oz", "kph": "km/h",
    "mph": "mi/h", "degree": "deg", "radian": "rad", "dollar": "dollar", "hrs": "h", "mins": "min", "secs": "s",
    "lbs": "lb", "yrs": "yr", "kgs": "kg", "cms": "cm",
}
_GENERIC_UNITS = {"unit", "units", "square units", "sq units", "cubic units", "u"}  # "10 square units": no unit


def _singular(word: str) -> str:
    if word in _UNIT_NAMES or len(word) <= 3:
        return word
    if word.endswith(("ches", "shes", "xes", "sses")):
        return word[:-2]
    return word[:-1] if word.endswith("s") and not word.endswith("ss") else word


def unit_key(unit: str) -> str:
    """One spelling of a unit, to compare two answers' units: ``\\text{ centimeters}`` and ``cm`` give
    ``cm``; ``square meters``, ``m^2`` and ``m^{2}`` give ``m^2``; ``miles per hour`` gives ``mi/h``.
    ``""`` for no unit or a generic one (``square units``)."""
    u = re.sub(r"\\[a-z]+\s*\{([^{}]*)\}", r"\1", unit).replace("{", "").replace("}", "").replace("~", " ")
    u = " ".join(u.lower().replace(".", " ").split())
    if not u or u in _GENERIC_UNITS:
        return ""
    power = ""
    m = re.match(r"^(?:square|sq)\s+(.+)$", u) or re.match(r"^(.+?)\s+squared$", u)
    if m:
        u, power = m.group(1), "^2"
    m = re.match(r"^(?:cubic|cu)\s+(.+)$", u) or re.match(r"^(.+?)\s+cubed$", u)
    if m:
        u, power = m.group(1), "^3"
    m = re.match(r"^(.*?)\s*\^\s*([23])$", u)
    if m:
        u, power = m.group(1), "^" + m.group(2)
    if u in _GENERIC_UNITS:
        return ""
    parts = [p.strip() for p in re.split(r"\s+per\s+|/", u)]
    names = ["".join(_UNIT_NAMES.get(_singular(w), _singular(w)) for w in p.split()) for p in parts]
    return "/".join(names) + power


def _scaled(value: str, unit: str) -> tuple[str, str]:
    """``5`` with the unit ``thousand`` is ``5000``; ``2`` with ``million dollars`` is ``2000000`` (unit
    ``dollars``). A value that is not a plain number gets ``\\times`` the factor."""
    words = unit.split()
    factor = 1
    while words and _singular(words[0].lower()) in _FACTORS:
        factor *= _FACTORS[_singular(words.pop(0).lower())]
    if factor == 1:
        return value, unit
    number = parse_number(value)
    if number is None:
        return f"{value} \\times {factor}", " ".join(words)
    scaled = number.value * factor
    text = str(scaled.numerator) if scaled.denominator == 1 else f"\\frac{{{scaled.numerator}}}{{{scaled.denominator}}}"
    return text, " ".join(words)


def normalize_answer(text: str) -> str:
    """Canonical text of one answer: what :func:`is_equivalent` compares.

    Takes the last ``\\boxed{}`` if any; removes ``$``, ``\\(``, ``\\left``/``\\right``,
    spacing commands, ``\\displaystyle``, ``\\!``; maps ``\\dfrac``/``\\tfrac``/``\\cfrac`` to
    ``\\frac``; unwraps ``\\text{}``/``\\mathrm{}`` and drops unit words (``5\\text{ cm}`` ->
    ``5``), degree marks (``^\\circ``), ``\\$`` and a trailing percent sign (``%`` is a unit:
    ``25\\%`` -> ``25``); drops thousands separators in a lone number (``18,\\!000`` ->
    ``18000``); writes base subscripts one way (``4210_{7}`` -> ``4210_7``); ``\\approx`` reads
    as ``=``; a choice letter ``(B)`` becomes ``B``; without a box, reads the text after the last
    "the answer is" / "answer:" phrase; drops a trailing period. Never raises.
    """
    return normalize_with_unit(text)[0]


def normalize_with_unit(text: str) -> tuple[str, str]:
    """:func:`normalize_answer` and the unit it dropped (``5\\text{ cm}^2`` -> ``("5", "cm^2")``; a number
    word is a factor, not a unit: ``5\\text{ thousand}`` -> ``("5000", "")``). The unit is ``""`` when none."""
    if not isinstance(text, str):
        return "", ""
    unit = ""
    s = text.strip()
    if len(s) > MAX_INPUT_CHARS:
        s = s[-MAX_INPUT_CHARS:]
    s = final_answer(s).strip()  # the last \boxed{}, an "answer" phrase, the value prose states (extraction.py)
    s = s.replace("\\!", "")  # a negative thin space: 18,\!000 is one number
    s = re.sub(r"\\(?:approx|simeq)(?![A-Za-z])|≈", "=", s).lstrip("= ")
    s = re.sub(r"\\(le|ge|ne)(?:q|qslant)?(?![A-Za-z])", r"\\\1q ", s)
    s = s.replace("≤", "\\leq ").replace("≥", "\\geq ").replace("≠", "\\neq ")
    s = s.replace("<=", "\\leq ").replace(">=", "\\geq ").replace("!=", "\\neq ")  # x >= 5 is x \geq 5
    s = _MATRIX_ENV_RE.sub(r"\\\1{pmatrix}", s)  # bmatrix, matrix, ... : one spelling, math-verify reads it
    for a, b in (("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\cfrac", "\\frac"),
                 ("\\dbinom", "\\binom"), ("\\tbinom", "\\binom"),
                 ("\\lbrace", "\\{"), ("\\rbrace", "\\}"), ("\\langle", "("), ("\\rangle", ")"),
                 ("\\lvert", "|"), ("\\rvert", "|"), ("\\vert", "|"), ("\\lVert", "|"), ("\\rVert", "|"),
                 ("\\displaystyle", ""),
                 ("^{\\circ}", ""), ("^\\circ", ""), ("{^\\circ}", ""), ("\\circ", ""), ("°", ""), ("\\degree", ""),
                 ("\\%", "%"), ("\\$", ""), ("{,}", ""), ("\\dots", ""), ("\\ldots", ""),
                 ("−", "-"), ("×", "\\times "), ("·", "\\cdot "), ("π", "\\pi "), ("∞", "\\infty "), ("∪", "\\cup "),
                 ("\\infinity", "\\infty"), ("\\emptyset", "\\{\\}"), ("\\varnothing", "\\{\\}")):
        s = s.replace(a, b)
    s = re.sub(r"\\left\s*\.|\\right\s*\.", "", s)
    s = re.sub(r"\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big)(?![A-Za-z])", "", s)
    s = _ARRAY_RE.sub(r"\\begin{pmatrix}\1\\end{pmatrix}", s)  # [\begin{array}{cc}...\end{array}] is a matrix
    s = re.sub(r"(?<!\\)\\[,;: ]|\\q?quad(?![A-Za-z])|~", " ", s)
    s = re.sub(r"(\d)_\{(\w+)\}", r"\1_\2", s)  # base subscripts: 4210_{7} = 4210_7
    s = s.replace("$", "").replace("\\(", "").replace("\\)", "").replace("\\[", "").replace("\\]", "")
    # \text{...}: a trailing word-only \text after some math is a unit; otherwise unwrap it
    for _ in range(5):
        m = _TEXT_RE.search(s)
        if not m:
            break
        inner = m.group(1)
        before = s[:m.start()].strip()
        if before and re.fullmatch(r"\s*[A-Za-z][A-Za-z\s.]*(\^\{?[23]\}?)?", inner + s[m.end():]) and \
                not any(w in ("and", "or") for w in inner.split()):
            s, unit = before, inner + s[m.end():]
            break
        s = s[:m.start()] + " " + inner + " " + s[m.end():]
    s = re.sub(r"\s+", " ", s).strip()
    s = re.sub(r"\s*\b(?:and|or)\b\s*", ", ", s)
    s = s.strip(" ,")
    s = re.sub(r"\.$", "", s).strip()
    s = _CURRENCY_RE.sub("", s).strip()  # €5, 5 EUR, 1000,99 ₽
    s, dropped = _strip_units(s)
    unit = dropped or unit
    glued = _GLUED_UNIT_RE.match(s)
    if glued:  # 12cm
        s, unit = glued.group(1), glued.group(2)
    if unit:
        s, unit = _scaled(s, unit)  # 5 thousand is 5000
    s = re.sub(r"\s*%$", "", s).strip()  # percent is a unit, like cm: 25% is the answer 25
    if re.fullmatch(r"[-+]?\s*\d.*degrees?", s):
        s = s.rsplit(" ", 1)[0]
    if _THOUSANDS_RE.match(s):
        s = s.replace(",", "")
    m = _CHOICE_RE.match(s)
    if m:
        s = m.group(1)
    return s, unit.strip()


# ------------------------------------------------------------------------------------------
# answer structure


@dataclass(frozen=True)
class Shape:
    """The shape of one normalized answer (see ``docs/math.md``, "Shape")."""

    kind: str  # choice | set | bare | seq | matrix | union | eq | scalar | text
    text: str = ""
    items: tuple["Shape", ...] = ()
    open: str = ""
    close: str = ""
    label: str = ""  # the name an assignment gave this value (x in x = 3): two different names never match


_OPENERS = {"(": ")", "[": "]", "{": "}"}
_MATRIX_RE = re.compile(r"^\\begin\{pmatrix\}(.*)\\end\{pmatrix\}$", re.S)


def depth_ok(s: str) -> bool:
    """No more than ``MAX_NESTING`` levels of brackets."""
    depth = 0
    for c in s:
        if c in "([{":
            depth += 1
            if depth > MAX_NESTING:
                return False
        elif c in ")]}":
            depth -= 1
    return True


def _split_top(s: str, sep: str) -> list[str]:
    """Split on ``sep`` outside any brackets (``\\{`` counts as a bracket)."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s) and s[i + 1] in "{}":
            depth += 1 if s[i + 1] == "{" else -1
            i += 2
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and s.startswith(sep, i):
            parts.append(s[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    parts.append(s[start:])
    return parts


def _outer_close(s: str) -> int:
    """Index of the bracket that closes ``s[0]`` (any closer type, for intervals); -1 if none."""
    depth = 0
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s) and s[i + 1] in "{}":
            depth += 1 if s[i + 1] == "{" else -1
            if depth == 0:
                return i
            i += 2
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


# a left side that names the answer (its value is what counts): a letter or Greek letter
# with an optional subscript or prime, f(x) with a one-letter name, a segment AB or |AB|,
# or a tuple of such names ((p, q) = (3, 2)). A function call (\sin(x) = ...) is not a name.
_GREEK = ("alpha|beta|gamma|delta|epsilon|varepsilon|zeta|eta|theta|vartheta|iota|kappa|lambda|mu|nu|xi|rho|sigma|"
          "tau|upsilon|phi|varphi|chi|psi|omega|Gamma|Delta|Theta|Lambda|Xi|Sigma|Phi|Psi|Omega")
_NAME = rf"(?:[A-Za-z]|\\(?:{_GREEK}))(?:_\{{?[A-Za-z0-9]+\}}?)?'*"
_NAME_RE = re.compile(rf"^(?:{_NAME}(?:\([A-Za-z]\))?|[A-Z]{{2,3}}|\|[A-Z]{{2}}\||\\overline\{{[A-Z]{{2}}\}})$")
_NAMES_RE = re.compile(rf"^\(\s*{_NAME}(?:\s*,\s*{_NAME})+\s*\)$")
_IN_RE = re.compile(r"^(.*?)\\in(?![A-Za-z])\s*(.+)$")
_REL_RE = re.compile(r"\\leq|\\geq|<|>")
_INFTY = "\\infty"


def _is_name(lhs: str) -> bool:
    lhs = lhs.strip()
    return bool(_NAME_RE.match(lhs) or _NAMES_RE.match(lhs))


_LABEL_NOISE_RE = re.compile(r"_\{[^{}]*\}|_[A-Za-z0-9]|\^\{?-1\}?|\\(?:frac|overline|cdot|times|angle|measuredangle|"
                             r"triangle|vec|hat|widehat|bar|tilde|overrightarrow|mathbf|mathit|mathrm|text)(?![A-Za-z])")
_GREEK_RE = re.compile(rf"\\(?:{_GREEK})(?![A-Za-z])")


def _is_label(lhs: str) -> bool:
    """Names combined without numbers or functions (``x+y``, ``ab``, ``\\frac{NO}{BO}``, ``S_{MBCN}:S``, ``P(X=2)``):
    math-verify's assignment left side (``is_expr_of_only_symbols``), a label of the asked quantity."""
    bare = re.sub(r"(?<=[A-Za-z])\([^()]*\)", " ", lhs)  # P(X=2), f(2): the argument of a name
    bare = _GREEK_RE.sub("a", _LABEL_NOISE_RE.sub(" ", bare))
    return bool(re.fullmatch(r"[A-Za-z\s{}()\[\]|+\-*/:',]+", bare)) and bool(re.search(r"[A-Za-z]", bare))


def _letters(s: str) -> set[str]:
    """The variables of an expression: single letters and Greek letters, not LaTeX commands or subscripts."""
    return set(_GREEK_RE.findall(s)) | set(re.findall(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+|_\{[^{}]*\}|_\w", " ", s)))


def _label_key(lhs: str) -> str:
    """One spelling of a left-side name: ``x_{1}`` is ``x_1``, ``|AB|`` and ``\\overline{AB}`` are ``AB``."""
    key = re.sub(r"_\{(\w+)\}", r"_\1", canon(lhs))
    key = re.sub(r"^\\overline\{([A-Z]{2})\}$|^\|([A-Z]{2})\|$", lambda m: m.group(1) or m.group(2), key)
    return key


def _assignment(lhs: str, rhs: str) -> str | None:
    """The label when ``lhs = rhs`` gives the value ``rhs`` a name (``x = 3``, ``f(x) = 2x+1``, ``x+y = 5``);
    ``""`` for a computation whose result is ``rhs`` (``\\binom{5}{2} = 10``); None for an equation: a
    left side with numbers and variables (``2x = 6``), a constant against an expression in variables
    (``7 = 11a+c``), or a name that occurs on the right too (``y = 2y+1`` says y = -1, ``x + y = 2x``
    says y = x; a derivative ``\\frac{dy}{dx} = 2x``, ``f'(x) = 2x`` names a function of x)."""
    if _is_computation(lhs):
        return "" if _is_computation(rhs) else None
    if not (_is_name(lhs) or _is_label(lhs)):
        return None
    call = re.fullmatch(r"(.+)\(\s*[A-Za-z]\s*\)", lhs.strip())  # f(x) = 2x + 1: x is f's argument
    derivative = re.search(r"\\frac\s*\{\s*d|\\partial|'", lhs)  # dy/dx = 2x, f'(x) = 2x: names, not equations
    if not derivative and _letters(call.group(1) if call else lhs) & _letters(rhs):
        return None
    return _label_key(lhs)


def _is_computation(lhs: str) -> bool:
    """A constant expression without variables (``\\binom{5}{2}``, ``17 \\bmod 5``, ``e^{i\\pi}``): its
    right side is the result. Letters in subscripts (``\\log_2``, ``\\lim_{x \\to 0}``) and the constants
    ``e``, ``i`` and ``\\pi`` do not count as variables; anything else with a letter (a Greek one too:
    ``\\sin\\theta``) is an equation."""
    bare = re.sub(r"\\(?:begin|end)\{[A-Za-z*]+\}|\\[A-Za-z]+|_\{[^{}]*\}|_[A-Za-z0-9]", " ", lhs)
    bound = re.findall(r"\\lim_\{?\s*([A-Za-z])\s*\\(?:to|rightarrow)", lhs)  # lim_{x \to 0} f(x): x is bound
    if bound:
        bare = re.sub(f"[{''.join(bound)}]", " ", bare)
    return bool(lhs.strip()) and not re.search(r"[A-DF-HJ-Za-df-hj-z]", bare) and not _GREEK_RE.search(lhs)


def _inequality(s: str) -> str | None:
    """A one-variable inequality as the interval it describes (``x \\leq 5`` -> ``(-\\infty, 5]``).

    ``x < a``, ``a < x``, ``a < x < b`` with ``<``, ``>``, ``\\leq``, ``\\geq``; None for anything else."""
    parts = _REL_RE.split(s)
    ops = _REL_RE.findall(s)
    if not 1 <= len(ops) <= 2 or any(not p.strip() for p in parts):
        return None
    parts = [p.strip() for p in parts]
    names = [i for i, p in enumerate(parts) if _NAME_RE.match(p) and not re.search(r"\d", p)]
    if len(names) != 1:
        return None
    k = names[0]
    if len(ops) == 1:
        op = ops[0]
        value = parts[1 - k]
        if k == 1:  # a < x  is  x > a
            op = {"<": ">", ">": "<", "\\leq": "\\geq", "\\geq": "\\leq"}[op]
        if op in ("<", "\\leq"):
            return f"(-{_INFTY}, {value}{')' if op == '<' else ']'}"
        return f"{'(' if op == '>' else '['}{value}, {_INFTY})"
    if k != 1:
        return None
    lo_op, hi_op = ops
    if lo_op in ("<", "\\leq") and hi_op in ("<", "\\leq"):
        lo, hi = parts[0], parts[2]
    elif lo_op in (">", "\\geq") and hi_op in (">", "\\geq"):  # b > x > a
        lo, hi, lo_op, hi_op = parts[2], parts[0], hi_op, lo_op
    else:
        return None
    return f"{'(' if lo_op in ('<', '>') else '['}{lo}, {hi}{')' if hi_op in ('<', '>') else ']'}"


def parse_shape(s: str, depth: int = 0) -> Shape:
    """The shape of a normalized answer. Assignments are unwrapped to their value."""
    s = s.strip()
    if depth > 8 or not s:
        return Shape("text", s)
    m = _CHOICE_RE.match(s) or re.match(r"^\(([A-J])\)\s", s)
    if m:
        return Shape("choice", m.group(1))
    eq = _split_top(s, "=")
    if len(eq) == 2 and eq[1].strip() and _is_computation(eq[0]) and _is_computation(eq[1]):
        return parse_shape(eq[1], depth + 1)  # \\begin{vmatrix}...\\end{vmatrix} = 3
    m = _MATRIX_RE.match(s)
    if m and "\\begin" not in m.group(1):  # a matrix: rows of entries, compared entry by entry
        rows = [r for r in (x.strip() for x in re.split(r"\\\\", m.group(1))) if r]
        if 0 < len(rows) <= MAX_LIST_ITEMS:
            return Shape("matrix", s, items=tuple(
                Shape("seq", open="[", close="]", items=tuple(parse_shape(e, depth + 1) for e in r.split("&")))
                for r in rows))
    if "\\begin" in s or "&" in s:  # another environment or an aligned block: math-verify reads it whole
        return Shape("scalar", s)
    semi = [p.strip() for p in _split_top(s, ";")]
    if len(semi) > 1 and all(semi):  # "p=5,q=2; p=7,q=2": answers separated by semicolons
        return Shape("bare", s, items=tuple(parse_shape(p, depth + 1) for p in semi))
    if "\\cup" in s:
        parts = [p for p in (x.strip() for x in s.split("\\cup")) if p]
        if len(parts) > 1:
            return Shape("union", s, items=tuple(parse_shape(p, depth + 1) for p in parts))
    if s.startswith("\\{") and s.endswith("\\}") and _outer_close(s) == len(s) - 2:
        inner = s[2:-2].strip()
        items = [p.strip() for p in _split_top(inner, ",")] if inner else []
        return Shape("set", s, items=tuple(parse_shape(p, depth + 1) for p in items if p))
    if s[0] in _OPENERS and _outer_close(s) == len(s) - 1 and s[-1] in ")]}":
        inner = s[1:-1]
        parts = [p.strip() for p in _split_top(inner, ",")]
        if s[0] == "{" and s[-1] == "}":
            if len(parts) == 1:
                return parse_shape(inner, depth + 1)  # LaTeX grouping
            return Shape("set", s, items=tuple(parse_shape(p, depth + 1) for p in parts))
        if len(parts) == 1 and s[0] + s[-1] in ("()", "[]"):
            return parse_shape(inner, depth + 1)
        if len(parts) > 1:
            return Shape("seq", s, open=s[0], close=s[-1], items=tuple(parse_shape(p, depth + 1) for p in parts))
    parts = [p.strip() for p in _split_top(s, ",")]
    if len(parts) > 1:
        if any(not p for p in parts):
            return Shape("text", s)
        return Shape("bare", s, items=tuple(parse_shape(p, depth + 1) for p in parts))
    m = _IN_RE.match(s)
    if m and _is_name(m.group(1)):
        return replace(parse_shape(m.group(2), depth + 1), label=_label_key(m.group(1)))
    eq = _split_top(s, "=")
    if len(eq) >= 2 and all(p.strip() for p in eq):
        lhs, rhs = eq[0].strip(), eq[-1].strip()
        label = _assignment(lhs, rhs) if len(eq) == 2 else None
        if label is not None:  # x = 3 and \\binom{5}{2} = 10 both answer their right side; x keeps its name
            return replace(parse_shape(rhs, depth + 1), label=label)
        if len(eq) > 2:
            return parse_shape(rhs, depth + 1)
        return Shape("eq", lhs + "=" + rhs)
    interval = _inequality(s)
    if interval is not None:
        return parse_shape(interval, depth + 1)
    if "\\pm" in s and s.count("\\pm") == 1:
        a, b = s.split("\\pm")
        return Shape("bare", s, items=(parse_shape(f"{a}+{b}", depth + 1), parse_shape(f"{a}-{b}", depth + 1)))
    return Shape("scalar", s)


def canon(s: str) -> str:
    """Text with whitespace removed (case kept: ``X`` and ``x`` are different variables)."""
    return re.sub(r"\s+", "", s)


_WORDS_RE = re.compile(r"^[A-Za-z]+(?: [A-Za-z]+)*$")
_BASE_NUMERAL_RE = re.compile(r"^[0-9A-Za-z]+_[0-9]+$")


def words_equal(a: str, b: str) -> bool:
    """Answers written in words (a word of three letters or more: ``Monday``, ``no solution``)
    compare case-insensitively; single letters and short products stay case-sensitive."""
    if not (_WORDS_RE.match(a) and _WORDS_RE.match(b)):
        return False
    if max(len(w) for w in (a + " " + b).split()) < 3:
        return False
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


def is_base_numeral(s: str) -> bool:
    """A numeral with a base subscript (``4210_7``): equal only to the same text, never to a plain number."""
    return bool(_BASE_NUMERAL_RE.match(s.replace(" ", "")))


# ------------------------------------------------------------------------------------------
# guards before the slow path

_INT_RE = re.compile(r"\d+")
_FACT_RE = re.compile(r"(\d+)\s*!")
_BINOM_RE = re.compile(r"\\binom\s*\{?\s*(\d+)")


def _exponents(s: str) -> list[tuple[int, str]]:
    """(index of the ``^``, exponent text) for every power: a brace group, or a number or one character."""
    out: list[tuple[int, str]] = []
    for i, c in enumerate(s):
        if c != "^" and not (c == "*" and s.startswith("**", i) and (i == 0 or s[i - 1] != "*")):
            continue
        j = i + (2 if c == "*" else 1)
        while j < len(s) and s[j] == " ":
            j += 1
        if j < len(s) and s[j] == "{":
            depth, k = 0, j
            while k < len(s):
                depth += {"{": 1, "}": -1}.get(s[k], 0)
                if depth == 0:
                    break
                k += 1
            out.append((i, s[j + 1:k]))
        else:
            m = re.match(r"[-+]?\d+|.", s[j:])
            out.append((i, s[j:].split(" ", 1)[0] if s[j:j + 1] in "([" else (m.group(0) if m else "")))
    return out


def too_costly(s: str) -> bool:
    """True when sympy could spend unbounded time or memory on ``s``; such answers are
    compared as text only, which keeps the worker from being killed on hostile input:
    over-long or over-nested text, number literals over 400 digits, power towers with
    numbers (``10^{10^{10}}``, ``2^{1/2^{1000}}``; ``e^{x^2}`` is fine), integer exponents
    over 2,000 (over 200 unless the base is a number: ``(x+1)^{1000}``), factorials over
    500 and binomials of numbers over 10,000."""
    if len(s) > MAX_ANSWER_CHARS or not depth_ok(s):
        return True
    if any(len(m) > 400 for m in _INT_RE.findall(s)):
        return True
    if re.search(r"\d\s*(?:\^|\*\*)\s*[-+]?\d+\s*(?:\^|\*\*)", s):  # 9^9^9, 10**10**10
        return True
    for at, exp in _exponents(s):
        numbers = [int(n[:7]) for n in _INT_RE.findall(exp)]
        if "^" in exp or "**" in exp:  # a power inside an exponent
            if not re.search(r"[A-Za-z]", exp.replace("\\frac", "")) or any(n > 20 for n in numbers):
                return True
        bare = re.fullmatch(r"\s*[-+]?(\d+)\s*", exp)
        if bare:
            n = int(bare.group(1)[:7])
            if n > 2000 or (n > 200 and not (at > 0 and s[at - 1].isdigit())):
                return True
        elif any(n > 200 for n in numbers):
            return True
    if any(int(n[:7]) > 500 for n in _FACT_RE.findall(s)):
        return True
    return any(int(n[:7]) > 10_000 for n in _BINOM_RE.findall(s))
