"""Registration of llm_marl tasks in PettingZoo's own registry (AEC and parallel forms).

PettingZoo 1.27 has a Gymnasium-style registry (``pettingzoo.register`` /
``pettingzoo.make(env_type, id)``, separate ``"aec"`` and ``"parallel"`` registries).
:func:`register_task` writes a task into both::

    register_task("llm_marl/Sokoban-v0", "llm_marl_envs.grid.sokoban:SokobanEnv", max_turns=5)

    pettingzoo.make("aec", "llm_marl/Sokoban-v0", size=7)        # the AEC env itself
    pettingzoo.make("parallel", "llm_marl/Sokoban-v0")           # parallel_form(SokobanEnv): turn-based
    llm_marl_envs.make("Sokoban-v0")                              # shortcut; namespace optional

The entry point may be the env class (or any callable) or a ``"module:attr"`` string,
which is imported only when the env is first made.

Each task module also offers PettingZoo's module functions, made once here by
:func:`pettingzoo_functions` (one line per task module)::

    raw_env, env, parallel_env = pettingzoo_functions(SokobanEnv)

    sokoban.raw_env(size=7)        # the env class itself (what the registry's "aec" entry builds)
    sokoban.env(size=7)            # raw_env wrapped in PettingZoo's OrderEnforcingWrapper
    sokoban.parallel_env(size=7)   # parallel_form(env, size=7): the turn-based parallel form

Of PettingZoo's standard AEC wrappers only ``OrderEnforcingWrapper`` fits Text actions:
``AssertOutOfBoundsWrapper`` would raise on a non-``str`` action, which these envs score as
an invalid action instead (the env never raises on model output); ``TerminateIllegalWrapper``
needs an action mask (every ``str`` is legal); ``ClipOutOfBoundsWrapper`` is for ``Box``
actions; ``CaptureStdoutWrapper`` adds ``"ansi"`` rendering, which the envs have natively.

The parallel form (:func:`parallel_form`) is PettingZoo's turn-based one: one parallel step is one
role's action (the active role's, named by ``infos[a]["active_agent"]``, at ``reset`` too). So in it
PettingZoo's ``max_cycles`` counts parallel steps, as PettingZoo's ``max_cycles_test`` counts them:
``parallel_env(max_cycles=n)`` ends after ``n`` steps (``max_steps=n``), while the AEC env's
``max_cycles=n`` lets every role act ``n`` times (``max_turns=n``). Orchestrated tasks take no
``max_cycles`` in either form (see :meth:`~llm_marl_envs.base.LLMTeamEnv.orchestrated`).
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable, NamedTuple

import pettingzoo
from pettingzoo.utils.conversions import turn_based_aec_to_parallel_wrapper
from pettingzoo.utils.wrappers import OrderEnforcingWrapper

from .base import resolve_max_turns

__all__ = ["NAMESPACE", "PettingZooFunctions", "TurnBasedParallelEnv", "full_id", "make", "make_parallel",
           "parallel_form", "pettingzoo_functions", "register_task", "registered_tasks"]

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


class TurnBasedParallelEnv(turn_based_aec_to_parallel_wrapper):
    """PettingZoo's turn-based parallel form of an AEC env (``turn_based_aec_to_parallel``): every live role
    observes, only the active role's action is used, and every info names the active role
    (``infos[a]["active_agent"]``), from ``reset`` on. The infos returned are copies: adding
    ``active_agent`` never writes into the AEC env's own ``infos``."""

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        observations, _ = super().reset(seed=seed, options=options)
        return observations, self._infos()

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        if not self.aec_env.agents:
            return {}, {}, {}, {}, {}
        aec = self.aec_env
        aec.step(actions[aec.agent_selection])
        rewards, terminations, truncations = dict(aec.rewards), dict(aec.terminations), dict(aec.truncations)
        infos = self._infos()
        observations = {agent: aec.observe(agent) for agent in aec.agents}
        while aec.agents and (aec.terminations[aec.agent_selection] or aec.truncations[aec.agent_selection]):
            aec.step(None)  # the finished roles leave; nothing else changes
        for agent in aec.agents:
            infos[agent]["active_agent"] = aec.agent_selection
        self.agents = aec.agents[:]
        return observations, rewards, terminations, truncations, infos

    def _infos(self) -> dict[str, dict]:
        aec = self.aec_env
        return {a: {**info, **({"active_agent": aec.agent_selection} if aec.agents else {})}
                for a, info in aec.infos.items()}


def _orchestrated(make_aec: Any) -> bool:
    target = make_aec if isinstance(make_aec, type) else getattr(make_aec, "raw_env", None)
    check = getattr(target, "orchestrated", None)
    return bool(check()) if callable(check) else False


def parallel_form(make_aec: Callable[..., pettingzoo.AECEnv], /, **kwargs: Any) -> TurnBasedParallelEnv:
    """The parallel form of the AEC env ``make_aec(**kwargs)``: :class:`TurnBasedParallelEnv`.

    One parallel step is one role's action, so ``max_cycles`` (PettingZoo's cycle of the parallel API: one
    ``step`` call) counts parallel steps: ``max_cycles=n`` builds the AEC env with ``max_steps=n`` (and
    ``max_turns=n`` unless given), and the episode ends after ``n`` steps unless the task ends it first. An
    orchestrated task refuses ``max_cycles`` (its constructor says why).
    """
    cycles = kwargs.pop("max_cycles", None)
    if cycles is not None and not _orchestrated(make_aec):
        steps = resolve_max_turns(None, cycles, 1)
        if kwargs.get("max_steps") not in (None, steps):
            raise ValueError(f"max_cycles={cycles!r} and max_steps={kwargs['max_steps']!r} disagree; in the "
                             "parallel form they are one setting (parallel steps): give only one")
        kwargs = {"max_turns": steps, **kwargs, "max_steps": steps}
    elif cycles is not None:
        kwargs["max_cycles"] = cycles
    return TurnBasedParallelEnv(make_aec(**kwargs))


@dataclasses.dataclass(frozen=True)
class _ParallelCreator:
    """Callable entry point of the parallel form: :func:`parallel_form` of the AEC entry point."""

    entry_point: Any

    def __call__(self, **kwargs: Any) -> pettingzoo.ParallelEnv:
        return parallel_form(_resolve(self.entry_point), **kwargs)


def register_task(task_id: str, entry_point: Callable[..., Any] | str, **default_kwargs: Any) -> str:
    """Register a task in PettingZoo's AEC and parallel registries; returns the full id.

    ``entry_point`` builds the AEC env (an :class:`~llm_marl_envs.base.LLMTeamEnv`
    subclass, a factory, or a ``"module:attr"`` string); ``default_kwargs`` are its
    default arguments (call-time kwargs override them). The parallel form is
    :func:`parallel_form` of the AEC env (PettingZoo's turn-based form): every role observes, only the
    active role's action is used (``infos[a]["active_agent"]`` names it).
    """
    if not (callable(entry_point) or isinstance(entry_point, str)):
        raise TypeError(f"entry_point must be a callable or a 'module:attr' string, got {entry_point!r}")
    fid = full_id(task_id)
    if fid in _TASKS and _TASKS[fid][1] == default_kwargs and _same_entry_point(_TASKS[fid][0], entry_point):
        return fid  # re-import of the module that registers it, or its lazy "module:attr" made real: nothing to do
    pettingzoo.register("aec", fid, entry_point=entry_point, kwargs=dict(default_kwargs))
    pettingzoo.register("parallel", fid, entry_point=_ParallelCreator(entry_point), kwargs=dict(default_kwargs))
    _TASKS[fid] = (entry_point, default_kwargs)
    return fid


def _same_entry_point(registered: Callable[..., Any] | str, new: Callable[..., Any] | str) -> bool:
    """``new`` is ``registered``, or the object its ``"module:attr"`` string names (a task registered lazily by id,
    whose module then registers it with the class itself)."""
    if registered == new:
        return True
    return (isinstance(registered, str) and callable(new)
            and registered == f"{getattr(new, '__module__', '')}:{getattr(new, '__qualname__', '')}")


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
    ``parallel_env(**kwargs)`` is ``parallel_form(env, **kwargs)`` (turn-based). The two
    functions are named and placed as functions of the class's module (they pickle by
    reference once the module assigns them, ``raw_env, env, parallel_env = ...``).
    """
    if not callable(raw_env):
        raise TypeError(f"pettingzoo_functions needs an env class (or factory), got {raw_env!r}")
    name = getattr(raw_env, "__name__", repr(raw_env))

    def env(**kwargs: Any) -> pettingzoo.AECEnv:
        return OrderEnforcingWrapper(raw_env(**kwargs))

    def parallel_env(**kwargs: Any) -> pettingzoo.ParallelEnv:
        return parallel_form(env, **kwargs)

    env.__doc__ = (f"``{name}(**kwargs)`` wrapped in PettingZoo's ``OrderEnforcingWrapper`` (the AEC env; "
                   f"kwargs are {name}'s arguments).")
    parallel_env.__doc__ = ("The turn-based parallel form of :func:`env`: ``parallel_form(env, **kwargs)``; every "
                            "role observes, only the active role's action is used; ``max_cycles`` counts parallel "
                            "steps.")
    env.raw_env = raw_env  # type: ignore[attr-defined]  # what parallel_form asks whether it is orchestrated
    for fn in (env, parallel_env):
        fn.__module__ = getattr(raw_env, "__module__", fn.__module__)
        fn.__qualname__ = fn.__name__
    return PettingZooFunctions(raw_env, env, parallel_env)
