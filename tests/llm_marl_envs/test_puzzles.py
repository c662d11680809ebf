"""Tests for the pure puzzle logic: llm_marl_envs.puzzles.{sokoban,planpath,sudoku,render}."""

from __future__ import annotations

import random
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_marl_envs.puzzles import planpath, sokoban
from llm_marl_envs.puzzles.moves import MOVES

# ============================================================================ Sokoban

SIMPLE = """\
#####
#@$.#
#####"""


def plain_bfs(level: sokoban.SokobanLevel, max_states: int = 200_000) -> int | None:
    """Reference optimum: BFS over full states with apply_move, no pruning."""
    if sokoban.is_solved(level):
        return 0
    seen = {(level.player, level.boxes)}
    q = deque([(level, 0)])
    while q:
        cur, d = q.popleft()
        for m in MOVES:
            nxt, moved, _ = sokoban.apply_move(cur, m)
            key = (nxt.player, nxt.boxes)
            if not moved or key in seen:
                continue
            if sokoban.is_solved(nxt):
                return d + 1
            seen.add(key)
            assert len(seen) < max_states
            q.append((nxt, d + 1))
    return None


def test_from_xsb_simple() -> None:
    lvl = sokoban.from_xsb(SIMPLE)
    assert (lvl.height, lvl.width) == (3, 5)
    assert lvl.player == (1, 1) and lvl.boxes == {(1, 2)} and lvl.goals == {(1, 3)}
    assert (0, 0) in lvl.walls and (1, 4) in lvl.walls and len(lvl.walls) == 12
    assert sokoban.solve(lvl) == "R"


def test_from_xsb_all_symbols_and_ragged_lines() -> None:
    text = "\n  ####\n###  #\n#+*$ ##\n# .$ #\n######\n\n"
    lvl = sokoban.from_xsb(text)
    assert (lvl.height, lvl.width) == (5, 7)
    assert lvl.player == (2, 1) and (2, 1) in lvl.goals
    assert lvl.boxes == {(2, 2), (2, 3), (3, 3)} and lvl.goals == {(2, 1), (2, 2), (3, 2)}
    assert (0, 6) not in lvl.walls  # padding is floor
    alt = sokoban.from_xsb("#####\n#@$.#\n#-_-#\n#####")
    assert alt.walls == sokoban.from_xsb("#####\n#@$.#\n#   #\n#####").walls


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("#####\n#@$.#\n##x##", "line 3, column 3"),
        ("\n#####\n#@$.#\n#\t  #", "line 4, column 2"),
        ("#####\n# $.#\n#####", "no player"),
        ("#####\n#@$.#\n#@  #", "2 players (at line 2 column 2, line 3 column 2)"),
        ("######\n#@$$.#\n######", "2 boxes but 1 goals"),
        ("#####\n#@ .#\n#####", "no boxes"),
        ("   \n  \n", "empty level"),
    ],
)
def test_from_xsb_errors(text: str, fragment: str) -> None:
    with pytest.raises(ValueError) as err:
        sokoban.from_xsb(text)
    assert fragment in str(err.value)


def test_level_validation() -> None:
    lvl = sokoban.from_xsb(SIMPLE)
    with pytest.raises(ValueError, match="inside a wall"):
        sokoban.SokobanLevel(3, 5, lvl.walls, lvl.goals, lvl.boxes, (0, 0))
    with pytest.raises(ValueError, match="outside"):
        sokoban.SokobanLevel(3, 5, lvl.walls, lvl.goals, {(5, 5)}, (1, 1))
    with pytest.raises(ValueError, match="on a box"):
        sokoban.SokobanLevel(3, 5, lvl.walls, lvl.goals, lvl.boxes, (1, 2))


def test_xsb_roundtrip_and_render_text() -> None:
    text = "  ####\n###  #\n#+*$ #\n# .$ #\n######"
    lvl = sokoban.from_xsb(text)
    out = sokoban.to_xsb(lvl)
    assert out.splitlines()[2] == "#+*$ #"
    assert sokoban.from_xsb(out) == lvl
    assert sokoban.render_text(lvl) == out


def test_parse_levels_file(tmp_path) -> None:
    content = """; Microban-like test collection
Title: Test set

; level one
#####
#@$.#
#####
Level 1

Level 2
  ####
###  #
#@$ .#
#    #
######
; trailing comment
"""
    path = tmp_path / "levels.xsb"
    path.write_text(content)
    levels = sokoban.parse_levels_file(path)
    assert len(levels) == 2
    assert levels[0] == sokoban.from_xsb(SIMPLE)
    assert levels[1].player == (2, 1) and levels[1].goals == {(2, 4)}
    assert [sokoban.solve(lv) for lv in levels] == ["R", "RR"]


def test_parse_levels_file_errors_name_file_and_level(tmp_path) -> None:
    path = tmp_path / "bad.xsb"
    path.write_text("#####\n#@$.#\n#####\n\n#####\n#@$.#\n#!  #\n#####\n")
    with pytest.raises(ValueError) as err:
        sokoban.parse_levels_file(path)
    msg = str(err.value)
    assert str(path) in msg and "level 2" in msg and "line 7, column 2" in msg
    typo = tmp_path / "typo.xsb"
    typo.write_text("Level 1\n####x\n#@$.#\n#####\n")
    with pytest.raises(ValueError, match="level 1 .*line 2, column 5"):
        sokoban.parse_levels_file(typo)
    empty = tmp_path / "empty.xsb"
    empty.write_text("; nothing\nTitle: none\n")
    with pytest.raises(ValueError, match="no Sokoban levels"):
        sokoban.parse_levels_file(empty)


def test_apply_move_rules() -> None:
    lvl = sokoban.from_xsb("######\n#@$$.#\n# $  #\n#  . #\n#   .#\n######")
    same, moved, pushed = sokoban.apply_move(lvl, "R")  # box into box
    assert same == lvl and not moved and not pushed
    same, moved, _ = sokoban.apply_move(lvl, "U")  # wall
    assert same == lvl and not moved
    down, moved, pushed = sokoban.apply_move(lvl, "D")
    assert moved and not pushed and down.player == (2, 1) and down.boxes == lvl.boxes
    pushed_lvl, moved, pushed = sokoban.apply_move(down, "R")
    assert moved and pushed and pushed_lvl.player == (2, 2) and (2, 3) in pushed_lvl.boxes
    with pytest.raises(ValueError, match="unknown move"):
        sokoban.apply_move(lvl, "X")


def test_box_goal_distance_is_matching() -> None:
    # boxes at column 1 and 2, goals at columns 3 and 4: any matching costs 4
    lvl = sokoban.from_xsb("#######\n#@$$..#\n#######")
    assert sokoban.box_goal_distance(lvl) == 4
    # nearest-goal sum would give 1 + 2 = 3; a one-to-one matching must give 1 + 3 = 4
    lvl = sokoban.from_xsb("########\n#.$$@ .#\n########")
    assert sokoban.box_goal_distance(lvl) == 1 + 3
    assert sokoban.box_goal_distance(sokoban.from_xsb("####\n#@*#\n####")) == 0


def test_dead_squares_corners() -> None:
    lvl = sokoban.from_xsb("######\n#    #\n#@$ .#\n#    #\n######")
    dead = sokoban.dead_squares(lvl)
    assert {(1, 1), (1, 4), (3, 1), (3, 4)} <= dead
    assert (2, 2) not in dead and (2, 4) not in dead


def test_solver_unsolvable_and_budget() -> None:
    corner = sokoban.from_xsb("#####\n#$ .#\n#@  #\n#####")
    assert sokoban.solve(corner) is None
    solvable = sokoban.from_xsb("#######\n#@    #\n# $   #\n#    .#\n#######")
    assert sokoban.solve(solvable, max_states=3) is None
    assert sokoban.solve(sokoban.from_xsb("####\n#@*#\n####")) == ""


@pytest.mark.parametrize(
    "text",
    [
        "#######\n#@    #\n# $   #\n#    .#\n#######",
        "#######\n#  .  #\n# $$  #\n#@  . #\n#######",
        "  ####\n###  #\n#@$  #\n# #$.#\n#   .#\n######",
    ],
)
def test_solver_optimal_on_handmade_levels(text: str) -> None:
    lvl = sokoban.from_xsb(text)
    plan = sokoban.solve(lvl)
    assert plan is not None and sokoban.is_solved(sokoban.apply_moves(lvl, plan))
    assert len(plan) == plain_bfs(lvl)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(0, 2**32 - 1))
def test_generated_levels_solved_by_plan_and_optimal(seed: int) -> None:
    lvl, plan = sokoban.generate(random.Random(seed))
    assert (lvl.height, lvl.width) == (6, 6) and len(lvl.boxes) == 1
    assert not sokoban.is_solved(lvl) and len(plan) >= 4
    assert sokoban.is_solved(sokoban.apply_moves(lvl, plan))
    assert len(plan) == plain_bfs(lvl)
    assert sokoban.from_xsb(sokoban.to_xsb(lvl)) == lvl


@pytest.mark.parametrize("h, w, n", [(7, 7, 2), (8, 8, 2), (6, 8, 3)])
def test_generated_multi_box_levels(h: int, w: int, n: int) -> None:
    rng = random.Random(h * 100 + w * 10 + n)
    for _ in range(3):
        lvl, plan = sokoban.generate(rng, height=h, width=w, n_boxes=n, min_moves=6)
        assert (lvl.height, lvl.width, len(lvl.boxes)) == (h, w, n)
        assert len(plan) >= 6 and sokoban.is_solved(sokoban.apply_moves(lvl, plan))
        # outer wall intact
        assert all((0, c) in lvl.walls and (h - 1, c) in lvl.walls for c in range(w))
    lvl, plan = sokoban.generate(random.Random(5), height=7, width=7, n_boxes=2)
    assert len(plan) == plain_bfs(lvl)


def test_generate_deterministic_and_varied() -> None:
    a = [sokoban.generate(random.Random(s)) for s in range(5)]
    b = [sokoban.generate(random.Random(s)) for s in range(5)]
    assert a == b
    assert len({lvl for lvl, _ in a}) == 5


def test_generate_bad_arguments() -> None:
    with pytest.raises(ValueError):
        sokoban.generate(random.Random(0), height=2)
    with pytest.raises(ValueError):
        sokoban.generate(random.Random(0), height=4, width=4, n_boxes=3)
    with pytest.raises(RuntimeError, match="min_moves"):
        sokoban.generate(random.Random(0), height=4, width=4, min_moves=50, max_tries=5)


def test_sokoban_render_rgb() -> None:
    lvl = sokoban.from_xsb(SIMPLE)
    img = sokoban.render_rgb(lvl, cell=10)
    assert img.shape == (30, 50, 3) and img.dtype == np.uint8
    after, _, _ = sokoban.apply_move(lvl, "R")
    img2 = sokoban.render_rgb(after, cell=10)
    assert not np.array_equal(img, img2)
    # the pushed box now on its goal changes colour: the goal cell differs
    assert not np.array_equal(img[10:20, 30:40], img2[10:20, 30:40])


# ============================================================================ Plan-path


def bfs_distance(grid: planpath.PlanPathGrid, start) -> int | None:
    seen = {start: 0}
    q = deque([start])
    while q:
        p = q.popleft()
        if p == grid.goal:
            return seen[p]
        for m in MOVES:
            n, moved = planpath.apply_move(grid, p, m)
            if moved and n not in seen:
                seen[n] = seen[p] + 1
                q.append(n)
    return None


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(0, 2**32 - 1), st.sampled_from([(10, 10, 0.25), (5, 7, 0.4), (2, 1, 0.0)]))
def test_planpath_generate_reachable_and_shortest(seed: int, shape) -> None:
    h, w, dens = shape
    grid, path = planpath.generate(random.Random(seed), height=h, width=w, obstacle_density=dens)
    assert (grid.height, grid.width) == (h, w)
    assert grid.start != grid.goal
    assert grid.start not in grid.obstacles and grid.goal not in grid.obstacles
    pos = grid.start
    for m in path:
        pos, moved = planpath.apply_move(grid, pos, m)
        assert moved
    assert pos == grid.goal
    assert len(path) == bfs_distance(grid, grid.start)
    assert len(path) == planpath.distance_to_goal(grid, grid.start)


def test_planpath_moves_and_distance() -> None:
    grid = planpath.PlanPathGrid(3, 4, frozenset({(0, 1), (1, 1)}), (0, 0), (0, 2))
    assert planpath.apply_move(grid, (0, 0), "U") == ((0, 0), False)  # edge
    assert planpath.apply_move(grid, (0, 0), "R") == ((0, 0), False)  # obstacle
    assert planpath.apply_move(grid, (0, 0), "D") == ((1, 0), True)
    assert planpath.distance_to_goal(grid, (0, 0)) == 6
    assert planpath.shortest_path(grid) == list("DDRRUU")
    assert planpath.shortest_path(grid, start=(0, 2)) == []
    walled = planpath.PlanPathGrid(2, 3, frozenset({(0, 1), (1, 1)}), (0, 0), (0, 2))
    assert planpath.shortest_path(walled) is None
    assert planpath.distance_to_goal(walled, (0, 0)) == -1
    with pytest.raises(ValueError, match="on an obstacle"):
        planpath.PlanPathGrid(2, 2, frozenset({(0, 0)}), (0, 0), (1, 1))
    with pytest.raises(ValueError, match="outside"):
        planpath.PlanPathGrid(2, 2, frozenset(), (0, 0), (2, 1))
    with pytest.raises(ValueError, match="unknown move"):
        planpath.apply_move(grid, (0, 0), "up")


def test_planpath_render() -> None:
    grid = planpath.PlanPathGrid(3, 4, frozenset({(0, 1), (1, 1)}), (0, 0), (0, 2))
    assert planpath.render_text(grid) == "A#G.\n.#..\n...."
    assert planpath.render_text(grid, (2, 3)) == ".#G.\n.#..\n...A"
    img = planpath.render_rgb(grid, cell=8)
    assert img.shape == (24, 32, 3) and img.dtype == np.uint8
    img2 = planpath.render_rgb(grid, (2, 3), cell=8)
    assert not np.array_equal(img, img2)


def test_planpath_deterministic() -> None:
    a = [planpath.generate(random.Random(s)) for s in range(5)]
    assert a == [planpath.generate(random.Random(s)) for s in range(5)]
    assert len({g for g, _ in a}) == 5
    with pytest.raises(ValueError):
        planpath.generate(random.Random(0), obstacle_density=1.0)


# ============================================================================ Sudoku

from llm_marl_envs.puzzles import sudoku  # noqa: E402

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
