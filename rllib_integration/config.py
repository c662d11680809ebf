"""``ATGRPOConfig``'s settings: builders, RLlib's settings that map to ours or mean nothing here, validation.

The config class lives here without the algorithm it builds (:class:`ATGRPOConfigBase`);
:mod:`.algorithm` binds :class:`~.algorithm.ATGRPO` in ``ATGRPOConfig``, the class users build. Every
AT-GRPO setting is declared once, in :mod:`rllib_integration.settings`: its attribute, default and
builder keyword come from there, and the typed builder methods (:mod:`.config_builders`) are generated
from it (``python scripts/gen_config_builders.py``).
"""

from __future__ import annotations

import difflib
import functools
import inspect
from typing import TYPE_CHECKING, Any, Mapping, Optional, Self

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from .config_builders import RLLIB_BUILDERS, ConfigBuilders
from .envs import EnvCheck, check_env
from .policies import AgentTableMapping, resolve_mapping
from .settings import (OLD_ATTRIBUTES, ConfigError, attribute_name, builder_calls, builder_keywords, config_attributes,
                       settings_of, validate_settings, warn_renamed)

__all__ = ["ATGRPOConfigBase", "RLLIB_ALIASES", "RLLIB_UNUSED"]

#: RLlib settings that are ATGRPO settings under another name: RLlib keyword -> (builder, ours).
#: The RLlib builders accept them and set ours (the RLlib attribute keeps its default).
RLLIB_ALIASES: dict[str, tuple[str, str]] = {
    "num_env_runners": ("rollouts", "num_rollout_actors"),
    "num_cpus_per_env_runner": ("rollouts", "num_cpus_per_rollout_worker"),
    "num_gpus_per_env_runner": ("rollouts", "num_gpus_per_rollout_worker"),
    "max_num_env_runner_restarts": ("rollouts", "max_worker_restarts"),
    "evaluation_duration": ("evaluation", "evaluation_num_episodes"),
}

_BATCH = ("an iteration plays rollout.envs_per_iteration episodes to the end with sampling.k candidates per "
          "(env, turn, agent): set .rollouts(envs_per_iteration=...) and .sampling(k=...)")
#: RLlib settings that mean nothing to ATGRPO: attribute -> what to use instead. Changing one from
#: RLlib's default is an error (``validate``) rather than silently ignored.
RLLIB_UNUSED: dict[str, str] = {
    "gamma": "AT-GRPO does not discount: every candidate is scored by the reward of its own step "
             "(alpha * team + local) and normalised within its (env, turn, agent) group; shape rewards in the env "
             "(env.config alpha, invalid_penalty) instead",
    "train_batch_size": _BATCH,
    "train_batch_size_per_learner": _BATCH,
    "num_envs_per_env_runner": _BATCH,
    "rollout_fragment_length": "episodes are always played to the end; " + _BATCH,
    "batch_mode": "episodes are always played to the end",
    "evaluation_num_env_runners": "evaluation runs on the rollout workers (rollout.num_rollout_actors)",
    "evaluation_parallel_to_training": "evaluation runs after the iteration's update",
    "evaluation_duration_unit": "evaluation counts episodes: .evaluation(evaluation_num_episodes=N)",
    "explore": "sampling.temperature (training) and evaluation.temperature (0 = greedy)",
}
_RLLIB_DEFAULTS: dict[str, Any] = {}


@functools.cache
def _rllib_params(builder: str) -> frozenset[str]:
    """The keywords of RLlib's own ``AlgorithmConfig.<builder>()``."""
    return frozenset(inspect.signature(getattr(AlgorithmConfig, builder)).parameters) - {"self"}


def _rllib_default(attr: str) -> Any:
    if not _RLLIB_DEFAULTS:
        base = AlgorithmConfig()
        _RLLIB_DEFAULTS.update({a: getattr(base, a, None) for a in [*RLLIB_UNUSED, *RLLIB_ALIASES]})
    return _RLLIB_DEFAULTS[attr]



class ATGRPOConfigBase(ConfigBuilders, AlgorithmConfig):
    """Everything of :class:`~.algorithm.ATGRPOConfig` but the algorithm it builds (see docs/config_reference.md
    for every setting). :mod:`.algorithm` binds :class:`~.algorithm.ATGRPO` in its subclass ``ATGRPOConfig``, so
    the algorithm imports its config and never the other way round.

    Every AT-GRPO setting is declared once, in :mod:`rllib_integration.settings`; its attribute,
    default and builder keyword come from there. Besides RLlib's own settings
    (``.environment``, ``.multi_agent``, ``.training(lr=, grad_clip=, num_epochs=,
    minibatch_size=)``, ``.learners``, ``.evaluation(evaluation_interval=)``, ``.debugging(seed=)``)
    it adds ``.llm(...)`` (models, specialization, LoRA), ``.sampling(...)`` and ``.rollouts(...)``,
    and AT-GRPO keywords in ``.training(...)`` and ``.evaluation(...)``. :meth:`validate` checks
    every setting against the same schema as the YAML files, the env (a probe env built in this
    process) and the policy mapping against its roles. RLlib settings with an ATGRPO meaning are
    mapped by RLlib's own builders (:data:`RLLIB_ALIASES`: ``num_env_runners``,
    ``evaluation_duration``, ...); those without one are rejected (:data:`RLLIB_UNUSED`: ``gamma``,
    ``train_batch_size``, ...).
    """

    if TYPE_CHECKING:  # the settings' attributes are set from rllib_integration.settings at run time
        def __getattr__(self, name: str) -> Any: ...

    def __init__(self, algo_class: Optional[type] = None) -> None:
        super().__init__(algo_class=algo_class)
        for attr, value in config_attributes().items():
            setattr(self, attr, value)
        # RLlib: no RLlib EnvRunners (the rollout workers sample), one local learner by default.
        self.num_env_runners = 0
        self.create_local_env_runner = False

    def get_state(self) -> dict[str, Any]:
        """RLlib's state, keeping settings whose value is -1: RLlib drops every attribute equal to its
        ``DEPRECATED_VALUE`` (-1), so ``.training(lr=-1.0)`` would come back as the default and pass
        validation inside ``build_algo``."""
        state = super().get_state()
        for attr in config_attributes():
            if attr not in state and attr in self.__dict__:
                state[attr] = self.__dict__[attr]
        return state

    # -- RLlib hooks -----------------------------------------------------------------------
    def get_default_learner_class(self) -> type:
        from .learner import ATGRPOTorchLearner

        return ATGRPOTorchLearner

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from .rl_module import LLMRLModule

        return RLModuleSpec(module_class=LLMRLModule)

    # -- builder methods: typed in .config_builders (generated from the schema); their one body ---------
    def _set_settings(self, builder: str, kwargs: Mapping[str, Any], *, rllib_method: bool = False) -> dict:
        """Set this builder's AT-GRPO settings from ``kwargs``; return the rest (RLlib's own keywords). A keyword
        of the previous release (:data:`~.settings.OLD_ATTRIBUTES`) sets its setting, with a DeprecationWarning."""
        ours = builder_keywords(builder)
        rllib_params = _rllib_params(builder) if rllib_method else set()
        rest = {}
        for k in kwargs:  # as a run config giving both names, before anything is set
            new = OLD_ATTRIBUTES.get(k)
            if new in ours and k not in rllib_params and kwargs.get(new, NotProvided) is not NotProvided:
                raise ConfigError(f"ATGRPOConfig.{builder}(): {k!r} is the previous name of {new!r}, which is "
                                  f"given too; keep {new!r}")
        for k, v in kwargs.items():
            if OLD_ATTRIBUTES.get(k) in ours and k not in rllib_params:
                warn_renamed(k, OLD_ATTRIBUTES[k], f"ATGRPOConfig.{builder}() keyword", stacklevel=5)
                k = OLD_ATTRIBUTES[k]
            if k in rllib_params:
                rest[k] = v
            elif k in ours and not ours[k].rllib:
                if v is not NotProvided:
                    setattr(self, k, {**getattr(self, k), **dict(v)} if k in ("lora", "warm_start") else v)
            else:
                known = sorted(set(ours) | rllib_params)
                hint = difflib.get_close_matches(k, known, n=1, cutoff=0.5)
                raise ConfigError(f"ATGRPOConfig.{builder}() got an unknown keyword {k!r}"
                                  + (f" (did you mean {hint[0]!r}?)" if hint else "") + f"; known: {known}")
        return rest

    def _map_rllib_aliases(self, builder: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        """RLlib keywords that are ours under another name (:data:`RLLIB_ALIASES`) -> ours; returns the rest."""
        rest = {}
        params = _rllib_params(builder)  # only RLlib's own keywords of this builder
        for k, v in kwargs.items():
            alias = RLLIB_ALIASES.get(k) if k in params else None
            if alias is None or v is NotProvided:
                rest[k] = v
                continue
            if k == "evaluation_duration" and not isinstance(v, int):
                raise ConfigError(f"ATGRPOConfig.evaluation(evaluation_duration={v!r}): ATGRPO evaluates a number "
                                  "of episodes; give an int (it sets evaluation_num_episodes)")
            setattr(self, alias[1], v)
        return rest

    def _apply_builder(self, builder: str, ours: dict[str, Any], rest: dict[str, Any]) -> Self:
        """The body of every generated builder (:mod:`.config_builders`): set ``ours`` (keywords not given are
        :data:`NotProvided` and keep their value); ``rest`` holds RLlib's own keywords for RLlib's builder of
        the same name (after :data:`RLLIB_ALIASES`), or, for a builder of AT-GRPO settings only, keywords
        nobody knows (a :class:`ConfigError` with the close match)."""
        rllib_method = builder in RLLIB_BUILDERS
        if rllib_method:
            rest = self._map_rllib_aliases(builder, rest)
        rest = self._set_settings(builder, {**ours, **rest}, rllib_method=rllib_method)  # e.g. env= is RLlib's
        if rllib_method:
            getattr(AlgorithmConfig, builder)(self, **rest)
        return self

    def env_runners(self, **kwargs: Any) -> Self:
        """RLlib's ``.env_runners()``: ``num_env_runners``, ``num_cpus_per_env_runner``,
        ``num_gpus_per_env_runner`` set the rollout workers' (:data:`RLLIB_ALIASES`)."""
        return super().env_runners(**self._map_rllib_aliases("env_runners", kwargs))

    def fault_tolerance(self, **kwargs: Any) -> Self:
        """RLlib's ``.fault_tolerance()``; ``max_num_env_runner_restarts`` sets ``max_worker_restarts``."""
        return super().fault_tolerance(**self._map_rllib_aliases("fault_tolerance", kwargs))

    # -- validation --------------------------------------------------------------------------
    def validate(self) -> None:
        """Everything checkable, in this process, before Ray starts.

        RLlib's checks; every AT-GRPO setting against the run-settings schema (model paths
        included); RLlib settings that mean nothing here (:data:`RLLIB_UNUSED`); the env (its id,
        with close matches, and its arguments, by building one probe env here); the policy mapping
        against the env's roles; and, where Ray is already running, the resources against the
        cluster's. Raises :class:`ConfigError` naming the attribute.
        """
        super().validate()
        if self.env is None:
            raise ConfigError("ATGRPOConfig.env: set an env, e.g. .environment('llm_marl/PlanPath-v0')")
        validate_settings(settings_of(self), check_paths=True, name=attribute_name)
        for attr, instead in RLLIB_UNUSED.items():
            if hasattr(self, attr) and getattr(self, attr) != _rllib_default(attr):
                raise ConfigError(f"ATGRPOConfig.{attr}={getattr(self, attr)!r} is an RLlib setting ATGRPO does not "
                                  f"use: {instead}")
        for alias, (builder, ours) in RLLIB_ALIASES.items():
            value = getattr(self, alias)
            if value != _rllib_default(alias):
                raise ConfigError(f"ATGRPOConfig.{alias}={value!r}: ATGRPO's setting is {ours}; set "
                                  f".{builder}({ours}=...) (RLlib's builder keyword {alias}= does that)")
        self.check_env()
        self.check_resources()

    def check_env(self) -> EnvCheck:
        """Resolve the env, build one probe env here (train and eval arguments) and check the policy
        mapping against its roles; returns the env entry and agents. Raises :class:`ConfigError`."""
        check = check_env(self.env, dict(self.env_config or {}), modules=self.env_modules,
                          eval_env_config=self.env_eval_config,
                          names={"env": "ATGRPOConfig.env", "env_config": "ATGRPOConfig.env_config",
                                 "eval_env_config": "ATGRPOConfig.env_eval_config",
                                 "modules": "ATGRPOConfig.env_modules"})
        resolve_mapping(self, check.agents, env_name=check.entry.name)
        return check

    def resource_needs(self) -> dict[str, float]:
        """CPU/GPU of the Ray actors a run starts (rollout workers, remote learners; :mod:`.resources`)."""
        from .resources import ActorPlan, actor_resources

        return actor_resources(ActorPlan.of_config(self))

    def check_resources(self, available: Optional[Mapping[str, float]] = None, *, source: str = "the Ray cluster"
                        ) -> None:
        """Fail now if the run's actors need more CPUs/GPUs than ``available`` (default: the running Ray
        cluster's totals, with what is free now in the message; nothing is checked when Ray is not running:
        ``build_algo()`` checks against this machine before it starts a local Ray). The message names the
        settings (YAML keys and builder keywords)."""
        from .resources import ActorPlan, check_resources

        free = None
        if available is None:
            import ray

            if not ray.is_initialized():
                return
            available, free = ray.cluster_resources(), ray.available_resources()
        check_resources(ActorPlan.of_config(self), available, source=source, free=free, python=True,
                        advice="Give Ray more (ray.init(num_cpus=...), llm-marl --num-cpus, more nodes) or ask "
                               "for less")

    # -- YAML run configs ----------------------------------------------------------------------
    @classmethod
    def from_run_config(cls, cfg: Mapping[str, Any]) -> Self:
        """An ATGRPOConfig from a validated run config (:func:`rllib_integration.settings.load_config`)."""
        c = cls()
        for builder, kwargs in builder_calls(cfg).items():
            getattr(c, builder)(**kwargs)
        policies = cfg["policies"]
        mapping = dict(cfg["policy_mapping"])
        if policies or mapping:
            pids = sorted(set(policies) | set(mapping.values()))
            overrides = {pid: {k: v for k, v in (policies.get(pid) or {}).items() if k != "model"} for pid in pids}
            multi: dict[str, Any] = {"policies": set(pids)}
            if mapping:
                multi["policy_mapping_fn"] = AgentTableMapping(mapping)
            c.multi_agent(**multi)
            c.rl_module(algorithm_config_overrides_per_module={p: o for p, o in overrides.items() if o})
        return c


def _old_attribute(old: str, new: str) -> property:
    """``ATGRPOConfig.<old>``: the previous release's name of ``<new>``, with a DeprecationWarning."""
    def get(self: Any) -> Any:
        warn_renamed(old, new, "ATGRPOConfig attribute")
        return getattr(self, new)

    def set_(self: Any, value: Any) -> None:
        warn_renamed(old, new, "ATGRPOConfig attribute")
        setattr(self, new, value)

    return property(get, set_, doc=f"Deprecated: ``{new}`` (the previous release's name).")


for _old, _new in OLD_ATTRIBUTES.items():
    setattr(ATGRPOConfigBase, _old, _old_attribute(_old, _new))
