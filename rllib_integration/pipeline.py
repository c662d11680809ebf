"""Rollouts ahead of the learner: one-step-off (and k-step-off) asynchronous training.

With ``training.max_staleness = k > 0`` the rollout workers keep ``k`` batches in flight: right after
an iteration's batch is collected the next one is submitted, so it is generated (with the weights the
workers hold then) while the learner updates on the collected one; the new weights reach each worker
between two batches (a Ray actor runs its calls in order; the in-process worker takes them before its
next batch), never stopping the learner. Every sample carries the weights version that generated it
(``Sample.policy_version``); when a batch is trained the learner's version is the last one pushed, so
its staleness is ``version - policy_version`` (1 in the steady state of one-step-off). Parts of a batch
older than ``k`` versions (e.g. after a restart) are dropped and counted. The loss uses the log-probs
each sample was generated with, so the PPO ratio corrects for the lag. ``k = 0`` is the synchronous
loop (sample, then update), unchanged.
"""

from __future__ import annotations

import collections
from typing import Any, Callable

import numpy as np

__all__ = ["RolloutPipeline", "stale_parts"]


def stale_parts(versions: list[int], current: int, max_staleness: int) -> list[bool]:
    """Which batch parts (generated with weights ``versions``) are more than ``max_staleness`` versions older
    than ``current``. A part of unknown version (-1) is never dropped."""
    return [v >= 0 and current - v > max_staleness for v in versions]


class RolloutPipeline:
    """Batches of rollouts for successive iterations, ``max_staleness`` of them in flight (0: none, synchronous).

    ``submit(iteration)`` starts the batch of that iteration and returns a job for ``pool.collect``; ``pool`` is
    the :class:`~.rollout_pool.RolloutWorkerPool` (its ``version`` is the learner's last pushed weights)."""

    def __init__(self, pool: Any, max_staleness: int, submit: Callable[[int], Any]) -> None:
        self.pool, self.max_staleness, self.submit = pool, int(max_staleness), submit
        self._in_flight: collections.deque[tuple[int, Any]] = collections.deque()
        self.dropped_total = 0

    @property
    def asynchronous(self) -> bool:
        return self.max_staleness > 0

    def next_parts(self, iteration: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The parts of ``iteration``'s batch, and (asynchronous) the staleness report; keeps the pipeline full."""
        if not self.asynchronous:
            return self.pool.collect(self.submit(iteration)), {}
        if not self._in_flight:  # the first iteration (or the first after a restore)
            self._in_flight.append((iteration, self.submit(iteration)))
        it, job = self._in_flight.popleft()
        assert it == iteration, (it, iteration)
        parts = self.pool.collect(job)
        while len(self._in_flight) < self.max_staleness:  # generated while the learner updates on this batch
            nxt = iteration + 1 + len(self._in_flight)
            self._in_flight.append((nxt, self.submit(nxt)))
        current = int(self.pool.version)
        versions = [int(p.get("weights_version", -1)) for p in parts]
        drop = stale_parts(versions, current, self.max_staleness)
        dropped = sum(len(p["samples"]) for p, d in zip(parts, drop, strict=True) if d)
        self.dropped_total += dropped
        kept = [_without_samples(p) if d else p for p, d in zip(parts, drop, strict=True)]
        staleness = [current - s.policy_version for p in kept for s in p["samples"] if s.policy_version >= 0]
        report = {"max_staleness": self.max_staleness, "in_flight": len(self._in_flight),
                  "staleness_mean": float(np.mean(staleness)) if staleness else 0.0,
                  "staleness_max": int(max(staleness)) if staleness else 0,
                  "dropped_stale": dropped, "dropped_stale_total": self.dropped_total}
        return kept, report

    def clear(self) -> None:
        """Forget the batches in flight (a restored run samples again from its own iteration)."""
        self._in_flight.clear()


def _without_samples(part: dict[str, Any]) -> dict[str, Any]:
    """A batch part whose samples are dropped (too stale): its episodes and timings stay for the metrics."""
    return {**part, "samples": []}
