r"""PlanPath-v0: walk the agent to the goal around obstacles, as a tool/executor team.

| Import | `from llm_marl_envs.grid import planpath` |
|---|---|
| Registered id | `llm_marl/PlanPath-v0` |
| Actions | Text |
| Parallel API | Yes (turn-based) |
| Agents | `agents = ['tool', 'executor']` |
| Number of agents | 2 |
| Action space | `AnyText(0, 16384)` |
| Observation space | `Dict('prompt': AnyText(0, 1048576))` |
| State space | `AnyText(0, 1048576)` |
| Default max turns | 4 |
| Render modes | `ansi`, `human`, `rgb_array` |

A grid task (:mod:`llm_marl_envs.grid.base`): the tool writes a path-finding program, the
executor answers the moves that are applied. Generated grids always have a path.

## Roles

``tool`` then ``executor``; one turn is one action of each.

- ``tool`` writes a Python program in a ```` ```python ```` block. It runs in the sandbox
  with the current grid on stdin (one row per line); its printed output should propose
  moves (``U``/``D``/``L``/``R``, read with :func:`llm_marl_envs.grid.moves.parse_moves`).
  A fault of the sandbox itself (its worker died under the program, also on the fresh workers
  it was retried on) is never scored: ``step`` raises :class:`sandboxes.SandboxInfrastructureError`
  and the step is not taken.
- ``executor`` sees the grid (with the agent at its *current* position), the tool's
  program, output and parsed proposal, and answers the moves that are applied.

## Observation

``{"prompt": str}``: the current grid (``#`` obstacle, ``.`` free, ``A`` agent, ``G``
goal), the agent's and goal's (row, col), moves used, earlier turns, the answer format,
and for the executor the tool's program and output of this turn
(``prompt_style="compact"``: board, legend, earlier moves and the answer cue last, see
:mod:`llm_marl_envs.grid.base`). ``state()`` is the grid and the progress.

## Action

Any text. Executor: moves parsed by ``parse_moves``; unparseable text is invalid (nothing
applied). Moves apply in order; a move into an obstacle or off the grid does nothing but
is counted; moves after reaching the goal are ignored. Tool: invalid without a fenced
code block.

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

with progress ``p(pos) = 1 - d(pos) / d(start)``, ``d`` the shortest-path (BFS) distance
to the goal around obstacles (``p = 1`` exactly at the goal); ``optimal``: total moves
equal the shortest path's length. ``best``/``best_proposal``: see :mod:`llm_marl_envs.grid.base`.

## Episode end

Terminated at the goal (``success=True``); truncated after ``max_turns`` turns
(``success=False``).

## Arguments

- ``size=10``: int or ``(height, width)``.
- ``obstacle_density=0.25``: share of obstacle cells, in ``[0, 1)``.
- ``split``: ``"train"``/``"eval"`` (disjoint halves by a hash of the grid text).
- ``optimal_bonus=0.5``, ``tool_timeout_s=5``, ``tool_memory_mb=256``,
  ``prompt_style="full"`` (or ``"compact"``): those of :mod:`llm_marl_envs.grid.base`.
- ``max_turns=4`` (or ``max_cycles``), ``alpha=1.0``, ``invalid_penalty=0.1``,
  ``sandbox="auto"``, ``sandbox_limits``, ``render_mode`` (``"ansi"``, ``"human"``,
  ``"rgb_array"``): those of :class:`~llm_marl_envs.base.LLMTeamEnv`.

## Example

>>> from llm_marl_envs.grid import planpath
>>> from llm_marl_envs.grid.planpath.puzzle import shortest_path
>>> env = planpath.env(size=(3, 4), obstacle_density=0.0)
>>> env.reset(seed=0)
>>> env.step("I have no program.")          # tool: no ```python block, invalid
>>> board = env.unwrapped.game_state.board
>>> env.step("Answer: " + " ".join(shortest_path(board.grid, board.pos)))   # executor
>>> env.rewards["executor"]                 # 1.0 * team + (max(0, 1 - 0) + 0.5)
2.5
>>> env.terminations["executor"], env.infos["executor"]["success"]
(True, True)

## Version history

- v0: initial version. Later additions that change no episode (the module functions
  ``env``/``raw_env``/``parallel_env``, ``state_space``, the ``max_cycles`` check) keep v0.
  The module moved from ``llm_marl_envs.planpath`` to ``llm_marl_envs.grid.planpath`` (no episode changed).
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Sequence

from llm_marl_envs.base import stable_hash
from llm_marl_envs.registry import pettingzoo_functions

from ..base import Applied, GridState, GridToolEnv, expert_program_text
from ..moves import parse_moves
from . import puzzle as pp

__all__ = ["PlanPathBoard", "PlanPathEnv", "PlanPathTask", "env", "parallel_env", "raw_env"]


@dataclasses.dataclass(frozen=True)
class PlanPathBoard:
    grid: pp.PlanPathGrid
    pos: tuple[int, int]


@dataclasses.dataclass(frozen=True)
class PlanPathTask:
    task_id: str
    board: PlanPathBoard
    optimal: int  # shortest path length from the start


class PlanPathEnv(GridToolEnv):
    __doc__ = __doc__
    metadata = {"name": "planpath_v0", "render_modes": ["ansi", "human", "rgb_array"], "is_parallelizable": False}
    task_name = "path-planning"
    rules = ("Plan-path: move the agent (A) up, down, left or right, one cell per move, to reach the goal (G). "
             "Obstacles (#) and the grid's edges block moves. Row 0 is the top row.")
    legend = "# obstacle, . free cell, A agent (current position), G goal"
    answer_format = ("end your reply with one line 'Answer: <moves>' where moves are U (up), D (down), L (left), "
                     "R (right), e.g. 'Answer: R R D D'. The moves are applied in order from the current position.")
    compact_answer_format = "moves U/D/L/R"
    tool_output_format = "the moves to play as a line 'Answer: <moves>' with U/D/L/R, e.g. 'Answer: RRDD'"

    def __init__(self, size: int | Sequence[int] = 10, obstacle_density: float = 0.25, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.height, self.width = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
        if self.height * self.width < 2:
            raise ValueError(f"size={size!r} is too small: the grid needs at least 2 cells")
        if not 0.0 <= obstacle_density < 1.0:
            raise ValueError(f"obstacle_density={obstacle_density!r} must be in [0, 1)")
        self.obstacle_density = float(obstacle_density)

    def load_task(self, seed: int, split: str) -> PlanPathTask:
        def generate(rng: Any) -> tuple[pp.PlanPathGrid, list[str]]:
            return pp.generate(random.Random(int(rng.integers(0, 2**63 - 1))), self.height, self.width,
                               self.obstacle_density)

        grid, path = self.generate_in_split(seed, split, generate, key=lambda gp: pp.render_text(gp[0]))
        digest = stable_hash(pp.render_text(grid))[:12]
        return PlanPathTask(f"planpath/{self.height}x{self.width}/{digest}", PlanPathBoard(grid, grid.start),
                            len(path))

    def board_text(self, board: PlanPathBoard) -> str:
        return pp.render_text(board.grid, board.pos)

    def progress(self, board: PlanPathBoard) -> float:
        d0 = pp.distance_to_goal(board.grid, board.grid.start)
        d = pp.distance_to_goal(board.grid, board.pos)
        return 1.0 if d == 0 else max(0.0, 1.0 - d / d0)

    def parse_answer(self, text: str) -> list[str] | None:
        return parse_moves(text)

    def answer_text(self, answer: list[str]) -> str:
        return "".join(answer) if answer else "(no moves)"

    def apply_answer(self, board: PlanPathBoard, answer: list[str]) -> Applied:
        pos, used, blocked = board.pos, 0, 0
        for move in answer:
            if pos == board.grid.goal:
                break
            pos, moved = pp.apply_move(board.grid, pos, move)
            used += 1
            blocked += not moved
        return Applied(PlanPathBoard(board.grid, pos), used, f"{blocked} blocked" if blocked else "")

    def is_optimal(self, moves_used: int) -> bool:
        return moves_used == self.task.optimal

    def status_lines(self, state: GridState) -> list[str]:
        b: PlanPathBoard = state.board
        return [f"Agent at (row, col) = {b.pos}; goal at {b.grid.goal}. Moves used so far: {state.moves_used} "
                f"(the shortest path from the start has {self.task.optimal} moves)."]

    def render_board_rgb(self, board: PlanPathBoard) -> Any:
        return pp.render_rgb(board.grid, board.pos)

    # the expert
    def expert_program(self) -> str:
        # the same breadth-first search, short in the compact style (fewer tokens for a small model to write)
        return expert_program_text(__name__, "expert_compact.py" if self.prompt_style == "compact"
                                   else "expert.py")

    def expert_solution(self) -> list[str]:
        board: PlanPathBoard = self.game_state.board
        return list(pp.shortest_path(board.grid, board.pos) or "U")


#: PettingZoo's module functions: ``env()`` (wrapped), ``raw_env``, ``parallel_env()``.
raw_env, env, parallel_env = pettingzoo_functions(PlanPathEnv)
