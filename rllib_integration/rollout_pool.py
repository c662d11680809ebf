"""The driver's side of the rollout workers: :class:`RolloutWorkerPool`.

It runs ``n`` :class:`~.rollout_worker.RolloutWorker` s as Ray actors (or one in-process worker when
``n == 0``), splits a batch of seeds between them, pushes new weights after every update, and when an
actor dies mid-batch starts a new one with the same index, gives it the latest weights and redoes that
worker's part of the batch (up to ``max_restarts`` times in total). A part of a batch is a pure function
of (seeds, iteration, part index, weights), so in the synchronous loop the redo gives the same samples the
dead worker would have returned (asynchronously, the new worker has the newest weights).
:meth:`RolloutWorkerPool.submit` / :meth:`~RolloutWorkerPool.collect` let a batch be generated while the
learner works (asynchronous training, :mod:`.pipeline`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any, Mapping, Optional, Sequence

from .core import seeding
from .rollout_worker import RolloutWorker, TrainSeeds, WorkerSpec
from .settings import default_of

__all__ = ["RolloutWorkerPool", "SampleJob"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class SampleJob:
    """A batch being sampled (:meth:`RolloutWorkerPool.submit`): its parts and where their results come from."""

    parts: list[tuple[int, list[int], int]]  # (part index, seeds, env offset)
    options: dict[str, Any]
    refs: dict[int, tuple[Any, Any]] = dataclasses.field(default_factory=dict)  # part -> (actor, ObjectRef)
    sets_before: list[tuple[int, Any, Any]] = dataclasses.field(default_factory=list)  # pushes queued before it
    future: Any = None  # the in-process worker in the background: a Future of the parts' results

    def kwargs(self, j: int, offset: int) -> dict[str, Any]:
        """``RolloutWorker.sample`` keywords of part ``j`` (each part its own sampling seed)."""
        o = self.options
        return dict(sampling_seed=seeding.part_seed(o["sampling_seed"], j), env_offset=offset, split=o["split"],
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
        self._weights_ref: Any = None  # the ray.ObjectRef of the last pushed weights
        self._version = 0
        self._pending_sets: list[tuple[int, Any, Any]] = []  # (index, actor, set_weights ref) not waited for
        self._executor: Any = None  # the in-process worker's background thread (asynchronous training)
        self._local_lock = threading.Lock()
        self._local_job: Any = None  # its running job (a Future)
        self._local_pending: Optional[tuple[Mapping[str, Mapping[str, Any]], int]] = None
        self.local: Optional[RolloutWorker] = None
        self.actors: list = []
        self.stream_queue: Any = None  # the bounded queue of a running stream (start_stream)
        self._stream_kwargs: dict[str, Any] = {}  # its start_stream keywords (a restarted actor resumes with them)
        #: streaming: worker index -> env_idx of the last env the learner took from it (where a restarted one resumes)
        self.stream_taken: dict[int, int] = {}
        if self.num_workers == 0:
            self.local = RolloutWorker(spec, 0)
        else:
            self.actors = [self._start(i) for i in range(self.num_workers)]
            self._wait_started(self.actors)

    @classmethod
    def of_config(cls, spec: WorkerSpec, cfg: Any) -> "RolloutWorkerPool":
        """The pool of a run (``rollout.num_rollout_workers`` and their resources, restarts, start timeout)."""
        return cls(spec, int(cfg.num_rollout_actors), num_cpus=float(cfg.num_cpus_per_rollout_worker),
                   num_gpus=float(cfg.num_gpus_per_rollout_worker), max_restarts=int(cfg.max_rollout_worker_restarts),
                   start_timeout_s=float(cfg.rollout_start_timeout_s))

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

    def sleep(self) -> None:
        """Every worker's backend frees its device memory (vLLM's sleep mode) until its next weight load or
        sample. A worker that died is restarted at the next sample, as always."""
        if self.local is not None:
            self.local.sleep()
            return
        import ray

        refs = [a.sleep.remote() for a in self.actors]
        for ref in refs:
            try:
                ray.get(ref)
            except Exception as e:  # noqa: BLE001 - a dead actor: restarted (with the weights) at the next sample
                logger.warning("rollout worker did not go to sleep (%s); it is restarted at the next sample",
                               type(e).__name__)

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
        if self.stream_queue is not None:  # it resumes its share of the stream after the last env taken from it
            last = self.stream_taken.get(i + 1)
            ray.get(self._start_actor_stream(i, self._stream_kwargs["first"] + i if last is None
                                             else last + len(self.actors)))

    def _get_or_restart(self, i: int, actor: Any, ref: Any) -> tuple[bool, Any]:
        """``(True, ray.get(ref))`` of a call made on ``actor`` (worker ``i``), or ``(False, None)`` when it
        died: it is restarted (with the latest weights) unless it has been since, so one death costs one
        restart whatever number of its calls fail."""
        import ray
        from ray.exceptions import RayActorError

        try:
            return True, ray.get(ref)
        except RayActorError as e:
            if self.actors[i] is actor:
                self._restart(i, e)
            return False, None

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
        # the weights pushed so far run before this job's samples on each actor (its calls run in order)
        job.sets_before, self._pending_sets = self._pending_sets, []
        job.refs = {j: (self.actors[j], self.actors[j].sample.remote(part, **job.kwargs(j, off)))
                    for j, part, off in parts}
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
        # Only the pushes queued before this job's samples: later ones wait behind later jobs on the actors.
        for i, actor, ref in job.sets_before:
            self._get_or_restart(i, actor, ref)
        out: dict[int, dict] = {}
        for j, part, off in job.parts:
            ok, value = self._get_or_restart(j, *job.refs[j])
            out[j] = value if ok else self._call_with_restart(
                j, lambda a, p=part, jj=j, o=off: a.sample.remote(p, **job.kwargs(jj, o)))
        return [out[j] for j, _, _ in job.parts]

    def wait_idle(self) -> None:
        """Wait until the in-process worker's background job (if any) is done."""
        job = self._local_job
        if job is not None:
            job.exception()  # waits; its result stays in the future for collect()

    def start_stream(self, *, first: int, seeds: TrainSeeds, slots: int, queue_size: int, sampling_seed: int,
                     mode: str = default_of("sampling.mode"), k: int = default_of("sampling.k")) -> Any:
        """Streaming (:meth:`RolloutWorker.start_stream`): worker ``w`` of ``n`` plays the training envs
        ``first + w, first + w + n, ...``, ``ceil(slots / n)`` at a time, and puts each finished env into one
        bounded queue of ``queue_size`` envs (a ``queue.Queue`` for the in-process worker, a
        ``ray.util.queue.Queue`` actor for Ray actors), which is returned; take from it with ``get(timeout=)``."""
        self.stop_stream()
        workers: list[Any] = [self.local] if self.local is not None else list(self.actors)
        n = len(workers)
        per = -(-int(slots) // n)
        if self.local is not None:
            import queue

            self.stream_queue = queue.Queue(maxsize=int(queue_size))
            self.local.start_stream(self.stream_queue, first=first, stride=1, seeds=seeds, slots=per,
                                    sampling_seed=sampling_seed, mode=mode, k=k)
            return self.stream_queue
        import ray
        from ray.util.queue import Queue

        self.stream_queue = Queue(maxsize=int(queue_size), actor_options={"num_cpus": 0})
        self._stream_kwargs = dict(first=first, seeds=seeds, slots=per, sampling_seed=sampling_seed, mode=mode, k=k)
        ray.get([self._start_actor_stream(w, first + w) for w in range(n)])
        return self.stream_queue

    def _start_actor_stream(self, w: int, first: int) -> Any:
        kw = self._stream_kwargs
        return self.actors[w].start_stream.remote(
            self.stream_queue, first=first, stride=len(self.actors), seeds=kw["seeds"], slots=kw["slots"],
            sampling_seed=seeding.part_seed(kw["sampling_seed"], w), mode=kw["mode"], k=kw["k"])

    def restart_dead_streams(self, timeout_s: float = 30.0) -> int:
        """Streaming with rollout actors: restart those that died (the same restart budget as batches, with the
        latest weights), each resuming its share of the stream after the last env of it the learner took
        (:attr:`stream_taken`: the envs after it that it was playing are played again; one before it still
        playing is skipped). Returns how many were restarted. A death found by a weight push restarts it the same
        way (:meth:`_restart`)."""
        if self.stream_queue is None or self.local is not None:
            return 0
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        restarted = 0
        for w, actor in enumerate(self.actors):
            try:
                ray.get(actor.ping.remote(), timeout=timeout_s)
            except GetTimeoutError:
                continue  # alive but busy
            except RayActorError as e:
                self._restart(w, e)
                restarted += 1
        return restarted

    def stop_stream(self) -> None:
        """Stop the workers' streams (each after its current round) and drop their queue."""
        if self.stream_queue is None:
            return
        if self.local is not None:
            self.local.stop_stream()
        else:
            import ray
            from ray.exceptions import RayActorError

            for a in self.actors:
                try:
                    ray.get(a.stop_stream.remote())
                except RayActorError:
                    pass
            self.stream_queue.shutdown(force=True)
        self.stream_queue = None
        self.stream_taken.clear()

    def stop(self) -> None:
        self.stop_stream()
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        import ray

        if self.local is not None:
            self.local.close()
        if self.actors:  # let each free its backend (vLLM engines, their files), then kill it
            try:
                ray.wait([a.close.remote() for a in self.actors], num_returns=len(self.actors), timeout=30)
            except Exception:
                pass
        for a in self.actors:
            try:
                ray.kill(a)
            except Exception:
                pass
        self.actors = []
        self.local = None
