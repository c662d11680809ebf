"""Sokoban puzzle logic: levels, XSB text, moves, an optimal solver and a generator.

Coordinates are ``(row, col)`` with ``(0, 0)`` the top-left cell. Cells outside the
grid count as walls. Moves are ``U/D/L/R`` (see :mod:`llm_marl_envs.grid.moves`); a move into a box pushes
it when the cell behind the box is free.

XSB text (the standard Sokoban format)::

    #  wall          @  player          +  player on a goal
    $  box           *  box on a goal   .  goal
    space, '-' or '_'  floor

Lines may be ragged; short lines are padded with floor. :func:`to_xsb` writes floor as a
space and keeps every row at full width, so ``from_xsb(to_xsb(level)) == level`` for every
level whose first and last rows hold something other than floor (all walled levels).
"""

from __future__ import annotations

import os
import random
from collections import deque
from dataclasses import dataclass, replace
from itertools import permutations

import numpy as np

from ..moves import MOVE_DELTAS, MOVES
from ..render import draw_grid_lines, fill_cell, new_canvas

__all__ = ["SokobanLevel", "XSB_CHARS", "from_xsb", "to_xsb", "parse_levels_text",
           "parse_levels_file", "apply_move", "apply_moves", "is_solved", "solve",
           "dead_squares", "generate", "box_goal_distance", "boxes_on_goals",
           "render_text", "render_rgb"]

Pos = tuple[int, int]
_State = tuple[int, tuple[int, ...]]  # solver state: (player index, sorted box indices)

#: Characters allowed in an XSB level row.
XSB_CHARS = "#@+$*. -_"


@dataclass(frozen=True)
class SokobanLevel:
    """An immutable Sokoban state (the level plus where the player and boxes are now).

    ``walls``, ``goals`` and ``boxes`` are frozensets of ``(row, col)``. Hashable, so it
    can key caches and visited sets. Raises ``ValueError`` when the state is
    inconsistent: a non-positive size, anything out of bounds, the player or a box in a
    wall, the player on a box, a goal in a wall, no box, or a box count different from
    the goal count.
    """

    height: int
    width: int
    walls: frozenset[Pos]
    goals: frozenset[Pos]
    boxes: frozenset[Pos]
    player: Pos

    def __post_init__(self) -> None:
        for name in ("walls", "goals", "boxes"):
            value = getattr(self, name)
            if not isinstance(value, frozenset):
                object.__setattr__(self, name, frozenset(value))
        if not isinstance(self.player, tuple):
            object.__setattr__(self, "player", tuple(self.player))
        if self.height < 1 or self.width < 1:
            raise ValueError(f"level size must be positive, got {self.height}x{self.width}")
        h, w = self.height, self.width
        for name in ("walls", "goals", "boxes"):
            for r, c in getattr(self, name):
                if not (0 <= r < h and 0 <= c < w):
                    raise ValueError(f"{name[:-1]} at {(r, c)} is outside the {h}x{w} level")
        pr, pc = self.player
        if not (0 <= pr < h and 0 <= pc < w):
            raise ValueError(f"player at {self.player} is outside the {h}x{w} level")
        if self.player in self.walls:
            raise ValueError(f"player at {self.player} is inside a wall")
        if self.player in self.boxes:
            raise ValueError(f"player at {self.player} is on a box")
        if self.boxes & self.walls:
            raise ValueError(f"boxes inside walls at {sorted(self.boxes & self.walls)}")
        if self.goals & self.walls:
            raise ValueError(f"goals inside walls at {sorted(self.goals & self.walls)}")
        if not self.boxes:
            raise ValueError("level has no boxes")
        if len(self.boxes) != len(self.goals):
            raise ValueError(f"level has {len(self.boxes)} boxes but {len(self.goals)} goals")


# --------------------------------------------------------------------------- XSB text

def _level_from_rows(rows: list[str], line_numbers: list[int]) -> SokobanLevel:
    """Build a level from XSB rows; ``line_numbers`` are the rows' 1-based line numbers."""
    if not rows:
        raise ValueError("empty level: no XSB rows")
    height, width = len(rows), max(len(r) for r in rows)
    walls, goals, boxes = set(), set(), set()
    players: list[tuple[Pos, int, int]] = []
    for r, (row, lineno) in enumerate(zip(rows, line_numbers, strict=True)):
        for c, ch in enumerate(row):
            if ch == "#":
                walls.add((r, c))
            elif ch in " -_":
                pass
            elif ch == ".":
                goals.add((r, c))
            elif ch == "$":
                boxes.add((r, c))
            elif ch == "*":
                boxes.add((r, c))
                goals.add((r, c))
            elif ch == "@":
                players.append(((r, c), lineno, c + 1))
            elif ch == "+":
                players.append(((r, c), lineno, c + 1))
                goals.add((r, c))
            else:
                raise ValueError(f"line {lineno}, column {c + 1}: unexpected character {ch!r} "
                                 f"(XSB allows '#', '@', '+', '$', '*', '.', ' ', '-', '_')")
    if not players:
        raise ValueError("no player: the level needs exactly one '@' or '+'")
    if len(players) > 1:
        where = ", ".join(f"line {ln} column {col}" for _, ln, col in players)
        raise ValueError(f"{len(players)} players (at {where}): the level needs exactly one")
    if not boxes:
        raise ValueError("no boxes: the level needs at least one '$' or '*'")
    if len(boxes) != len(goals):
        raise ValueError(f"{len(boxes)} boxes but {len(goals)} goals: the counts must be equal")
    return SokobanLevel(height, width, frozenset(walls), frozenset(goals), frozenset(boxes),
                        players[0][0])


def from_xsb(text: str) -> SokobanLevel:
    """Parse one level in XSB text (see the module docstring).

    Blank lines before and after the level are ignored; ragged lines are padded with floor.
    Raises ``ValueError`` naming the line and column (1-based, counted in ``text``) of an
    unexpected character, and for no player, several players (with their positions), no
    boxes, or a box count different from the goal count.
    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    idx = [i for i, line in enumerate(lines) if line.strip()]
    if not idx:
        raise ValueError("empty level: no XSB rows")
    first, last = idx[0], idx[-1]
    return _level_from_rows(lines[first:last + 1], list(range(first + 1, last + 2)))


def to_xsb(level: SokobanLevel) -> str:
    """XSB text of ``level``: one full-width row per line (floor as space), no final newline."""
    rows = []
    for r in range(level.height):
        row = []
        for c in range(level.width):
            p = (r, c)
            if p in level.walls:
                row.append("#")
            elif p == level.player:
                row.append("+" if p in level.goals else "@")
            elif p in level.boxes:
                row.append("*" if p in level.goals else "$")
            elif p in level.goals:
                row.append(".")
            else:
                row.append(" ")
        rows.append("".join(row))
    return "\n".join(rows)


def _is_metadata(line: str) -> bool:
    """A title/metadata line: holds a letter or digit and does not start with ``#``."""
    return not line.lstrip().startswith("#") and any(ch.isalnum() for ch in line)


def parse_levels_text(text: str, source: str = "<string>") -> list[SokobanLevel]:
    """Parse several XSB levels separated by blank lines.

    Lines whose first non-blank character is ``;`` are comments and are dropped. In each
    blank-line separated block, leading and trailing lines that contain a letter or digit
    and do not start with ``#`` (titles such as ``Level 3`` or ``Title: ...``) are
    dropped; a block left empty is skipped. A stray letter inside a wall row (``###x#``)
    is an error, not a title. Errors raise ``ValueError`` naming ``source``, the level number (1-based,
    counting levels only) and the line number in the text.
    """
    blocks: list[list[tuple[int, str]]] = []
    current: list[tuple[int, str]] = []
    for lineno, line in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), 1):
        if line.lstrip().startswith(";"):
            continue
        if not line.strip():
            if current:
                blocks.append(current)
                current = []
            continue
        current.append((lineno, line))
    if current:
        blocks.append(current)
    levels: list[SokobanLevel] = []
    for block in blocks:
        while block and _is_metadata(block[0][1]):
            block = block[1:]
        while block and _is_metadata(block[-1][1]):
            block = block[:-1]
        if not block:
            continue
        number = len(levels) + 1
        try:
            levels.append(_level_from_rows([ln for _, ln in block], [n for n, _ in block]))
        except ValueError as err:
            raise ValueError(f"{source}: level {number} (starting at line {block[0][0]}): "
                             f"{err}") from None
    return levels


def parse_levels_file(path: str | os.PathLike[str]) -> list[SokobanLevel]:
    """Read a file of XSB levels (see :func:`parse_levels_text`); errors name the file,
    the level number and the line. Raises ``ValueError`` if the file holds no level."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    levels = parse_levels_text(text, source=str(path))
    if not levels:
        raise ValueError(f"{path}: no Sokoban levels found (levels are XSB blocks separated "
                         f"by blank lines)")
    return levels


# --------------------------------------------------------------------------- moves

def _blocked(level: SokobanLevel, p: Pos) -> bool:
    return (p in level.walls or not (0 <= p[0] < level.height and 0 <= p[1] < level.width))


def apply_move(level: SokobanLevel, move: str) -> tuple[SokobanLevel, bool, bool]:
    """Apply one move; returns ``(new_level, moved, pushed)``.

    Moving into a wall (or off the grid), or pushing a box into a wall or another box, is
    illegal: the level comes back unchanged with ``moved=False, pushed=False``. ``move``
    must be ``U/D/L/R`` (``ValueError`` otherwise).
    """
    try:
        dr, dc = MOVE_DELTAS[move]
    except KeyError:
        raise ValueError(f"unknown move {move!r}; expected one of U, D, L, R") from None
    pr, pc = level.player
    p1 = (pr + dr, pc + dc)
    if _blocked(level, p1):
        return level, False, False
    if p1 in level.boxes:
        p2 = (p1[0] + dr, p1[1] + dc)
        if _blocked(level, p2) or p2 in level.boxes:
            return level, False, False
        boxes = (level.boxes - {p1}) | {p2}
        return replace(level, boxes=boxes, player=p1), True, True
    return replace(level, player=p1), True, False


def apply_moves(level: SokobanLevel, moves: str | list[str]) -> SokobanLevel:
    """Apply a sequence of moves (illegal ones leave the state unchanged)."""
    for m in moves:
        level, _, _ = apply_move(level, m)
    return level


def is_solved(level: SokobanLevel) -> bool:
    """True when every box stands on a goal."""
    return level.boxes == level.goals


def boxes_on_goals(level: SokobanLevel) -> int:
    """Number of boxes standing on goals."""
    return len(level.boxes & level.goals)


def box_goal_distance(level: SokobanLevel) -> int:
    """Minimum total Manhattan distance of a one-to-one assignment of boxes to goals.

    Exact min-cost matching (each goal takes one box): by enumeration for up to 6 boxes,
    by a dynamic programme over goal subsets for up to 14; above that (rare) it falls back
    to the sum over boxes of the distance to the nearest goal, a lower bound. Zero exactly
    when the level is solved. Walls are ignored (it is a progress measure, not a plan).
    """
    boxes, goals = sorted(level.boxes), sorted(level.goals)
    n = len(boxes)
    cost = [[abs(b[0] - g[0]) + abs(b[1] - g[1]) for g in goals] for b in boxes]
    if n <= 6:
        return min(sum(cost[i][p[i]] for i in range(n)) for p in permutations(range(n)))
    if n <= 14:
        inf = float("inf")
        dp = [inf] * (1 << n)
        dp[0] = 0
        for mask in range(1 << n):
            i = bin(mask).count("1")
            if i >= n or dp[mask] == inf:
                continue
            for j in range(n):
                if not mask & (1 << j):
                    nm = mask | (1 << j)
                    v = dp[mask] + cost[i][j]
                    if v < dp[nm]:
                        dp[nm] = v
        return int(dp[(1 << n) - 1])
    return sum(min(row) for row in cost)


# --------------------------------------------------------------------------- solver

def dead_squares(level: SokobanLevel) -> frozenset[Pos]:
    """Floor cells from which no push sequence can bring a box to any goal.

    Computed by "pulling" a box backwards from every goal (ignoring other boxes): a cell
    is live if a box there can be pushed onto a goal. A box on a dead cell means the level
    is lost, which covers corner deadlocks and dead wall segments. Sound: pruning states
    with a box on a dead cell never removes a solution.
    """
    h, w = level.height, level.width

    def floor(p: Pos) -> bool:
        return 0 <= p[0] < h and 0 <= p[1] < w and p not in level.walls

    live = set(level.goals)
    q = deque(level.goals)
    while q:
        x = q.popleft()
        for dr, dc in MOVE_DELTAS.values():
            prev = (x[0] - dr, x[1] - dc)  # box came from here, pushed by (dr, dc)
            player = (x[0] - 2 * dr, x[1] - 2 * dc)
            if prev not in live and floor(prev) and floor(player):
                live.add(prev)
                q.append(prev)
    return frozenset((r, c) for r in range(h) for c in range(w)
                     if (r, c) not in level.walls and (r, c) not in live)


def solve(level: SokobanLevel, max_states: int = 200_000) -> str | None:
    """An optimal (fewest moves, pushes counted as moves) solution as a ``"UDLR"`` string.

    Breadth-first search over ``(player, boxes)`` states, expanding moves in ``U, D, L, R``
    order (so the answer is deterministic), pruning states with a box on a
    :func:`dead_squares` cell. Returns ``""`` for a solved level and ``None`` when the
    level is unsolvable *or* more than ``max_states`` states would be visited.
    """
    if is_solved(level):
        return ""
    h, w = level.height, level.width
    n = h * w
    # neighbour table: nbr[i][k] = index after move k from i, or -1 if wall / off-grid
    free = [((i // w, i % w) not in level.walls) for i in range(n)]
    deltas = [MOVE_DELTAS[m] for m in MOVES]
    nbr = []
    for i in range(n):
        r, c = divmod(i, w)
        row = []
        for dr, dc in deltas:
            rr, cc = r + dr, c + dc
            row.append(rr * w + cc if 0 <= rr < h and 0 <= cc < w and free[rr * w + cc] else -1)
        nbr.append(row)
    dead = {r * w + c for r, c in dead_squares(level)}
    boxes0 = tuple(sorted(r * w + c for r, c in level.boxes))
    if any(b in dead for b in boxes0):
        return None
    goals = frozenset(r * w + c for r, c in level.goals)
    start = (level.player[0] * w + level.player[1], boxes0)
    parent: dict[_State, tuple[_State, int] | None] = {start: None}
    frontier = [start]
    while frontier:
        nxt_frontier = []
        for state in frontier:
            p, boxes = state
            for k in range(4):
                p1 = nbr[p][k]
                if p1 < 0:
                    continue
                if p1 in boxes:
                    p2 = nbr[p1][k]
                    if p2 < 0 or p2 in boxes or p2 in dead:
                        continue
                    nb = tuple(sorted(p2 if b == p1 else b for b in boxes))
                    new = (p1, nb)
                    if new in parent:
                        continue
                    parent[new] = (state, k)
                    if goals.issuperset(nb):
                        return _path(parent, new)
                else:
                    new = (p1, boxes)
                    if new in parent:
                        continue
                    parent[new] = (state, k)
                nxt_frontier.append(new)
                if len(parent) > max_states:
                    return None
        frontier = nxt_frontier
    return None


def _path(parent: dict[_State, tuple[_State, int] | None], state: _State) -> str:
    out = []
    while (step := parent[state]) is not None:
        state, k = step
        out.append(MOVES[k])
    return "".join(reversed(out))


# --------------------------------------------------------------------------- generator

def _carve(rng: random.Random, height: int, width: int, target: int) -> set[Pos]:
    """Random-walk room carving inside the outer wall until ``target`` floor cells."""
    cur = (rng.randrange(1, height - 1), rng.randrange(1, width - 1))
    floor = {cur}
    direction = rng.choice(MOVES)
    for _ in range(target * 50):
        if len(floor) >= target:
            break
        if rng.random() < 0.35:
            direction = rng.choice(MOVES)
        dr, dc = MOVE_DELTAS[direction]
        nxt = (cur[0] + dr, cur[1] + dc)
        if 1 <= nxt[0] < height - 1 and 1 <= nxt[1] < width - 1:
            cur = nxt
            floor.add(cur)
        else:
            direction = rng.choice(MOVES)
    return floor


def generate(rng: random.Random, height: int = 6, width: int = 6, n_boxes: int = 1,
             min_moves: int = 4, max_tries: int = 500,
             max_states: int = 200_000) -> tuple[SokobanLevel, str]:
    """A procedural level and its optimal solution (``solve`` on it).

    ``height``/``width`` include the outer wall. Each try carves a room by a random walk
    inside the outer wall (55-90% of the interior), puts ``n_boxes`` boxes on random goals
    and the player on another floor cell, then plays in reverse: the player walks at
    random and, when walking away from an adjacent box, pulls it along with probability
    0.7. The reverse-played state is a level solvable by construction; :func:`solve`
    verifies it and gives the optimal plan, which must have at least ``min_moves`` moves.

    Deterministic for a given ``rng`` state. Raises ``ValueError`` for impossible sizes and
    ``RuntimeError`` when ``max_tries`` tries give no level.
    """
    if height < 3 or width < 3:
        raise ValueError(f"level must be at least 3x3 including the outer wall, "
                         f"got {height}x{width}")
    interior = (height - 2) * (width - 2)
    if n_boxes < 1 or interior < n_boxes + 2:
        raise ValueError(f"{n_boxes} boxes do not fit a {height}x{width} level "
                         f"({interior} interior cells; need boxes + 2)")
    if min_moves < 1:
        raise ValueError(f"min_moves must be >= 1, got {min_moves}")
    all_cells = frozenset((r, c) for r in range(height) for c in range(width))
    for _ in range(max_tries):
        target = max(n_boxes + 2, round(interior * rng.uniform(0.55, 0.9)))
        floor = _carve(rng, height, width, target)
        if len(floor) < n_boxes + 2:
            continue
        cells = sorted(floor)
        goals = frozenset(rng.sample(cells, n_boxes))
        boxes = set(goals)
        player = rng.choice([p for p in cells if p not in boxes])
        for _step in range(rng.randint(4 * len(cells), 12 * len(cells)) * n_boxes):
            dr, dc = MOVE_DELTAS[rng.choice(MOVES)]
            nxt = (player[0] + dr, player[1] + dc)
            if nxt not in floor or nxt in boxes:
                continue
            behind = (player[0] - dr, player[1] - dc)
            if behind in boxes and rng.random() < 0.7:
                boxes.remove(behind)
                boxes.add(player)
            player = nxt
        if boxes == goals:
            continue
        level = SokobanLevel(height, width, all_cells - floor, goals, frozenset(boxes), player)
        plan = solve(level, max_states=max_states)
        if plan is None or len(plan) < min_moves:
            continue
        return level, plan
    raise RuntimeError(f"no {height}x{width} level with {n_boxes} boxes and >= {min_moves} "
                       f"moves in {max_tries} tries; lower min_moves or raise max_tries")


# --------------------------------------------------------------------------- rendering

def render_text(level: SokobanLevel) -> str:
    """The level as XSB rows (same as :func:`to_xsb`)."""
    return to_xsb(level)


_COLORS = {"floor": (230, 225, 210), "wall": (90, 90, 100), "goal": (220, 60, 60),
           "box": (170, 110, 50), "box_on_goal": (70, 170, 70), "player": (40, 90, 210),
           "line": (210, 205, 190)}


def render_rgb(level: SokobanLevel, cell: int = 16) -> np.ndarray:
    """An RGB image ``(height*cell, width*cell, 3)`` uint8: walls grey, goals red dots,
    boxes brown (green on a goal), player blue."""
    img = new_canvas(level.height, level.width, cell, _COLORS["floor"])
    draw_grid_lines(img, cell, _COLORS["line"])
    for r, c in level.walls:
        fill_cell(img, r, c, cell, _COLORS["wall"])
    goal_margin = max(1, cell * 3 // 8)
    for r, c in level.goals:
        fill_cell(img, r, c, cell, _COLORS["goal"], margin=goal_margin)
    for r, c in level.boxes:
        color = _COLORS["box_on_goal"] if (r, c) in level.goals else _COLORS["box"]
        fill_cell(img, r, c, cell, color, margin=max(1, cell // 8))
    pr, pc = level.player
    fill_cell(img, pr, pc, cell, _COLORS["player"], margin=max(1, cell // 4))
    if (pr, pc) in level.goals:
        fill_cell(img, pr, pc, cell, _COLORS["goal"], margin=goal_margin)
    return img
