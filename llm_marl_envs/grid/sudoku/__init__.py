r"""Sudoku-v0: fill the grid so every row, column and box holds each digit once, as a
tool/executor team.

| Import | `from llm_marl_envs.grid import sudoku` |
|---|---|
| Registered id | `llm_marl/Sudoku-v0` |
| Actions | Text |
| Parallel API | Yes (turn-based) |
| Agents | `agents = ['tool', 'executor']` |
| Number of agents | 2 |
| Action space | `AnyText(0, 16384)` |
| Observation space | `Dict('prompt': AnyText(0, 1048576))` |
| State space | `AnyText(0, 1048576)` |
| Default max turns | 4 |
| Render modes | `ansi`, `human`, `rgb_array` |

A grid task (:mod:`llm_marl_envs.grid.base`): the tool writes a solver program, the executor
answers the grid that is applied. Generated puzzles have exactly one solution (checked
by the solver). Given puzzles must be solvable; if one has several solutions, any
complete valid grid solves it and progress counts agreement with the solver's first one.

## Roles

``tool`` then ``executor``; one turn is one action of each.

- ``tool`` writes a Python program in a ```` ```python ```` block. It runs in the sandbox
  with the current grid on stdin (rows of digits, ``.`` for blanks, ``|`` between boxes,
  ``-+-`` lines between box bands); its printed output should propose a grid (read with
  :func:`llm_marl_envs.grid.sudoku.puzzle.parse_grid`).
  A fault of the sandbox itself (its worker died under the program, also on the fresh workers
  it was retried on) is never scored: ``step`` raises :class:`sandboxes.SandboxInfrastructureError`
  and the step is not taken.
- ``executor`` sees the grid, the tool's program, output and parsed proposal, and answers
  the grid that is applied.

## Observation

``{"prompt": str}``: the current grid, the legend, how many blanks remain, earlier turns,
the answer format, and for the executor the tool's program and output
(``prompt_style="compact"``: a few lines, see :mod:`llm_marl_envs.grid.base`). ``state()`` is
the grid and the progress.

## Action

Any text. Executor: a ``size`` x ``size`` grid parsed by ``parse_grid`` (rows of digits;
``0``/``.`` blanks allowed for cells left open). Cells are ASCII digits read whole: a line with a
leading-zero number (``03``), a signed one (``-3``) or a digit that is not ASCII (``٣``) is no
row, never read as the cell 3. It is invalid (nothing applied) when it
cannot be parsed, changes a given clue, or repeats a digit in a row, column or box;
otherwise it replaces the current grid. Tool: invalid without a fenced code block; its
proposal is checked the same way (an illegal proposal earns nothing). The expert executor
answers the grid on one line as the prompt shows the proposal in ``prompt_style="compact"``
(``Answer: 1432/3214/2341/4123``, a copy of the ``Tool proposed:`` line), and one row per line
otherwise; both parse.

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

with progress ``p(grid) = correct(grid) / blanks``, ``correct`` the puzzle's blank cells
holding the solution's digit and ``blanks`` the puzzle's blank count (``p = 1`` when
solved, i.e. complete with no rule broken); ``optimal``: solved in the first turn.
``best``/``best_proposal``: see :mod:`llm_marl_envs.grid.base`.

## Episode end

Terminated when solved (``success=True``); truncated after ``max_turns`` turns
(``success=False``).

## Arguments

- ``size=4``: 4 or 9.
- ``n_clues=None``: clues of generated puzzles (``None``: locally minimal puzzles).
- ``puzzles=None``: a list of 16- or 81-character strings, ``0`` or ``.`` for blanks,
  played in order by seed.
- ``split``: ``"train"``/``"eval"`` (disjoint halves by a hash of the puzzle); default
  ``"all"`` when ``puzzles`` are given, else ``"train"``.
- ``optimal_bonus=0.5``, ``tool_timeout_s=5``, ``tool_memory_mb=256``,
  ``prompt_style="full"`` (or ``"compact"``): those of :mod:`llm_marl_envs.grid.base`.
- ``max_turns=4`` (or ``max_cycles``), ``alpha=1.0``, ``invalid_penalty=0.1``,
  ``sandbox="auto"``, ``sandbox_limits``, ``render_mode`` (``"ansi"``, ``"human"``,
  ``"rgb_array"``): those of :class:`~llm_marl_envs.base.LLMTeamEnv`.

## Example

>>> from llm_marl_envs.grid import sudoku
>>> env = sudoku.env(puzzles=["1.3...1..1..3..."])
>>> env.reset(seed=0)
>>> env.step("I have no program.")          # tool: no ```python block, invalid
>>> env.step("Answer:\n1 2 3 4\n4 3 1 2\n2 1 4 3\n3 4 2 1")   # executor: solved in turn 1
>>> env.rewards["executor"]                 # 1.0 * team + (max(0, 1 - 0) + 0.5)
2.5
>>> env.terminations["executor"], env.infos["executor"]["success"]
(True, True)

## Version history

- v0: initial version. Later additions that change no episode (the module functions
  ``env``/``raw_env``/``parallel_env``, ``state_space``, the ``max_cycles`` check) keep v0.
  The module moved from ``llm_marl_envs.sudoku`` to ``llm_marl_envs.grid.sudoku`` (no episode changed).
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Sequence

from llm_marl_envs.base import stable_hash
from llm_marl_envs.registry import pettingzoo_functions

from ..base import Applied, GridState, GridToolEnv, expert_program_text
from . import puzzle as sd

__all__ = ["SudokuEnv", "SudokuTask", "env", "parallel_env", "raw_env"]


@dataclasses.dataclass(frozen=True)
class SudokuTask:
    task_id: str
    board: sd.Grid       # the puzzle (0 = blank)
    solution: sd.Grid


class SudokuEnv(GridToolEnv):
    __doc__ = __doc__
    metadata = {"name": "sudoku_v0", "render_modes": ["ansi", "human", "rgb_array"], "is_parallelizable": False}
    task_name = "Sudoku"
    legend = "digits are filled cells, . is a blank, | and -+- separate the boxes"
    compact_answer_format = "the full grid, one row per line"
    tool_output_format = ("the completed grid after a line 'Answer:', one row per line with the digits separated "
                          "by spaces")

    def __init__(self, size: int = 4, n_clues: int | None = None, puzzles: Sequence[str] | None = None,
                 split: str | None = None, **kwargs: Any) -> None:
        super().__init__(split=split or ("all" if puzzles is not None else "train"), **kwargs)
        if size not in (4, 9):
            raise ValueError(f"size={size!r} is not supported; use 4 or 9")
        self.size = size
        self.n_clues = n_clues
        self.puzzles: list[sd.Grid] | None = None
        if puzzles is not None:
            if isinstance(puzzles, str):
                raise ValueError("puzzles must be a list of puzzle strings, not one string")
            self.puzzles = []
            for i, text in enumerate(puzzles):
                try:
                    grid = sd.parse_puzzle_string(text)
                except ValueError as err:
                    raise ValueError(f"puzzles[{i}]: {err}") from None
                if sd.solve(grid) is None:
                    raise ValueError(f"puzzles[{i}] has no solution")
                if all(v for row in grid for v in row):
                    raise ValueError(f"puzzles[{i}] has no blank cell")
                self.puzzles.append(grid)
            if not self.puzzles:
                raise ValueError("puzzles is empty: give at least one puzzle string")

    # the rules/answer text depend on the size of the current puzzle
    @property
    def rules(self) -> str:  # type: ignore[override]
        n = len(self.task.board) if self.task is not None else self.size
        b = int(n ** 0.5)
        return (f"Sudoku {n}x{n}: fill every blank so that each row, each column and each {b}x{b} box contains "
                f"the digits 1-{n} exactly once. The given clues cannot be changed.")

    @property
    def answer_format(self) -> str:  # type: ignore[override]
        n = len(self.task.board) if self.task is not None else self.size
        example = " ".join(str(d) for d in range(1, n + 1))
        return (f"end your reply with a line 'Answer:' followed by the full {n}x{n} grid, one row per line, digits "
                f"separated by spaces (e.g. '{example}'); use . for a cell you leave blank. Your grid replaces "
                "the current one: it must keep every given clue and must not repeat a digit in a row, column or box.")

    def load_task(self, seed: int, split: str) -> SudokuTask:
        if self.puzzles is not None:
            puzzle = self.select_in_split(seed, split, self.puzzles, key=sd.grid_to_string)
            solution = sd.solve(puzzle)
            assert solution is not None  # __init__ rejected unsolvable puzzles
            return SudokuTask(f"sudoku/given/{stable_hash(sd.grid_to_string(puzzle))[:12]}", puzzle, solution)

        def generate(rng: Any) -> tuple[sd.Grid, sd.Grid]:
            return sd.generate(random.Random(int(rng.integers(0, 2**63 - 1))), self.size, self.n_clues)

        puzzle, solution = self.generate_in_split(seed, split, generate, key=lambda ps: sd.grid_to_string(ps[0]))
        return SudokuTask(f"sudoku/{self.size}x{self.size}/{stable_hash(sd.grid_to_string(puzzle))[:12]}",
                          puzzle, solution)

    def solution_text(self) -> str:
        return "\n".join(" ".join(map(str, row)) for row in self.task.solution)

    # board hooks
    def board_text(self, board: sd.Grid) -> str:
        return sd.render_text(board)

    def progress(self, board: sd.Grid) -> float:
        if sd.check_answer(self.task.board, board)[0]:
            return 1.0
        blanks = sum(1 for row in self.task.board for v in row if not v)
        return sd.correct_cells(self.task.board, self.task.solution, board) / blanks

    def parse_answer(self, text: str) -> sd.Grid | None:
        return sd.parse_grid(text, len(self.task.board))

    def answer_text(self, answer: sd.Grid) -> str:
        return "/".join("".join(str(v) if v else "." for v in row) for row in answer)

    def apply_answer(self, board: sd.Grid, answer: sd.Grid) -> Applied | str:
        puzzle = self.task.board
        n = len(puzzle)
        for r in range(n):
            for c in range(n):
                if puzzle[r][c] and answer[r][c] != puzzle[r][c]:
                    return (f"changes the given clue at row {r + 1}, column {c + 1} "
                            f"({puzzle[r][c]} -> {answer[r][c] or 'blank'})")
        conflict = sd.find_conflict(answer)
        if conflict:
            return conflict
        changed = sum(1 for r in range(n) for c in range(n) if answer[r][c] != board[r][c])
        blanks = sum(1 for row in answer for v in row if not v)
        return Applied(answer, changed, f"{blanks} blank{'s' if blanks != 1 else ''} left" if blanks else "")

    def is_optimal(self, moves_used: int) -> bool:
        return self.turn == 0

    def status_lines(self, state: GridState) -> list[str]:
        blanks = sum(1 for row in state.board for v in row if not v)
        return [f"Blank cells left: {blanks}."]

    def render_board_rgb(self, board: sd.Grid) -> Any:
        return sd.render_rgb(board, self.task.board)

    # the expert
    def expert_program(self) -> str:
        # the same backtracking search, short in the compact style (fewer tokens for a small model to write)
        return expert_program_text(__name__, "expert_compact.py" if self.prompt_style == "compact"
                                   else "expert.py")

    def expert_solution(self) -> sd.Grid:
        return self.task.solution

    def answer_action(self, answer: sd.Grid) -> str:
        # compact style: the grid as the executor's prompt shows the tool's proposal (``Answer: 1432/3214/...``)
        if self.prompt_style == "compact":
            return f"Answer: {self.answer_text(answer)}"
        return "Answer:\n" + "\n".join(" ".join(str(v) if v else "." for v in row) for row in answer)


#: PettingZoo's module functions: ``env()`` (wrapped), ``raw_env``, ``parallel_env()``.
raw_env, env, parallel_env = pettingzoo_functions(SudokuEnv)
