"""Envs for the RLlib layer: entry points that travel to Ray workers, registration, and the env checks.

An env reaches the rollout workers as an :class:`EnvEntry`: a picklable env creator holding an
*importable* entry point (a ``"module:attr"`` string, the env class itself, or an RLlib-style
creator) plus the modules that must be imported first (``env.modules``, the module that
registers a user's task). A worker builds its envs from the entry it is given; it never looks
an id up in a registry of its own process, so a task registered by the user's module trains
on every worker as soon as that module can be imported there (installed, on ``PYTHONPATH``, or
shipped with Ray's ``runtime_env={"py_modules": [...]}``; :func:`task_runtime_env` writes that
runtime env, with a ``worker_process_setup_hook`` that imports the modules in every worker).

:func:`resolve_env` turns what a user gives ``.environment()`` into an entry, the way RLlib
users write it: a registered id (``llm_marl/PlanPath-v0``, a task of one's own, or an id given
to RLlib's ``register_env``), a ``"module:Class"`` string, a PettingZoo AEC env class (called
with the env config as keyword arguments), or an RLlib creator / env class taking the env
config dict. :func:`check_env` builds one probe env in the calling process, so an unknown id, an
unknown env argument or a bad value is reported (naming the key) before Ray starts.

:func:`register_llm_marl_envs` is the one explicit call that registers every llm_marl task
with RLlib's ``register_env`` (``rllib_integration.register()`` calls it; importing registers nothing).
What it registers is an :class:`RLlibEnvCreator`: RLlib's creator signature (an ``EnvContext`` in) and an
RLlib ``MultiAgentEnv`` out (RLlib's own ``PettingZooEnv`` around the AEC env), so a stock RLlib
algorithm's env runners can build and step the name; ATGRPO still gets the AEC env itself (its entry,
:func:`resolve_env`). Nothing here imports Ray unless asked to register with it.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import importlib
import inspect
import os
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from .settings import ConfigError

__all__ = ["EnvEntry", "EnvCheck", "RLlibEnvCreator", "resolve_env", "check_env", "make_env", "import_env_modules",
           "import_env_modules_from_environ", "task_runtime_env", "register_llm_marl_envs", "registered_env",
           "ENV_MODULES_VAR"]

#: the environment variable :func:`import_env_modules_from_environ` reads (set by :func:`task_runtime_env`)
ENV_MODULES_VAR = "LLM_MARL_ENV_MODULES"


def _module_name(spec: str) -> str:
    """``"pkg.mod"`` -> itself; ``"path/to/my_task.py"`` -> ``"my_task"``."""
    return Path(spec).stem if spec.endswith(".py") else spec


def import_env_modules(modules: Sequence[str], *, key: str = "env.modules") -> list[Any]:
    """Import the modules that register tasks: dotted names, or paths of ``.py`` files.

    A ``.py`` path that exists here is imported from its directory; on a Ray worker where the
    file was shipped with ``runtime_env={"py_modules": [path]}`` it is imported by its name.
    """
    out = []
    for spec in modules or ():
        if not isinstance(spec, str) or not spec:
            raise ConfigError(f"{key}: expected module names or .py paths, got {spec!r}")
        name = _module_name(spec)
        if spec.endswith(".py") and Path(spec).expanduser().is_file():
            folder = str(Path(spec).expanduser().resolve().parent)
            if folder not in sys.path:
                sys.path.insert(0, folder)
        try:
            out.append(importlib.import_module(name))
        except Exception as e:  # the user's module: any error is theirs, named here
            raise ConfigError(f"{key}: cannot import {spec!r} ({type(e).__name__}: {e}). Give an importable "
                              "module name (installed or on PYTHONPATH) or the path of a .py file") from e
    return out


def import_env_modules_from_environ() -> None:
    """Ray ``worker_process_setup_hook``: import the modules named in ``$LLM_MARL_ENV_MODULES``."""
    names = [m for m in os.environ.get(ENV_MODULES_VAR, "").split(",") if m]
    import_env_modules(names)


def task_runtime_env(modules: Sequence[str], runtime_env: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """A Ray ``runtime_env`` that ships ``modules`` to every worker and imports them there.

    Modules given as ``.py`` paths, and modules whose top-level package is not part of an installed
    distribution, go to ``py_modules``; ``worker_process_setup_hook`` imports them all in
    every worker process. ``runtime_env`` is merged in (its ``py_modules``/``env_vars`` kept).
    Use it as ``ray.init(runtime_env=task_runtime_env(["my_tasks"]))``; ``llm-marl`` does.
    """
    env: dict[str, Any] = {k: (list(v) if k == "py_modules" else dict(v) if k == "env_vars" else v)
                           for k, v in dict(runtime_env or {}).items()}
    modules = [m for m in modules or () if m]
    if not modules:
        return env
    ship: list[str] = env.setdefault("py_modules", [])
    for spec in modules:
        path = _shippable_path(spec)
        if path is not None and path not in ship:
            ship.append(path)
    if not ship:
        env.pop("py_modules")
    names = [_module_name(m) for m in modules]
    env.setdefault("env_vars", {})[ENV_MODULES_VAR] = ",".join(names)
    env["worker_process_setup_hook"] = f"{__name__}.import_env_modules_from_environ"
    return env


def _shippable_path(spec: str) -> Optional[str]:
    """The file or package directory to ship for a module, or None where it is installed."""
    if spec.endswith(".py"):
        return str(Path(spec).expanduser().resolve())
    top = importlib.import_module(spec.split(".")[0])
    origin = getattr(top, "__file__", None)
    if origin is None:
        return None
    path = Path(origin).resolve()
    from importlib.metadata import packages_distributions

    if top.__name__ in packages_distributions() or any(p in ("site-packages", "dist-packages") for p in path.parts):
        return None  # installed (editable installs too): every node has the same environment
    return str(path.parent if path.name == "__init__.py" else path)


# ---------------------------------------------------------------------------- the entry
def _resolve_entry_point(entry_point: Any) -> Callable[..., Any]:
    if callable(entry_point):
        return entry_point
    module, _, attr = str(entry_point).partition(":")
    if not attr:
        raise ConfigError(f"env entry point {entry_point!r} must look like 'package.module:ClassName'")
    return getattr(importlib.import_module(module), attr)


def _is_aec_class(obj: Any) -> bool:
    import pettingzoo

    return isinstance(obj, type) and issubclass(obj, pettingzoo.AECEnv)


@dataclasses.dataclass(frozen=True)
class EnvEntry:
    """A picklable env creator: ``entry(env_config)`` builds the env in any process.

    ``entry_point`` is a ``"module:attr"`` string, a class or a callable; with
    ``takes_context`` it is called RLlib's way, ``entry_point(EnvContext(env_config))``,
    otherwise PettingZoo's way, ``entry_point(**{**kwargs, **env_config})``. ``modules`` are
    imported first (they register the task, or define the entry point).
    """

    env_id: str
    entry_point: Any
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    modules: tuple[str, ...] = ()
    takes_context: bool = False

    def __call__(self, env_config: Optional[Mapping[str, Any]] = None, worker_index: int = 0) -> Any:
        import_env_modules(self.modules)
        fn = _resolve_entry_point(self.entry_point)
        if self.takes_context:
            from ray.rllib.env.env_context import EnvContext

            ctx = env_config if isinstance(env_config, EnvContext) else EnvContext(dict(env_config or {}),
                                                                                     worker_index=worker_index)
            return _pettingzoo_env_of(fn(ctx))
        return fn(**{**dict(self.kwargs), **dict(env_config or {})})

    @property
    def name(self) -> str:
        """What error messages call the env."""
        ep = self.entry_point
        return self.env_id or (ep if isinstance(ep, str) else getattr(ep, "__qualname__", repr(ep)))


def _pettingzoo_env_of(env: Any) -> Any:
    """The PettingZoo env inside RLlib's ``PettingZooEnv`` wrapper (what an RLlib creator of a PettingZoo task
    returns); any other env as it is. The trainer steps the AEC env itself."""
    if "ray.rllib.env.wrappers.pettingzoo_env" in sys.modules:
        from ray.rllib.env.wrappers.pettingzoo_env import PettingZooEnv

        if isinstance(env, PettingZooEnv):
            return env.env
    return env


@dataclasses.dataclass(frozen=True)
class RLlibEnvCreator:
    """An env creator for RLlib's ``register_env``: ``creator(env_context)`` builds the AEC env from ``entry``
    (with the context's config as env arguments) and returns it as an RLlib ``MultiAgentEnv`` (RLlib's own
    ``PettingZooEnv`` wrapper: one role acts per step, the one whose observation ``step`` returns)."""

    entry: EnvEntry

    def __call__(self, env_config: Optional[Mapping[str, Any]] = None) -> Any:
        from ray.rllib.env.wrappers.pettingzoo_env import PettingZooEnv

        return PettingZooEnv(self.entry(dict(env_config or {}), worker_index=getattr(env_config, "worker_index", 0)))


def _unknown_id(env_id: str, key: str) -> ConfigError:
    import llm_marl_envs

    ours = llm_marl_envs.registered_tasks()
    hint = difflib.get_close_matches(env_id, ours, n=1, cutoff=0.6)
    return ConfigError(
        f"{key}: unknown env id {env_id!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
        + f"; registered tasks: {ours}. A task of your own is registered by importing the module that calls "
        "register_task(...): give it as env.modules / --import MODULE (or .environment(..., env_modules=[...]))")


def resolve_env(env: Any, modules: Sequence[str] = (), *, key: str = "env.id",
                modules_key: str = "env.modules") -> EnvEntry:
    """What ``.environment(env)`` was given -> an :class:`EnvEntry` (imports ``modules`` first).

    A string is looked up in PettingZoo's registry (llm_marl tasks and any task registered
    with ``register_task``/``pettingzoo.register``), then in RLlib's ``register_env`` registry
    (if Ray is loaded), then taken as a ``"module:attr"`` entry point; anything else must be an
    env class or a creator. Raises :class:`ConfigError` naming ``key`` (with close matches).
    """
    modules = tuple(modules or ())
    import_env_modules(modules, key=modules_key)
    import llm_marl_envs  # noqa: F401  (registers the library's tasks)

    if isinstance(env, EnvEntry):
        return dataclasses.replace(env, modules=tuple(dict.fromkeys(env.modules + modules)))
    if isinstance(env, str):
        import pettingzoo

        full = llm_marl_envs.full_id(env) if "/" not in env and ":" not in env and \
            llm_marl_envs.full_id(env) in pettingzoo.aec_registry else env
        if full in pettingzoo.aec_registry:
            spec = pettingzoo.spec("aec", full)
            return EnvEntry(full, spec.entry_point, dict(spec.kwargs or {}), modules)
        if "ray.tune.registry" in sys.modules:
            from ._rllib import registered_env_creator

            creator = registered_env_creator(env)
            if creator is not None:
                if isinstance(creator, RLlibEnvCreator):
                    creator = creator.entry
                if isinstance(creator, EnvEntry):
                    return dataclasses.replace(creator, modules=tuple(dict.fromkeys(creator.modules + modules)))
                return EnvEntry(env, creator, {}, modules, takes_context=True)
        if re.fullmatch(r"[\w.]+:[\w.]+", env):
            try:
                target = _resolve_entry_point(env)
            except (ImportError, AttributeError) as e:
                raise ConfigError(f"{key}: cannot import the entry point {env!r} ({e})") from e
            return EnvEntry(env, env, {}, modules, takes_context=not _is_aec_class(target))
        raise _unknown_id(env, key)
    if callable(env):
        return EnvEntry(getattr(env, "__qualname__", ""), env, {}, modules, takes_context=not _is_aec_class(env))
    raise ConfigError(f"{key}: expected an env id, a 'module:Class' entry point, an env class or a creator, "
                      f"got {env!r}")


def make_env(entry: EnvEntry, env_config: Mapping[str, Any], worker_index: int = 0) -> Any:
    """One env from an :class:`EnvEntry` (in the calling process)."""
    return entry(env_config, worker_index=worker_index)


# ---------------------------------------------------------------------------- checks
def _item(where: str, key: str) -> str:
    return f"{where}[{key!r}]" if where.endswith("]") or where.startswith("ATGRPOConfig") else f"{where}.{key}"


def _known_arguments(entry_point: Any) -> Optional[list[str]]:
    """Keyword arguments a constructor accepts (through ``**kwargs`` passed to base classes); None: any."""
    if not isinstance(entry_point, type):
        return None
    names: list[str] = []
    for cls in entry_point.__mro__:
        init = cls.__dict__.get("__init__")
        if init is None:
            continue
        params = list(inspect.signature(init).parameters.values())[1:]
        names += [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            return sorted(set(names))
    return None


@dataclasses.dataclass
class EnvCheck:
    """What :func:`check_env` found: the entry and the env's agents (roles)."""

    entry: EnvEntry
    agents: list[str]


def check_env(env: Any, env_config: Mapping[str, Any], *, modules: Sequence[str] = (),
              eval_env_config: Optional[Mapping[str, Any]] = None, names: Optional[Mapping[str, str]] = None
              ) -> EnvCheck:
    """Resolve the env and build one probe env (train split, and the eval split's config) here.

    An unknown argument or a bad value raises :class:`ConfigError` naming the key
    (``names`` maps ``env``, ``env_config``, ``eval_env_config``, ``modules`` to what the
    message calls them: YAML keys by default, ``ATGRPOConfig`` attributes from Python).
    """
    n = {"env": "env.id", "env_config": "env.config", "eval_env_config": "env.eval_config",
         "modules": "env.modules", **dict(names or {})}
    entry = resolve_env(env, modules, key=n["env"], modules_key=n["modules"])
    if not isinstance(env_config, Mapping):
        raise ConfigError(f"{n['env_config']}: expected a mapping of env arguments, got {env_config!r}")
    probe = _probe(entry, {**dict(env_config), "split": env_config.get("split", "train")}, n["env_config"])
    if eval_env_config:
        _probe(entry, {**dict(env_config), **dict(eval_env_config), "split": "eval"}, n["eval_env_config"],
               own=set(eval_env_config))
    agents = list(getattr(probe, "possible_agents", []) or [])
    if not agents:
        raise ConfigError(f"{n['env']}: {entry.name} has no possible_agents; the trainer needs a PettingZoo AEC "
                          "env whose agents are its roles")
    try:
        probe.close()
    except Exception:
        pass
    return EnvCheck(entry, agents)


def _probe(entry: EnvEntry, cfg: dict, where: str, own: Optional[set] = None) -> Any:
    try:
        return entry(cfg)
    except ConfigError:
        raise
    except TypeError as e:
        m = re.search(r"unexpected keyword argument '(\w+)'", str(e))
        if m and m.group(1) == "split" and "split" not in (own or ()):
            raise ConfigError(f"{where}: {entry.name} does not take a `split` argument; the trainer builds every env "
                              "with split='train' or split='eval' (disjoint problem sets, see LLMTeamEnv)") from None
        if m and m.group(1) in cfg:
            bad = m.group(1)
            known = _known_arguments(_resolve_entry_point(entry.entry_point)) or []
            hint = difflib.get_close_matches(bad, known, n=1, cutoff=0.5)
            raise ConfigError(f"{_item(where, bad)}: {bad!r} is not an argument of {entry.name}"
                              + (f" (did you mean {hint[0]!r}?)" if hint else "")
                              + (f"; its arguments: {known}" if known else "")) from None
        raise _bad_value(entry, cfg, where, e, own) from None
    except Exception as e:
        raise _bad_value(entry, cfg, where, e, own) from None


# ---------------------------------------------------------------------------- argument types
def _type_mismatch(entry: EnvEntry, key: str, value: Any) -> Optional[str]:
    """"expected <type in words>, got <kind of value>" where the env constructor's annotation of ``key``
    rules ``value`` out; None where it allows it or does not say."""
    if entry.takes_context:
        return None
    try:
        cls = _resolve_entry_point(entry.entry_point)
    except Exception:  # noqa: BLE001 - the env's own error stands
        return None
    if not isinstance(cls, type):
        return None
    ann = _argument_annotation(cls, str(key))
    if ann is None or _fits(value, ann) is not False:
        return None
    return f"expected {_describe(ann)}, got {_describe_value(value)}"


def _argument_annotation(cls: type, name: str) -> Any:
    """The evaluated annotation of keyword argument ``name`` of ``cls`` (its own ``__init__`` or, through
    ``**kwargs``, a base class's); None where there is none or it cannot be evaluated."""
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            params = inspect.signature(init).parameters
        except (TypeError, ValueError):
            return None
        if name in params:
            ann = getattr(init, "__annotations__", {}).get(name)
            if isinstance(ann, str):
                try:
                    ann = eval(ann, dict(getattr(init, "__globals__", {})))  # as typing.get_type_hints does
                except Exception:
                    return None
            return ann
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            return None
    return None


_SEQUENCES = (list, tuple, set, frozenset, collections.abc.Sequence, collections.abc.Collection,
              collections.abc.Iterable)
_MAPPINGS = (dict, collections.abc.Mapping)


def _fits(v: Any, t: Any) -> Optional[bool]:
    """Whether a config value (YAML: None, bool, int, float, str, list, dict) fits annotation ``t``;
    None where the annotation does not say."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if t is Any or t is object:
        return True
    if t is None or t is type(None):
        return v is None
    if origin is typing.Annotated:
        return _fits(v, args[0])
    if origin in (typing.Union, types.UnionType):
        res = [_fits(v, a) for a in args]
        return True if True in res else (False if all(r is False for r in res) else None)
    if origin is typing.Literal:
        return v in args
    if t is bool:
        return isinstance(v, bool)
    if t is int:
        return isinstance(v, int) and not isinstance(v, bool)
    if t is float:
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t is str:
        return isinstance(v, str)
    if t in _SEQUENCES or origin in _SEQUENCES:
        if not isinstance(v, (list, tuple)):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(v) != len(args):
                return False
            res = [_fits(x, a) for x, a in zip(v, args, strict=True)]
        else:
            res = [_fits(x, args[0]) for x in v] if args else []
        return False if False in res else (True if all(r is True for r in res) else None)
    if t in _MAPPINGS or origin in _MAPPINGS:
        return isinstance(v, dict) or None
    return None


_PLURAL = {int: "integers", float: "numbers", str: "strings", bool: "booleans"}


def _describe(t: Any) -> str:
    """An annotation in words: ``int | Sequence[int]`` -> ``an integer or a list of integers``."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is typing.Annotated:
        return _describe(args[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(dict.fromkeys(_describe(a) for a in args))
    if origin is typing.Literal:
        return f"one of {list(args)}"
    if t is None or t is type(None):
        return "null"
    words = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    if t in words:
        return words[t]
    if t in _SEQUENCES or origin in _SEQUENCES:
        if origin is tuple and args and args[-1] is not Ellipsis:
            return f"a list of {len(args)} " + (_PLURAL.get(args[0], "values") if len(set(args)) == 1 else "values")
        return "a list" + (f" of {_PLURAL[args[0]]}" if args and args[0] in _PLURAL else "")
    if t in _MAPPINGS or origin in _MAPPINGS:
        return "a mapping"
    return getattr(t, "__name__", str(t))


def _describe_value(v: Any) -> str:
    if v is None:
        return "null"
    for kind, words in ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
                        (list, "a list"), (dict, "a mapping")):
        if isinstance(v, kind):
            return words
    return type(v).__name__


def _bad_value(entry: EnvEntry, cfg: dict, where: str, err: Exception, own: Optional[set]) -> ConfigError:
    """Name the argument a construction error is about: the one its message names, or the one
    whose removal lets the env build."""
    keys = [k for k in cfg if k != "split" and (own is None or k in own)]
    text = str(err)
    named = [k for k in keys if re.search(rf"\b{re.escape(k)}\b", text)]
    culprit = named[0] if len(named) == 1 else None
    if culprit is None:
        for k in keys:
            try:
                entry({kk: v for kk, v in cfg.items() if kk != k})
            except Exception:
                continue
            culprit = k
            break
    if culprit is not None:
        mismatch = _type_mismatch(entry, culprit, cfg[culprit])
        if mismatch:  # the env's own error can be about a part of the value (`int(size[0])` of 'abc': 'a')
            return ConfigError(f"{_item(where, culprit)}: bad value {cfg[culprit]!r} for {entry.name}: {mismatch}")
        return ConfigError(f"{_item(where, culprit)}: bad value {cfg[culprit]!r} for {entry.name} "
                           f"({type(err).__name__}: {text})")
    return ConfigError(f"{where}: {entry.name} cannot be built with {cfg!r} ({type(err).__name__}: {text})")


# ---------------------------------------------------------------------------- RLlib registry
def register_llm_marl_envs() -> list[str]:
    """Register every llm_marl task (and every task registered with ``register_task`` so far) with RLlib's
    ``register_env``: an :class:`RLlibEnvCreator` each, so ``config.environment("llm_marl/Code-v0")`` gives
    any RLlib algorithm a ``MultiAgentEnv``. Returns the ids."""
    import llm_marl_envs
    from ray.tune.registry import register_env

    from ._rllib import registered_env_creator

    ids = llm_marl_envs.registered_tasks()
    for env_id in ids:
        if registered_env_creator(env_id) is None:
            register_env(env_id, RLlibEnvCreator(resolve_env(env_id)))
    return ids


def registered_env(env_id: str) -> Callable[..., Any]:
    """The env creator RLlib's env runners call for ``config.environment(env_id)``: the one registered with
    ``ray.tune.registry.register_env`` (by :func:`register_llm_marl_envs` for the llm_marl tasks), called with
    an ``EnvContext``. A name nothing registered is a :class:`ValueError` naming the call that registers it."""
    from ._rllib import registered_env_creator

    creator = registered_env_creator(env_id)
    if creator is None:
        raise ValueError(f"no env {env_id!r} is registered with RLlib here; call rllib_integration.register() "
                         "(the llm_marl tasks and those of register_task) or ray.tune.registry.register_env")
    return creator
