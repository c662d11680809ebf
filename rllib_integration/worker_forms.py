"""The two forms of a rollout worker as :class:`~.rollout_pool.RolloutWorkerPool` sees it: :class:`WorkerHandle`.

The pool talks to its workers through one interface, :class:`WorkerHandle`, with two forms:
:class:`ActorWorker` (a Ray actor: a call returns an ``ObjectRef``; it can die and be restarted) and
:class:`InProcessWorker` (``n == 0``: calls run at once, a sample when collected or in a background thread;
it never dies).
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from typing import Any, Mapping, Optional, Sequence

from .rollout_worker import RolloutWorker, WorkerSpec

__all__ = ["WorkerHandle", "InProcessWorker", "ActorWorker"]


class WorkerHandle:
    """One rollout worker as the pool sees it. :meth:`set_weights`, :meth:`sample`, :meth:`ping`, :meth:`sleep`,
    :meth:`start_stream`, :meth:`stop_stream` and :meth:`close` make a call on the worker and return it (to pass to
    :meth:`get`); :meth:`get` waits for its result, raising what the call raised. :meth:`died`, :meth:`dead`,
    :meth:`restarted` and :meth:`kill` are about the worker's life: where they have a body here, it is what a
    worker that cannot die does (the in-process one). The static methods prepare what a pool gives its workers
    (:meth:`share`, :meth:`new_queue`, :meth:`drop_queue`) or wait for all of them at once."""

    index: int  # the worker's place in the pool (0-based)

    def set_weights(self, weights: Any, version: int) -> Any:
        raise NotImplementedError

    def sample(self, part: list[int], kwargs: dict[str, Any], *, background: bool = False) -> Any:
        raise NotImplementedError

    def ping(self) -> Any:
        raise NotImplementedError

    def sleep(self) -> Any:
        raise NotImplementedError

    def start_stream(self, out: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def stop_stream(self) -> Any:
        raise NotImplementedError

    def close(self) -> Any:
        raise NotImplementedError

    def get(self, call: Any, timeout: Optional[float] = None) -> Any:
        raise NotImplementedError

    def died(self, error: BaseException) -> bool:
        """Whether ``error`` (raised by :meth:`get`) says the worker died (then :meth:`restarted` replaces it)."""
        return False

    def dead(self, timeout_s: float) -> Optional[Exception]:
        """The error that says the worker died, or None when it answers (or is busy for ``timeout_s``)."""
        return None

    def restarted(self) -> "WorkerHandle":
        """A new worker in its place (this one killed)."""
        raise RuntimeError(f"rollout worker {self.index + 1} cannot be restarted")

    @staticmethod
    def share(weights: Mapping[str, Mapping[str, Any]]) -> Any:
        """The weights in the form each worker's :meth:`set_weights` takes."""
        return weights

    @staticmethod
    def new_queue(size: int) -> Any:
        """The bounded queue the workers' streams put finished envs into."""
        return queue.Queue(maxsize=size)

    @staticmethod
    def drop_queue(q: Any) -> None:
        """Free a stream's queue."""

    @staticmethod
    def wait_started(workers: Sequence["WorkerHandle"], timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until the workers run; else kill them and fail naming what is missing."""

    @staticmethod
    def wait_closed(calls: list, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for the workers' :meth:`close` calls, whatever they raise."""

    def kill(self) -> None:
        """End the worker (after :meth:`close`)."""


def _ran(value: Any = None) -> concurrent.futures.Future:
    """A call of the in-process worker that has run: a finished future of its result."""
    done: concurrent.futures.Future = concurrent.futures.Future()
    done.set_result(value)
    return done


class InProcessWorker(WorkerHandle):
    """The one worker of a pool with ``n == 0``, in this process. Its calls run at once (their errors raise at
    the call), but a sample: it runs when collected (:meth:`get`), or with ``background`` in a thread; weights
    pushed while that thread samples are loaded before the next sample."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.index = 0
        self.worker = RolloutWorker(spec, 0)
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._lock = threading.Lock()
        self._job: Optional[concurrent.futures.Future] = None  # the background sample
        self._pending: Optional[tuple[Any, int]] = None  # weights pushed while it runs

    def set_weights(self, weights: Any, version: int) -> concurrent.futures.Future:
        with self._lock:
            if self._job is not None and not self._job.done():
                self._pending = (weights, version)  # taken before the next sample
                return _ran(version)
            self._pending = None
            return _ran(self.worker.set_weights(weights, version))

    def sample(self, part: list[int], kwargs: dict[str, Any], *, background: bool = False) -> Any:
        if not background:
            return lambda: self._sample(part, kwargs, idle=True)  # runs when collected
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rollout")
        with self._lock:
            self._job = self._executor.submit(self._sample, part, kwargs)
        return self._job

    def _sample(self, part: list[int], kwargs: dict[str, Any], idle: bool = False) -> dict[str, Any]:
        if idle and self._job is not None:
            self._job.exception()  # a background sample first (it holds the worker), then its pending weights
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            self.worker.set_weights(*pending)
        return self.worker.sample(part, **kwargs)

    def ping(self) -> concurrent.futures.Future:
        return _ran(self.worker.ping())

    def sleep(self) -> concurrent.futures.Future:
        self.worker.sleep()
        return _ran()

    def start_stream(self, out: Any, **kwargs: Any) -> concurrent.futures.Future:
        return _ran(self.worker.start_stream(out, **kwargs))

    def stop_stream(self) -> concurrent.futures.Future:
        return _ran(self.worker.stop_stream())

    def close(self) -> concurrent.futures.Future:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        self.worker.close()
        return _ran()

    def get(self, call: Any, timeout: Optional[float] = None) -> Any:
        if isinstance(call, concurrent.futures.Future):
            return call.result(timeout)
        return call()


class ActorWorker(WorkerHandle):
    """A Ray actor running a :class:`~.rollout_worker.RolloutWorker` (its worker index is ``index + 1``); its calls
    return ``ObjectRef`` s and run in order on the actor."""

    def __init__(self, spec: WorkerSpec, index: int, num_cpus: float, num_gpus: float) -> None:
        import ray

        self.spec, self.index, self.num_cpus, self.num_gpus = spec, index, num_cpus, num_gpus
        self.actor: Any = ray.remote(RolloutWorker).options(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0,
                                                       name=None).remote(spec, index + 1)

    def set_weights(self, weights: Any, version: int) -> Any:
        return self.actor.set_weights.remote(weights, version)

    def sample(self, part: list[int], kwargs: dict[str, Any], *, background: bool = False) -> Any:
        return self.actor.sample.remote(part, **kwargs)  # an actor always samples beside the driver

    def ping(self) -> Any:
        return self.actor.ping.remote()

    def sleep(self) -> Any:
        return self.actor.sleep.remote()

    def start_stream(self, out: Any, **kwargs: Any) -> Any:
        return self.actor.start_stream.remote(out, **kwargs)

    def stop_stream(self) -> Any:
        return self.actor.stop_stream.remote()

    def close(self) -> Any:
        return self.actor.close.remote()

    def get(self, call: Any, timeout: Optional[float] = None) -> Any:
        import ray

        return ray.get(call, timeout=timeout)

    def died(self, error: BaseException) -> bool:
        from ray.exceptions import RayActorError

        return isinstance(error, RayActorError)

    def dead(self, timeout_s: float) -> Optional[Exception]:
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            self.get(self.ping(), timeout=timeout_s)
        except GetTimeoutError:
            return None  # alive but busy
        except RayActorError as e:
            return e
        return None

    def restarted(self) -> "ActorWorker":
        self.kill()
        return ActorWorker(self.spec, self.index, self.num_cpus, self.num_gpus)

    def kill(self) -> None:
        import ray

        try:
            ray.kill(self.actor)
        except Exception:
            pass

    @staticmethod
    def share(weights: Mapping[str, Mapping[str, Any]]) -> Any:
        import ray

        return ray.put(dict(weights))  # one copy in the object store for every actor

    @staticmethod
    def new_queue(size: int) -> Any:
        from ray.util.queue import Queue

        return Queue(maxsize=size, actor_options={"num_cpus": 0})

    @staticmethod
    def drop_queue(q: Any) -> None:
        q.shutdown(force=True)

    @staticmethod
    def wait_started(workers: Sequence[WorkerHandle], timeout_s: float) -> None:
        import ray
        from ray.exceptions import GetTimeoutError

        refs = [w.ping() for w in workers]
        ready, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        if not pending:
            ray.get(ready)
            return
        avail = ray.available_resources()
        total = ray.cluster_resources()
        for w in workers:
            w.kill()
        first = workers[0]
        assert isinstance(first, ActorWorker)
        each = {"CPU": first.num_cpus, "GPU": first.num_gpus}
        want = ", ".join(f"{v:g} {k}" for k, v in each.items() if v)
        raise GetTimeoutError(
            f"{len(pending)} of {len(refs)} rollout workers did not start within rollout.start_timeout_s="
            f"{timeout_s:g}s. Each needs {want or 'no resources'} (rollout.num_cpus_per_rollout_worker "
            f"/ num_gpus_per_rollout_worker); the cluster has CPU {avail.get('CPU', 0):g} free of "
            f"{total.get('CPU', 0):g}, "
            f"GPU {avail.get('GPU', 0):g} free of {total.get('GPU', 0):g}. Free or add resources, or lower "
            "rollout.num_rollout_actors. (A worker's start also loads its models and, with rollout.static_cache "
            "on a GPU and rollout.warmup, compiles decoding: ~1-3 min per model; raise rollout.start_timeout_s "
            "if the resources are there.)")

    @staticmethod
    def wait_closed(calls: list, timeout_s: float) -> None:
        import ray

        try:  # let each free its backend (vLLM engines, their files)
            ray.wait(calls, num_returns=len(calls), timeout=timeout_s)
        except Exception:
            pass
