"""Rollout workers: Ray actors that run the tree-structured sampler over batches of envs.

Each :class:`RolloutWorker` holds a generation backend for all policies (built from the
:class:`~.policies.LLMPolicySpec` s, so it serves exactly what the learner trains) and a list
of env instances made through RLlib's env registry (``register_env``). ``sample`` plays one
batch of env seeds to the end with :class:`~.core.rollout.RolloutSampler` and returns the samples,
episode summaries and timings (generation, env stepping, sandbox), and the sandbox counters of the batch
(``sandbox``: the infrastructure faults of the process's sandboxes during it, and ``dropped_episodes``,
the episodes dropped for one, described in ``dropped``; the driver sums them: ``results.sandbox_counters``).

:class:`~.rollout_pool.RolloutWorkerPool` (the driver's side) runs ``n`` of them as Ray actors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import queue as queue_mod
import threading
import time
import traceback
from typing import Any, Mapping, Optional, Sequence

from .core import seeding
from .core.backends.base import Completion, GenerationBackend, GenerationRequest, SamplingParams
from .envs import make_env
from .quiet import install_in_worker
from .settings import SANDBOX_KINDS, default_of


def _writable(v: Any) -> Any:
    """An array torch may wrap: Ray hands numpy arrays over read-only (torch warns on those)."""
    import numpy as np

    a = np.asarray(v)
    return a if a.flags.writeable else a.copy()

__all__ = ["RolloutWorker", "WorkerSpec", "TrainSeeds", "SANDBOX_KINDS", "backend_options", "with_sandbox"]

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
    #: policy id -> nucleus top-p (``policies.<id>.top_p``); a policy not named here samples with ``top_p``
    top_ps: dict = dataclasses.field(default_factory=dict)
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
    tree_select: str = default_of("sampling.tree_select")             # RolloutSampler(tree_select=)
    backend_options: dict = dataclasses.field(default_factory=dict)  # policies.make_backend(options=)
    progress: bool = False               # a progress bar (Ray's tqdm_ray) per sample() call




    @classmethod
    def of_config(cls, cfg: Any, entry: Any, probe: Any, policy_specs: Mapping[str, Any],
                  mapping: Mapping[str, str]) -> "WorkerSpec":
        """The spec of a run's workers from its ``ATGRPOConfig``: its env (``entry``; ``probe`` one env built from
        it: an llm_marl task runs programs in ``rollout.sandbox``), policies, sampling and backend settings."""
        from llm_marl_envs import LLMTeamEnv

        env_config = dict(cfg.env_config)
        if isinstance(getattr(probe, "unwrapped", probe), LLMTeamEnv):
            env_config = with_sandbox(env_config, cfg.sandbox)
        from .policies import policy_setting

        temps = {pid: float(policy_setting(cfg, pid, "temperature")) for pid in policy_specs}
        top_ps = {pid: float(policy_setting(cfg, pid, "top_p")) for pid in policy_specs}
        return cls(env=entry, env_config=env_config, eval_env_config=dict(cfg.env_eval_config),
                   policy_specs=dict(policy_specs), policy_mapping=dict(mapping), temperatures=temps, top_ps=top_ps,
                   top_p=float(cfg.top_p), max_new_tokens=int(cfg.max_new_tokens), chat=bool(cfg.chat),
                   system_prompt=cfg.system_prompt,
                   stop=tuple(cfg.stop) if isinstance(cfg.stop, (list, tuple)) else cfg.stop,
                   backend=cfg.backend,
                   device=cfg.model_device or ("cuda" if float(cfg.num_gpus_per_rollout_worker) > 0 else "cpu"),
                   torch_threads=int(cfg.torch_threads), seed=int(cfg.seed or 0), step_workers=cfg.step_workers,
                   tree_select=str(cfg.tree_select), progress=bool(cfg.progress_bars),
                   backend_options=backend_options(cfg))


@dataclasses.dataclass(frozen=True)
class TrainSeeds:
    """The env seed of the ``n``-th training env of a run (iteration ``i``'s ``j``-th env is ``n = i * envs + j``):
    fresh problems, or with ``rollout.train_task_pool: N`` the seeds ``0..N-1`` in turn
    (:func:`.core.seeding.train_env_seed`)."""

    seed: int = default_of("training.seed")
    pool: Optional[int] = default_of("rollout.train_task_pool")

    def __call__(self, n: int) -> int:
        return seeding.train_env_seed(self.seed, n, self.pool)


def backend_options(cfg: Any) -> dict[str, Any]:
    """The generation backend's keywords from a run's config (``rollout.static_cache/compile/logprobs/
    max_batch_size/warmup``, or ``rollout.vllm`` for the vLLM backend): ``policies.make_backend(options=)``."""
    if cfg.backend == "vllm":
        return {"engine_options": dict(cfg.vllm or {}), "sleep_mode": bool(cfg.vllm_sleep)}
    return {"static_cache": bool(cfg.static_cache), "compile": cfg.compile,
            "logprobs": cfg.logprobs, "max_batch_size": int(cfg.max_batch_size),
            "warmup": bool(cfg.warmup)}


def with_sandbox(env_config: Mapping[str, Any], kind: str) -> dict:
    """``env_config`` with the ``sandbox``/``sandbox_limits`` env arguments for ``rollout.sandbox: kind``.

    ``warm``: the bwrap fork-server pool (``sandbox="bwrap", sandbox_limits={"warm": True, ...}``),
    or ``"auto"`` with a warning where bubblewrap does not work (which then raises
    ``SandboxUnavailable`` when an env first runs a program: ``auto`` never becomes ``local``);
    ``cold``: ``"auto"`` (a fresh bwrap sandbox per run, the envs' own default); ``docker``/``local``: that backend. A
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
                           "sandbox='auto', which refuses to run programs without isolation (see docs/sandboxes.md)")
            cfg["sandbox"] = "auto"
    else:
        cfg["sandbox"] = {"cold": "auto"}.get(kind, kind)
    if limits:
        cfg["sandbox_limits"] = limits
    return cfg


def _sandbox_seconds(envs: Sequence[Any]) -> float:
    """The seconds the envs (and their copies) have spent in their sandbox so far: each env's
    ``sandbox_seconds`` (:attr:`llm_marl_envs.LLMTeamEnv.sandbox_seconds`; 0 for an env without it)."""
    return sum(float(getattr(getattr(e, "unwrapped", e), "sandbox_seconds", 0.0)) for e in envs)


def _sandbox_part(before: Mapping[str, int], dropped: Sequence[Any],
                  env_offset: int = 0) -> tuple[dict[str, Any], dict[str, int]]:
    """A result's ``sandbox`` counters (those of this process's sandboxes since ``before``, an earlier
    ``llm_marl_envs.sandbox_fault_counts()``, plus the ``dropped`` episodes) and its ``dropped`` records; and
    the counts now (the next ``before``)."""
    from llm_marl_envs import sandbox_fault_counts

    now = sandbox_fault_counts()
    counts = {k: max(0, int(v) - int(before.get(k, 0))) for k, v in now.items()}  # a collected sandbox drops out
    counts["dropped_episodes"] = len(dropped)
    return {"sandbox": counts,
            "dropped": [{**dataclasses.asdict(d), "env_idx": d.env_idx + env_offset} for d in dropped]}, now


class _TimedBackend(GenerationBackend):
    """Wraps a backend: per-policy temperatures and top-p, generation time and token counts.

    A ``generate`` call is split into one inner call per distinct (temperature, top-p) of its requests'
    policies, in sorted order, the ``j``-th seeded :func:`.core.seeding.params_group_seed` (one call, the
    given seed, when every policy samples alike). ``override_temperature`` (evaluation) replaces every
    policy's temperature; the policies' top-p stay."""

    def __init__(self, inner: GenerationBackend, temperatures: Mapping[str, float],
                 top_ps: Optional[Mapping[str, float]] = None):
        self.inner, self.temperatures, self.top_ps = inner, dict(temperatures), dict(top_ps or {})
        self.gen_s = 0.0
        self.tokens = 0
        self.calls = 0
        self.override_temperature: Optional[float] = None
        self.on_call: Optional[Any] = None  # called after each generate() (one agent step of every active env)

    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[list[Completion]]:
        t0 = time.perf_counter()
        out: list[Optional[list[Completion]]] = [None] * len(requests)
        by_params: dict[tuple[float, float], list[int]] = {}
        for i, r in enumerate(requests):
            t = self.override_temperature
            if t is None:
                t = self.temperatures.get(r.policy_id, params.temperature)
            top_p = self.top_ps.get(r.policy_id, params.top_p)
            by_params.setdefault((float(t), float(top_p)), []).append(i)
        for j, ((t, top_p), idx) in enumerate(sorted(by_params.items())):
            p = dataclasses.replace(params, temperature=t, top_p=top_p,
                                    seed=seeding.params_group_seed(params.seed, j))
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

    def sleep(self) -> None:
        self.inner.sleep()

    def close(self) -> None:
        self.inner.close()


class RolloutWorker:
    """Samples AT-GRPO trees (or parallel episodes) for a batch of env seeds."""

    def __init__(self, spec: WorkerSpec, worker_index: int = 0, backend: Optional[GenerationBackend] = None):
        """``backend``: generate with this one instead of the backend ``spec`` describes (a benchmark's in-memory
        model); it is wrapped like the built one (per-policy temperatures, generation timing)."""
        install_in_worker()  # the driver's quiet filters, in a Ray worker it started (not on import)
        import torch

        torch.set_num_threads(max(1, int(spec.torch_threads)))
        from .envs import import_env_modules
        from .policies import make_backend

        import_env_modules(spec.env.modules)  # the user's task module (shipped with the job's runtime_env)

        self.spec, self.worker_index = spec, worker_index
        if backend is None:
            backend = make_backend(spec.policy_specs, backend=spec.backend, device=spec.device,
                                   options=spec.backend_options)
        self.backend = _TimedBackend(backend, spec.temperatures, spec.top_ps)
        self._envs: dict[str, list] = {"train": [], "eval": [], "stream": []}
        self.weights_version = -1
        # streaming (start_stream): its thread and stop flag; weights pushed meanwhile wait in _pending until a
        # round starts (_round); _backend_lock keeps the stream's rounds and sample() (evaluation) apart
        self._backend_lock = threading.Lock()
        self._pending_lock = threading.Lock()
        self._pending: Optional[tuple[Mapping[str, Mapping[str, Any]], int]] = None
        self._stream_thread: Optional[threading.Thread] = None
        self._stream_stop = threading.Event()
        self._stream_stats = {"rounds": 0, "emitted": 0}
        self._stream_gen_s = 0.0  # generation time of the stream since its last finished env

    def ping(self) -> int:
        return self.worker_index

    def sleep(self) -> None:
        """Free the backend's device memory while the learner updates (vLLM's sleep mode; woken by the next
        weight load or sample)."""
        self.backend.sleep()

    def close(self) -> None:
        """Free the generation backend (vLLM: its engines and the files it wrote)."""
        self.backend.close()

    def set_weights(self, weights: Mapping[str, Mapping[str, Any]], version: int = 0) -> int:
        """Load the learner's weights (``version``); while a stream runs, before its next round."""
        with self._pending_lock:
            if self.streaming():
                self._pending = (weights, version)
                return version
        return self._load_weights(weights, version)

    def _apply_pending(self) -> None:
        with self._pending_lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            self._load_weights(*pending)

    def _load_weights(self, weights: Mapping[str, Mapping[str, Any]], version: int) -> int:
        import torch

        from .core.tensor_codec import decode

        for pid, state in weights.items():
            state = decode(state)  # bf16 arrives as tagged raw bits (LLMRLModule.sync_state)
            self.backend.update_weights(pid, {k: v if isinstance(v, torch.Tensor) else torch.as_tensor(_writable(v))
                                              for k, v in state.items()})
        self.weights_version = version
        return version

    def _env_list(self, split: str, n: int, key: Optional[str] = None) -> list:
        envs = self._envs[key or split]
        cfg = dict(self.spec.env_config)
        if split == "eval":
            cfg.update(self.spec.eval_env_config)
        cfg["split"] = split
        while len(envs) < n:
            envs.append(make_env(self.spec.env, cfg, self.worker_index))
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

    def sample(self, seeds: Sequence[int], *, sampling_seed: int, env_offset: int = 0, split: str = "train",
               mode: str = default_of("sampling.mode"), k: int = default_of("sampling.k"),
               temperature: Optional[float] = None) -> dict[str, Any]:
        """Play one env per seed to the end; return samples, episodes and timings (beside a running stream:
        between two of its rounds, with the newest weights)."""
        with self._backend_lock:
            self._apply_pending()
            return self._sample(seeds, sampling_seed=sampling_seed, env_offset=env_offset, split=split, mode=mode, k=k,
                                temperature=temperature)

    def _sampler(self, sampling_seed: int, k: int) -> Any:
        from .core.rollout import RolloutSampler

        params = SamplingParams(temperature=1.0, top_p=self.spec.top_p, max_new_tokens=self.spec.max_new_tokens,
                                stop=self.spec.stop, seed=int(sampling_seed))
        mapping = dict(self.spec.policy_mapping)
        return RolloutSampler(self.backend, lambda agent: mapping[agent], params, k=k, chat=self.spec.chat,
                              system_prompt=self.spec.system_prompt, step_workers=self.spec.step_workers,
                              tree_select=self.spec.tree_select)

    def _sample(self, seeds: Sequence[int], *, sampling_seed: int, env_offset: int, split: str, mode: str, k: int,
                temperature: Optional[float]) -> dict[str, Any]:
        from llm_marl_envs import sandbox_fault_counts

        t0 = time.perf_counter()
        faults = sandbox_fault_counts()  # process-wide: the in-process worker and a Ray actor alike
        envs = self._env_list(split, len(seeds))
        sandbox_s = _sandbox_seconds(envs)
        self.backend.gen_s, self.backend.tokens, self.backend.calls = 0.0, 0, 0
        self.backend.override_temperature = temperature
        sampler = self._sampler(sampling_seed, k)
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
            s.group_key = s.group_key._replace(env_idx=s.group_key.env_idx + env_offset)  # s.env_idx follows
        episodes = []
        for ep in sampler.last_episodes:
            ep = dataclasses.replace(ep, env_idx=ep.env_idx + env_offset)
            episodes.append(ep)
        total = time.perf_counter() - t0
        sandbox = _sandbox_seconds(envs) - sandbox_s
        return {"samples": samples, "episodes": episodes, "worker_index": self.worker_index,
                "weights_version": self.weights_version,
                "timings": {"rollout_s": total, "generate_s": self.backend.gen_s, "sandbox_s": sandbox,
                            "env_s": max(0.0, total - self.backend.gen_s - sandbox),
                            "tokens": self.backend.tokens, "generate_calls": self.backend.calls},
                **_sandbox_part(faults, sampler.last_dropped, env_offset)[0]}

    # -- streaming (training.streaming) -------------------------------------------------------------------
    def streaming(self) -> bool:
        """Whether a stream (:meth:`start_stream`) is running."""
        return self._stream_thread is not None and self._stream_thread.is_alive()

    def start_stream(self, out: Any, *, first: int, stride: int, seeds: TrainSeeds, slots: int, sampling_seed: int,
                     mode: str = default_of("sampling.mode"), k: int = default_of("sampling.k")) -> int:
        """Play training envs ``first, first + stride, ...`` (the ``n``-th with seed ``seeds(n)`` and ``env_idx``
        ``n``), ``slots`` at once with continuous batching (:meth:`~.core.rollout.RolloutSampler.stream`), in a
        thread, until :meth:`stop_stream`; put each finished env, whole, into ``out`` (a bounded ``queue.Queue``
        or ``ray.util.queue.Queue``): a full queue blocks the thread, so the worker pauses (backpressure).
        Returns at once (a Ray actor stays free for weight pushes and evaluation)."""
        self.stop_stream()
        self._stream_stop = threading.Event()
        self._stream_stats = {"rounds": 0, "emitted": 0}
        self._stream_thread = threading.Thread(
            target=self._stream_loop, name="llm-marl-stream", daemon=True,
            args=(out, self._stream_stop, int(first), int(stride), seeds, int(slots), int(sampling_seed), mode, int(k)))
        self._stream_thread.start()
        return self.worker_index

    def stop_stream(self) -> dict[str, int]:
        """Stop the stream (after its current round) and wait for its thread; returns its counts."""
        self._stream_stop.set()
        if self._stream_thread is not None:
            self._stream_thread.join()
            self._stream_thread = None
        self._apply_pending()
        return self.stream_stats()

    def stream_stats(self) -> dict[str, int]:
        """The running stream's rounds (``generate`` calls) and finished envs put into its queue so far."""
        return {**self._stream_stats, "weights_version": self.weights_version}

    @contextlib.contextmanager
    def _round(self) -> Any:
        """One round of the stream: the newest weights pushed, the backend kept from :meth:`sample`."""
        with self._backend_lock:
            self._apply_pending()
            self.backend.override_temperature = None
            g0 = self.backend.gen_s
            yield self.weights_version
            self._stream_gen_s += self.backend.gen_s - g0
            self._stream_stats["rounds"] += 1

    def _stream_loop(self, out: Any, stop: threading.Event, first: int, stride: int, seeds: TrainSeeds, slots: int,
                     sampling_seed: int, mode: str, k: int) -> None:
        envs = self._env_list("train", slots, key="stream")
        positions = itertools.count(first, stride)

        def next_env(slot: int) -> Optional[tuple[int, Any]]:
            if stop.is_set():
                return None
            n = next(positions)
            envs[slot].reset(seed=seeds(n))
            return n, envs[slot]

        from llm_marl_envs import sandbox_fault_counts

        self._stream_gen_s = 0.0
        t0 = time.perf_counter()
        sandbox_s = _sandbox_seconds(envs)  # the slots' envs (and their candidates' copies) count it together
        faults = sandbox_fault_counts()
        try:
            for fin in self._sampler(sampling_seed, k).stream(next_env, slots, mode=mode, round_guard=self._round):
                # the time since the previous finished env: its share of the worker's rounds
                now = time.perf_counter()
                gen, self._stream_gen_s = self._stream_gen_s, 0.0
                total = _sandbox_seconds(envs)  # read once: the difference and the next start are one value
                sandbox, sandbox_s = total - sandbox_s, total
                tokens = sum(len(s.completion_token_ids) for s in fin.samples)
                faulted, faults = _sandbox_part(faults, fin.dropped)  # the faults since the previous finished env
                part = {"samples": fin.samples, "episodes": fin.episodes, "worker_index": self.worker_index,
                        "weights_version": min((s.policy_version for s in fin.samples), default=self.weights_version),
                        "timings": {"rollout_s": now - t0, "generate_s": gen, "sandbox_s": sandbox,
                                    "env_s": max(0.0, now - t0 - gen - sandbox), "tokens": tokens,
                                    "generate_calls": 0},
                        **faulted}
                t0 = now
                if not _put(out, part, stop):
                    return
                self._stream_stats["emitted"] += 1
        except BaseException as e:  # the driver raises it when it takes from the queue
            _put(out, {"error": f"rollout worker {self.worker_index}: {type(e).__name__}: {e}",
                       "traceback": traceback.format_exc()}, stop)


def _put(out: Any, item: Any, stop: threading.Event, poll_s: float = 1.0) -> bool:
    """Put ``item`` into the bounded queue ``out``, waiting while it is full; False if ``stop`` came first."""
    while not stop.is_set():
        try:
            out.put(item, timeout=poll_s)
            return True
        except queue_mod.Full:  # ray.util.queue.Full is one too
            continue
    return False
