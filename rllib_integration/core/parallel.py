"""Parallel sampling: :meth:`RolloutSampler.collect_parallel <.rollout.RolloutSampler.collect_parallel>`.

``K`` independent episodes per task (deep copies of each env), one sample per step; the
samples of the K episodes of env ``e`` at (turn, agent) share the key
``(task_id, e, turn, agent)`` — the usual GRPO grouping across episodes. Each round
(:func:`parallel_round`) steps every episode still playing once, all their requests in one
``backend.generate`` call.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, NamedTuple, Sequence

from sandboxes import SandboxInfrastructureError

from .records import DroppedEpisode, EpisodeSummary, Sample
from .rounds import EpisodeTally, ask, episode_over, episode_summary, make_sample, one_line, step_result
from .sampler import SamplerBase

__all__ = ["EpisodeCopy", "collect_parallel", "parallel_round"]


class EpisodeCopy(NamedTuple):
    """Parallel mode's unit: episode ``episode`` (of the K) of env ``source``, played on its own copy ``env``."""

    source: int
    episode: int
    env: Any


def collect_parallel(sampler: SamplerBase, envs: Sequence[Any]
                     ) -> tuple[list[Sample], list[EpisodeSummary], list[DroppedEpisode]]:
    """K episodes of every env (reset) to their ends; the samples, the episodes, the dropped ones."""
    copies = [EpisodeCopy(i, e, copy.deepcopy(envs[i])) for i in range(len(envs)) for e in range(sampler.k)]
    got: list[tuple[int, Sample]] = []
    tally = EpisodeTally(len(copies))
    active = [j for j, unit in enumerate(copies) if not episode_over(unit.env)]
    while active:
        active = parallel_round(sampler, copies, range(len(envs)), active, tally, lambda i, s: got.append((i, s)))
    episodes = [episode_summary(unit.env, unit.source, unit.episode, tally.steps[j], tally.totals[j])
                for j, unit in enumerate(copies) if j not in tally.dropped]
    samples = [s for i, s in got if i * sampler.k + s.candidate not in tally.dropped]
    return samples, episodes, list(tally.dropped.values())


def parallel_round(sampler: SamplerBase, copies: Sequence[EpisodeCopy], ids: Sequence[int], active: list[int],
                   tally: EpisodeTally, add: Callable[[int, Sample], None]) -> list[int]:
    """One step of every episode ``active`` (indices into ``copies``; env ``i``'s group keys carry ``ids[i]``),
    recorded with ``add(i, sample)``. Returns the episodes still playing."""
    reqs, pending = [], []
    for j in active:
        step, req = ask(sampler, copies[j].env, j, tally.steps[j])
        reqs.append(req)
        pending.append(step)
    outs = sampler.backend.generate(reqs, sampler.call_params(1))
    still = []
    for comps, step in zip(outs, pending, strict=True):
        j = step.unit
        i, e, env = copies[j]
        comp = comps[0]
        try:
            env.step(comp.text)
        except SandboxInfrastructureError as exc:  # this episode is dropped; the others play on
            tally.drop(j, DroppedEpisode(ids[i], str(getattr(env, "task_id", "")), e, step.turn, step.agent,
                                         one_line(exc)))
            continue
        result = step_result(env, step.agent, step.turn)
        add(i, make_sample(step, comp, result, ids[i], e, True))
        tally.add_step(j, result.reward)
        if not episode_over(env) and tally.steps[j] < sampler.max_steps:
            still.append(j)
    return still
