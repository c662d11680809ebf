"""Tests for the Sokoban puzzle logic: llm_marl_envs.grid.sokoban.puzzle."""

from __future__ import annotations

import random
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_marl_envs.grid.moves import MOVES
from llm_marl_envs.grid.sokoban import puzzle as sokoban


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
