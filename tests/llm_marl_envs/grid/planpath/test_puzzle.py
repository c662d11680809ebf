"""Tests for the Plan-path puzzle logic: llm_marl_envs.grid.planpath.puzzle."""

from __future__ import annotations

import random
from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_marl_envs.grid.moves import MOVES
from llm_marl_envs.grid.planpath import puzzle as planpath


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
