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
   (:func:`.core.advantages.compute_advantages`); zero-variance groups are dropped if asked;
3. each policy's samples form that module's train batch; ``LearnerGroup.update`` takes one
   optimizer step per minibatch round (per-policy minibatch sizes), ``num_epochs`` times (with
   ``training.behavior_logprobs: learner`` the learner first recomputes the behaviour log-probs of all
   of them, :func:`learner_behavior_logprobs`);
4. the learner's trainable weights (the full model, or the LoRA adapter at L2) are pushed to
   every rollout worker's generation backend.

The config's builders, RLlib-compatibility tables and validation are in :mod:`.config` (typed
builders generated from the schema: :mod:`.config_builders`); the warm-start stage in
:mod:`.warm_start_stage`; what an iteration reports in :mod:`.results`; placement groups and the local
Ray in :mod:`.placement`; the loss in the learner's ``compute_loss_for_module`` (:mod:`.learner`).

Usage::

    from rllib_integration import ATGRPOConfig
    config = (ATGRPOConfig()
              .environment("llm_marl/PlanPath-v0", env_config={"size": 3})
              .llm(model_path="tiny", specialization="L1")
              .training(lr=1e-3, estimator="at_grpo"))
    algo = config.build_algo(); algo.train()

    import rllib_integration
    rllib_integration.register()        # "ATGRPO" and the llm_marl envs in Tune's registry
    tune.Tuner("ATGRPO", param_space=config).fit()
"""

from __future__ import annotations

import contextvars
import dataclasses
import time
from collections import defaultdict
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

import numpy as np

from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core import COMPONENT_LEARNER_GROUP
from ray.rllib.core.learner.learner_group import LearnerGroup
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.tune.result import TRAINING_ITERATION

from . import _rllib
from .batching import minibatch_rounds, multi_agent_batch
from .config import RLLIB_ALIASES, RLLIB_UNUSED, ATGRPOConfigBase
from .core import seeding
from .core.loss import SAMPLER_METRICS
from .core.metrics import episode_metrics, role_correctness
from .envs import EnvEntry, register_llm_marl_envs, resolve_env
from .pipeline import RolloutPipeline, StreamPipeline
from .placement import check_trial_placement, init_ray_for, trial_bundles
from .policies import LLMPolicySpec, policy_setting, resolve_policies
from .results import LearningSignalWatch, count_params, iteration_results, plain, sandbox_counters, wall_timings
from .warm_start_stage import run_warm_start

__all__ = ["ATGRPOConfig", "ATGRPO", "register", "register_llm_marl_envs", "RLLIB_ALIASES", "RLLIB_UNUSED"]

#: set while ``ATGRPO.from_checkpoint`` builds the algorithm: the checkpoint holds the warm-started weights
_RESTORING: contextvars.ContextVar[bool] = contextvars.ContextVar("atgrpo_restoring", default=False)


class ATGRPOConfig(ATGRPOConfigBase):
    """Configuration of :class:`ATGRPO` (see docs/config_reference.md for every setting).

    Every AT-GRPO setting is declared once, in :mod:`rllib_integration.settings`; its attribute,
    default and builder keyword come from there. Besides RLlib's own settings
    (``.environment``, ``.multi_agent``, ``.training(lr=, grad_clip=, num_epochs=,
    minibatch_size=)``, ``.learners``, ``.evaluation(evaluation_interval=)``, ``.debugging(seed=)``)
    it adds ``.llm(...)`` (models, specialization, LoRA), ``.sampling(...)`` and ``.rollouts(...)``,
    and AT-GRPO keywords in ``.training(...)`` and ``.evaluation(...)``, each typed and documented
    (:mod:`.config_builders`). :meth:`validate` checks every setting against the same schema as the
    YAML files, the env (a probe env built in this process) and the policy mapping against its roles.
    RLlib settings with an ATGRPO meaning are mapped by RLlib's own builders (:data:`RLLIB_ALIASES`:
    ``num_env_runners``, ``evaluation_duration``, ...); those without one are rejected
    (:data:`RLLIB_UNUSED`: ``gamma``, ``train_batch_size``, ...). Its body is in :mod:`.config`; this
    class only names the algorithm it builds.
    """

    def __init__(self, algo_class: Optional[type] = None) -> None:
        super().__init__(algo_class=algo_class or ATGRPO)


# ------------------------------------------------------------------------------ algorithm
@_rllib.rllib_hooks("env_id_and_creator", "setup_logdir")
class ATGRPO(Algorithm):
    """AT-GRPO over LLM teams (see the module docstring)."""

    config: ATGRPOConfig  # RLlib types it AlgorithmConfig | None; set in Algorithm.__init__
    learner_group: LearnerGroup  # built in setup (RLlib types it Optional)
    #: how many of each iteration's samples :meth:`training_step` keeps in :attr:`last_transcripts` (prompt,
    #: completion, reward, role, policy, group key; :func:`.run_logs.pick_transcripts`); ``llm-marl train`` sets it
    #: from ``run.transcripts_per_iteration`` and writes them to ``transcripts.jsonl``. 0: none kept
    keep_transcripts: int = 0
    #: the last iteration's picked transcripts (kept out of the result, so Tune's results stay small)
    last_transcripts: list[dict[str, Any]] = []

    @classmethod
    def get_default_config(cls) -> ATGRPOConfig:
        return ATGRPOConfig()

    def setup_logdir(self) -> None:
        """Outside Tune, RLlib's Trainable makes a folder in ``~/ray_results`` per build that nothing writes in
        (79 piled up in one session): here it is a temporary folder, removed by :meth:`cleanup` if still empty.
        Under Tune (a storage context) the trial's directory, as RLlib does. (Tune's ``Trainable._setup_logdir``,
        :func:`._rllib.rllib_hooks`.)"""
        if _rllib.tune_storage(self):
            _rllib.setup_logdir_as_tune(self)
            return
        import tempfile

        _rllib.set_logdir(self, tempfile.mkdtemp(prefix="llm-marl-algo-"))

    # -- resources ---------------------------------------------------------------------------
    @classmethod
    def default_resource_request(cls, config: AlgorithmConfig | dict) -> Any:
        from ray.tune.execution.placement_groups import PlacementGroupFactory

        cf: Any  # an ATGRPOConfig (its settings' attributes are made at run time)
        if isinstance(config, AlgorithmConfig):
            cf = config
        else:
            cf = cls.get_default_config().update_from_dict(config)
        bundles = trial_bundles(cf)
        check_trial_placement(cf, bundles)
        return PlacementGroupFactory(bundles=bundles, strategy=cf.placement_strategy)

    @staticmethod
    def env_id_and_creator(env_specifier: Any, config: AlgorithmConfig) -> tuple[Optional[str], EnvEntry]:
        """The env as an :class:`~.envs.EnvEntry` (importable entry point; workers build envs from it); RLlib's
        ``Algorithm._get_env_id_and_creator`` (:func:`._rllib.rllib_hooks`)."""
        entry = resolve_env(env_specifier, getattr(config, "env_modules", ()), key="ATGRPOConfig.env",
                            modules_key="ATGRPOConfig.env_modules")
        return entry.name, entry

    # -- setup ----------------------------------------------------------------------------
    def setup(self, config: AlgorithmConfig) -> None:  # type: ignore[override]  # RLlib's own signature
        """The run's parts in order: Ray (where actors run), the policies and their learners, the rollout workers
        and the pipeline that feeds the learner, the warm start, the run's tallies and RLlib's metrics. (Algorithm.setup
        would build RLlib EnvRunners, which step gym-style envs with RLModule forward passes; LLM teams are sampled
        by our rollout workers instead.)"""
        import torch

        from ray.rllib.utils import force_list

        cfg: ATGRPOConfig = self.config
        if int(cfg.num_rollout_actors) > 0 or int(cfg.num_learners) > 0:
            init_ray_for(cfg)  # before any actor (remote learners too) starts; checks that they fit
        torch.set_num_threads(max(1, int(cfg.torch_threads)))
        self.callbacks = [cls() for cls in force_list(cfg.callbacks_class)]
        _rllib.no_env_runners(self)
        probe = self._set_up_policies(cfg)
        self._set_up_rollouts(cfg, probe)
        self._set_up_warm_start(cfg)
        self._totals: defaultdict[str, float] = defaultdict(float)
        # iterations in a row in which every group had zero reward variance, or a role got no samples
        self._signal = LearningSignalWatch(agents=self._agents)
        # RLlib types foreach_learner's func as (learner, kwargs) -> T; it calls func(learner, **kwargs)
        self._param_counts = next(iter(self.learner_group.foreach_learner(count_params))).get()  # type: ignore[arg-type]
        _rllib.set_up_metrics(self)  # RLlib's Ray (Prometheus) metrics used by Algorithm.train()/log_result()
        from ray.rllib.callbacks.utils import make_callback

        make_callback("on_algorithm_init", self.callbacks, cfg.callbacks_on_algorithm_init,
                      kwargs=dict(algorithm=self, metrics_logger=self.metrics))

    def _set_up_policies(self, cfg: ATGRPOConfig) -> Any:
        """The env's agents and their policies (the RLModule spec, the policy mapping), each role's metrics, and the
        learner group. Returns the probe env :func:`policy_module_spec` built."""
        self._module_spec, mapping, setup = policy_module_spec(cfg)
        self._agents = setup.agents
        # each role's own correctness in evaluations (roles/*): the task's role_metrics(samples) hook if its env
        # class has one, else the tool -> executor rule of the grid tasks (core.metrics.role_correctness)
        hook = getattr(getattr(setup.probe, "unwrapped", setup.probe), "role_metrics", None)
        self._role_metrics = hook if callable(hook) else role_correctness
        self._env_entry = setup.entry
        self._mapping, self._policy_ids_, self._specs = mapping, setup.policy_ids, setup.specs
        self.learner_group = cfg.build_learner_group(rl_module_spec=self._module_spec)
        return setup.probe

    def _set_up_rollouts(self, cfg: ATGRPOConfig, probe: Any) -> None:
        """The rollout workers with the learner's weights, and the pipeline that feeds their batches to the
        learner (streaming or not)."""
        from .rollout_pool import RolloutWorkerPool
        from .rollout_worker import WorkerSpec

        self._worker_spec = WorkerSpec.of_config(cfg, self._env_entry, probe, self._specs, self._mapping)
        self.rollout_workers = RolloutWorkerPool.of_config(self._worker_spec, cfg)
        self._sync_weights()
        final = cfg.evaluation_final_iteration  # 1-based; the pipeline counts from 0
        last = None if final is None else int(final) - 1
        self._pipeline: RolloutPipeline | StreamPipeline
        if cfg.streaming:
            self._pipeline = StreamPipeline(self.rollout_workers, int(cfg.max_staleness), self._start_stream,
                                            batch_envs=int(cfg.envs_per_iteration), group_by=tuple(cfg.group_by),
                                            min_samples=cfg.stream_min_samples,
                                            timeout_s=float(cfg.stream_timeout_s), last_iteration=last)
        else:
            self._pipeline = RolloutPipeline(self.rollout_workers, int(cfg.max_staleness), self._submit_sampling,
                                             last_iteration=last)

    def _set_up_warm_start(self, cfg: ATGRPOConfig) -> None:
        """The warm start (``warm_start.episodes`` > 0, not when restoring): now, or in a Tune trial at the first
        step (a restore cancels it)."""
        self.warm_start_metrics: Optional[dict[str, Any]] = None
        self._warm_start_reported = False
        self._pending_warm_start: Optional[Callable[[], dict[str, Any]]] = None
        if int(cfg.warm_start.get("episodes", 0)) <= 0 or _RESTORING.get():
            return

        def warm() -> dict[str, Any]:
            return run_warm_start(
                cfg, env_entry=self._env_entry, env_config=self._worker_spec.env_config,
                learner_group=self.learner_group, mapping=dict(self._mapping),
                model_paths={pid: s.model_path for pid, s in self._specs.items()},
                evaluate=self.evaluate, sync_weights=self._sync_weights)

        if _rllib.tune_storage(self):
            # a Tune trial: Tune may restore a checkpoint into it next (Tuner.restore, a failed trial
            # retried), whose weights are warm-started already; so the warm start waits for the first step,
            # and a restore cancels it (set_state)
            self._pending_warm_start = warm
        else:
            self.warm_start_metrics = warm()

    @classmethod
    def from_checkpoint(cls, path: Any, filesystem: Any = None, *, config: Optional[AlgorithmConfig] = None,
                        imports: Sequence[str] = (), **kwargs: Any) -> "ATGRPO":
        """Rebuild an ATGRPO from a checkpoint or a run directory of ``llm-marl train`` (its newest complete
        checkpoint; :mod:`.checkpoints`: data only, nothing unpickled) and restore
        its state. The algorithm is built from the settings the checkpoint records (or from ``config``, your
        own); ``imports``: modules that register a task of your own, besides the ``env.modules`` it names
        (checked: absolute paths outside the checkpoint's run directory, or module names). The warm start is
        part of the checkpointed weights, so setup skips it."""
        from .checkpoints import algorithm_config, find_checkpoint, read_checkpoint

        if filesystem is not None:
            raise ValueError("ATGRPO.from_checkpoint reads local checkpoints only (filesystem= is not supported)")
        ckpt = read_checkpoint(find_checkpoint(getattr(path, "path", path)))
        cfg = config if config is not None else algorithm_config(ckpt, imports, config_cls=ATGRPOConfig)
        token = _RESTORING.set(True)
        try:
            algo = cfg.build_algo()
        finally:
            _RESTORING.reset(token)
        assert isinstance(algo, ATGRPO)
        algo.set_state(ckpt.state)
        return algo

    def _policy_setting(self, pid: str, key: str) -> Any:
        return policy_setting(self.config, pid, key)

    # -- weights ------------------------------------------------------------------------------
    def _sync_weights(self) -> float:
        """Push the learner's weights to the rollout workers, in the sampling dtype (``LLMRLModule.sync_state``)."""
        t0 = time.perf_counter()
        lg = self.learner_group
        # every learner holds the same weights (DDP): ask one, as LearnerGroup.get_state does
        weights = next(iter(lg.foreach_learner(_learner_sync_weights, **_rllib.one_remote_learner(lg)))).get()
        pipeline = getattr(self, "_pipeline", None)  # asynchronous: the workers take them between batches
        self.rollout_workers.sync_weights(weights, wait=pipeline is None or pipeline.wait_for_weights)
        return time.perf_counter() - t0

    # -- one iteration -----------------------------------------------------------------------------
    def _seeds(self) -> Any:
        """The run's :class:`~.rollout_worker.TrainSeeds` (the seed of its ``n``-th training env)."""
        from .rollout_worker import TrainSeeds

        pool = self.config.train_task_pool
        return TrainSeeds(int(self.config.seed or 0), None if not pool else int(pool))

    def _train_seeds(self, iteration: int) -> list[int]:
        n, seeds = int(self.config.envs_per_iteration), self._seeds()
        return [seeds(iteration * n + j) for j in range(n)]

    def _sampling_seed(self, iteration: int) -> int:
        return seeding.sampling_seed(int(self.config.seed or 0), iteration)

    def training_step(self) -> dict[str, Any]:  # type: ignore[override]  # RLlib's returns None; step() uses ours
        """One AT-GRPO iteration: sample, advantages, update, sync."""
        t0 = time.perf_counter()
        batch = self._sample_trees()
        if self.config.vllm_sleep:  # the learner gets the engines' GPU memory; the weight sync wakes them
            self.rollout_workers.sleep()
        t1 = time.perf_counter()
        adv, gids, keep = self._advantages(batch["samples"])
        if self.keep_transcripts:
            from .run_logs import pick_transcripts

            self.last_transcripts = pick_transcripts(batch["samples"], self.keep_transcripts, self.iteration + 1)
        t2 = time.perf_counter()
        learner_metrics, num_updates = self._update(batch["samples"], adv, keep)
        t3 = time.perf_counter()
        t_sync = self._sync_weights() if num_updates else 0.0
        times = {"rollout_s": t1 - t0, "advantage_s": t2 - t1, "update_s": t3 - t2, "weight_sync_s": t_sync}
        out = self._training_results(iteration_results(batch, adv, gids, keep, learner_metrics, num_updates, times))
        if batch["async"]:
            out["async"] = batch["async"]
        return out

    def _submit_sampling(self, iteration: int) -> Any:
        cfg = self.config
        return self.rollout_workers.submit(self._train_seeds(iteration), sampling_seed=self._sampling_seed(iteration),
                                           split="train", mode=cfg.mode, k=int(cfg.k),
                                           background=self._pipeline.asynchronous)

    def _start_stream(self, first: int) -> Any:
        """Streaming: the workers play the training envs from the ``first``-th on (``pipeline.StreamPipeline``)."""
        cfg = self.config
        n, queue_size = int(cfg.envs_per_iteration), cfg.stream_queue_size or max(1, int(cfg.num_rollout_actors))
        return self.rollout_workers.start_stream(
            first=first, seeds=self._seeds(), slots=n, queue_size=int(queue_size),
            sampling_seed=self._sampling_seed(first // n), mode=cfg.mode, k=int(cfg.k))

    def _sample_trees(self) -> dict[str, Any]:
        """The iteration's env seeds played by the rollout workers (submitted ahead with ``max_staleness`` > 0:
        :mod:`.pipeline`): samples, episodes, summed timings, the staleness report."""
        parts, report = self._pipeline.next_parts(self.iteration)
        samples = [s for p in parts for s in p["samples"]]
        episodes = [e for p in parts for e in p["episodes"]]
        self._episode_callbacks(episodes)
        self._callback("on_sample_end", env_runner=None, metrics_logger=self.metrics, samples=samples, worker=None)
        return {"samples": samples, "episodes": episodes, "timings": wall_timings(parts), "async": report,
                "sandbox": sandbox_counters(parts)}  # stops the run if too many episodes were dropped

    def _callback(self, name: str, **kwargs: Any) -> None:
        """RLlib's callback ``name`` (callback classes and ``config.callbacks(name=fn)``), in this process."""
        from ray.rllib.callbacks.utils import make_callback

        make_callback(name, self.callbacks, getattr(self.config, f"callbacks_{name}", None), kwargs=kwargs)

    def _episode_callbacks(self, episodes: list) -> None:
        """``on_episode_end`` once per finished episode (an :class:`~.core.records.EpisodeSummary`)."""
        for ep in episodes:
            self._callback("on_episode_end", episode=ep, env_runner=None, metrics_logger=self.metrics, env=None,
                           env_index=int(ep.env_idx), rl_module=None, worker=None, base_env=None, policies=None)

    def _advantages(self, samples: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Advantages, group ids and the keep mask (zero-variance groups dropped if asked): the configured
        estimator of the registry (:mod:`.core.advantages`), with its settings."""
        from .core.advantages import advantages_of_run

        a = advantages_of_run(samples, self.config)
        return (-1.0 if self.config.flip_advantages else 1.0) * a.advantages, a.group_ids, a.keep

    def _update(self, samples: list, adv: np.ndarray, keep: np.ndarray) -> tuple[dict[str, Any], int]:
        """``num_epochs`` passes of per-policy minibatch rounds, one ``LearnerGroup.update`` per round.

        With ``training.behavior_logprobs: learner`` the learner first recomputes the log-probs of every
        trained sample under its current weights (:func:`learner_behavior_logprobs`, over epoch 0's rounds),
        and they are the ``old_logprobs`` of every epoch. Each policy's learner metrics are those of its last
        optimizer step, except :data:`~.core.loss.SAMPLER_METRICS` (learner vs sampler log-probs), which are
        its first step's: the weights the sampler had, in a synchronous run."""
        cfg = self.config
        learner_metrics: dict[str, Any] = {}
        first_step: dict[str, dict[str, Any]] = {}
        num_updates = 0
        pids = [s.policy_id for s in samples]
        behavior: Optional[dict[int, np.ndarray]] = None
        for epoch in range(int(cfg.num_epochs)):
            rounds = minibatch_rounds(pids, keep, seed=int(cfg.seed or 0), iteration=self.iteration, epoch=epoch,
                                      minibatch_size=lambda pid: self._policy_setting(pid, "minibatch_size"))
            if epoch == 0 and rounds and cfg.behavior_logprobs == "learner":
                behavior = learner_behavior_logprobs(self.learner_group, samples, adv, rounds)
            for round_ in rounds:
                update = self.learner_group.update(batch=multi_agent_batch(samples, adv, round_,
                                                                           behavior_logprobs=behavior))
                num_updates += 1
                res = update[0] if isinstance(update, list) and update else update
                for pid in round_:
                    learner_metrics[pid] = plain(res.get(pid, {})) if isinstance(res, Mapping) else {}
                    first_step.setdefault(pid, {k: learner_metrics[pid][k] for k in SAMPLER_METRICS
                                                if k in learner_metrics[pid]})
        for pid, first in first_step.items():
            learner_metrics[pid].update(first)
        return learner_metrics, num_updates

    def _training_results(self, out: dict[str, Any]) -> dict[str, Any]:
        """:func:`results.iteration_results` plus what this run has seen so far: totals, worker restarts,
        the policies, the warm start (first result only) and the learning-signal watch."""
        throughput = out["throughput"]
        self._totals["samples"] += throughput["samples"]
        self._totals["episodes"] += out["env_runners"]["num_episodes"]
        self._totals["tokens"] += throughput["tokens_generated"]
        out["totals"] = dict(self._totals)
        out["num_rollout_worker_restarts"] = self.rollout_workers.num_restarts
        out["num_rollout_workers"] = self.rollout_workers.num_workers
        out["policies"] = {pid: {"level": self._specs[pid].level, **self._param_counts.get(pid, {})}
                           for pid in self._policy_ids_}
        if self.warm_start_metrics is not None and not self._warm_start_reported:
            out["warm_start"] = self.warm_start_metrics  # in the first result only
            self._warm_start_reported = True
        self._signal.update(self.config, out)
        return out

    def step(self) -> dict[str, Any]:
        if self._pending_warm_start is not None:  # a Tune trial's first step, with nothing restored into it
            warm, self._pending_warm_start = self._pending_warm_start, None
            self.warm_start_metrics = warm()
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
                                    sampling_seed=seeding.eval_sampling_seed(int(cfg.seed or 0)), split="eval",
                                    mode="parallel", k=1, temperature=float(cfg.evaluation_temperature))
        samples = [s for p in parts for s in p["samples"]]
        episodes = [e for p in parts for e in p["episodes"]]
        out = episode_metrics(episodes)
        out["sandbox"] = sandbox_counters(parts, what="evaluation")
        agents = sorted({s.agent for s in samples})
        out["agents"] = {a: {"valid_ratio": float(np.mean([s.valid for s in samples if s.agent == a])),
                             "reward_mean": float(np.mean([s.reward for s in samples if s.agent == a]))}
                         for a in agents}
        roles = self._role_metrics(samples)
        if roles:
            out["roles"] = roles
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
        learner = _rllib.local_learner(lg)
        if learner is not None:
            return learner.module[module_id]
        return next(iter(lg.foreach_learner(lambda learner, **_: learner.module[module_id]))).get()

    # -- checkpoints ---------------------------------------------------------------------------
    def get_checkpointable_components(self) -> list[tuple[str, Any]]:
        return [(COMPONENT_LEARNER_GROUP, self.learner_group)]

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> Dict[str, Any]:
        state: Dict[str, Any] = {}
        if _rllib.wants_component(self, COMPONENT_LEARNER_GROUP, components, not_components):
            state[COMPONENT_LEARNER_GROUP] = self.learner_group.get_state(
                components=_rllib.subcomponents(self, COMPONENT_LEARNER_GROUP, components),
                not_components=_rllib.subcomponents(self, COMPONENT_LEARNER_GROUP, not_components), **kwargs)
        state["atgrpo"] = {"totals": dict(self._totals),
                           "num_rollout_worker_restarts": self.rollout_workers.num_restarts}
        state[TRAINING_ITERATION] = self.training_iteration
        return state

    def set_state(self, state: Dict[str, Any]) -> None:
        self._pending_warm_start = None  # restored weights are the ones to continue from (warm-started already)
        if COMPONENT_LEARNER_GROUP in state:
            self.learner_group.set_state(state[COMPONENT_LEARNER_GROUP])
        if "atgrpo" in state:
            self._totals = defaultdict(float, state["atgrpo"].get("totals", {}))
        if TRAINING_ITERATION in state:
            _rllib.set_training_iteration(self, state[TRAINING_ITERATION])
        self._pipeline.clear()  # batches in flight belong to the old weights and iteration
        self._sync_weights()

    def save_to_path(self, path: Any = None, *, state: Optional[Dict[str, Any]] = None, filesystem: Any = None,
                     use_msgpack: bool = False, run_config: Optional[Mapping[str, Any]] = None) -> str:
        """Write a checkpoint of data only, whole or not at all (:func:`.checkpoints.write_checkpoint`):
        the state as JSON + safetensors and the settings to rebuild the algorithm from; ``run_config`` (the
        CLI's) is kept beside them. ``use_msgpack`` is accepted for RLlib's callers and changes nothing."""
        import tempfile

        from .checkpoints import config_record, write_checkpoint

        if filesystem is not None:
            raise ValueError("ATGRPO.save_to_path writes local checkpoints only (filesystem= is not supported)")
        dest = path if path is not None else tempfile.mkdtemp(prefix="atgrpo-checkpoint-")
        record = config_record(self.config, self._mapping, self._env_entry.name)
        write_checkpoint(dest, state if state is not None else self.get_state(), config=record,
                         iteration=int(self.iteration), run_config=run_config)
        return str(dest)

    def restore_from_path(self, path: Any, *args: Any, **kwargs: Any) -> None:
        """Restore the state of a checkpoint of :meth:`save_to_path` (verified; nothing unpickled)."""
        from .checkpoints import read_checkpoint

        self.set_state(read_checkpoint(path).state)

    def restore_env_runners(self, env_runner_group: Any) -> list:
        return []

    def cleanup(self) -> None:
        if getattr(self, "rollout_workers", None) is not None:
            self.rollout_workers.stop()
        if getattr(self, "learner_group", None) is not None:
            self.learner_group.shutdown()
        logdir = _rllib.logdir(self)
        if not _rllib.tune_storage(self) and logdir:
            import os

            try:
                os.rmdir(logdir)  # only if empty: whatever a user wrote there stays
            except OSError:
                pass

    @property
    def policy_mapping(self) -> dict[str, str]:
        """agent -> policy id, as resolved at setup."""
        return dict(self._mapping)

    @property
    def policy_specs(self) -> dict[str, LLMPolicySpec]:
        return dict(self._specs)


@dataclasses.dataclass(frozen=True)
class _ModuleSetup:
    """What :func:`policy_module_spec` resolved on the way: the env entry, a probe env and its agents,
    the policy ids and their specs."""

    entry: EnvEntry
    probe: Any
    agents: list[str]
    policy_ids: list[str]
    specs: dict[str, LLMPolicySpec]


def policy_module_spec(cfg: Any) -> tuple[MultiRLModuleSpec, dict[str, str], _ModuleSetup]:
    """The ``MultiRLModuleSpec`` of a config's policies (one :class:`~.rl_module.LLMRLModule` each, on the
    spaces of the first agent it plays), the agent -> policy mapping, and what was resolved on the way (a
    probe env built here; the tiny model built if the config asks for one). ``ATGRPO.setup`` builds its
    learners from it, and :mod:`.export` the policies of a checkpoint."""
    check = cfg.check_env()
    entry, agents = check.entry, check.agents
    probe = entry(dict(cfg.env_config))
    setup = resolve_policies(cfg, agents)
    mapping = setup.mapping
    module_specs = {}
    for pid in setup.policy_ids:
        agent = next((a for a, p in mapping.items() if p == pid), agents[0])
        module_specs[pid] = RLModuleSpec(module_class=cfg.get_default_rl_module_spec().module_class,
                                         observation_space=probe.observation_space(agent),
                                         action_space=probe.action_space(agent),
                                         model_config=setup.specs[pid].module_config())
    return (MultiRLModuleSpec(rl_module_specs=module_specs), dict(mapping),
            _ModuleSetup(entry, probe, list(agents), list(setup.policy_ids), dict(setup.specs)))


def _learner_sync_weights(learner: Any, _: Any = None) -> dict[str, Any]:
    """``foreach_learner`` callback: the learner's weights for the rollout workers."""
    return learner.get_sync_weights()


def _learner_recompute(learner: Any, batches: Optional[list] = None) -> list[dict[str, np.ndarray]]:
    """``foreach_learner`` callback: :meth:`~.learner.ATGRPOTorchLearner.behavior_logprobs` of each batch."""
    return [learner.behavior_logprobs(b) for b in batches or []]


def learner_behavior_logprobs(learner_group: LearnerGroup, samples: list, adv: np.ndarray,
                              rounds: list[dict[str, list[int]]]) -> dict[int, np.ndarray]:
    """``training.behavior_logprobs: learner``: the learner's log-probs of the completion tokens of every sample
    in ``rounds`` (an epoch's minibatch rounds, :func:`~.batching.minibatch_rounds`) under its current weights,
    ``{sample index: float32 array of its completion length}``. One learner is asked (all hold the same weights),
    once, for the batches of every round as ``LearnerGroup.update`` gets them (same rows, same micro-batches)."""
    batches = [multi_agent_batch(samples, adv, r) for r in rounds]
    res = next(iter(learner_group.foreach_learner(_learner_recompute, batches=batches,
                                                  **_rllib.one_remote_learner(learner_group)))).get()
    out: dict[int, np.ndarray] = {}
    for batch, round_, logprobs in zip(batches, rounds, res, strict=True):
        for pid, idx in round_.items():
            cmask = np.asarray(batch.policy_batches[pid]["completion_mask"]) > 0
            for row, i in enumerate(idx):
                out[i] = np.asarray(logprobs[pid][row][cmask[row]], dtype=np.float32)
    return out


def register() -> None:
    """Register ``"ATGRPO"`` with Tune and every ``llm_marl/...`` task with RLlib's ``register_env``, so
    ``tune.Tuner("ATGRPO", param_space=config)`` and ``config.environment("llm_marl/PlanPath-v0")`` in other
    RLlib algorithms find them. Importing the package registers nothing. Tune's registry lives in the Ray
    session: call it before or after ``ray.init()``, and again after a ``ray.shutdown()`` and a new
    ``ray.init()`` (passing the class, ``tune.Tuner(ATGRPO, ...)``, needs no registration)."""
    from ray.tune.registry import register_trainable

    register_llm_marl_envs()
    register_trainable("ATGRPO", ATGRPO)
