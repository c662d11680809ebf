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

With the in-process worker (``rollout.num_rollout_workers: 0``) the batch is generated in a thread of
the learner's process: the two share torch's global random state and, on a GPU, its memory. The HF
backend seeds generation per call, so samples stay reproducible as long as the learner draws no random
numbers (no dropout); prefer rollout actors for asynchronous runs of models with dropout.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Optional

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
