"""The grid tasks: Sokoban, Sudoku and Plan-path, each a tool/executor team (one package per task).

- :mod:`.base`: :class:`GridToolEnv`, the shared env of the family (roles, rewards
  :data:`REWARD_FORMULAS`, prompt styles); a new grid task subclasses it.
- :mod:`.moves`: :func:`~llm_marl_envs.grid.moves.parse_moves` reads ``U/D/L/R`` move lists from model text.
- :mod:`.render`: small numpy drawing helpers shared by the tasks' ``render_rgb`` functions.
- :mod:`.sokoban`, :mod:`.sudoku`, :mod:`.planpath`: one package per task. The package itself is the
  env module (its docstring is the task's manual; ``env()``, ``raw_env``, ``parallel_env()``:
  ``from llm_marl_envs.grid import sokoban; sokoban.env()``); beside it ``puzzle.py`` holds the pure
  puzzle logic (levels, solver, generator, rendering: plain Python and numpy, no PettingZoo, no
  sandbox) and ``expert.py`` the expert tool's program (Plan-path and Sudoku also ``expert_compact.py``).

The expert programs are data, not modules of the package: programs the tool role writes, run in
the sandbox with the board on stdin. They are kept as real files so they can be read, run and
linted; :func:`expert_program_text` reads them (never imports them), and the envs'
``expert_program()`` returns that text.
"""

from .base import (PROMPT_STYLES, REWARD_FORMULAS, Applied, GridState, GridToolEnv, ToolRun, executor_reward,
                   expert_program_text, tool_reward)
from .planpath import PlanPathEnv
from .sokoban import SokobanEnv
from .sudoku import SudokuEnv

__all__ = ["Applied", "GridState", "GridToolEnv", "PROMPT_STYLES", "PlanPathEnv", "REWARD_FORMULAS", "SokobanEnv",
           "SudokuEnv", "ToolRun", "executor_reward", "expert_program_text", "tool_reward"]
