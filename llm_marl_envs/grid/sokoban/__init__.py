r"""Sokoban-v0: push every box onto a goal, as a tool/executor team.

| Import | `from llm_marl_envs.grid import sokoban` |
|---|---|
| Registered id | `llm_marl/Sokoban-v0` |
| Actions | Text |
| Parallel API | Yes (turn-based) |
| Agents | `agents = ['tool', 'executor']` |
| Number of agents | 2 |
| Action space | `AnyText(0, 16384)` |
| Observation space | `Dict('prompt': AnyText(0, 1048576))` |
| State space | `AnyText(0, 1048576)` |
| Default max turns | 4 |
| Render modes | `ansi`, `human`, `rgb_array` |

A grid task (:mod:`llm_marl_envs.grid.base`): the tool writes a search program, the executor
answers the moves that are applied. Procedural levels come from reverse play and are
verified by the built-in optimal solver, which also gives the optimal length.

## Roles

``tool`` then ``executor``; one turn is one action of each.

- ``tool`` writes a Python program in a ```` ```python ```` block. It runs in the sandbox
  (``tool_timeout_s``, ``tool_memory_mb``) with the current level in XSB text on stdin;
  its printed output should propose moves (``U``/``D``/``L``/``R``, read with
  :func:`llm_marl_envs.grid.moves.parse_moves`). Nothing is applied.
  A fault of the sandbox itself (its worker died under the program, also on the fresh workers
  it was retried on) is never scored: ``step`` raises :class:`sandboxes.SandboxInfrastructureError`
  and the step is not taken.
- ``executor`` sees the level, the tool's program, its output and the parsed proposal,
  and answers the moves that are applied, e.g. ``Answer: R R D``.

## Observation

``{"prompt": str}`` for the acting role: the current level (XSB rows), the legend (``#``
wall, ``@`` player, ``+`` player on goal, ``$`` box, ``*`` box on goal, ``.`` goal, space
floor), boxes on goals, moves used, the history of earlier turns, the answer format, and
for the executor the tool's program and output of this turn (``prompt_style="compact"``:
a few lines, see :mod:`llm_marl_envs.grid.base`). ``state()`` is the level and the progress.

## Action

Any text. Executor: moves parsed by ``parse_moves`` (``Answer: UDLR``, ``up, left``,
arrows...); unparseable text is invalid (nothing applied). Moves are applied in order; a
move into a wall or a blocked push does nothing but is counted; moves after the level is
solved are ignored. Tool: invalid without a fenced code block.

## Rewards

``reward = alpha * team + local``, given to the acting role (:data:`llm_marl_envs.grid.base.REWARD_FORMULAS`):

```text
executor  team  = 1[solved]
          local = max(0, p(new) - best) + optimal_bonus * 1[solved and optimal]
tool      team  = 1[would_solve]
          local = max(0, p(simulated) - max(best, best_proposal))
invalid   team  = 0
          local = -invalid_penalty
```

with progress ``p(level) = clip(1 - D(level) / D0, 0, 1)``, where ``D`` is the minimum
total Manhattan distance of a one-to-one box-to-goal assignment
(:func:`~llm_marl_envs.grid.sokoban.puzzle.box_goal_distance`) and ``D0`` its value at the
start (``p = 1`` exactly when every box is on a goal); ``optimal``: total moves equal the
optimal solution's length. ``best``/``best_proposal``: see :mod:`llm_marl_envs.grid.base`.

## Episode end

Terminated when solved (``success=True``); truncated after ``max_turns`` turns
(``success=False``: a time-out is never a success).

## Arguments

- ``size=6``: int or ``(height, width)``, outer wall included.
- ``n_boxes=1``; ``min_moves=4``: shortest solution of generated levels.
- ``levels=None``: a list of XSB level strings, or a path to a file of XSB levels
  separated by blank lines; played in order by seed (seed ``s`` plays level ``s mod n``).
- ``split``: ``"train"``/``"eval"`` (disjoint halves by a hash of the level text);
  default ``"all"`` when ``levels`` are given, else ``"train"``.
- ``optimal_bonus=0.5``, ``tool_timeout_s=5``, ``tool_memory_mb=256``,
  ``prompt_style="full"`` (or ``"compact"``): those of :mod:`llm_marl_envs.grid.base`.
- ``max_turns=4`` (or ``max_cycles``), ``alpha=1.0``, ``invalid_penalty=0.1``,
  ``sandbox="auto"``, ``sandbox_limits``, ``render_mode`` (``"ansi"``, ``"human"``,
  ``"rgb_array"``): those of :class:`~llm_marl_envs.base.LLMTeamEnv`.

## Example

>>> from llm_marl_envs.grid import sokoban
>>> env = sokoban.env(levels=["#######\n#@ $ .#\n#######"])
>>> env.reset(seed=0)
>>> env.step("I have no program.")          # tool: no ```python block, invalid
>>> env.rewards["tool"], env.infos["tool"]["action_valid"]
(-0.1, False)
>>> env.step("Answer: R R R")               # executor: solved in the optimal 3 moves
>>> env.rewards["executor"]                 # 1.0 * team + (max(0, 1 - 0) + 0.5)
2.5
>>> env.terminations["executor"], env.infos["executor"]["success"]
(True, True)

## Version history

- v0: initial version. Later additions that change no episode (the module functions
  ``env``/``raw_env``/``parallel_env``, ``state_space``, the ``max_cycles`` check) keep v0.
  The module moved from ``llm_marl_envs.sokoban`` to ``llm_marl_envs.grid.sokoban`` (no episode changed).
"""

from __future__ import annotations

import dataclasses
import os
import random
from typing import Any, Sequence

from llm_marl_envs.base import stable_hash
from llm_marl_envs.registry import pettingzoo_functions

from ..base import Applied, GridState, GridToolEnv, expert_program_text
from ..moves import parse_moves
from . import puzzle as sk

__all__ = ["SokobanEnv", "SokobanTask", "env", "parallel_env", "raw_env"]


@dataclasses.dataclass(frozen=True)
class SokobanTask:
    task_id: str
    board: sk.SokobanLevel
    optimal: str | None  # optimal solution ("UDLR"), None if the solver gave up


class SokobanEnv(GridToolEnv):
    __doc__ = __doc__
    metadata = {"name": "sokoban_v0", "render_modes": ["ansi", "human", "rgb_array"], "is_parallelizable": False}
    task_name = "Sokoban"
    rules = ("Sokoban: move the player (@) up, down, left or right. Walking into a box pushes it one cell if the "
             "cell behind it is free; boxes cannot be pulled and you cannot push two boxes. Walls (#) block. The "
             "puzzle is solved when every box ($) stands on a goal (.).")
    legend = "# wall, @ player, + player on a goal, $ box, * box on a goal, . goal, space floor"
    answer_format = ("end your reply with one line 'Answer: <moves>' where moves are U (up), D (down), L (left), "
                     "R (right), e.g. 'Answer: R R U L'. The moves are applied in order.")
    compact_answer_format = "moves U/D/L/R"
    tool_output_format = "the moves to play as a line 'Answer: <moves>' with U/D/L/R, e.g. 'Answer: RRUL'"

    def __init__(self, size: int | Sequence[int] = 6, n_boxes: int = 1, min_moves: int = 4,
                 levels: Sequence[str] | str | os.PathLike[str] | None = None, split: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(split=split or ("all" if levels is not None else "train"), **kwargs)
        self.height, self.width = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
        self.n_boxes = int(n_boxes)
        self.min_moves = int(min_moves)
        self.levels: list[sk.SokobanLevel] | None = None
        if levels is not None:
            if isinstance(levels, (str, os.PathLike)) and os.path.exists(levels):
                self.levels = sk.parse_levels_file(levels)
            elif isinstance(levels, (str, os.PathLike)):
                raise ValueError(f"levels={levels!r} is not an existing file; pass a path to an XSB levels file "
                                 "or a list of XSB strings")
            else:
                self.levels = [sk.from_xsb(x) for x in levels]
            if not self.levels:
                raise ValueError("levels is empty: give at least one XSB level")
            solved = [i for i, lv in enumerate(self.levels) if sk.is_solved(lv)]
            if solved:
                raise ValueError(f"levels {solved} are already solved (every box on a goal); remove them")

    def load_task(self, seed: int, split: str) -> SokobanTask:
        if self.levels is not None:
            level = self.select_in_split(seed, split, self.levels, key=sk.to_xsb)
            return SokobanTask(f"sokoban/given/{_digest(level)}", level, sk.solve(level))

        def generate(rng: Any) -> tuple[sk.SokobanLevel, str]:
            return sk.generate(random.Random(int(rng.integers(0, 2**63 - 1))), self.height, self.width,
                               self.n_boxes, min_moves=self.min_moves)

        level, plan = self.generate_in_split(seed, split, generate, key=lambda lp: sk.to_xsb(lp[0]))
        return SokobanTask(f"sokoban/{self.height}x{self.width}-b{self.n_boxes}/{_digest(level)}", level, plan)

    # board hooks
    def board_text(self, board: sk.SokobanLevel) -> str:
        return sk.render_text(board)

    def progress(self, board: sk.SokobanLevel) -> float:
        if sk.is_solved(board):
            return 1.0
        d0 = sk.box_goal_distance(self.task.board)
        return min(1.0, max(0.0, 1.0 - sk.box_goal_distance(board) / d0)) if d0 > 0 else 0.0

    def parse_answer(self, text: str) -> list[str] | None:
        return parse_moves(text)

    def answer_text(self, answer: list[str]) -> str:
        return "".join(answer) if answer else "(no moves)"

    def apply_answer(self, board: sk.SokobanLevel, answer: list[str]) -> Applied:
        used = blocked = 0
        for move in answer:
            if sk.is_solved(board):
                break
            board, moved, _ = sk.apply_move(board, move)
            used += 1
            blocked += not moved
        return Applied(board, used, f"{blocked} blocked" if blocked else "")

    def is_optimal(self, moves_used: int) -> bool:
        return self.task.optimal is not None and moves_used == len(self.task.optimal)

    def status_lines(self, state: GridState) -> list[str]:
        opt = self.task.optimal
        return [f"Boxes on goals: {sk.boxes_on_goals(state.board)} of {len(state.board.goals)}. "
                f"Moves used so far: {state.moves_used}"
                + (f" (the shortest full solution has {len(opt)} moves)." if opt is not None else ".")]

    def render_board_rgb(self, board: sk.SokobanLevel) -> Any:
        return sk.render_rgb(board)

    # the expert
    def expert_program(self) -> str:
        return expert_program_text(__name__)

    def expert_solution(self) -> list[str]:
        return list(sk.solve(self.game_state.board) or "U")


#: PettingZoo's module functions: ``env()`` (wrapped), ``raw_env``, ``parallel_env()``.
raw_env, env, parallel_env = pettingzoo_functions(SokobanEnv)


def _digest(level: sk.SokobanLevel) -> str:
    return stable_hash(sk.to_xsb(level))[:12]
