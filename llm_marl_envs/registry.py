"""Registration of llm_marl tasks in PettingZoo's own registry (AEC and parallel forms).

PettingZoo 1.27 has a Gymnasium-style registry (``pettingzoo.register`` /
``pettingzoo.make(env_type, id)``, separate ``"aec"`` and ``"parallel"`` registries).
:func:`register_task` writes a task into both::

    register_task("llm_marl/Sokoban-v0", "llm_marl_envs.grid.sokoban:SokobanEnv", max_turns=5)

    pettingzoo.make("aec", "llm_marl/Sokoban-v0", size=7)        # the AEC env itself
    pettingzoo.make("parallel", "llm_marl/Sokoban-v0")           # turn_based_aec_to_parallel(env)
    llm_marl_envs.make("Sokoban-v0")                              # shortcut; namespace optional

The entry point may be the env class (or any callable) or a ``"module:attr"`` string,
which is imported only when the env is first made.

Each task module also offers PettingZoo's module functions, made once here by
:func:`pettingzoo_functions` (one line per task module)::

    raw_env, env, parallel_env = pettingzoo_functions(SokobanEnv)

    sokoban.raw_env(size=7)        # the env class itself (what the registry's "aec" entry builds)
    sokoban.env(size=7)            # raw_env wrapped in PettingZoo's OrderEnforcingWrapper
    sokoban.parallel_env(size=7)   # turn_based_aec_to_parallel(env(...))

Of PettingZoo's standard AEC wrappers only ``OrderEnforcingWrapper`` fits Text actions:
``AssertOutOfBoundsWrapper`` would raise on a non-``str`` action, which these envs score as
an invalid action instead (the env never raises on model output); ``TerminateIllegalWrapper``
needs an action mask (every ``str`` is legal); ``ClipOutOfBoundsWrapper`` is for ``Box``
actions; ``CaptureStdoutWrapper`` adds ``"ansi"`` rendering, which the envs have natively.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable, NamedTuple

import pettingzoo
from pettingzoo.utils.conversions import turn_based_aec_to_parallel
from pettingzoo.utils.wrappers import OrderEnforcingWrapper

__all__ = ["NAMESPACE", "PettingZooFunctions", "full_id", "make", "make_parallel", "pettingzoo_functions",
           "register_task", "registered_tasks"]

#: The namespace every llm_marl task id lives in.
NAMESPACE = "llm_marl"

_TASKS: dict[str, tuple[Callable[..., Any] | str, dict[str, Any]]] = {}


def full_id(task_id: str) -> str:
    """``"Sokoban-v0"`` -> ``"llm_marl/Sokoban-v0"``; ids with a namespace are kept."""
    if not isinstance(task_id, str) or not task_id:
        raise ValueError(f"task id must be a non-empty str like 'llm_marl/Sokoban-v0', got {task_id!r}")
    return task_id if "/" in task_id else f"{NAMESPACE}/{task_id}"


def _resolve(entry_point: Callable[..., Any] | str) -> Callable[..., Any]:
    if callable(entry_point):
        return entry_point
    module, _, attr = entry_point.partition(":")
    if not attr:
        raise ValueError(f"entry point {entry_point!r} must look like 'package.module:ClassName'")
    return getattr(importlib.import_module(module), attr)


@dataclasses.dataclass(frozen=True)
class _ParallelCreator:
    """Callable entry point of the parallel form: builds the AEC env and converts it."""

    entry_point: Any

    def __call__(self, **kwargs: Any) -> pettingzoo.ParallelEnv:
        return turn_based_aec_to_parallel(_resolve(self.entry_point)(**kwargs))


def register_task(task_id: str, entry_point: Callable[..., Any] | str, **default_kwargs: Any) -> str:
    """Register a task in PettingZoo's AEC and parallel registries; returns the full id.

    ``entry_point`` builds the AEC env (an :class:`~llm_marl_envs.base.LLMTeamEnv`
    subclass, a factory, or a ``"module:attr"`` string); ``default_kwargs`` are its
    default arguments (call-time kwargs override them). The parallel form is
    ``turn_based_aec_to_parallel`` of the AEC env: every role observes, only the active
    role's action is used (``infos[a]["active_agent"]`` names it).
    """
    if not (callable(entry_point) or isinstance(entry_point, str)):
        raise TypeError(f"entry_point must be a callable or a 'module:attr' string, got {entry_point!r}")
    fid = full_id(task_id)
    if fid in _TASKS and _TASKS[fid] == (entry_point, default_kwargs):
        return fid  # re-import of the module that registers it: nothing to do
    pettingzoo.register("aec", fid, entry_point=entry_point, kwargs=dict(default_kwargs))
    pettingzoo.register("parallel", fid, entry_point=_ParallelCreator(entry_point), kwargs=dict(default_kwargs))
    _TASKS[fid] = (entry_point, default_kwargs)
    return fid


def registered_tasks() -> list[str]:
    """Full ids of the tasks registered through :func:`register_task`, sorted."""
    return sorted(_TASKS)


def make(task_id: str, **kwargs: Any) -> Any:
    """``pettingzoo.make("aec", task_id, **kwargs)``, with the ``llm_marl/`` namespace optional."""
    return pettingzoo.make("aec", full_id(task_id), **kwargs)


def make_parallel(task_id: str, **kwargs: Any) -> Any:
    """``pettingzoo.make("parallel", task_id, **kwargs)``, with the ``llm_marl/`` namespace optional."""
    return pettingzoo.make("parallel", full_id(task_id), **kwargs)


class PettingZooFunctions(NamedTuple):
    """PettingZoo's module functions of one task: ``raw_env``, ``env()``, ``parallel_env()``."""

    raw_env: Callable[..., pettingzoo.AECEnv]
    env: Callable[..., pettingzoo.AECEnv]
    parallel_env: Callable[..., pettingzoo.ParallelEnv]


def pettingzoo_functions(raw_env: Callable[..., pettingzoo.AECEnv]) -> PettingZooFunctions:
    """PettingZoo's module functions for a task class, as PettingZoo's own envs define them.

    ``raw_env`` is the class itself; ``env(**kwargs)`` is ``raw_env(**kwargs)`` wrapped in
    ``OrderEnforcingWrapper`` (see the module docstring for why no other standard wrapper);
    ``parallel_env(**kwargs)`` is ``turn_based_aec_to_parallel(env(**kwargs))``. The two
    functions are named and placed as functions of the class's module (they pickle by
    reference once the module assigns them, ``raw_env, env, parallel_env = ...``).
    """
    if not callable(raw_env):
        raise TypeError(f"pettingzoo_functions needs an env class (or factory), got {raw_env!r}")
    name = getattr(raw_env, "__name__", repr(raw_env))

    def env(**kwargs: Any) -> pettingzoo.AECEnv:
        return OrderEnforcingWrapper(raw_env(**kwargs))

    def parallel_env(**kwargs: Any) -> pettingzoo.ParallelEnv:
        return turn_based_aec_to_parallel(env(**kwargs))

    env.__doc__ = (f"``{name}(**kwargs)`` wrapped in PettingZoo's ``OrderEnforcingWrapper`` (the AEC env; "
                   f"kwargs are {name}'s arguments).")
    parallel_env.__doc__ = ("The turn-based parallel form of :func:`env`: "
                            "``turn_based_aec_to_parallel(env(**kwargs))``; every role observes, only the active "
                            "role's action is used.")
    for fn in (env, parallel_env):
        fn.__module__ = getattr(raw_env, "__module__", fn.__module__)
        fn.__qualname__ = fn.__name__
    return PettingZooFunctions(raw_env, env, parallel_env)
