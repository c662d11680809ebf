"""Rollouts ahead of the learner: one-step-off (and k-step-off) asynchronous training.

With ``training.max_staleness = k > 0`` the rollout workers keep ``k`` batches in flight: right after
an iteration's batch is collected the next one is submitted, so it is generated (with the weights the
workers hold then) while the learner updates on the collected one; the new weights reach each worker
between two batches (a Ray actor runs its calls in order; the in-process worker takes them before its
next batch), never stopping the learner. Every sample carries the weights version that generated it
(``Sample.policy_version``); when a batch is trained the learner's version is the last one pushed, so
its staleness is ``version - policy_version`` (1 in the steady state of one-step-off). Parts of a batch
older than ``k`` versions are dropped and counted: that happens only when weights were pushed besides
the iterations' own (e.g. a learner state restored into a running algorithm); a restarted worker gets
the newest weights, so its redone part is never older. The loss uses the log-probs each sample was
generated with, so the PPO ratio corrects for the lag. No batch is started past ``last_iteration``
(``evaluation.final_iteration``, where the run's length is known), so the run's end and its final
evaluation wait for nothing. ``k = 0`` is the synchronous loop (sample, then update), unchanged.

With the in-process worker (``rollout.num_rollout_actors: 0``) the batch is generated in a thread of
the learner's process: the two share torch's global random state and, on a GPU, its memory. The HF
backend seeds generation per call, so samples stay reproducible as long as the learner draws no random
numbers (no dropout); prefer rollout actors for asynchronous runs of models with dropout.
"""

from __future__ import annotations

import collections
import queue
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

__all__ = ["RolloutPipeline", "StreamPipeline", "drop_stale", "stale_parts"]


def stale_parts(versions: list[int], current: int, max_staleness: int) -> list[bool]:
    """Which batch parts (generated with weights ``versions``) are more than ``max_staleness`` versions older
    than ``current``. A part of unknown version (-1) is never dropped."""
    return [v >= 0 and current - v > max_staleness for v in versions]


class RolloutPipeline:
    """Batches of rollouts for successive iterations, ``max_staleness`` of them in flight (0: none, synchronous).

    ``submit(iteration)`` starts the batch of that iteration and returns a job for ``pool.collect``; ``pool`` is
    the :class:`~.rollout_pool.RolloutWorkerPool` (its ``version`` is the learner's last pushed weights)."""

    def __init__(self, pool: Any, max_staleness: int, submit: Callable[[int], Any],
                 last_iteration: Optional[int] = None) -> None:
        self.pool, self.max_staleness, self.submit = pool, int(max_staleness), submit
        self.last_iteration = last_iteration  # 0-based index of the run's last iteration, if known
        self._in_flight: collections.deque[tuple[int, Any]] = collections.deque()
        self.dropped_total = 0

    @property
    def asynchronous(self) -> bool:
        return self.max_staleness > 0

    def next_parts(self, iteration: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The parts of ``iteration``'s batch, and (asynchronous) the staleness report; keeps the pipeline full."""
        if not self.asynchronous:
            return self.pool.collect(self.submit(iteration)), {}
        while self._in_flight and self._in_flight[0][0] != iteration:  # a failed iteration is retried
            self._in_flight.popleft()
        if not self._in_flight:  # the first iteration (or the first after a restore or a retry)
            self._in_flight.append((iteration, self.submit(iteration)))
        _, job = self._in_flight.popleft()
        parts = self.pool.collect(job)
        while len(self._in_flight) < self.max_staleness:  # generated while the learner updates on this batch
            nxt = iteration + 1 + len(self._in_flight)
            if self.last_iteration is not None and nxt > self.last_iteration:
                break
            self._in_flight.append((nxt, self.submit(nxt)))
        kept, report = drop_stale(parts, int(self.pool.version), self.max_staleness)
        self.dropped_total += report["dropped_stale"]
        return kept, {**report, "in_flight": len(self._in_flight), "dropped_stale_total": self.dropped_total}

    @property
    def wait_for_weights(self) -> bool:
        """Whether a weight push waits for the workers (synchronous: they sample next with them)."""
        return not self.asynchronous

    def clear(self) -> None:
        """Forget the batches in flight (a restored run samples again from its own iteration)."""
        self._in_flight.clear()


def drop_stale(parts: list[dict[str, Any]], current: int, max_staleness: int, by: Optional[Sequence[str]] = None
               ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``parts`` without their samples more than ``max_staleness`` versions older than ``current``, and the staleness
    report of the samples kept. What is dropped whole: a part (``by`` None; its ``weights_version``), or each group
    (the group key restricted to ``by``) with any sample that old (a streamed env's turns may come from several
    versions; all K candidates of one (turn, agent) node from one)."""
    dropped = 0
    kept = []
    for p in parts:
        if by is None:
            stale = stale_parts([int(p.get("weights_version", -1))], current, max_staleness)[0]
            keep = [] if stale else p["samples"]
        else:
            keys = [tuple(getattr(s.group_key, f) for f in by) for s in p["samples"]]
            oldest: dict[tuple, int] = {}
            for key, s in zip(keys, p["samples"], strict=True):
                oldest[key] = min(oldest.get(key, s.policy_version), s.policy_version)
            groups = list(oldest)
            old = {k for k, d in zip(groups, stale_parts([oldest[k] for k in groups], current, max_staleness),
                                     strict=True) if d}
            keep = [s for key, s in zip(keys, p["samples"], strict=True) if key not in old]
        dropped += len(p["samples"]) - len(keep)
        kept.append(p if len(keep) == len(p["samples"]) else {**p, "samples": keep})  # episodes stay for the metrics
    staleness = [current - s.policy_version for p in kept for s in p["samples"] if s.policy_version >= 0]
    return kept, {"max_staleness": max_staleness, "staleness_mean": float(np.mean(staleness)) if staleness else 0.0,
                  "staleness_max": int(max(staleness)) if staleness else 0, "dropped_stale": dropped}


class StreamPipeline:
    """Streaming episodes (``training.streaming``): the rollout workers play training envs without a break, with
    continuous batching, and put each finished env (all its samples: every group of it whole) into a bounded
    queue; a batch is whole envs taken from it until it holds ``min_samples`` samples (None: ``batch_envs`` envs),
    or what is there when ``timeout_s`` has passed (at least one env). A full queue stops the workers
    (backpressure). Weights reach a worker between two of its rounds, so each sample carries the version it was
    generated with; a group (``group_by``) with a sample more than ``max_staleness`` versions older than the
    learner is dropped whole and counted.

    ``start(first)`` starts the workers' stream at training env ``first`` (``RolloutWorkerPool.start_stream``) and
    returns its queue; the stream starts at the first batch, from ``iteration * batch_envs`` (the problems of the
    synchronous run, in order), stops after the batch of ``last_iteration`` and after :meth:`clear`."""

    wait_for_weights = True  # a push only hands the weights over (the worker loads them at its next round)
    asynchronous = True

    def __init__(self, pool: Any, max_staleness: int, start: Callable[[int], Any], *, batch_envs: int,
                 group_by: Sequence[str], min_samples: Optional[int] = None, timeout_s: float = 60.0,
                 last_iteration: Optional[int] = None, poll_s: float = 1.0, check_s: float = 10.0) -> None:
        self.pool, self.max_staleness, self.start = pool, int(max_staleness), start
        self.batch_envs, self.min_samples, self.timeout_s = int(batch_envs), min_samples, float(timeout_s)
        self.group_by = tuple(group_by)
        self.last_iteration, self.poll_s, self.check_s = last_iteration, float(poll_s), float(check_s)
        self._queue: Any = None
        self.dropped_total = 0

    def _enough(self, parts: list[dict[str, Any]]) -> bool:
        if self.min_samples is None:
            return len(parts) >= self.batch_envs
        return sum(len(p["samples"]) for p in parts) >= self.min_samples

    def take(self) -> tuple[list[dict[str, Any]], bool]:
        """Finished envs from the queue until there are enough (or the timeout, with at least one); and whether
        the timeout cut the batch."""
        deadline = time.monotonic() + self.timeout_s
        checked = time.monotonic()
        parts: list[dict[str, Any]] = []
        while not self._enough(parts):
            left = deadline - time.monotonic()
            if parts and left <= 0:
                return parts, True
            try:
                item = self._queue.get(timeout=max(0.0, min(left, self.poll_s)) if parts else self.poll_s)
            except queue.Empty:  # ray.util.queue.Empty is one too
                if time.monotonic() - checked >= self.check_s:  # nothing for a while: a dead actor is restarted
                    self.pool.restart_dead_streams()
                    checked = time.monotonic()
                continue
            if "error" in item:
                raise RuntimeError(f"streaming: {item['error']}\n{item.get('traceback', '')}")
            parts.append(item)
            taken, w = self.pool.stream_taken, item["worker_index"]
            for e in item["episodes"][:1]:  # where a restarted worker resumes
                taken[w] = max(e.env_idx, taken.get(w, -1))
        return parts, False

    def next_parts(self, iteration: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The next batch of finished envs and its streaming and staleness report."""
        if self._queue is None:
            self._queue = self.start(iteration * self.batch_envs)
        parts, timed_out = self.take()
        if self.last_iteration is not None and iteration >= self.last_iteration:
            self.clear()  # nothing runs beside the final evaluation
        kept, report = drop_stale(parts, int(self.pool.version), self.max_staleness, by=self.group_by)
        self.dropped_total += report["dropped_stale"]
        return kept, {**report, "streaming": True, "envs": len(parts), "timed_out": timed_out,
                      "queued": self.queued(), "dropped_stale_total": self.dropped_total}

    def queued(self) -> int:
        """Finished envs waiting in the queue."""
        return 0 if self._queue is None else int(self._queue.qsize())

    def clear(self) -> None:
        """Stop the stream (a restored run starts it again from its own iteration)."""
        self.pool.stop_stream()
        self._queue = None
