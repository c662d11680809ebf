"""Sudoku puzzle logic: grids, a unique-solution generator, a solver, answer parsing/checking.

A grid is ``tuple[tuple[int, ...], ...]`` of ``size`` rows of ``size`` ints, ``0`` for a
blank. ``size`` is a perfect square (4 with 2x2 boxes, 9 with 3x3 boxes; 16 also works
for the solver and checker). Rows and columns are 0-based in code and 1-based in messages.
"""

from __future__ import annotations

import math
import random
import re

import numpy as np

from ..render import draw_grid_lines, draw_text_in_cell, new_canvas

__all__ = ["Grid", "generate", "count_solutions", "solve", "parse_grid", "parse_puzzle_string",
           "grid_to_string", "check_answer", "correct_cells", "find_conflict", "render_text",
           "render_rgb"]

Grid = tuple[tuple[int, ...], ...]

#: Only this many trailing characters of model text are parsed by :func:`parse_grid`.
MAX_INPUT_CHARS = 20_000


def _box_size(size: int) -> int:
    b = math.isqrt(size)
    if size < 1 or b * b != size:
        raise ValueError(f"sudoku size must be a perfect square (4, 9, 16), got {size}")
    return b


def _check_shape(grid: Grid) -> int:
    """Validate shape and values; return ``size``. Raises ``ValueError``."""
    size = len(grid)
    _box_size(size)
    for r, row in enumerate(grid):
        if len(row) != size:
            raise ValueError(f"row {r + 1} has {len(row)} cells, expected {size}")
        for c, v in enumerate(row):
            if not isinstance(v, (int, np.integer)) or not 0 <= v <= size:
                raise ValueError(f"row {r + 1}, column {c + 1}: value {v!r} is not in 0..{size}")
    return size


def find_conflict(grid: Grid) -> str | None:
    """Describe the first rule break among the filled cells (``"digit 3 repeats in row 2"``),
    checking rows, then columns, then boxes; ``None`` if there is none. Blanks are ignored."""
    size = len(grid)
    b = _box_size(size)
    for r in range(size):
        vals = [v for v in grid[r] if v]
        if len(vals) != len(set(vals)):
            return f"digit {_dup(vals)} repeats in row {r + 1}"
    for c in range(size):
        vals = [grid[r][c] for r in range(size) if grid[r][c]]
        if len(vals) != len(set(vals)):
            return f"digit {_dup(vals)} repeats in column {c + 1}"
    for br in range(0, size, b):
        for bc in range(0, size, b):
            vals = [grid[r][c] for r in range(br, br + b) for c in range(bc, bc + b) if grid[r][c]]
            if len(vals) != len(set(vals)):
                return (f"digit {_dup(vals)} repeats in the box of rows {br + 1}-{br + b}, "
                        f"columns {bc + 1}-{bc + b}")
    return None


def _dup(vals: list[int]) -> int:
    seen = set()
    for v in vals:
        if v in seen:
            return v
        seen.add(v)
    raise AssertionError("no duplicate")


# --------------------------------------------------------------------------- solver

class _Search:
    """Bitmask backtracking with the minimum-remaining-values heuristic."""

    def __init__(self, grid: Grid) -> None:
        self.size = n = len(grid)
        self.b = b = _box_size(n)
        self.full = (1 << n) - 1
        self.cells = [v for row in grid for v in row]
        self.rows = [0] * n
        self.cols = [0] * n
        self.boxes = [0] * n
        self.rc = [(i // n, i % n, (i // n // b) * b + (i % n) // b) for i in range(n * n)]
        self.ok = True
        for i, v in enumerate(self.cells):
            if v:
                r, c, x = self.rc[i]
                bit = 1 << (v - 1)
                if (self.rows[r] | self.cols[c] | self.boxes[x]) & bit:
                    self.ok = False
                self.rows[r] |= bit
                self.cols[c] |= bit
                self.boxes[x] |= bit
        self.empties = [i for i, v in enumerate(self.cells) if not v]

    def run(self, limit: int, rng: random.Random | None = None) -> tuple[int, list[int] | None]:
        """Count solutions up to ``limit``; also return the first one found."""
        self.count = 0
        self.first: list[int] | None = None
        self.limit = limit
        self.rng = rng
        if self.ok:
            self._rec(0)
        return self.count, self.first

    def _rec(self, depth: int) -> bool:
        """Returns True when the limit is reached (stop)."""
        empties = self.empties
        if depth == len(empties):
            self.count += 1
            if self.first is None:
                self.first = list(self.cells)
            return self.count >= self.limit
        rows, cols, boxes, rc, full = self.rows, self.cols, self.boxes, self.rc, self.full
        best_k, best_cand, best_n = -1, 0, 99
        for k in range(depth, len(empties)):
            r, c, x = rc[empties[k]]
            cand = full & ~(rows[r] | cols[c] | boxes[x])
            if not cand:
                return False
            nc = cand.bit_count()
            if nc < best_n:
                best_k, best_cand, best_n = k, cand, nc
                if nc == 1:
                    break
        empties[depth], empties[best_k] = empties[best_k], empties[depth]
        i = empties[depth]
        r, c, x = rc[i]
        digits = [d for d in range(1, self.size + 1) if best_cand & (1 << (d - 1))]
        if self.rng is not None:
            self.rng.shuffle(digits)
        for d in digits:
            bit = 1 << (d - 1)
            rows[r] |= bit
            cols[c] |= bit
            boxes[x] |= bit
            self.cells[i] = d
            stop = self._rec(depth + 1)
            rows[r] &= ~bit
            cols[c] &= ~bit
            boxes[x] &= ~bit
            self.cells[i] = 0
            if stop:
                return True
        return False


def _to_grid(cells: list[int], size: int) -> Grid:
    return tuple(tuple(cells[r * size:(r + 1) * size]) for r in range(size))


def count_solutions(grid: Grid, limit: int = 2) -> int:
    """Number of solutions of ``grid``, counting stops at ``limit`` (so ``limit=2``
    distinguishes none / unique / several). Givens that break a rule give 0.
    Raises ``ValueError`` for a bad shape or values."""
    _check_shape(grid)
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    return _Search(grid).run(limit)[0]


def solve(grid: Grid) -> Grid | None:
    """The first solution in digit order (the only one for a proper puzzle), or ``None``."""
    size = _check_shape(grid)
    _, first = _Search(grid).run(1)
    return None if first is None else _to_grid(first, size)


def _random_solution(rng: random.Random, size: int) -> Grid:
    empty = tuple((0,) * size for _ in range(size))
    _, first = _Search(empty).run(1, rng=rng)
    assert first is not None
    return _to_grid(first, size)


def generate(rng: random.Random, size: int = 4, n_clues: int | None = None,
             max_tries: int = 50) -> tuple[Grid, Grid]:
    """A puzzle with exactly one solution, and that solution.

    A random full grid is filled by randomised backtracking; then clues are removed in a
    random order, each removal kept only if the puzzle still has a unique solution
    (:func:`count_solutions` with ``limit=2``). With ``n_clues=None`` removal runs over
    every cell, giving a locally minimal puzzle (no clue can be removed); otherwise it
    stops at ``n_clues`` clues, and a try that cannot get that low is restarted with a new
    grid. Deterministic for a given ``rng`` state. Raises ``ValueError`` for a bad size or
    ``n_clues`` and ``RuntimeError`` when ``max_tries`` tries fail (e.g. ``n_clues`` below
    what uniqueness allows: 4 for 4x4, 17 for 9x9).
    """
    _box_size(size)
    if n_clues is not None and not 0 <= n_clues <= size * size:
        raise ValueError(f"n_clues must be in 0..{size * size}, got {n_clues}")
    target = 0 if n_clues is None else n_clues
    for _ in range(max_tries):
        solution = _random_solution(rng, size)
        cells = [v for row in solution for v in row]
        order = list(range(size * size))
        rng.shuffle(order)
        clues = size * size
        for i in order:
            if clues <= target:
                break
            v = cells[i]
            cells[i] = 0
            if _Search(_to_grid(cells, size)).run(2)[0] == 1:
                clues -= 1
            else:
                cells[i] = v
        if n_clues is None or clues == n_clues:
            return _to_grid(cells, size), solution
    raise RuntimeError(f"no {size}x{size} puzzle with {n_clues} clues and a unique solution in "
                       f"{max_tries} tries; use more clues")


# --------------------------------------------------------------------------- text

def grid_to_string(grid: Grid) -> str:
    """Compact one-line form, row by row, ``.`` for blanks: ``"1.3.....`` (sizes <= 9)."""
    size = _check_shape(grid)
    if size > 9:
        raise ValueError("grid_to_string needs size <= 9 (one character per cell)")
    return "".join(str(v) if v else "." for row in grid for v in row)


def parse_puzzle_string(text: str) -> Grid:
    """Parse a 16-character (4x4) or 81-character (9x9) puzzle string, row by row.

    ``0`` or ``.`` are blanks; whitespace anywhere is ignored. Raises ``ValueError``
    naming the problem: a wrong length, a bad character (with its position), a digit too
    large for the size, or givens that break a rule.
    """
    s = "".join(text.split())
    if len(s) not in (16, 81):
        raise ValueError(f"sudoku string must have 16 (4x4) or 81 (9x9) cells, got {len(s)}")
    size = 4 if len(s) == 16 else 9
    cells = []
    for i, ch in enumerate(s):
        if ch == ".":
            cells.append(0)
        elif ch.isdigit() and ch.isascii():
            v = int(ch)
            if v > size:
                raise ValueError(f"cell {i + 1} (row {i // size + 1}, column {i % size + 1}): "
                                 f"digit {v} is too large for a {size}x{size} sudoku")
            cells.append(v)
        else:
            raise ValueError(f"cell {i + 1}: unexpected character {ch!r} (use 1-{size}, "
                             f"and 0 or '.' for blanks)")
    grid = _to_grid(cells, size)
    conflict = find_conflict(grid)
    if conflict:
        raise ValueError(f"the givens break a rule: {conflict}")
    return grid


_ROW_LABEL = re.compile(r"^\s*(?:row\s*\d+|r\d+)\s*[:=.)\-]?", re.IGNORECASE)
_LIST_OF_LISTS = re.compile(r"\[\s*\[[^\[\]]*\](?:\s*(?:,\s*)?\[[^\[\]]*\])*\s*(?:,\s*)?\]")
_CELL_TOKENS = re.compile(r"[0-9]+|[._]")
_SEPARATOR_LINE = re.compile(r"^[\s\-+=|:*]+$")
_SIGNED = re.compile(r"(?<![0-9._])[-+][0-9]")  # -3, +3: a signed number, not a cell (3-1-2-4 is fine)


def _not_cells(text: str) -> bool:
    """Text that holds something other than cells and separators: a letter, a digit or numeral that is
    not ASCII (٣, ３, ², ½), or a signed number. Such text is no grid (nothing of it is read as cells)."""
    return bool(_SIGNED.search(text)) or any(ch.isalpha() or (not ch.isascii() and ch.isnumeric()) for ch in text)


def _cell_value(tok: str, size: int) -> int | None:
    if tok in (".", "_"):
        return 0
    if len(tok) > 1 and tok[0] == "0":
        return None  # 03, 00: never read as the cell 3 or a blank
    if len(tok) > len(str(size)):
        return None  # more digits than any cell: never int() of a 4,400-digit token (Python's limit raises)
    v = int(tok)
    return v if v <= size else None


def _parse_row(line: str, size: int) -> tuple[int, ...] | None:
    line = _ROW_LABEL.sub("", line, count=1)
    if _not_cells(line):
        return None
    toks = _CELL_TOKENS.findall(line)
    if not toks:
        return None
    if size <= 9:
        toks = list("".join(toks))  # one digit per cell, wherever the spaces are: "31 | 24" is 3 1 2 4
    if len(toks) != size:
        return None
    vals = [_cell_value(t, size) for t in toks]
    if any(v is None for v in vals):
        return None
    return tuple(vals)  # type: ignore[arg-type]


def _parse_flat(line: str, size: int) -> Grid | None:
    if size > 9:
        return None
    tail = re.split(r"[:=]", line)[-1]
    if _not_cells(tail):
        return None
    toks = _CELL_TOKENS.findall(tail)
    joined = "".join(toks)
    if len(joined) != size * size:
        return None
    vals = [_cell_value(ch, size) for ch in joined]
    if any(v is None for v in vals):
        return None
    return _to_grid(vals, size)  # type: ignore[arg-type]


def _grid_from_lists(block: str, size: int) -> Grid | None:
    inner = re.findall(r"\[([^\[\]]*)\]", block)
    if len(inner) != size:
        return None
    rows = []
    for part in inner:
        if _not_cells(part):
            return None
        toks = _CELL_TOKENS.findall(part)
        if len(toks) != size:
            return None
        vals = [_cell_value(t, size) for t in toks]
        if any(v is None for v in vals):
            return None
        rows.append(tuple(vals))
    return tuple(rows)  # type: ignore[arg-type]


def parse_grid(text: str, size: int) -> Grid | None:
    """Read a ``size`` x ``size`` grid from model text; ``None`` if there is no full grid.

    Accepted forms (the grid that *ends last* in the text wins, so an answer written after
    a restated puzzle is the one read):

    * ``size`` consecutive row lines. A row line holds no letters (except a leading label
      ``Row 3:`` / ``R3:``) and exactly ``size`` cells: digits ``1..size`` with ``0``,
      ``.`` or ``_`` for blanks, separated by spaces, commas, ``|``, brackets or quotes,
      or written together (``1234``; sizes <= 9). Blank lines, code fences and
      separator lines (``---+---``) between rows are skipped; any other line breaks the
      run; if more than ``size`` rows run together the last ``size`` are used.
    * A JSON/Python list of lists: ``[[1, 2, 3, 4], [3, 4, 1, 2], ...]`` (blanks as 0 or
      ``"."``).
    * One line with all ``size*size`` cells, optionally after a label:
      ``Answer: 1234341221434321``.

    A cell is read only whole: for sizes <= 9 each ASCII digit is one cell (``31 24`` is 3 1 2 4, as
    ``31 | 24``, and ``3.0`` is three cells: 3 and two blanks); for larger sizes each number is one
    cell. A line with a number written with a leading zero (``03``, ``00``), a signed number
    (``-3``, ``+3``), a letter, or a digit or numeral that is not ASCII (``٣``, ``３``, ``²``, ``½``)
    is no row, and a row needs exactly ``size`` cells: nothing is read out of a longer number.

    The returned grid may contain 0 (blanks); :func:`check_answer` judges it. Only the
    last :data:`MAX_INPUT_CHARS` characters are read; never raises for a ``str``.
    """
    if not isinstance(text, str) or not text:
        return None
    try:
        _box_size(size)
    except ValueError:
        return None
    text = text[-MAX_INPUT_CHARS:]
    best_end, best = -1, None
    for m in _LIST_OF_LISTS.finditer(text):
        g = _grid_from_lists(m.group(0), size)
        if g is not None and m.end() >= best_end:
            best_end, best = m.end(), g
    run: list[tuple[int, ...]] = []
    offset = 0
    for line in text.split("\n"):
        end = offset + len(line)
        offset = end + 1
        stripped = line.strip()
        row = _parse_row(line, size)
        if row is not None:
            run.append(row)
            if len(run) >= size and end >= best_end:
                best_end, best = end, tuple(run[-size:])
            continue
        if not stripped or stripped.startswith("```") or _SEPARATOR_LINE.match(stripped):
            continue
        run = []
        flat = _parse_flat(line, size)
        if flat is not None and end >= best_end:
            best_end, best = end, flat
    return best


# --------------------------------------------------------------------------- answers

def check_answer(puzzle: Grid, grid: Grid | None) -> tuple[bool, str]:
    """Judge an answer grid against the puzzle: ``(valid, reason)``.

    Valid only if the grid has the puzzle's shape, keeps every given clue, has no blanks,
    and has no digit repeated in a row, column or box. The reason names the first
    problem found in that order, or is ``"solved"``.
    """
    size = _check_shape(puzzle)
    if grid is None:
        return False, "no grid found"
    try:
        if len(grid) != size or _check_shape(grid) != size:
            return False, f"expected a {size}x{size} grid"
    except (ValueError, TypeError) as err:
        return False, f"expected a {size}x{size} grid with values 0..{size}: {err}"
    for r in range(size):
        for c in range(size):
            if puzzle[r][c] and grid[r][c] != puzzle[r][c]:
                return False, (f"changes the given clue at row {r + 1}, column {c + 1} "
                               f"({puzzle[r][c]} -> {grid[r][c] or 'blank'})")
    blanks = sum(1 for row in grid for v in row if not v)
    if blanks:
        return False, f"incomplete: {blanks} blank cell{'s' if blanks > 1 else ''}"
    conflict = find_conflict(grid)
    if conflict:
        return False, conflict
    return True, "solved"


def correct_cells(puzzle: Grid, solution: Grid, grid: Grid | None) -> int:
    """How many of the puzzle's blank cells ``grid`` fills with the solution's digit.

    ``0`` for ``None`` or a grid of the wrong shape; given clues never count.
    """
    size = len(puzzle)
    if grid is None or len(grid) != size or any(len(row) != size for row in grid):
        return 0
    return sum(1 for r in range(size) for c in range(size)
               if not puzzle[r][c] and grid[r][c] == solution[r][c])


# --------------------------------------------------------------------------- rendering

def render_text(grid: Grid) -> str:
    """Rows of digits (``.`` for blanks) with ``|`` between boxes and ``-+-`` lines between
    box bands; :func:`parse_grid` reads it back::

        1 . | 3 4
        3 4 | . 2
        ----+----
        ...
    """
    size = _check_shape(grid)
    b = _box_size(size)
    width = 1 if size <= 9 else 2
    lines = []
    for r, row in enumerate(grid):
        if r and r % b == 0:
            groups = ["-" * ((width + 1) * b - 1)] * b
            lines.append("-+-".join(groups))
        cells = [(str(v) if v else ".").rjust(width) for v in row]
        lines.append(" | ".join(" ".join(cells[i:i + b]) for i in range(0, size, b)))
    return "\n".join(lines)


def render_rgb(grid: Grid, puzzle: Grid | None = None, cell: int = 24) -> np.ndarray:
    """An RGB image ``(size*cell, size*cell, 3)`` uint8 with thin cell lines, thick box
    lines and digits in a bitmap font: given clues (non-zero in ``puzzle``) black, other
    digits blue. Blanks stay empty."""
    size = _check_shape(grid)
    b = _box_size(size)
    img = new_canvas(size, size, cell, (255, 255, 255))
    draw_grid_lines(img, cell, (190, 190, 190))
    draw_grid_lines(img, cell, (0, 0, 0), every=b, thickness=max(1, cell // 12))
    for r in range(size):
        for c in range(size):
            v = grid[r][c]
            if v:
                given = puzzle is not None and puzzle[r][c] != 0
                color = (0, 0, 0) if given else (30, 80, 220)
                draw_text_in_cell(img, r, c, cell, str(v), color)
    return img
