"""Plan-path puzzle logic: walk from a start cell to a goal cell around obstacles.

Coordinates are ``(row, col)`` with ``(0, 0)`` the top-left cell; moves are
``U/D/L/R`` (see :mod:`llm_marl_envs.grid.moves`). The grid's edges and obstacle cells block moves.

Text form (:func:`render_text`): one line per row, ``#`` obstacle, ``.`` free, ``A`` the
agent, ``G`` the goal (``A`` wins when the agent stands on the goal).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence, cast

import numpy as np

from ..moves import MOVE_DELTAS, MOVES
from ..render import draw_grid_lines, fill_cell, new_canvas

__all__ = ["PlanPathGrid", "generate", "shortest_path", "apply_move", "distance_to_goal",
           "distances_from_goal", "render_text", "render_rgb", "LEGEND"]

Pos = tuple[int, int]

#: Characters used by :func:`render_text`.
LEGEND: dict[str, str] = {"#": "obstacle", ".": "free cell", "A": "agent", "G": "goal"}


def _as_pos(p: Sequence[int]) -> Pos:
    """A position given as any pair (list, tuple, array) as the hashable tuple the grid uses."""
    return cast(Pos, tuple(p))


@dataclass(frozen=True)
class PlanPathGrid:
    """An immutable plan-path grid. Hashable, so derived data can be cached per grid.

    Raises ``ValueError`` if the size is not positive, or ``start``/``goal`` are out of
    bounds or on an obstacle (obstacles out of bounds are rejected too).
    """

    height: int
    width: int
    obstacles: frozenset[Pos]
    start: Pos
    goal: Pos

    def __post_init__(self) -> None:
        if self.height < 1 or self.width < 1:
            raise ValueError(f"grid size must be positive, got {self.height}x{self.width}")
        object.__setattr__(self, "obstacles", frozenset(self.obstacles))
        object.__setattr__(self, "start", tuple(self.start))
        object.__setattr__(self, "goal", tuple(self.goal))
        for o in self.obstacles:
            if not self.in_bounds(o):
                raise ValueError(f"obstacle {o} is outside the {self.height}x{self.width} grid")
        for name in ("start", "goal"):
            p = getattr(self, name)
            if not self.in_bounds(p):
                raise ValueError(f"{name} {p} is outside the {self.height}x{self.width} grid")
            if p in self.obstacles:
                raise ValueError(f"{name} {p} is on an obstacle")

    def in_bounds(self, pos: Pos) -> bool:
        """True if ``pos`` lies inside the grid."""
        return 0 <= pos[0] < self.height and 0 <= pos[1] < self.width

    def is_free(self, pos: Pos) -> bool:
        """True if ``pos`` is inside the grid and not an obstacle."""
        return self.in_bounds(pos) and pos not in self.obstacles


def apply_move(grid: PlanPathGrid, pos: Pos, move: str) -> tuple[Pos, bool]:
    """Move from ``pos`` one step; returns ``(new_pos, moved)``.

    A move into an obstacle or off the grid leaves the position unchanged with
    ``moved=False``. ``move`` must be one of ``U/D/L/R`` (``ValueError`` otherwise).
    """
    try:
        dr, dc = MOVE_DELTAS[move]
    except KeyError:
        raise ValueError(f"unknown move {move!r}; expected one of U, D, L, R") from None
    nxt = (pos[0] + dr, pos[1] + dc)
    if grid.is_free(nxt):
        return nxt, True
    return (pos[0], pos[1]), False


def _bfs(grid: PlanPathGrid, source: Pos) -> dict[Pos, int]:
    dist = {source: 0}
    q = deque([source])
    while q:
        r, c = q.popleft()
        d = dist[(r, c)] + 1
        for m in MOVES:
            dr, dc = MOVE_DELTAS[m]
            nxt = (r + dr, c + dc)
            if nxt not in dist and grid.is_free(nxt):
                dist[nxt] = d
                q.append(nxt)
    return dist


@lru_cache(maxsize=4096)
def distances_from_goal(grid: PlanPathGrid) -> dict[Pos, int]:
    """BFS distance to the goal from every cell that can reach it (cached per grid).

    The returned dict is shared by the cache: do not modify it.
    """
    return _bfs(grid, grid.goal)


def distance_to_goal(grid: PlanPathGrid, pos: Pos) -> int:
    """Fewest moves from ``pos`` to the goal; ``-1`` if the goal cannot be reached.

    Uses :func:`distances_from_goal` (one BFS per grid, cached).
    """
    return distances_from_goal(grid).get(_as_pos(pos), -1)


def shortest_path(grid: PlanPathGrid, start: Pos | None = None) -> list[str] | None:
    """A shortest move list from ``start`` (default ``grid.start``) to the goal.

    Deterministic: at every step it takes the first move in ``U, D, L, R`` order that
    decreases the BFS distance. ``[]`` when already on the goal, ``None`` if unreachable.
    """
    pos = _as_pos(grid.start if start is None else start)
    dist = distances_from_goal(grid)
    if pos not in dist:
        return None
    path: list[str] = []
    while dist[pos] > 0:
        for m in MOVES:
            dr, dc = MOVE_DELTAS[m]
            nxt = (pos[0] + dr, pos[1] + dc)
            if dist.get(nxt, -2) == dist[pos] - 1:
                path.append(m)
                pos = nxt
                break
    return path


def generate(rng: random.Random, height: int = 10, width: int = 10,
             obstacle_density: float = 0.25,
             max_tries: int = 1000) -> tuple[PlanPathGrid, list[str]]:
    """A random grid whose goal is reachable from its start, and a shortest path.

    Each cell is an obstacle with probability ``obstacle_density``; start and goal are two
    distinct free cells chosen uniformly, re-drawn until the goal is reachable.
    Deterministic for a given ``rng`` state. Raises ``ValueError`` for bad arguments and
    ``RuntimeError`` if ``max_tries`` grids all fail (e.g. density near 1).
    """
    if height < 1 or width < 1 or height * width < 2:
        raise ValueError(f"grid must have at least 2 cells, got {height}x{width}")
    if not 0.0 <= obstacle_density < 1.0:
        raise ValueError(f"obstacle_density must be in [0, 1), got {obstacle_density}")
    for _ in range(max_tries):
        obstacles = frozenset((r, c) for r in range(height) for c in range(width)
                              if rng.random() < obstacle_density)
        free = [(r, c) for r in range(height) for c in range(width) if (r, c) not in obstacles]
        if len(free) < 2:
            continue
        start, goal = rng.sample(free, 2)
        grid = PlanPathGrid(height, width, obstacles, start, goal)
        path = shortest_path(grid)
        if path is not None:
            return grid, path
    raise RuntimeError(f"no solvable {height}x{width} grid with density {obstacle_density} "
                       f"in {max_tries} tries")


def render_text(grid: PlanPathGrid, pos: Pos | None = None) -> str:
    """Rows of ``#`` obstacle, ``.`` free, ``G`` goal, ``A`` agent (at ``pos``, default start)."""
    pos = _as_pos(grid.start if pos is None else pos)
    rows = []
    for r in range(grid.height):
        row = []
        for c in range(grid.width):
            p = (r, c)
            row.append("A" if p == pos else "G" if p == grid.goal
                       else "#" if p in grid.obstacles else ".")
        rows.append("".join(row))
    return "\n".join(rows)


_COLORS = {"free": (235, 235, 235), "obstacle": (60, 60, 60), "goal": (60, 180, 75),
           "agent": (30, 100, 220), "line": (200, 200, 200)}


def render_rgb(grid: PlanPathGrid, pos: Pos | None = None, cell: int = 16) -> np.ndarray:
    """An RGB image ``(height*cell, width*cell, 3)`` uint8: obstacles dark, goal green,
    agent a blue square (inset, so an agent on the goal still shows the goal)."""
    pos = _as_pos(grid.start if pos is None else pos)
    img = new_canvas(grid.height, grid.width, cell, _COLORS["free"])
    for r, c in grid.obstacles:
        fill_cell(img, r, c, cell, _COLORS["obstacle"])
    fill_cell(img, grid.goal[0], grid.goal[1], cell, _COLORS["goal"])
    draw_grid_lines(img, cell, _COLORS["line"])
    fill_cell(img, pos[0], pos[1], cell, _COLORS["agent"], margin=max(1, cell // 5))
    return img
