"""The driver's side of the rollout workers: :class:`RolloutWorkerPool`.

It runs ``n`` :class:`~.rollout_worker.RolloutWorker` s as Ray actors (or one in-process worker when
``n == 0``), splits a batch of seeds between them, pushes new weights after every update, and when an
actor dies mid-batch starts a new one with the same index, gives it the latest weights and redoes that
worker's part of the batch (up to ``max_restarts`` times in total). A part of a batch is a pure function
of (seeds, iteration, part index, weights), so in the synchronous loop the redo gives the same samples the
dead worker would have returned (asynchronously, the new worker has the newest weights).
:meth:`RolloutWorkerPool.submit` / :meth:`~RolloutWorkerPool.collect` let a batch be generated while the
learner works (asynchronous training, :mod:`.pipeline`).

The pool talks to its workers through one interface with two forms (:mod:`.worker_forms`): a Ray actor, which can
die and be restarted, or the one in-process worker of ``n == 0``, which never dies.
"""

from __future__ import annotations

import dataclasses
import logging
from operator import methodcaller
from typing import Any, Callable, Mapping, Optional, Sequence

from .core import seeding
from .rollout_worker import RolloutWorker, TrainSeeds, WorkerSpec
from .settings import default_of
from .worker_forms import ActorWorker, InProcessWorker, WorkerHandle

__all__ = ["RolloutWorkerPool", "SampleJob"]

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class SampleJob:
    """A batch being sampled (:meth:`RolloutWorkerPool.submit`): its parts and where their results come from."""

    parts: list[tuple[int, list[int], int]]  # (part index, seeds, env offset)
    options: dict[str, Any]
    calls: dict[int, tuple[WorkerHandle, Any]] = dataclasses.field(default_factory=dict)  # part -> (worker, call)
    sets_before: list[tuple[int, WorkerHandle, Any]] = dataclasses.field(default_factory=list)  # pushes before it

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
        self.num_workers = int(num_workers)
        self.start_timeout_s = float(start_timeout_s)
        self.max_restarts = int(max_restarts)
        self.num_restarts = 0
        #: the last pushed weights as the actors take them (WorkerHandle.share), for an actor restarted later;
        #: None with the in-process worker, which cannot be restarted (no second copy of the weights kept)
        self._weights: Any = None
        self._version = 0
        #: (index, worker, its set_weights call) not waited for yet
        self._pending_sets: list[tuple[int, WorkerHandle, Any]] = []
        self.stream_queue: Any = None  # the bounded queue of a running stream (start_stream)
        self._stream_kwargs: dict[str, Any] = {}  # its start_stream keywords (a restarted actor resumes with them)
        #: streaming: worker index -> env_idx of the last env the learner took from it (where a restarted one resumes)
        self.stream_taken: dict[int, int] = {}
        self._form: type[WorkerHandle] = InProcessWorker if self.num_workers == 0 else ActorWorker
        self.workers: list[WorkerHandle] = (
            [InProcessWorker(spec)] if self.num_workers == 0 else
            [ActorWorker(spec, i, num_cpus, num_gpus) for i in range(self.num_workers)])
        self._form.wait_started(self.workers, self.start_timeout_s)

    @classmethod
    def of_config(cls, spec: WorkerSpec, cfg: Any) -> "RolloutWorkerPool":
        """The pool of a run (``rollout.num_rollout_actors`` and their resources, restarts, start timeout)."""
        return cls(spec, int(cfg.num_rollout_actors), num_cpus=float(cfg.num_cpus_per_rollout_worker),
                   num_gpus=float(cfg.num_gpus_per_rollout_worker), max_restarts=int(cfg.max_worker_restarts),
                   start_timeout_s=float(cfg.start_timeout_s))

    @property
    def local(self) -> Optional[RolloutWorker]:
        """The in-process worker (``num_workers == 0``), else None."""
        return next((w.worker for w in self.workers if isinstance(w, InProcessWorker)), None)

    @property
    def actors(self) -> list:
        """The Ray actors (``num_workers > 0``), in worker order."""
        return [w.actor for w in self.workers if isinstance(w, ActorWorker)]

    def sync_weights(self, weights: Mapping[str, Mapping[str, Any]], *, wait: bool = True) -> int:
        """Push the learner's (trainable) weights to every worker's generation backend; returns their version.

        ``wait=False`` (asynchronous training): do not wait for the workers. A Ray actor takes them after the
        sample it is running (its calls run in order), the in-process worker before its next sample; errors
        (a dead actor: restarted with these weights) surface at the next :meth:`collect`."""
        self._version += 1
        shared = self._form.share(weights)
        self._weights = shared if self._form is ActorWorker else None
        for i in range(len(self.workers)):
            if wait:
                self._call_with_restart(i, methodcaller("set_weights", shared, self._version))
            else:
                worker = self.workers[i]
                self._pending_sets.append((i, worker, worker.set_weights(shared, self._version)))
        return self._version

    def sleep(self) -> None:
        """Every worker's backend frees its device memory (vLLM's sleep mode) until its next weight load or
        sample. A worker that died is restarted at the next sample, as always."""
        calls = [(w, w.sleep()) for w in self.workers]
        for worker, call in calls:
            try:
                worker.get(call)
            except Exception as e:  # noqa: BLE001 - a dead actor: restarted (with the weights) at the next sample
                logger.warning("rollout worker did not go to sleep (%s); it is restarted at the next sample",
                               type(e).__name__)

    @property
    def version(self) -> int:
        """The version of the weights last pushed (:meth:`sync_weights`); samples carry theirs."""
        return self._version

    def _restart(self, i: int, err: Exception) -> None:
        self.num_restarts += 1
        if self.num_restarts > self.max_restarts:
            raise RuntimeError(f"rollout worker {i + 1} died and the restart budget "
                               f"(rollout.max_worker_restarts={self.max_restarts}) is spent: {err}") from err
        logger.warning("rollout worker %d died (%s); restarting it and redoing its batch", i + 1,
                       type(err).__name__)
        worker = self.workers[i] = self.workers[i].restarted()
        if self._weights is not None:
            worker.get(worker.set_weights(self._weights, self._version))
        if self.stream_queue is not None:  # it resumes its share of the stream after the last env taken from it
            last = self.stream_taken.get(i + 1)
            worker.get(self._start_stream(i, self._stream_kwargs["first"] + i if last is None
                                          else last + len(self.workers)))

    def _get_or_restart(self, i: int, worker: WorkerHandle, call: Any) -> tuple[bool, Any]:
        """``(True, result)`` of a call made on ``worker`` (worker ``i``), or ``(False, None)`` when it
        died: it is restarted (with the latest weights) unless it has been since, so one death costs one
        restart whatever number of its calls fail."""
        try:
            return True, worker.get(call)
        except Exception as e:
            if not worker.died(e):
                raise
            if self.workers[i] is worker:
                self._restart(i, e)
            return False, None

    def _call_with_restart(self, i: int, call: Callable[[WorkerHandle], Any]) -> Any:
        """``call(worker i)``'s result, restarting the worker and calling again each time it died."""
        while True:
            ok, value = self._get_or_restart(i, self.workers[i], call(self.workers[i]))
            if ok:
                return value

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
        n = len(self.workers)
        bounds = [round(j * len(seeds) / n) for j in range(n + 1)]
        parts = [(j, seeds[bounds[j]:bounds[j + 1]], bounds[j]) for j in range(n) if bounds[j + 1] > bounds[j]]
        job = SampleJob(parts=parts, options=dict(sampling_seed=sampling_seed, split=split, mode=mode, k=k,
                                                  temperature=temperature))
        # the weights pushed so far run before this job's samples on each worker (an actor's calls run in order)
        job.sets_before, self._pending_sets = self._pending_sets, []
        job.calls = {j: (self.workers[j], self.workers[j].sample(part, job.kwargs(j, off), background=background))
                     for j, part, off in parts}
        return job

    def collect(self, job: "SampleJob") -> list[dict[str, Any]]:
        """The results of a :meth:`submit` (in part order), redoing the part of an actor that died."""
        # Only the pushes queued before this job's samples: later ones wait behind later jobs on the actors.
        for i, worker, call in job.sets_before:
            self._get_or_restart(i, worker, call)
        out: dict[int, dict] = {}
        for j, part, off in job.parts:
            ok, value = self._get_or_restart(j, *job.calls[j])
            out[j] = value if ok else self._call_with_restart(j, methodcaller("sample", part, job.kwargs(j, off)))
        return [out[j] for j, _, _ in job.parts]

    def start_stream(self, *, first: int, seeds: TrainSeeds, slots: int, queue_size: int, sampling_seed: int,
                     mode: str = default_of("sampling.mode"), k: int = default_of("sampling.k")) -> Any:
        """Streaming (:meth:`RolloutWorker.start_stream`): worker ``w`` of ``n`` plays the training envs
        ``first + w, first + w + n, ...``, ``ceil(slots / n)`` at a time, and puts each finished env into one
        bounded queue of ``queue_size`` envs (a ``queue.Queue`` for the in-process worker, a
        ``ray.util.queue.Queue`` actor for Ray actors), which is returned; take from it with ``get(timeout=)``."""
        self.stop_stream()
        n = len(self.workers)
        self.stream_queue = self._form.new_queue(int(queue_size))
        self._stream_kwargs = dict(first=first, seeds=seeds, slots=-(-int(slots) // n), sampling_seed=sampling_seed,
                                   mode=mode, k=k)
        calls = [(w, self._start_stream(i, first + i)) for i, w in enumerate(self.workers)]
        for worker, call in calls:
            worker.get(call)
        return self.stream_queue

    def _start_stream(self, w: int, first: int) -> Any:
        kw = self._stream_kwargs
        return self.workers[w].start_stream(
            self.stream_queue, first=first, stride=len(self.workers), seeds=kw["seeds"], slots=kw["slots"],
            sampling_seed=seeding.part_seed(kw["sampling_seed"], w), mode=kw["mode"], k=kw["k"])

    def restart_dead_streams(self, timeout_s: float = 30.0) -> int:
        """Streaming with rollout actors: restart those that died (the same restart budget as batches, with the
        latest weights), each resuming its share of the stream after the last env of it the learner took
        (:attr:`stream_taken`: the envs after it that it was playing are played again; one before it still
        playing is skipped). Returns how many were restarted. A death found by a weight push restarts it the same
        way (:meth:`_restart`)."""
        if self.stream_queue is None:
            return 0
        restarted = 0
        for i, worker in enumerate(self.workers):
            err = worker.dead(timeout_s)
            if err is not None:
                self._restart(i, err)
                restarted += 1
        return restarted

    def stop_stream(self) -> None:
        """Stop the workers' streams (each after its current round) and drop their queue."""
        if self.stream_queue is None:
            return
        for worker in self.workers:
            try:
                worker.get(worker.stop_stream())
            except Exception as e:
                if not worker.died(e):
                    raise
        self._form.drop_queue(self.stream_queue)
        self.stream_queue = None
        self.stream_taken.clear()

    def stop(self) -> None:
        self.stop_stream()
        self._form.wait_closed([w.close() for w in self.workers], timeout_s=30)
        for worker in self.workers:
            worker.kill()
        self.workers = []
