"""The records a rollout produces: one :class:`Sample` per sampled action, grouped by its :class:`GroupKey`; one
:class:`EpisodeSummary` per finished episode, one :class:`DroppedEpisode` per episode dropped for a sandbox
infrastructure fault; streaming yields them per env as a :class:`FinishedEnv`. Plain data (picklable, so they
travel between Ray actors), no torch, no Ray.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

import numpy as np

__all__ = ["GroupKey", "Sample", "EpisodeSummary", "DroppedEpisode", "FinishedEnv", "group_ids"]


class GroupKey(NamedTuple):
    """The AT-GRPO group of a sample: same problem, same env instance, same turn, same agent."""

    task_id: str
    env_idx: int
    turn: int
    agent: str


@dataclass
class Sample:
    """One sampled action (a candidate), ready for advantage computation and the loss.

    Its problem, env instance, turn and agent are those of its :attr:`group_key` (``s.task_id`` is
    ``s.group_key.task_id``, and so on): read-only, so the two cannot disagree; moving a sample to another
    env index is replacing its key (``s.group_key = s.group_key._replace(env_idx=...)``)."""

    prompt: str
    prompt_token_ids: list[int]
    completion: str
    completion_token_ids: list[int]
    logprobs: list[float]
    reward: float
    group_key: GroupKey
    policy_id: str
    valid: bool
    candidate: int = 0          # index among the K candidates (tree) / episode index (parallel)
    chosen: bool = True         # tree mode: this candidate was continued
    finish_reason: str = ""
    reward_parts: dict = field(default_factory=dict)
    policy_version: int = -1    # the weights version that generated it (set by the rollout worker; -1: unknown)

    @property
    def task_id(self) -> str:
        return self.group_key.task_id

    @property
    def env_idx(self) -> int:
        return self.group_key.env_idx

    @property
    def turn(self) -> int:
        return self.group_key.turn

    @property
    def agent(self) -> str:
        return self.group_key.agent


@dataclass
class EpisodeSummary:
    env_idx: int
    task_id: str
    episode: int
    steps: int
    success: bool
    terminated: bool
    truncated: bool
    total_reward: float


@dataclass
class DroppedEpisode:
    """An episode dropped because stepping it raised :class:`sandboxes.SandboxInfrastructureError`."""

    env_idx: int
    task_id: str
    episode: int     # tree mode 0; parallel mode the episode index among the K
    turn: int        # the turn whose step failed
    agent: str
    error: str       # the exception, one line


@dataclass
class FinishedEnv:
    """One env's finished rollout in :meth:`~.rollout.RolloutSampler.stream`: all its samples (whole groups) and
    its episode summaries (tree mode one, parallel mode K)."""

    env_idx: int
    samples: list[Sample]
    episodes: list[EpisodeSummary]
    #: its episodes dropped for a sandbox infrastructure fault (their samples and summaries are not above)
    dropped: list[DroppedEpisode] = field(default_factory=list)


def group_ids(samples: Sequence[Sample], by: Sequence[str] = GroupKey._fields) -> np.ndarray:
    """Integer group ids of ``samples`` keeping the key fields ``by`` (see advantages.group_ids_from_keys)."""
    from .advantages import group_ids_from_keys

    return group_ids_from_keys([s.group_key for s in samples], by=by)
