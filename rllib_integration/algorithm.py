"""``ATGRPOConfig`` / ``ATGRPO``: AT-GRPO for teams of LLM agents as an RLlib Algorithm.

Built on RLlib's new API stack: one :class:`~.rl_module.LLMRLModule` per policy inside a
``MultiRLModule``, updated by :class:`~.learner.ATGRPOTorchLearner` through RLlib's
``LearnerGroup`` (local, or ``num_learners`` remote learners). Sampling does not use RLlib's
EnvRunners (they step gym-style vector envs with RLModule forward passes); it is done by
rollout-worker actors (:mod:`.rollout_worker`) that run the AT-GRPO tree sampler with a
generation backend (HF transformers or vLLM) over PettingZoo AEC team envs made through
RLlib's env registry. Their resources are part of the trial's placement group
(:meth:`ATGRPO.default_resource_request`), so they start inside Tune trials.

One iteration (:meth:`ATGRPO.training_step`):

1. the iteration's env seeds are split between the rollout workers; each plays its envs to
   the end with K candidates per (env, turn, agent) and returns every candidate;
2. advantages are computed over the whole batch with the configured estimator and grouping
   (:func:`advantages.compute_advantages`); zero-variance groups are dropped if asked;
3. each policy's samples form that module's train batch; ``LearnerGroup.update`` takes one
   optimizer step per minibatch round (per-policy minibatch sizes), ``num_epochs`` times;
4. the learner's trainable weights (the full model, or the LoRA adapter at L2) are pushed to
   every rollout worker's generation backend.

Usage::

    from rllib_integration import ATGRPOConfig             # registers "ATGRPO" and the envs
    config = (ATGRPOConfig()
              .environment("llm_marl/PlanPath-v0", env_config={"size": 3})
              .llm(model_path="tiny", specialization="L1")
              .training(lr=1e-3, estimator="at_grpo"))
    algo = config.build_algo(); algo.train()
    tune.Tuner("ATGRPO", param_space=config).fit()
"""

from __future__ import annotations

import contextvars
import difflib
import inspect
import logging
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional

import numpy as np

from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.core import COMPONENT_LEARNER_GROUP
from ray.rllib.core.learner.learner_group import LearnerGroup
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.checkpoints import Checkpointable
from ray.tune.result import TRAINING_ITERATION
from ray.tune.registry import register_trainable

from .settings import (SETTINGS, ConfigError, attribute_name, builder_calls, builder_keywords, config_attributes,
                       settings_of, validate_settings)
from .core.metrics import episode_metrics, rollout_metrics
from .batching import minibatch_rounds, multi_agent_batch
from .envs import EnvCheck, EnvEntry, check_env, register_llm_marl_envs, resolve_env
from .policies import AgentTableMapping, LLMPolicySpec, policy_setting, resolve_mapping, resolve_policies

__all__ = ["ATGRPOConfig", "ATGRPO", "register_llm_marl_envs", "RLLIB_ALIASES", "RLLIB_UNUSED"]

logger = logging.getLogger(__name__)

#: RLlib settings that are ATGRPO settings under another name: RLlib keyword -> (builder, ours).
#: The RLlib builders accept them and set ours (the RLlib attribute keeps its default).
RLLIB_ALIASES: dict[str, tuple[str, str]] = {
    "num_env_runners": ("rollouts", "num_rollout_actors"),
    "num_cpus_per_env_runner": ("rollouts", "num_cpus_per_rollout_worker"),
    "num_gpus_per_env_runner": ("rollouts", "num_gpus_per_rollout_worker"),
    "max_num_env_runner_restarts": ("rollouts", "max_rollout_worker_restarts"),
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
    "evaluation_num_env_runners": "evaluation runs on the rollout workers (rollout.num_rollout_workers)",
    "evaluation_parallel_to_training": "evaluation runs after the iteration's update",
    "evaluation_duration_unit": "evaluation counts episodes: .evaluation(evaluation_num_episodes=N)",
    "explore": "sampling.temperature (training) and evaluation.temperature (0 = greedy)",
}
_RLLIB_DEFAULTS: dict[str, Any] = {}


def _rllib_default(attr: str) -> Any:
    if not _RLLIB_DEFAULTS:
        base = AlgorithmConfig()
        _RLLIB_DEFAULTS.update({a: getattr(base, a, None) for a in [*RLLIB_UNUSED, *RLLIB_ALIASES]})
    return _RLLIB_DEFAULTS[attr]


# ------------------------------------------------------------------------------ config
class ATGRPOConfig(AlgorithmConfig):
    """Configuration of :class:`ATGRPO` (see docs/config_reference.md for every setting).

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
        super().__init__(algo_class=algo_class or ATGRPO)
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

    # -- builder methods (keywords: the attributes of rllib_integration.settings) ----------------
    def _set_settings(self, builder: str, kwargs: Mapping[str, Any], *, rllib_method: bool = False) -> dict:
        """Set this builder's AT-GRPO settings from ``kwargs``; return the rest (RLlib's own keywords)."""
        ours = builder_keywords(builder)
        rllib_params = set(inspect.signature(getattr(AlgorithmConfig, builder)).parameters) if rllib_method else set()
        rest = {}
        for k, v in kwargs.items():
            if k in rllib_params:
                rest[k] = v
            elif k in ours and not ours[k].rllib:
                if v is not NotProvided:
                    setattr(self, k, {**getattr(self, k), **dict(v)} if k in ("lora", "warm_start") else v)
            else:
                known = sorted(set(ours) | rllib_params - {"self"})
                hint = difflib.get_close_matches(k, known, n=1, cutoff=0.5)
                raise ConfigError(f"ATGRPOConfig.{builder}() got an unknown keyword {k!r}"
                                  + (f" (did you mean {hint[0]!r}?)" if hint else "") + f"; known: {known}")
        return rest

    def _map_rllib_aliases(self, builder: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        """RLlib keywords that are ours under another name (:data:`RLLIB_ALIASES`) -> ours; returns the rest."""
        rest = {}
        for k, v in kwargs.items():
            alias = RLLIB_ALIASES.get(k)
            if alias is None or v is NotProvided:
                rest[k] = v
                continue
            if k == "evaluation_duration" and not isinstance(v, int):
                raise ConfigError(f"ATGRPOConfig.evaluation(evaluation_duration={v!r}): ATGRPO evaluates a number "
                                  "of episodes; give an int (it sets evaluation_num_episodes)")
            setattr(self, alias[1], v)
        return rest

    def environment(self, env: Any = NotProvided, **kwargs: Any) -> "ATGRPOConfig":
        """RLlib's ``.environment()``: ``env`` is a registered id (an llm_marl task, a task of your own, an
        id given to ``register_env``), a ``"module:Class"`` entry point, a PettingZoo AEC env class (built
        with ``env_config`` as keyword arguments) or an RLlib creator; plus ``env_modules`` (modules that
        register your task, imported here and in every worker)."""
        return super().environment(env, **self._set_settings("environment", kwargs, rllib_method=True))

    def env_runners(self, **kwargs: Any) -> "ATGRPOConfig":
        """RLlib's ``.env_runners()``: ``num_env_runners``, ``num_cpus_per_env_runner``,
        ``num_gpus_per_env_runner`` set the rollout workers' (:data:`RLLIB_ALIASES`)."""
        return super().env_runners(**self._map_rllib_aliases("env_runners", kwargs))

    def fault_tolerance(self, **kwargs: Any) -> "ATGRPOConfig":
        """RLlib's ``.fault_tolerance()``; ``max_num_env_runner_restarts`` sets ``max_rollout_worker_restarts``."""
        return super().fault_tolerance(**self._map_rllib_aliases("fault_tolerance", kwargs))

    def llm(self, **kwargs: Any) -> "ATGRPOConfig":
        """Models: ``model_path`` ('tiny', 'smollm2', a directory, or {'tiny': {...}}); ``specialization``
        'L1'|'L2'|'L3'; ``policy_models`` {policy: model} at L3; ``lora`` {r, alpha, dropout, target_modules}."""
        self._set_settings("llm", kwargs)
        return self

    def sampling(self, **kwargs: Any) -> "ATGRPOConfig":
        """Generation: ``sampling_mode`` 'tree' (AT-GRPO) | 'parallel'; ``k`` candidates per (env, turn, agent)."""
        self._set_settings("sampling", kwargs)
        return self

    def rollouts(self, **kwargs: Any) -> "ATGRPOConfig":
        """Rollout-worker actors: ``num_rollout_actors``, ``envs_per_iteration``, their resources, the
        ``generation_backend``, ``rollout_sandbox`` (how llm_marl envs run programs) and ``step_workers``."""
        self._set_settings("rollouts", kwargs)
        return self

    def training(self, **kwargs: Any) -> "ATGRPOConfig":
        """RLlib's training settings plus AT-GRPO's (estimator, group_by, clip ranges, KL, loss_agg, ...)."""
        super().training(**self._set_settings("training", kwargs, rllib_method=True))
        return self

    def evaluation(self, **kwargs: Any) -> "ATGRPOConfig":
        """RLlib's evaluation settings plus ``evaluation_num_episodes``, ``evaluation_temperature``,
        ``eval_env_config`` and ``evaluation_final_iteration`` (the run's last iteration, e.g. Tune's
        ``stop={"training_iteration": N}``: it is evaluated too when it is no multiple of
        ``evaluation_interval``; ``llm-marl train`` sets it to ``run.iterations``)."""
        kwargs = self._map_rllib_aliases("evaluation", kwargs)
        super().evaluation(**self._set_settings("evaluation", kwargs, rllib_method=True))
        return self

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
                          eval_env_config=self.eval_env_config,
                          names={"env": "ATGRPOConfig.env", "env_config": "ATGRPOConfig.env_config",
                                 "eval_env_config": "ATGRPOConfig.eval_env_config",
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
    def from_run_config(cls, cfg: Mapping[str, Any]) -> "ATGRPOConfig":
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


def _builder_signature(builder: str, rllib_method: bool) -> inspect.Signature:
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    names = [a for a, s in builder_keywords(builder).items() if not s.rllib]
    if rllib_method:
        names += [n for n in inspect.signature(getattr(AlgorithmConfig, builder)).parameters if n != "self"]
    params += [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=NotProvided) for n in dict.fromkeys(names)]
    return inspect.Signature(params, return_annotation="ATGRPOConfig")


def _settings_builder(builder: str) -> Any:
    def method(self: ATGRPOConfig, **kwargs: Any) -> ATGRPOConfig:
        self._set_settings(builder, kwargs)
        return self

    method.__name__ = method.__qualname__ = builder
    method.__doc__ = f"The ``{builder}`` settings (docs/config_reference.md)."
    return method


# Every builder of AT-GRPO settings: its keywords are the schema's attributes (a builder named by a
# new setting and not written above is made here), shown in its signature.
for _name in sorted({s.builder for s in SETTINGS if s.attr and not s.rllib and s.builder}):
    _rllib = any(s.rllib for s in SETTINGS if s.builder == _name)  # also RLlib's own builder: keywords pass on
    if _name not in ATGRPOConfig.__dict__:
        setattr(ATGRPOConfig, _name, _settings_builder(_name))
    getattr(ATGRPOConfig, _name).__signature__ = _builder_signature(_name, _rllib)


def _init_ray_for(cfg: ATGRPOConfig) -> None:
    """Start a local Ray (if none runs) whose workers import ``env_modules`` (:func:`~.envs.task_runtime_env`),
    after checking that the run's actors fit this machine (a local Ray gets what it has): an actor that
    cannot be placed would wait forever. With ``RAY_ADDRESS`` the cluster is checked once connected."""
    import ray

    if ray.is_initialized():
        return
    from .envs import task_runtime_env
    from .resources import cluster_address, machine_resources, ray_address_file

    address = cluster_address()
    # a cluster started with `ray start` on this machine: ray.init() joins it; check after connecting
    joins_cluster = bool(address) or ray_address_file().is_file()
    if not joins_cluster:
        have = machine_resources()
        cfg.check_resources(have, source=f"this machine (Ray is not running yet: build_algo() starts a local Ray "
                                         f"with its {have['CPU']:g} CPU and {have['GPU']:g} GPU)")
    ray.init(runtime_env=task_runtime_env(cfg.env_modules) or None, include_dashboard=False)
    if joins_cluster:
        cfg.check_resources(source=f"the Ray cluster at RAY_ADDRESS={address!r}" if address
                            else "the Ray cluster `ray start` runs on this machine")


#: iterations in a row without any reward variance after which the run warns (see ``no_signal_message``)
NO_SIGNAL_WARN_ITERATIONS = 3


def no_signal_message(cfg: Any, result: Mapping[str, Any], streak: int) -> str:
    """The warning of a run whose AT-GRPO groups all had zero reward variance ``streak`` iterations in a
    row: what it means, each role's valid ratio and reply length, and the settings to change."""
    agents = result.get("agents", {}) or {}
    valid = {a: float(m.get("valid_ratio", 0.0)) for a, m in agents.items()}
    tokens = {a: float(m.get("completion_tokens_mean", 0.0)) for a, m in agents.items()}
    max_new = int(cfg.max_new_tokens)
    lines = [f"ATGRPO WARNING: no learning signal for {streak} iterations in a row: in every group (K="
             f"{int(cfg.k)} candidates of one (env, turn, agent)) all candidates got the same reward "
             "(groups/zero_variance_frac=1.0), so every advantage is 0 and the policies are not updated. "
             "Valid-action ratio per role: " + (", ".join(f"{a} {v:.2f}" for a, v in sorted(valid.items())) or "-")
             + "; reply tokens (mean): " + (", ".join(f"{a} {t:.1f}" for a, t in sorted(tokens.items())) or "-")
             + f" of sampling.max_new_tokens={max_new}. What to change:"]
    if valid and max(valid.values()) == 0.0:
        lines.append("* no candidate writes a valid action: the model does not follow the task's action format yet.")
        if not int(dict(cfg.warm_start or {}).get("episodes", 0)):
            lines.append("  - turn on the warm start (warm_start.episodes: 16, i.e. .training(warm_start={'episodes': "
                         "16})): a supervised pass on the task's expert demonstrations before RL (llm_marl tasks);")
        if tokens and max(tokens.values()) >= 0.9 * max_new:
            lines.append(f"  - raise sampling.max_new_tokens (now {max_new}): replies are cut at the limit, and an "
                         "action (a program, an answer line) may not fit;")
        lines.append("  - or use a model that follows the format (model.path), or a task whose invalid actions are "
                     "graded (env.config invalid_penalty only shifts them all alike).")
    else:
        lines.append(f"* the candidates act differently but score alike: raise sampling.k (now {int(cfg.k)}) or "
                     f"sampling.temperature (now {float(cfg.temperature):g}) for more diverse candidates, use "
                     "training.group_by [task_id, agent] to compare candidates across envs and turns, or shape the "
                     "rewards (env.config) so that better actions score higher.")
    return "\n".join(lines)


def _check_trial_placement(cf: Any, bundles: list[dict[str, float]]) -> None:
    """A Tune trial's placement group (``bundles``: the trial's own process first, then its actors) against
    the running cluster (Tune asks for it on the driver, where Ray runs): one that can never fit raises
    :class:`ConfigError` at once, naming the settings and what is free (else the trial is PENDING forever);
    one that fits is watched, and a warning names what it needs and what is free if it stays pending
    (resources held by others) for ``min(resources.PENDING_WARN_S, rollout.start_timeout_s)`` seconds."""
    import ray

    if not ray.is_initialized():
        return
    from . import resources

    main = {k: float(v) for k, v in bundles[0].items() if k in ("CPU", "GPU")}
    plan = resources.ActorPlan.of_config(cf, main_process=main)
    resources.check_resources(
        plan, ray.cluster_resources(), source="the Ray cluster for one Tune trial (its own process and its actors, "
                                              "one placement group)",
        free=ray.available_resources(), python=True,
        advice="Give Ray more (ray.init(num_cpus=...), more nodes) or ask for less (fewer rollout actors, "
               "num_cpus_per_rollout_worker=0.5, .resources(num_cpus_for_main_process=...))")
    needs = ", ".join(f"{v:g} {k}" for k, v in resources.actor_resources(plan).items())
    after = min(float(resources.PENDING_WARN_S), float(cf.rollout_start_timeout_s))
    resources.watch_pending_placement(bundles, f"{needs} ({resources.describe_plan(plan, python=True)})", after)


def _wall_timings(parts: list[dict[str, Any]]) -> dict[str, float]:
    """Per-phase wall times of a batch sampled by workers in parallel: the phases of the slowest
    worker (they add up to the batch's wall time), plus token and generation-time totals."""
    slowest = max(parts, key=lambda p: p["timings"]["rollout_s"])["timings"] if parts else {}
    out: dict[str, float] = defaultdict(float, {k: float(slowest.get(k, 0.0))
                                                for k in ("generate_s", "env_s", "sandbox_s")})
    for p in parts:
        out["tokens"] += p["timings"]["tokens"]
        out["generate_s_sum"] += p["timings"]["generate_s"]
    return out


def _count_params(learner: Any) -> dict[str, dict[str, int]]:
    out = {}
    for pid in learner.module.keys():
        ps = list(learner.module[pid].parameters())
        out[pid] = {"trainable_params": int(sum(p.numel() for p in ps if p.requires_grad)),
                    "total_params": int(sum(p.numel() for p in ps))}
    return out


#: set while ``ATGRPO.from_checkpoint`` builds the algorithm: the checkpoint holds the warm-started weights
_RESTORING: contextvars.ContextVar[bool] = contextvars.ContextVar("atgrpo_restoring", default=False)


def _learner_sync_weights(learner: Any, _: Any = None) -> dict[str, Any]:
    """``foreach_learner`` callback: the learner's weights for the rollout workers."""
    return learner.get_sync_weights()


def _warm_start_learner(learner: Any, *, demos: list, heldout: list, mapping: dict[str, str],
                        model_paths: dict[str, str], epochs: int, lr: float, batch_size: int, seed: int, chat: bool,
                        system_prompt: Optional[str]) -> dict[str, Any]:
    """Run :func:`core.warm_start.warm_start` on a learner's own modules (in place, before any RL
    update): each policy's ``lm`` (a PeftModel with only its adapter trainable at L2) with its
    tokenizer. A KL reference copy (L1/L3) is reset to the warm-started weights."""
    import torch
    from transformers import AutoTokenizer

    from .core.backends import HFBackend
    from .core.warm_start import warm_start

    pids = sorted(set(mapping.values()))
    models = {}
    for pid in pids:
        module = learner.module[pid]
        models[pid] = (module.lm, AutoTokenizer.from_pretrained(model_paths[pid]))
    device = str(next(models[pids[0]][0].parameters()).device)
    torch.manual_seed(seed)
    res = warm_start(HFBackend(models, device=device), demos, mapping, epochs=epochs, lr=lr, batch_size=batch_size,
                     chat=chat, system_prompt=system_prompt, heldout=heldout or None, seed=seed, progress="lines")
    for pid in pids:
        module = learner.module[pid]
        module.lm.train()
        if getattr(module, "_ref", None):
            module._ref[0].load_state_dict(module.lm.state_dict())
    return {"epoch_losses": res.epoch_losses, "heldout_losses": res.heldout_losses,
            "policy_losses": res.policy_losses, "num_demonstrations": res.num_demonstrations,
            "completion_tokens": res.completion_tokens, "train_s": res.seconds}


def _plain(x: Any) -> Any:
    """Stats objects (RLlib MetricsLogger leaves) -> python numbers, recursively."""
    if isinstance(x, Mapping):
        return {k: _plain(v) for k, v in x.items()}
    if hasattr(x, "peek"):
        try:
            return _plain(x.peek())
        except Exception:
            return None
    if hasattr(x, "item") and getattr(x, "ndim", 1) == 0:
        return x.item()
    return x


# ------------------------------------------------------------------------------ algorithm
class ATGRPO(Algorithm):
    """AT-GRPO over LLM teams (see the module docstring)."""

    config: ATGRPOConfig  # RLlib types it AlgorithmConfig | None; set in Algorithm.__init__
    learner_group: LearnerGroup  # built in setup (RLlib types it Optional)

    @classmethod
    def get_default_config(cls) -> ATGRPOConfig:
        return ATGRPOConfig()

    # -- resources ---------------------------------------------------------------------------
    @classmethod
    def default_resource_request(cls, config: AlgorithmConfig | dict) -> Any:
        from ray.rllib.algorithms.utils import _get_learner_bundles, _get_main_process_bundle
        from ray.tune.execution.placement_groups import PlacementGroupFactory

        cf: Any  # an ATGRPOConfig (its settings' attributes are made at run time)
        if isinstance(config, AlgorithmConfig):
            cf = config
        else:
            cf = cls.get_default_config().update_from_dict(config)
        main = _get_main_process_bundle(cf)
        workers = [{"CPU": float(cf.num_cpus_per_rollout_worker), "GPU": float(cf.num_gpus_per_rollout_worker)}
                   for _ in range(int(cf.num_rollout_actors))]
        bundles = [main] + workers + _get_learner_bundles(cf)
        bundles = [{k: v for k, v in b.items() if v} for b in bundles]
        bundles = [b for b in bundles if b] or [{"CPU": 1}]
        if not main or not any(main.values()):
            bundles.insert(0, {"CPU": 0.01})  # the trial's own process needs a (tiny) bundle of its own
        _check_trial_placement(cf, bundles)
        return PlacementGroupFactory(bundles=bundles, strategy=cf.placement_strategy)

    @staticmethod
    def _get_env_id_and_creator(env_specifier: Any, config: AlgorithmConfig) -> tuple[Optional[str], EnvEntry]:
        """The env as an :class:`~.envs.EnvEntry` (importable entry point; workers build envs from it)."""
        entry = resolve_env(env_specifier, getattr(config, "env_modules", ()), key="ATGRPOConfig.env",
                            modules_key="ATGRPOConfig.env_modules")
        return entry.name, entry

    # -- setup ----------------------------------------------------------------------------
    def setup(self, config: AlgorithmConfig) -> None:  # type: ignore[override]  # RLlib's own signature
        # Algorithm.setup would build RLlib EnvRunners, which step gym-style envs with RLModule
        # forward passes; LLM teams are sampled by our rollout workers instead.
        import torch

        from ray.rllib.utils import force_list

        from .rollout_worker import RolloutWorkerPool, WorkerSpec, with_sandbox

        cfg: ATGRPOConfig = self.config
        if int(cfg.num_rollout_actors) > 0 or int(cfg.num_learners) > 0:
            _init_ray_for(cfg)  # before any actor (remote learners too) starts; checks that they fit
        torch.set_num_threads(max(1, int(cfg.torch_threads)))
        self.callbacks = [cls() for cls in force_list(cfg.callbacks_class)]
        self.local_replay_buffer = None
        self.remote_requests_in_flight = defaultdict(set)
        self.env_runner_group = None
        self.eval_env_runner_group = None
        self.offline_data = None
        self.spaces = None
        self.env_to_module_connector = None
        self.module_to_env_connector = None
        self.evaluation_config = None
        self.evaluation_dataset = None
        self.reward_estimators = {}
        self.offline_eval_runner_group = None  # type: ignore[assignment]  # no offline data here

        check = cfg.check_env()
        entry, agents = check.entry, check.agents
        probe = entry(dict(cfg.env_config))
        spaces = {a: (probe.observation_space(a), probe.action_space(a)) for a in agents}
        self._agents = agents
        self._env_entry = entry

        # Policies, the agent -> policy mapping and one spec per policy (builds the tiny model if needed).
        setup = resolve_policies(cfg, agents)
        pids, mapping = setup.policy_ids, setup.mapping
        self._mapping, self._policy_ids_, self._specs = mapping, pids, setup.specs

        module_specs = {}
        for pid in pids:
            agent = next((a for a, p in mapping.items() if p == pid), agents[0])
            obs, act = spaces[agent]
            module_specs[pid] = RLModuleSpec(module_class=self.config.get_default_rl_module_spec().module_class,
                                             observation_space=obs, action_space=act,
                                             model_config=self._specs[pid].module_config())
        self._module_spec = MultiRLModuleSpec(rl_module_specs=module_specs)
        self.learner_group = cfg.build_learner_group(rl_module_spec=self._module_spec)

        # Envs that take sandbox= (llm_marl envs) run programs in the rollout.sandbox kind.
        env_config = dict(cfg.env_config)
        from llm_marl_envs import LLMTeamEnv

        if isinstance(getattr(probe, "unwrapped", probe), LLMTeamEnv):
            env_config = with_sandbox(env_config, cfg.rollout_sandbox)

        temps = {pid: float(self._policy_setting(pid, "temperature")) for pid in pids}
        device = cfg.model_device or ("cuda" if float(cfg.num_gpus_per_rollout_worker) > 0 else "cpu")
        self._worker_spec = WorkerSpec(
            env=entry, env_config=env_config, eval_env_config=dict(cfg.eval_env_config),
            policy_specs=self._specs, policy_mapping=mapping, temperatures=temps, top_p=float(cfg.top_p),
            max_new_tokens=int(cfg.max_new_tokens), chat=bool(cfg.chat), system_prompt=cfg.system_prompt,
            stop=tuple(cfg.stop) if isinstance(cfg.stop, (list, tuple)) else cfg.stop,
            backend=cfg.generation_backend, device=device, torch_threads=int(cfg.torch_threads),
            seed=int(cfg.seed or 0), step_workers=cfg.step_workers, progress=bool(cfg.progress_bars),
            backend_options=self._backend_options())
        self.rollout_workers = RolloutWorkerPool(self._worker_spec, int(cfg.num_rollout_actors),
                                         num_cpus=float(cfg.num_cpus_per_rollout_worker),
                                         num_gpus=float(cfg.num_gpus_per_rollout_worker),
                                         max_restarts=int(cfg.max_rollout_worker_restarts),
                                         start_timeout_s=float(cfg.rollout_start_timeout_s))
        self._sync_weights()
        self.warm_start_metrics: Optional[dict[str, Any]] = None
        self._warm_start_reported = False
        if int(cfg.warm_start.get("episodes", 0)) > 0 and not _RESTORING.get():
            self.warm_start_metrics = self._warm_start()
        self._totals: defaultdict[str, float] = defaultdict(float)
        self._no_signal_streak = 0  # iterations in a row in which every group had zero reward variance
        # RLlib types foreach_learner's func as (learner, kwargs) -> T; it calls func(learner, **kwargs)
        self._param_counts = next(iter(self.learner_group.foreach_learner(_count_params))).get()  # type: ignore[arg-type]
        self._set_up_metrics()  # RLlib's Ray (Prometheus) metrics used by Algorithm.train()/log_result()
        from ray.rllib.callbacks.utils import make_callback

        make_callback("on_algorithm_init", self.callbacks, cfg.callbacks_on_algorithm_init,
                      kwargs=dict(algorithm=self, metrics_logger=self.metrics))

    # -- warm start -------------------------------------------------------------------------------
    def _warm_start(self) -> dict[str, Any]:
        """The ``warm_start`` stage (before the first rollout): expert demonstrations on the train split
        (the run's env config), a supervised pass on every learner's modules (at L2 only the adapters),
        then the weights are pushed to the rollout workers. With evaluation on, the eval split is played
        greedily before it (``eval_before``) and after it (``eval_after``). Returns the stage's metrics."""
        from llm_marl_envs import LLMTeamEnv

        from .core.warm_start import collect_demonstrations

        cfg, ws = self.config, dict(self.config.warm_start)
        probe = self._env_entry(dict(cfg.env_config))
        if not isinstance(getattr(probe, "unwrapped", probe), LLMTeamEnv):
            raise ConfigError(f"warm_start.episodes={ws['episodes']}: the warm start needs an llm_marl task with an "
                              f"expert (env {cfg.env!r} is not an LLMTeamEnv); set warm_start.episodes=0")
        out: dict[str, Any] = {}
        if cfg.evaluation_interval:
            out["eval_before"] = self.evaluate()
        t0 = time.perf_counter()
        env_config = self._worker_spec.env_config
        first = int(ws["seed"]) * 100_003
        demos = collect_demonstrations(self._env_entry, env_config, int(ws["episodes"]), seed=first)
        heldout = (collect_demonstrations(self._env_entry, env_config, int(ws["heldout_episodes"]),
                                          seed=first + int(ws["episodes"]))
                   if int(ws["heldout_episodes"]) else [])
        collect_s = time.perf_counter() - t0
        if not demos:
            raise ConfigError(f"warm_start: the expert solved none of the {ws['episodes']} demonstration episodes "
                              "of this env config; raise warm_start.episodes or change env.config")
        print(f"warm start: {len(demos)} demonstrations from {ws['episodes']} expert episodes "
              f"({collect_s:.1f}s), {ws['epochs']} epochs", flush=True)
        # RLlib types foreach_learner's func as (learner, kwargs) -> T; it calls func(learner, **kwargs)
        results = self.learner_group.foreach_learner(
            _warm_start_learner,  # type: ignore[arg-type]
            demos=demos, heldout=heldout, mapping=dict(self._mapping),
            model_paths={pid: s.model_path for pid, s in self._specs.items()}, epochs=int(ws["epochs"]),
            lr=float(ws["lr"]), batch_size=int(ws["batch_size"]), seed=int(ws["seed"]), chat=bool(cfg.chat),
            system_prompt=cfg.system_prompt)
        res = next(iter(results)).get()
        self._sync_weights()
        if cfg.evaluation_interval:
            out["eval_after"] = self.evaluate()
        out.update(res, collect_s=collect_s, time_s=time.perf_counter() - t0, num_episodes=int(ws["episodes"]),
                   loss_first_epoch=res["epoch_losses"][0], loss_last_epoch=res["epoch_losses"][-1])
        if res["heldout_losses"]:
            out.update(heldout_loss_before=res["heldout_losses"][0], heldout_loss_after=res["heldout_losses"][-1])
        return out

    @classmethod
    def from_checkpoint(cls, *args: Any, **kwargs: Any) -> "ATGRPO":
        """Restore (the warm start is part of the checkpointed weights, so setup skips it)."""
        token = _RESTORING.set(True)
        try:
            algo = super().from_checkpoint(*args, **kwargs)
            assert isinstance(algo, ATGRPO)
            return algo
        finally:
            _RESTORING.reset(token)

    def _backend_options(self) -> dict[str, Any]:
        """Keywords of the generation backend (``rollout.static_cache/compile/logprobs/max_batch_size/warmup/vllm``)."""
        cfg = self.config
        if cfg.generation_backend == "vllm":
            return {"engine_options": dict(cfg.vllm_options or {})}
        return {"static_cache": bool(cfg.static_cache), "compile": cfg.generation_compile,
                "logprobs": cfg.rollout_logprobs, "max_batch_size": int(cfg.generation_max_batch_size),
                "warmup": bool(cfg.generation_warmup)}

    def _policy_setting(self, pid: str, key: str) -> Any:
        return policy_setting(self.config, pid, key)

    # -- weights ------------------------------------------------------------------------------
    def _sync_weights(self) -> float:
        """Push the learner's weights to the rollout workers, in the sampling dtype (``LLMRLModule.sync_state``)."""
        t0 = time.perf_counter()
        lg = self.learner_group
        # every learner holds the same weights (DDP): ask one, as LearnerGroup.get_state does
        kw: dict[str, Any] = {}
        if not lg.is_local and lg._worker_manager is not None:
            kw["remote_actor_ids"] = [lg._worker_manager.healthy_actor_ids()[0]]
        weights = next(iter(lg.foreach_learner(_learner_sync_weights, **kw))).get()
        self.rollout_workers.sync_weights(weights)
        return time.perf_counter() - t0

    # -- one iteration -----------------------------------------------------------------------------
    def _train_seeds(self, iteration: int) -> list[int]:
        cfg = self.config
        n = int(cfg.envs_per_iteration)
        if cfg.train_task_pool:
            return [(iteration * n + j) % int(cfg.train_task_pool) for j in range(n)]
        return [int(cfg.seed or 0) * 1_000_000 + iteration * n + j for j in range(n)]

    def _sampling_seed(self, iteration: int, salt: int = 0) -> int:
        return (int(self.config.seed or 0) * 1_000_003 + iteration * 10_007 + salt) % (2**31 - 1)

    def training_step(self) -> dict[str, Any]:  # type: ignore[override]  # RLlib's returns None; step() uses ours
        """One AT-GRPO iteration: sample, advantages, update, sync."""
        t0 = time.perf_counter()
        batch = self._sample_trees()
        t1 = time.perf_counter()
        adv, gids, keep = self._advantages(batch["samples"])
        t2 = time.perf_counter()
        learner_metrics, num_updates = self._update(batch["samples"], adv, keep)
        t3 = time.perf_counter()
        t_sync = self._sync_weights() if num_updates else 0.0
        times = {"rollout_s": t1 - t0, "advantage_s": t2 - t1, "update_s": t3 - t2, "weight_sync_s": t_sync}
        return self._training_results(batch, adv, gids, keep, learner_metrics, num_updates, times)

    def _sample_trees(self) -> dict[str, Any]:
        """The iteration's env seeds played by the rollout workers: samples, episodes, summed timings."""
        cfg, it = self.config, self.iteration
        parts = self.rollout_workers.sample(self._train_seeds(it), sampling_seed=self._sampling_seed(it),
                                    split="train", mode=cfg.sampling_mode, k=int(cfg.k))
        samples = [s for p in parts for s in p["samples"]]
        episodes = [e for p in parts for e in p["episodes"]]
        self._episode_callbacks(episodes)
        self._callback("on_sample_end", env_runner=None, metrics_logger=self.metrics, samples=samples, worker=None)
        return {"samples": samples, "episodes": episodes, "timings": _wall_timings(parts)}

    def _callback(self, name: str, **kwargs: Any) -> None:
        """RLlib's callback ``name`` (callback classes and ``config.callbacks(name=fn)``), in this process."""
        from ray.rllib.callbacks.utils import make_callback

        make_callback(name, self.callbacks, getattr(self.config, f"callbacks_{name}", None), kwargs=kwargs)

    def _episode_callbacks(self, episodes: list) -> None:
        """``on_episode_end`` once per finished episode (an :class:`~.core.rollout.EpisodeSummary`)."""
        for ep in episodes:
            self._callback("on_episode_end", episode=ep, env_runner=None, metrics_logger=self.metrics, env=None,
                           env_index=int(ep.env_idx), rl_module=None, worker=None, base_env=None, policies=None)

    def _advantages(self, samples: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Advantages, group ids and the keep mask (zero-variance groups dropped if asked)."""
        from .core.advantages import compute_advantages, dynamic_sampling_mask
        from .core.rollout import group_ids

        cfg = self.config
        if not samples:
            return np.zeros(0), np.zeros(0, dtype=np.int64), np.ones(0, dtype=bool)
        rewards = np.array([s.reward for s in samples], dtype=np.float64)
        gids = group_ids(samples, by=tuple(cfg.group_by))
        keep = dynamic_sampling_mask(rewards, gids) if cfg.filter_zero_variance else np.ones(len(samples), dtype=bool)
        # REINFORCE++-baseline whitens over the samples that are trained, per policy
        extra = {"keep": keep, "whiten_by": [s.policy_id for s in samples]} if cfg.estimator == "reinforce_pp" else {}
        adv = compute_advantages(rewards, gids, cfg.estimator, **extra) * (-1.0 if cfg.flip_advantages else 1.0)
        return adv, gids, keep

    def _update(self, samples: list, adv: np.ndarray, keep: np.ndarray) -> tuple[dict[str, Any], int]:
        """``num_epochs`` passes of per-policy minibatch rounds, one ``LearnerGroup.update`` per round."""
        cfg = self.config
        learner_metrics: dict[str, Any] = {}
        num_updates = 0
        pids = [s.policy_id for s in samples]
        for epoch in range(int(cfg.num_epochs)):
            for round_ in minibatch_rounds(pids, keep, seed=int(cfg.seed or 0), iteration=self.iteration,
                                           epoch=epoch,
                                           minibatch_size=lambda pid: self._policy_setting(pid, "minibatch_size")):
                update = self.learner_group.update(batch=multi_agent_batch(samples, adv, round_))
                num_updates += 1
                res = update[0] if isinstance(update, list) and update else update
                for pid in round_:
                    learner_metrics[pid] = _plain(res.get(pid, {})) if isinstance(res, Mapping) else {}
        return learner_metrics, num_updates

    def _training_results(self, batch: dict[str, Any], adv: np.ndarray, gids: np.ndarray, keep: np.ndarray,
                          learner_metrics: dict[str, Any], num_updates: int, times: dict[str, float]) -> dict:
        samples, episodes, timings = batch["samples"], batch["episodes"], batch["timings"]
        out = rollout_metrics(samples, adv, gids, keep, episodes)
        n_tok = timings["tokens"]
        gen_sum = timings["generate_s_sum"]
        out["learner"] = {pid: {k: v for k, v in (m or {}).items() if isinstance(v, (int, float))}
                          for pid, m in learner_metrics.items()}
        out["num_updates"] = num_updates
        out["timers"] = {"rollout_s": times["rollout_s"], "generate_s": timings["generate_s"],
                         "env_s": timings["env_s"], "sandbox_s": timings["sandbox_s"],
                         "advantage_s": times["advantage_s"], "update_s": times["update_s"],
                         "weight_sync_s": times["weight_sync_s"]}
        out["throughput"] = {"tokens_generated": int(n_tok),
                             "tokens_per_s": float(n_tok / gen_sum) if gen_sum else 0.0,
                             "samples": len(samples), "samples_trained": int(keep.sum())}
        self._totals["samples"] += len(samples)
        self._totals["episodes"] += len(episodes)
        self._totals["tokens"] += n_tok
        out["totals"] = dict(self._totals)
        out["num_rollout_worker_restarts"] = self.rollout_workers.num_restarts
        out["num_rollout_workers"] = self.rollout_workers.num_workers
        out["policies"] = {pid: {"level": self._specs[pid].level, **self._param_counts.get(pid, {})}
                           for pid in self._policy_ids_}
        out["env_runners"] = {"episode_return_mean": out.get("episode_return_mean", 0.0),
                              "num_episodes": len(episodes)}
        if self.warm_start_metrics is not None and not self._warm_start_reported:
            out["warm_start"] = self.warm_start_metrics  # in the first result only
            self._warm_start_reported = True
        self._watch_learning_signal(out)
        return out

    def _watch_learning_signal(self, out: dict[str, Any]) -> None:
        """Count the iterations in a row in which every group's candidates got one reward
        (``groups/zero_variance_frac`` == 1: every advantage is 0, nothing is learned), reported as
        ``groups/zero_variance_streak``; warn loudly, saying what to change, after
        :data:`NO_SIGNAL_WARN_ITERATIONS` of them (and every 10 more)."""
        groups = out.setdefault("groups", {})
        no_signal = groups.get("zero_variance_frac", 1.0) >= 1.0
        self._no_signal_streak = self._no_signal_streak + 1 if no_signal else 0
        groups["zero_variance_streak"] = self._no_signal_streak
        n = self._no_signal_streak - NO_SIGNAL_WARN_ITERATIONS
        if n >= 0 and n % 10 == 0:
            logger.warning(no_signal_message(self.config, out, self._no_signal_streak))

    def step(self) -> dict[str, Any]:
        results = self.training_step()
        if self._evaluates_after(self.iteration + 1):
            results["evaluation"] = self.evaluate()
        return results

    def _evaluates_after(self, iteration: int) -> bool:
        """Evaluation after ``iteration`` (1-based): every ``evaluation_interval`` iterations, and after the
        run's last one (``evaluation_final_iteration``) so that every run ends with a held-out result."""
        interval = self.config.evaluation_interval
        if not interval:
            return False
        final = getattr(self.config, "evaluation_final_iteration", None)
        return iteration % int(interval) == 0 or (final is not None and iteration == int(final))

    def evaluate(self, *args, **kwargs) -> dict[str, Any]:
        """Greedy (``evaluation_temperature``) episodes on the eval split, one per seed 0..N-1.

        Fires RLlib's ``on_evaluate_start`` / ``on_evaluate_end(evaluation_metrics=...)``, and
        ``on_episode_end`` for each eval episode.
        """
        cfg = self.config
        self._callback("on_evaluate_start", algorithm=self, metrics_logger=self.metrics)
        t0 = time.perf_counter()
        parts = self.rollout_workers.sample(list(range(int(cfg.evaluation_num_episodes))),
                                    sampling_seed=self._sampling_seed(0, salt=999_983), split="eval",
                                    mode="parallel", k=1, temperature=float(cfg.evaluation_temperature))
        samples = [s for p in parts for s in p["samples"]]
        episodes = [e for p in parts for e in p["episodes"]]
        out = episode_metrics(episodes)
        agents = sorted({s.agent for s in samples})
        out["agents"] = {a: {"valid_ratio": float(np.mean([s.valid for s in samples if s.agent == a])),
                             "reward_mean": float(np.mean([s.reward for s in samples if s.agent == a]))}
                         for a in agents}
        out["time_s"] = time.perf_counter() - t0
        self._episode_callbacks(episodes)
        self._callback("on_evaluate_end", algorithm=self, metrics_logger=self.metrics, evaluation_metrics=out)
        return out

    # -- using the trained policies -------------------------------------------------------------
    def get_module(self, module_id: Optional[str] = None) -> Any:
        """The trained :class:`~.rl_module.LLMRLModule` of policy ``module_id`` (its ``.lm`` is the Hugging
        Face model, a ``PeftModel`` at L2), from the learner; None if there is no such policy.
        Without an id (or RLlib's ``"default_policy"``), the only policy of an L1 run."""
        from ray.rllib.core import DEFAULT_MODULE_ID

        if module_id in (None, DEFAULT_MODULE_ID) and len(self._policy_ids_) == 1:
            module_id = self._policy_ids_[0]
        if module_id not in self._policy_ids_:
            return None
        lg = self.learner_group
        if lg.is_local and lg._learner is not None:
            return lg._learner.module[module_id]
        return next(iter(lg.foreach_learner(lambda learner, **_: learner.module[module_id]))).get()

    # -- checkpoints ---------------------------------------------------------------------------
    def get_checkpointable_components(self) -> list[tuple[str, Any]]:
        return [(COMPONENT_LEARNER_GROUP, self.learner_group)]

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> Dict[str, Any]:
        state: Dict[str, Any] = {}
        if self._check_component(COMPONENT_LEARNER_GROUP, components, not_components):
            state[COMPONENT_LEARNER_GROUP] = self.learner_group.get_state(
                components=self._get_subcomponents(COMPONENT_LEARNER_GROUP, components),
                not_components=self._get_subcomponents(COMPONENT_LEARNER_GROUP, not_components), **kwargs)
        state["atgrpo"] = {"totals": dict(self._totals),
                           "num_rollout_worker_restarts": self.rollout_workers.num_restarts}
        state[TRAINING_ITERATION] = self.training_iteration
        return state

    def set_state(self, state: Dict[str, Any]) -> None:
        if COMPONENT_LEARNER_GROUP in state:
            self.learner_group.set_state(state[COMPONENT_LEARNER_GROUP])
        if "atgrpo" in state:
            self._totals = defaultdict(float, state["atgrpo"].get("totals", {}))
        if TRAINING_ITERATION in state:
            self._iteration = state[TRAINING_ITERATION]
        self._sync_weights()

    def restore_from_path(self, path: Any, *args: Any, **kwargs: Any) -> None:
        Checkpointable.restore_from_path(self, path, *args, **kwargs)
        self._sync_weights()

    def restore_env_runners(self, env_runner_group: Any) -> list:
        return []

    def cleanup(self) -> None:
        if getattr(self, "rollout_workers", None) is not None:
            self.rollout_workers.stop()
        if getattr(self, "learner_group", None) is not None:
            self.learner_group.shutdown()

    @property
    def policy_mapping(self) -> dict[str, str]:
        """agent -> policy id, as resolved at setup."""
        return dict(self._mapping)

    @property
    def policy_specs(self) -> dict[str, LLMPolicySpec]:
        return dict(self._specs)


def _register_with_tune() -> None:
    """``"ATGRPO"`` and the llm_marl envs in Tune's registry, which lives in the Ray session."""
    register_llm_marl_envs()
    register_trainable("ATGRPO", ATGRPO)


_register_with_tune()
# A later ray.shutdown() + ray.init() starts an empty registry: register again after every init, with
# the hook Tune's own registry uses to flush registrations made before ray.init().
import ray._private.worker  # noqa: E402

ray._private.worker._post_init_hooks.append(_register_with_tune)
