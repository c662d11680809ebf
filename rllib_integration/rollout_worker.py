"""Rollout workers: Ray actors that run the tree-structured sampler over batches of envs.

Each :class:`RolloutWorker` holds a generation backend for all policies (built from the
:class:`~.policies.LLMPolicySpec` s, so it serves exactly what the learner trains) and a list
of env instances made through RLlib's env registry (``register_env``). ``sample`` plays one
batch of env seeds to the end with :class:`~.rollout.RolloutSampler` and returns the samples,
episode summaries and timings (generation, env stepping, sandbox).

:class:`RolloutWorkerPool` runs ``n`` of them as Ray actors (or one in-process worker when
``n == 0``), splits a batch of seeds between them, pushes new weights after every update,
and when an actor dies mid-batch starts a new one with the same index, gives it the latest
weights and redoes that worker's part of the batch (up to ``max_restarts`` times in total).
A part of a batch is a pure function of (seeds, iteration, part index, weights), so the redo
gives the same samples the dead worker would have returned.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any, Mapping, Optional, Sequence

from .core.backends.base import Completion, GenerationBackend, GenerationRequest, SamplingParams
from .envs import make_env
from .quiet import install_in_worker
from .settings import SANDBOX_KINDS, default_of

install_in_worker()


def _writable(v: Any) -> Any:
    """An array torch may wrap: Ray hands numpy arrays over read-only (torch warns on those)."""
    import numpy as np

    a = np.asarray(v)
    return a if a.flags.writeable else a.copy()

__all__ = ["RolloutWorker", "RolloutWorkerPool", "WorkerSpec", "SANDBOX_KINDS", "with_sandbox"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class WorkerSpec:
    """Everything a rollout worker needs (picklable)."""

    env: Any                      # an envs.EnvEntry: importable entry point + modules to import first
    env_config: dict
    eval_env_config: dict
    policy_specs: dict            # policy id -> LLMPolicySpec
    policy_mapping: dict          # agent -> policy id (resolved, explicit)
    temperatures: dict            # policy id -> sampling temperature
    # the defaults of the run settings of the same name (default_of: written once, in the schema)
    top_p: float = default_of("sampling.top_p")
    max_new_tokens: int = default_of("sampling.max_new_tokens")
    chat: bool = default_of("sampling.chat")
    system_prompt: Optional[str] = default_of("sampling.system_prompt")
    stop: Optional[tuple] = default_of("sampling.stop")
    backend: str = default_of("rollout.backend")
    device: Optional[str] = default_of("model.device")
    torch_threads: int = default_of("rollout.torch_threads")
    seed: int = default_of("training.seed")
    step_workers: Optional[int] = default_of("rollout.step_workers")  # RolloutSampler(step_workers=); None: its default
    backend_options: dict = dataclasses.field(default_factory=dict)  # policies.make_backend(options=)
    progress: bool = False               # a progress bar (Ray's tqdm_ray) per sample() call




def with_sandbox(env_config: Mapping[str, Any], kind: str) -> dict:
    """``env_config`` with the ``sandbox``/``sandbox_limits`` env arguments for ``rollout.sandbox: kind``.

    ``warm``: the bwrap fork-server pool (``sandbox="bwrap", sandbox_limits={"warm": True, ...}``),
    or ``"auto"`` with a warning where bubblewrap does not work; ``cold``: ``"auto"`` (a fresh
    bwrap sandbox per run, the envs' own default); ``docker``/``local``: that backend. A
    ``sandbox`` given in ``env_config`` itself wins. Only for envs that take ``sandbox=``
    (every :class:`llm_marl_envs.LLMTeamEnv`); the caller checks that.
    """
    if kind not in SANDBOX_KINDS:
        raise ValueError(f"rollout.sandbox: {kind!r} is not one of {list(SANDBOX_KINDS)}")
    cfg = dict(env_config)
    if "sandbox" in cfg:
        return cfg
    limits = dict(cfg.get("sandbox_limits") or {})
    if kind == "warm":
        import sandboxes

        if "bwrap" in sandboxes.available_backends():
            cfg["sandbox"] = "bwrap"
            limits["warm"] = True
        else:
            logger.warning("rollout.sandbox=warm: bubblewrap does not work here, so the envs use "
                           "sandbox='auto' (see docs/sandboxes.md)")
            cfg["sandbox"] = "auto"
    else:
        cfg["sandbox"] = {"cold": "auto"}.get(kind, kind)
    if limits:
        cfg["sandbox_limits"] = limits
    return cfg


class _TimedBackend(GenerationBackend):
    """Wraps a backend: per-policy temperatures, generation time and token counts."""

    def __init__(self, inner: GenerationBackend, temperatures: Mapping[str, float]):
        self.inner, self.temperatures = inner, dict(temperatures)
        self.gen_s = 0.0
        self.tokens = 0
        self.calls = 0
        self.override_temperature: Optional[float] = None
        self.on_call: Optional[Any] = None  # called after each generate() (one agent step of every active env)

    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[list[Completion]]:
        t0 = time.perf_counter()
        out: list[Optional[list[Completion]]] = [None] * len(requests)
        by_temp: dict[float, list[int]] = {}
        for i, r in enumerate(requests):
            t = self.override_temperature
            if t is None:
                t = self.temperatures.get(r.policy_id, params.temperature)
            by_temp.setdefault(float(t), []).append(i)
        for j, (t, idx) in enumerate(sorted(by_temp.items())):
            p = dataclasses.replace(params, temperature=t,
                                    seed=None if params.seed is None else params.seed + 104729 * j)
            res = self.inner.generate([requests[i] for i in idx], p)
            for i, comps in zip(idx, res, strict=True):
                out[i] = comps
        self.gen_s += time.perf_counter() - t0
        self.calls += 1
        if self.on_call is not None:
            self.on_call()
        done = [cs for cs in out if cs is not None]
        assert len(done) == len(out), "every request was answered"
        self.tokens += sum(len(c.token_ids) for cs in done for c in cs)
        return done

    def update_weights(self, policy_id: str, state_dict: Mapping[str, Any]) -> None:
        self.inner.update_weights(policy_id, state_dict)

    def policies(self) -> list[str]:
        return self.inner.policies()

    def tokenizer(self, policy_id: str) -> Any:
        return self.inner.tokenizer(policy_id)


class RolloutWorker:
    """Samples AT-GRPO trees (or parallel episodes) for a batch of env seeds."""

    def __init__(self, spec: WorkerSpec, worker_index: int = 0):
        import torch

        torch.set_num_threads(max(1, int(spec.torch_threads)))
        from .envs import import_env_modules
        from .policies import make_backend

        import_env_modules(spec.env.modules)  # the user's task module (shipped with the job's runtime_env)

        self.spec, self.worker_index = spec, worker_index
        self.backend = _TimedBackend(make_backend(spec.policy_specs, backend=spec.backend, device=spec.device,
                                                 options=spec.backend_options),
                                     spec.temperatures)
        self._envs: dict[str, list] = {"train": [], "eval": []}
        self.weights_version = -1

    def ping(self) -> int:
        return self.worker_index

    def set_weights(self, weights: Mapping[str, Mapping[str, Any]], version: int = 0) -> int:
        import torch

        from .core.tensor_codec import decode

        for pid, state in weights.items():
            state = decode(state)  # bf16 arrives as tagged raw bits (LLMRLModule.sync_state)
            self.backend.update_weights(pid, {k: v if isinstance(v, torch.Tensor) else torch.as_tensor(_writable(v))
                                              for k, v in state.items()})
        self.weights_version = version
        return version

    def _env_list(self, split: str, n: int) -> list:
        envs = self._envs[split]
        cfg = dict(self.spec.env_config)
        if split == "eval":
            cfg.update(self.spec.eval_env_config)
        cfg["split"] = split
        while len(envs) < n:
            env = make_env(self.spec.env, cfg, self.worker_index)
            self._time_sandbox(env)
            envs.append(env)
        return envs[:n]

    def _progress_bar(self, split: str, envs: list) -> Any:
        """Ray's ``tqdm_ray`` bar (rendered by the driver) over this call's agent steps (at most
        ``max_turns`` x roles, as every env of a round steps together)."""
        from ray.experimental.tqdm_ray import tqdm

        inner = getattr(envs[0], "unwrapped", envs[0]) if envs else None
        turns = getattr(inner, "max_turns", None)
        total = int(turns) * len(inner.possible_agents) if inner is not None and isinstance(turns, int) else None
        what = "evaluation" if split == "eval" else "rollout"
        return tqdm(desc=f"{what} (worker {self.worker_index}, {len(envs)} envs)", total=total, unit="step")

    @staticmethod
    def _time_sandbox(env) -> None:
        """Count the time the env spends in its sandbox (LLMTeamEnv.run_program), per instance."""
        inner = getattr(env, "unwrapped", env)
        run = getattr(inner, "run_program", None)
        if run is None:
            return
        inner._llm_marl_sandbox_s = 0.0
        lock = threading.Lock()  # candidates may step on copies of this env in several threads

        def timed(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return run(*a, **k)
            finally:
                with lock:
                    inner._llm_marl_sandbox_s += time.perf_counter() - t0

        inner.run_program = timed

    def sample(self, seeds: Sequence[int], *, sampling_seed: int, env_offset: int = 0, split: str = "train",
               mode: str = default_of("sampling.mode"), k: int = default_of("sampling.k"),
               temperature: Optional[float] = None) -> dict[str, Any]:
        """Play one env per seed to the end; return samples, episodes and timings."""
        from .core.rollout import GroupKey, RolloutSampler

        t0 = time.perf_counter()
        envs = self._env_list(split, len(seeds))
        for env in envs:
            getattr(env, "unwrapped", env)._llm_marl_sandbox_s = 0.0
        self.backend.gen_s, self.backend.tokens, self.backend.calls = 0.0, 0, 0
        self.backend.override_temperature = temperature
        params = SamplingParams(temperature=1.0, top_p=self.spec.top_p, max_new_tokens=self.spec.max_new_tokens,
                                stop=self.spec.stop, seed=int(sampling_seed))
        mapping = dict(self.spec.policy_mapping)
        sampler = RolloutSampler(self.backend, lambda agent: mapping[agent], params, k=k, chat=self.spec.chat,
                                 system_prompt=self.spec.system_prompt, step_workers=self.spec.step_workers)
        bar = self._progress_bar(split, envs) if self.spec.progress else None
        self.backend.on_call = None if bar is None else bar.update
        try:
            if mode == "tree":
                samples = sampler.collect_tree(envs, seeds=list(seeds))
            else:
                samples = sampler.collect_parallel(envs, seeds=list(seeds))
        finally:
            self.backend.override_temperature = None
            self.backend.on_call = None
            if bar is not None:
                bar.close()
        # Global env indices: groups of different workers never merge. Each sample carries its weights version.
        for s in samples:
            s.policy_version = self.weights_version
            s.env_idx += env_offset
            s.group_key = GroupKey(s.group_key.task_id, s.group_key.env_idx + env_offset, s.group_key.turn,
                                   s.group_key.agent)
        episodes = []
        for ep in sampler.last_episodes:
            ep = dataclasses.replace(ep, env_idx=ep.env_idx + env_offset)
            episodes.append(ep)
        total = time.perf_counter() - t0
        sandbox = sum(getattr(getattr(e, "unwrapped", e), "_llm_marl_sandbox_s", 0.0) for e in envs)
        return {"samples": samples, "episodes": episodes, "worker_index": self.worker_index,
                "weights_version": self.weights_version,
                "timings": {"rollout_s": total, "generate_s": self.backend.gen_s, "sandbox_s": sandbox,
                            "env_s": max(0.0, total - self.backend.gen_s - sandbox),
                            "tokens": self.backend.tokens, "generate_calls": self.backend.calls}}


@dataclasses.dataclass
class SampleJob:
    """A batch being sampled (:meth:`RolloutWorkerPool.submit`): its parts and where their results come from."""

    parts: list[tuple[int, list[int], int]]  # (part index, seeds, env offset)
    options: dict[str, Any]
    refs: dict[int, Any] = dataclasses.field(default_factory=dict)  # Ray actors: part index -> ObjectRef
    future: Any = None  # the in-process worker in the background: a Future of the parts' results

    def kwargs(self, j: int, offset: int) -> dict[str, Any]:
        """``RolloutWorker.sample`` keywords of part ``j`` (each part its own sampling seed)."""
        o = self.options
        return dict(sampling_seed=o["sampling_seed"] + 7_919 * j, env_offset=offset, split=o["split"],
                    mode=o["mode"], k=o["k"], temperature=o["temperature"])


class RolloutWorkerPool:
    """``num_workers`` rollout actors (or one local worker), with restart-and-redo on a crash."""

    def __init__(self, spec: WorkerSpec, num_workers: int = 1, *, num_cpus: float = 1, num_gpus: float = 0,
                 max_restarts: int = default_of("rollout.max_worker_restarts"),
                 start_timeout_s: float = default_of("rollout.start_timeout_s")):
        self.spec, self.num_workers = spec, int(num_workers)
        self.start_timeout_s = float(start_timeout_s)
        self.num_cpus, self.num_gpus, self.max_restarts = num_cpus, num_gpus, int(max_restarts)
        self.num_restarts = 0
        self._weights: Optional[Mapping[str, Mapping[str, Any]]] = None
        self._weights_ref: Any = None  # the ray.ObjectRef of the last pushed weights
        self._version = 0
        self._pending_sets: list[tuple[int, Any, Any]] = []  # (index, actor, set_weights ref) not waited for
        self._executor: Any = None  # the in-process worker's background thread (asynchronous training)
        self._local_lock = threading.Lock()
        self._local_job: Any = None  # its running job (a Future)
        self._local_pending: Optional[tuple[Mapping[str, Mapping[str, Any]], int]] = None
        self.local: Optional[RolloutWorker] = None
        self.actors: list = []
        if self.num_workers == 0:
            self.local = RolloutWorker(spec, 0)
        else:
            self.actors = [self._start(i) for i in range(self.num_workers)]
            self._wait_started(self.actors)

    def _wait_started(self, actors: list) -> None:
        """Wait (at most ``start_timeout_s``) until the actors run; else fail naming what is missing."""
        import ray
        from ray.exceptions import GetTimeoutError

        refs = [a.ping.remote() for a in actors]
        ready, pending = ray.wait(refs, num_returns=len(refs), timeout=self.start_timeout_s)
        if not pending:
            ray.get(ready)
            return
        avail = ray.available_resources()
        total = ray.cluster_resources()
        for a in actors:
            try:
                ray.kill(a)
            except Exception:
                pass
        each = {"CPU": self.num_cpus, "GPU": self.num_gpus}
        want = ", ".join(f"{v:g} {k}" for k, v in each.items() if v)
        raise GetTimeoutError(
            f"{len(pending)} of {len(refs)} rollout workers did not start within rollout.start_timeout_s="
            f"{self.start_timeout_s:g}s. Each needs {want or 'no resources'} (rollout.num_cpus_per_worker / "
            f"num_gpus_per_worker); the cluster has CPU {avail.get('CPU', 0):g} free of {total.get('CPU', 0):g}, "
            f"GPU {avail.get('GPU', 0):g} free of {total.get('GPU', 0):g}. Free or add resources, or lower "
            "rollout.num_rollout_workers. (A worker's start also loads its models and, with rollout.static_cache "
            "on a GPU and rollout.warmup, compiles decoding: ~1-3 min per model; raise rollout.start_timeout_s "
            "if the resources are there.)")

    def _start(self, index: int):
        import ray

        cls = ray.remote(RolloutWorker)
        return cls.options(num_cpus=self.num_cpus, num_gpus=self.num_gpus, max_restarts=0,
                           name=None).remote(self.spec, index + 1)

    def sync_weights(self, weights: Mapping[str, Mapping[str, Any]], *, wait: bool = True) -> int:
        """Push the learner's (trainable) weights to every worker's generation backend; returns their version.

        ``wait=False`` (asynchronous training): do not wait for the workers. A Ray actor takes them after the
        sample it is running (its calls run in order), the in-process worker before its next sample; errors
        (a dead actor: restarted with these weights) surface at the next :meth:`collect`."""
        self._version += 1
        self._weights = weights
        if self.local is not None:
            with self._local_lock:
                if self._local_job is not None and not self._local_job.done():
                    self._local_pending = (weights, self._version)  # taken before the next sample
                else:
                    self._local_pending = None
                    self.local.set_weights(weights, self._version)
            return self._version
        import ray

        self._weights_ref = ray.put(dict(weights))
        for i in range(len(self.actors)):
            if wait:
                self._call_with_restart(i, lambda a: a.set_weights.remote(self._weights_ref, self._version))
            else:
                actor = self.actors[i]
                self._pending_sets.append((i, actor, actor.set_weights.remote(self._weights_ref, self._version)))
        return self._version

    @property
    def version(self) -> int:
        """The version of the weights last pushed (:meth:`sync_weights`); samples carry theirs."""
        return self._version

    def _restart(self, i: int, err: Exception) -> None:
        import ray

        self.num_restarts += 1
        if self.num_restarts > self.max_restarts:
            raise RuntimeError(f"rollout worker {i + 1} died and the restart budget "
                               f"(rollout.max_worker_restarts={self.max_restarts}) is spent: {err}") from err
        logger.warning("rollout worker %d died (%s); restarting it and redoing its batch", i + 1,
                       type(err).__name__)
        try:
            ray.kill(self.actors[i])
        except Exception:
            pass
        self.actors[i] = self._start(i)
        if self._weights_ref is not None:
            ray.get(self.actors[i].set_weights.remote(self._weights_ref, self._version))

    def _call_with_restart(self, i: int, call):
        import ray
        from ray.exceptions import RayActorError

        while True:
            try:
                return ray.get(call(self.actors[i]))
            except RayActorError as e:
                self._restart(i, e)

    def sample(self, seeds: Sequence[int], *, sampling_seed: int, split: str = "train",
               mode: str = default_of("sampling.mode"), k: int = default_of("sampling.k"),
               temperature: Optional[float] = None) -> list[dict[str, Any]]:
        """Split ``seeds`` into one contiguous part per worker; returns the parts' results in order."""
        return self.collect(self.submit(seeds, sampling_seed=sampling_seed, split=split, mode=mode, k=k,
                                        temperature=temperature))

    def submit(self, seeds: Sequence[int], *, sampling_seed: int, split: str = "train",
               mode: str = default_of("sampling.mode"), k: int = default_of("sampling.k"),
               temperature: Optional[float] = None, background: bool = False) -> "SampleJob":
        """Start sampling (:meth:`sample`'s arguments) and return at once; :meth:`collect` waits for it.

        Ray actors start at once; the in-process worker runs the job in a background thread when
        ``background`` (asynchronous training), else when it is collected."""
        seeds = list(seeds)
        n = 1 if self.local is not None else len(self.actors)
        bounds = [round(j * len(seeds) / n) for j in range(n + 1)]
        parts = [(j, seeds[bounds[j]:bounds[j + 1]], bounds[j]) for j in range(n) if bounds[j + 1] > bounds[j]]
        options = dict(sampling_seed=sampling_seed, split=split, mode=mode, k=k, temperature=temperature)
        job = SampleJob(parts=parts, options=options)
        if self.local is not None:
            if background:
                import concurrent.futures

                if self._executor is None:
                    self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rollout")
                with self._local_lock:
                    self._local_job = job.future = self._executor.submit(self._local_parts, job)
            return job
        job.refs = {j: self.actors[j].sample.remote(part, **job.kwargs(j, off)) for j, part, off in parts}
        return job

    def _local_parts(self, job: "SampleJob") -> list[dict[str, Any]]:
        assert self.local is not None
        with self._local_lock:  # weights pushed while the previous job ran
            pending, self._local_pending = self._local_pending, None
        if pending is not None:
            self.local.set_weights(*pending)
        return [self.local.sample(part, **job.kwargs(j, off)) for j, part, off in job.parts]

    def collect(self, job: "SampleJob") -> list[dict[str, Any]]:
        """The results of a :meth:`submit` (in part order), redoing the part of an actor that died."""
        if self.local is not None:
            if job.future is not None:
                return job.future.result()
            self.wait_idle()  # a background job first (it holds the worker), then its pending weights
            return self._local_parts(job)
        import ray
        from ray.exceptions import RayActorError

        pending, self._pending_sets = self._pending_sets, []
        for i, actor, ref in pending:
            try:
                ray.get(ref)
            except RayActorError as e:
                if self.actors[i] is actor:  # not restarted since: restart it (with the latest weights)
                    self._restart(i, e)
        out: dict[int, dict] = {}
        for j, part, off in job.parts:
            try:
                out[j] = ray.get(job.refs[j])
            except RayActorError as e:
                self._restart(j, e)
                out[j] = self._call_with_restart(
                    j, lambda a, p=part, jj=j, o=off: a.sample.remote(p, **job.kwargs(jj, o)))
        return [out[j] for j, _, _ in job.parts]

    def wait_idle(self) -> None:
        """Wait until the in-process worker's background job (if any) is done."""
        job = self._local_job
        if job is not None:
            job.exception()  # waits; its result stays in the future for collect()

    def stop(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        import ray

        for a in self.actors:
            try:
                ray.kill(a)
            except Exception:
                pass
        self.actors = []
        self.local = None
