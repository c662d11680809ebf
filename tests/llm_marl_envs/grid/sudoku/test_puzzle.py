"""Tests for the Sudoku puzzle logic: llm_marl_envs.grid.sudoku.puzzle."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_marl_envs.grid.sudoku import puzzle as sudoku


SOL4 = ((3, 1, 2, 4), (2, 4, 1, 3), (1, 3, 4, 2), (4, 2, 3, 1))
PUZ4 = ((3, 0, 0, 0), (0, 4, 1, 0), (0, 3, 0, 2), (0, 0, 0, 1))
# a well-known hard 9x9 puzzle with a unique solution
HARD9 = "8..........36......7..9.2...5...7.......457.....1...3...1....68..85...1..9....4.."


def brute_force_count(grid, limit: int = 3) -> int:
    """Reference counter: plain cell-order backtracking, no bitmasks, no MRV."""
    size = len(grid)
    cells = [list(r) for r in grid]
    b = int(size ** 0.5)

    def ok(r, c, v):
        if v in cells[r] or any(cells[i][c] == v for i in range(size)):
            return False
        br, bc = r - r % b, c - c % b
        return all(cells[i][j] != v for i in range(br, br + b) for j in range(bc, bc + b))

    def rec(k):
        if k == size * size:
            return 1
        r, c = divmod(k, size)
        if cells[r][c]:
            return rec(k + 1)
        total = 0
        for v in range(1, size + 1):
            if ok(r, c, v):
                cells[r][c] = v
                total += rec(k + 1)
                cells[r][c] = 0
                if total >= limit:
                    break
        return total

    return rec(0)


def test_puz4_is_proper() -> None:
    assert sudoku.check_answer(PUZ4, SOL4) == (True, "solved")
    assert sudoku.count_solutions(PUZ4) == 1 == brute_force_count(PUZ4)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(0, 2**32 - 1))
def test_generated_4x4_unique(seed: int) -> None:
    puzzle, solution = sudoku.generate(random.Random(seed))
    assert len(puzzle) == 4 and all(len(r) == 4 for r in puzzle)
    assert sudoku.count_solutions(puzzle, limit=2) == 1
    assert brute_force_count(puzzle) == 1
    assert sudoku.solve(puzzle) == solution
    assert sudoku.check_answer(puzzle, solution) == (True, "solved")
    # locally minimal: removing any clue breaks uniqueness
    for r in range(4):
        for c in range(4):
            if puzzle[r][c]:
                fewer = tuple(tuple(0 if (i, j) == (r, c) else v for j, v in enumerate(row))
                              for i, row in enumerate(puzzle))
                assert sudoku.count_solutions(fewer) == 2


@pytest.mark.parametrize("seed", range(3))
def test_generated_9x9_unique(seed: int) -> None:
    puzzle, solution = sudoku.generate(random.Random(seed), size=9)
    assert sudoku.count_solutions(puzzle) == 1
    assert sudoku.solve(puzzle) == solution
    assert sudoku.check_answer(puzzle, solution)[0]
    assert 17 <= sum(v > 0 for r in puzzle for v in r) <= 40


def test_generate_n_clues_and_determinism() -> None:
    p, s = sudoku.generate(random.Random(7), size=9, n_clues=30)
    assert sum(v > 0 for r in p for v in r) == 30 and sudoku.count_solutions(p) == 1
    p4, _ = sudoku.generate(random.Random(7), size=4, n_clues=8)
    assert sum(v > 0 for r in p4 for v in r) == 8 and sudoku.count_solutions(p4) == 1
    a = [sudoku.generate(random.Random(i)) for i in range(5)]
    assert a == [sudoku.generate(random.Random(i)) for i in range(5)]
    assert len({p for p, _ in a}) > 1
    with pytest.raises(RuntimeError):
        sudoku.generate(random.Random(0), size=4, n_clues=2, max_tries=3)
    with pytest.raises(ValueError):
        sudoku.generate(random.Random(0), size=5)
    with pytest.raises(ValueError):
        sudoku.generate(random.Random(0), size=4, n_clues=17)


def test_count_solutions_and_solve() -> None:
    hard = sudoku.parse_puzzle_string(HARD9)
    assert sudoku.count_solutions(hard) == 1
    solved = sudoku.solve(hard)
    assert solved is not None and sudoku.check_answer(hard, solved)[0]
    empty4 = tuple((0,) * 4 for _ in range(4))
    assert sudoku.count_solutions(empty4, limit=1000) == 288  # all 4x4 sudokus
    assert sudoku.count_solutions(empty4, limit=5) == 5
    bad = ((1, 1, 0, 0),) + ((0,) * 4,) * 3
    assert sudoku.count_solutions(bad) == 0 and sudoku.solve(bad) is None
    two = tuple(tuple(0 if v in (1, 2) else v for v in row) for row in SOL4)
    assert sudoku.count_solutions(two, limit=10) == brute_force_count(two, limit=10) >= 2
    with pytest.raises(ValueError, match="row 2"):
        sudoku.count_solutions(((1, 2, 3, 4), (1, 2, 3)) + ((0,) * 4,) * 2)
    with pytest.raises(ValueError, match="value 5"):
        sudoku.count_solutions(((5, 0, 0, 0),) + ((0,) * 4,) * 3)


def test_check_answer_rejections() -> None:
    changed_clue = ((4, 1, 2, 3), (2, 3, 1, 4), (1, 4, 3, 2), (3, 2, 4, 1))  # a valid grid
    assert sudoku.check_answer(((0,) * 4,) * 4, changed_clue)[0]  # valid sudoku...
    ok, why = sudoku.check_answer(PUZ4, changed_clue)  # ...but it ignores the clues
    assert not ok and "given clue at row 1, column 1" in why
    broken_row = ((3, 1, 2, 4), (2, 4, 1, 4), (1, 3, 4, 2), (4, 2, 3, 1))
    ok, why = sudoku.check_answer(PUZ4, broken_row)
    assert not ok and "repeats in row 2" in why
    swapped_cols = ((3, 2, 1, 4), (2, 4, 1, 3), (1, 3, 4, 2), (4, 1, 3, 2))
    ok, why = sudoku.check_answer(((3, 0, 0, 0),) + ((0,) * 4,) * 3, swapped_cols)
    assert not ok and "column" in why
    incomplete = ((3, 1, 2, 4), (2, 4, 1, 3), (1, 3, 0, 2), (4, 2, 3, 1))
    ok, why = sudoku.check_answer(PUZ4, incomplete)
    assert not ok and why == "incomplete: 1 blank cell"
    assert sudoku.check_answer(PUZ4, None) == (False, "no grid found")
    assert not sudoku.check_answer(PUZ4, SOL4[:3])[0]
    assert not sudoku.check_answer(PUZ4, ((9, 1, 2, 4),) + SOL4[1:])[0]
    # box rule: rows and columns fine, boxes not
    latin = ((1, 2, 3, 4), (2, 3, 4, 1), (3, 4, 1, 2), (4, 1, 2, 3))
    ok, why = sudoku.check_answer(((0,) * 4,) * 4, latin)
    assert not ok and "box" in why


def test_correct_cells() -> None:
    assert sudoku.correct_cells(PUZ4, SOL4, SOL4) == 10
    assert sudoku.correct_cells(PUZ4, SOL4, PUZ4) == 0
    partial = ((3, 1, 0, 0), (9, 4, 1, 0), (0, 3, 0, 2), (0, 0, 0, 1))
    assert sudoku.correct_cells(PUZ4, SOL4, partial) == 1
    assert sudoku.correct_cells(PUZ4, SOL4, None) == 0
    assert sudoku.correct_cells(PUZ4, SOL4, SOL4[:2]) == 0


SOL4_TEXT_FORMS = [
    "3 1 2 4\n2 4 1 3\n1 3 4 2\n4 2 3 1",
    "Here is my answer:\n```\n3,1,2,4\n2,4,1,3\n1,3,4,2\n4,2,3,1\n```\nDone!",
    "[[3, 1, 2, 4], [2, 4, 1, 3], [1, 3, 4, 2], [4, 2, 3, 1]]",
    "grid = [\n  [3, 1, 2, 4],\n  [2, 4, 1, 3],\n  [1, 3, 4, 2],\n  [4, 2, 3, 1],\n]",
    "| 3 1 | 2 4 |\n| 2 4 | 1 3 |\n|-----+-----|\n| 1 3 | 4 2 |\n| 4 2 | 3 1 |",
    "Row 1: 3 1 2 4\nRow 2: 2 4 1 3\nRow 3: 1 3 4 2\nRow 4: 4 2 3 1",
    "3124\n2413\n1342\n4231",
    "Answer: 3124241313424231",
    "Puzzle:\n3 . . .\n. 4 1 .\n. 3 . .\n. . . 1\nSolution:\n3 1 2 4\n2 4 1 3\n1 3 4 2\n4 2 3 1\n",
    "[['3','1','2','4'],['2','4','1','3'],['1','3','4','2'],['4','2','3','1']]",
]


@pytest.mark.parametrize("text", SOL4_TEXT_FORMS)
def test_parse_grid_formats(text: str) -> None:
    assert sudoku.parse_grid(text, 4) == SOL4


def _rows(first: str) -> str:
    """SOL4 as row lines, its first row written as ``first``."""
    return "\n".join([first, "2 4 1 3", "1 3 4 2", "4 2 3 1"])


ROW16 = " ".join(str(v) for v in range(1, 17))


@pytest.mark.parametrize("text, size, read", [
    # every ASCII digit is one cell (sizes <= 9), wherever the spaces are: as the rendering's "31 | 24"
    (_rows("31 24"), 4, SOL4), (_rows("31|24"), 4, SOL4), (_rows("3-1-2-4"), 4, SOL4),
    ("- 3 1 2 4\n- 2 4 1 3\n- 1 3 4 2\n- 4 2 3 1", 4, SOL4), ("Answer: 3124/2413/1342/4231", 4, SOL4),
    pytest.param((ROW16 + "\n") * 16, 16, (tuple(range(1, 17)),) * 16, id="16x16"),
    # a cell is never read out of a longer number: a leading zero, a sign, a decimal, more digits than cells
    (_rows("03 1 2 4"), 4, None), ("[[03, 1, 2, 4], [2, 4, 1, 3], [1, 3, 4, 2], [4, 2, 3, 1]]", 4, None),
    (_rows("3 1 2 00"), 4, None), pytest.param((ROW16.replace("16", "016") + "\n") * 16, 16, None, id="16x16-016"),
    (_rows("-3 1 2 4"), 4, None), (_rows("+3 1 2 4"), 4, None), (_rows("3 1 2 -4"), 4, None),
    ("[[-3, 1, 2, 4], [2, 4, 1, 3], [1, 3, 4, 2], [4, 2, 3, 1]]", 4, None),
    ("Answer: -3124241313424231", 4, None),
    (_rows("3.0 1 2 4"), 4, None), (_rows("3 1 2 4."), 4, None), (_rows("12 3 1 2"), 4, None),
    (_rows("3 1 2 4 1"), 4, None), (_rows("3e0 1 2 4"), 4, None), (_rows("3x 1 2 4"), 4, None),
    # ASCII digits only: other digits and numerals are no cells (and no separators)
    (_rows("\u0663 1 2 4"), 4, None), (_rows("\uff13124"), 4, None), (_rows("3\u00b2 1 2 4"), 4, None),
    (_rows("3\u00bd 1 2 4"), 4, None), ("Answer: 3124241313424231\u0663", 4, None),
    # a token past int()'s 4,300-digit limit is no cell (parse_grid never raises for a str)
    pytest.param(("7" * 4400 + ROW16[1:] + "\n") + (ROW16 + "\n") * 15, 16, None, id="16x16-4400-digits"),
    pytest.param("[[" + "7" * 4400 + ", 2]]", 16, None, id="list-4400-digits"),
])
def test_parse_grid_reads_cells_only_as_whole_digits(text: str, size: int, read) -> None:
    assert sudoku.parse_grid(text, size) == read


def test_parse_grid_blanks_last_block_and_failures() -> None:
    assert sudoku.parse_grid("3 . . .\n. 4 1 .\n. 3 _ 2\n0 . . 1", 4) == PUZ4
    two_blocks = sudoku.render_text(PUZ4) + "\n\nNow filled:\n" + sudoku.render_text(SOL4)
    assert sudoku.parse_grid(two_blocks, 4) == SOL4
    for text in ["", "no grid here", "3 1 2 4\n2 4 1 3\n1 3 4 2", "3 1 2 4 5\n" * 4,
                 "1 2 3 9\n" * 4, "[[1,2],[3,4]]"]:
        assert sudoku.parse_grid(text, 4) is None, text
    assert sudoku.parse_grid(sudoku.render_text(sudoku.parse_puzzle_string(HARD9)), 9) \
        == sudoku.parse_puzzle_string(HARD9)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.text(max_size=300), st.sampled_from([4, 9]))
def test_parse_grid_never_raises(text: str, size: int) -> None:
    g = sudoku.parse_grid(text, size)
    assert g is None or (len(g) == size and all(len(r) == size for r in g))


def test_parse_grid_adversarial_work_is_bounded(python_lines) -> None:
    """Only the last MAX_INPUT_CHARS are read: a longer text costs no more Python work, and that work is
    linear in the characters read. (Time, regex included: benchmarks/puzzles_bench.py.)"""
    for text in ["[[1]" + " " * 20000, "[[" * 10000, "1 " * 10000, "1\n" * 10000]:
        for size in (4, 9):
            sudoku.parse_grid(text * 3, size)  # the same tail: fills any cache both counted calls then hit
            got, lines = python_lines(sudoku.parse_grid, text * 2, size)
            assert got is None and python_lines(sudoku.parse_grid, text * 10, size)[1] == lines
            assert lines < 20 * sudoku.MAX_INPUT_CHARS


def test_parse_puzzle_string() -> None:
    assert sudoku.parse_puzzle_string("3...\n.41.\n.3.2\n...1") == PUZ4
    assert sudoku.parse_puzzle_string("3000041003020001") == PUZ4
    assert sudoku.grid_to_string(PUZ4) == "3....41..3.2...1"
    assert sudoku.parse_puzzle_string(sudoku.grid_to_string(PUZ4)) == PUZ4
    with pytest.raises(ValueError, match="16 .*81.*got 15"):
        sudoku.parse_puzzle_string("3" * 15)
    with pytest.raises(ValueError, match="cell 2: unexpected character 'x'"):
        sudoku.parse_puzzle_string("3x" + "." * 14)
    with pytest.raises(ValueError, match="digit 5 is too large"):
        sudoku.parse_puzzle_string("5" + "." * 15)
    with pytest.raises(ValueError, match="repeats in row 1"):
        sudoku.parse_puzzle_string("33" + "." * 14)


def test_sudoku_render() -> None:
    text = sudoku.render_text(PUZ4)
    assert text.splitlines() == ["3 . | . .", ". 4 | 1 .", "----+----", ". 3 | . 2", ". . | . 1"]
    assert sudoku.parse_grid(text, 4) == PUZ4
    img = sudoku.render_rgb(PUZ4, cell=20)
    assert img.shape == (80, 80, 3) and img.dtype == np.uint8
    img_sol = sudoku.render_rgb(SOL4, puzzle=PUZ4, cell=20)
    assert not np.array_equal(img, img_sol)
    # given digit drawn black, filled digit blue
    assert (img_sol[0:20, 0:20] == 0).all(axis=2).any()
    assert (img_sol[0:20, 20:40] == (30, 80, 220)).all(axis=2).any()
    # different digits render differently in the same cell
    one = sudoku.render_rgb(((1, 0, 0, 0),) + ((0,) * 4,) * 3, cell=20)
    two = sudoku.render_rgb(((2, 0, 0, 0),) + ((0,) * 4,) * 3, cell=20)
    assert not np.array_equal(one, two)
    assert sudoku.render_rgb(sudoku.parse_puzzle_string(HARD9), cell=16).shape == (144, 144, 3)
