"""PettingZoo AEC environments for teams of LLM agents that speak text.

``import llm_marl_envs`` registers every task in PettingZoo's registry::

    import pettingzoo, llm_marl_envs
    env = pettingzoo.make("aec", "llm_marl/Sokoban-v0")       # or llm_marl_envs.make("Sokoban-v0")
    par = pettingzoo.make("parallel", "llm_marl/Sudoku-v0")   # or llm_marl_envs.make_parallel(...)

Each task module also offers PettingZoo's module functions ``env()`` (wrapped), ``raw_env``
and ``parallel_env()`` (``from llm_marl_envs.grid import sokoban; sokoban.env()``), made by
:func:`pettingzoo_functions`. A new task subclasses :class:`LLMTeamEnv`, defines them with
one line and calls :func:`register_task` (one line below per task module); see
docs/adding_a_task.md.
"""

from . import _moved
from .base import (AnyText, EnvSnapshot, LLMTeamEnv, StepOutcome, TranscriptEntry, extract_code_block,
                   sandbox_fault_counts, shared_sandbox, split_of, stable_hash)
from .registry import (NAMESPACE, PettingZooFunctions, full_id, make, make_parallel, pettingzoo_functions,
                       register_task, registered_tasks)
from sandboxes.version import distribution_version

#: the installed llm-marl distribution's version (``importlib.metadata``)
__version__ = distribution_version()
_moved.install()  # the modules that moved answer at their old names for one release

# One line per task module: id, "module:EnvClass" (imported lazily on first make).
register_task("llm_marl/Sokoban-v0", "llm_marl_envs.grid.sokoban:SokobanEnv")
register_task("llm_marl/Sudoku-v0", "llm_marl_envs.grid.sudoku:SudokuEnv")
register_task("llm_marl/PlanPath-v0", "llm_marl_envs.grid.planpath:PlanPathEnv")
register_task("llm_marl/Code-v0", "llm_marl_envs.code:CodeEnv")
register_task("llm_marl/Math-v0", "llm_marl_envs.math.env:MathEnv")
register_task("llm_marl/MathVerify-v0", "llm_marl_envs.math.verify:MathVerifyEnv")
# The examples of docs/adding_a_task.md and docs/environments.md: known by id too (their modules register them
# again with the class when imported, which changes nothing).
register_task("llm_marl/Arithmetic-v0", "llm_marl_envs.examples.arithmetic:ArithmeticEnv")
register_task("llm_marl/Router-v0", "llm_marl_envs.examples.router:RouterEnv")

__all__ = ["AnyText", "EnvSnapshot", "LLMTeamEnv", "NAMESPACE", "PettingZooFunctions", "StepOutcome",
           "TranscriptEntry", "extract_code_block", "full_id", "make", "make_parallel", "pettingzoo_functions",
           "register_task", "registered_tasks", "sandbox_fault_counts", "shared_sandbox", "split_of", "stable_hash",
           "__version__"]
