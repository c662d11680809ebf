"""Continuous batching: :meth:`RolloutSampler.stream <.rollout.RolloutSampler.stream>`.

``slots`` envs play at once, and an env's slot is refilled as soon as its rollout ends, so a ``generate`` call
never waits for the slowest env of a batch. The rounds are the tree mode's (:func:`~.tree.tree_round`) or the
parallel mode's (:func:`~.parallel.parallel_round`) over the units of the slots: a slot holds one unit in tree
mode (its env) and K in parallel mode (its env's K episodes, unit ``slot * K + e``).
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Callable, ContextManager, Iterator, Optional

from .parallel import EpisodeCopy, parallel_round
from .records import FinishedEnv, Sample
from .rounds import EpisodeTally, episode_over, episode_summary
from .sampler import SamplerBase
from .tree import CandidateStepper, tree_round

__all__ = ["stream"]


def stream(sampler: SamplerBase, next_env: Callable[[int], Optional[tuple[int, Any]]], slots: int, *, mode: str,
           round_guard: Optional[Callable[[], ContextManager[int]]] = None) -> Iterator[FinishedEnv]:
    """See :meth:`RolloutSampler.stream <.rollout.RolloutSampler.stream>`."""
    if mode not in ("tree", "parallel"):
        raise ValueError(f"mode must be 'tree' or 'parallel', got {mode!r}")
    guard = round_guard or (lambda: contextlib.nullcontext(-1))
    tree = mode == "tree"
    units_per_slot = 1 if tree else sampler.k
    units: list[Any] = [None] * (slots * units_per_slot)  # tree: the env; parallel: an EpisodeCopy
    ids, got = [-1] * slots, [list[Sample]() for _ in range(slots)]
    tally = EpisodeTally(slots * units_per_slot)
    stepper = CandidateStepper(sampler.step_workers, sampler.auto_step_workers, sampler.k)
    active: list[int] = []
    ready: list[FinishedEnv] = []

    def slot_units(slot: int) -> range:
        return range(slot * units_per_slot, (slot + 1) * units_per_slot)

    def finished(slot: int) -> FinishedEnv:
        eps = [episode_summary(units[j] if tree else units[j].env, ids[slot], j - slot * units_per_slot,
                               tally.steps[j], tally.totals[j]) for j in slot_units(slot) if j not in tally.dropped]
        kept = [s for s in got[slot] if slot * units_per_slot + (0 if tree else s.candidate) not in tally.dropped]
        return FinishedEnv(ids[slot], kept, eps, [tally.dropped.pop(j) for j in slot_units(slot)
                                                  if j in tally.dropped])

    def fill(slot: int) -> None:
        while (nxt := next_env(slot)) is not None:
            ids[slot], env = nxt
            got[slot] = []
            stepper.forget(slot)
            for j in slot_units(slot):
                units[j] = env if tree else EpisodeCopy(slot, j - slot * units_per_slot, copy.deepcopy(env))
                tally.restart(j)
            live = [j for j in slot_units(slot) if not episode_over(env)]
            if live:
                active.extend(live)
                return
            ready.append(finished(slot))  # over at reset: nothing to sample

    try:
        for slot in range(slots):
            fill(slot)
        if tree:
            stepper.start(len(active))
        while active or ready:
            while ready:
                yield ready.pop(0)
            if not active:
                break
            with guard() as version:
                def add(slot: int, s: Sample, v: int = version) -> None:
                    s.policy_version = v
                    got[slot].append(s)

                still = (tree_round(sampler, units, ids, active, tally, stepper, add) if tree else
                         parallel_round(sampler, units, ids, active, tally, add))
            done = sorted({j // units_per_slot for j in active} - {j // units_per_slot for j in still})
            active = still
            for slot in done:
                ready.append(finished(slot))
                fill(slot)
            active.sort()
    finally:
        stepper.close()
