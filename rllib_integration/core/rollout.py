"""Tree-structured (AT-GRPO) and plain parallel rollouts over llm_marl team envs: :class:`RolloutSampler`.

Works with any env following the design's env contract (a PettingZoo AEC env whose
observation is ``{"prompt": str}``, whose action is text, whose ``rewards[agent]`` is set
when ``agent`` steps, whose ``infos[agent]`` carry ``turn``/``task_id``/``action_valid``,
and which has ``snapshot()``/``restore()``), e.g. every :class:`llm_marl_envs.LLMTeamEnv`.

What every mode reads from the sampler (the policy mapping, the requests it sends, the seed of each
``generate`` call, the tree rule's generator) is :class:`.sampler.SamplerBase`, below the modes; this module's
:class:`RolloutSampler` dispatches to them, above. Each mode reads top to bottom in its own module:

=================  =================================================================================
``sampler``        :class:`SamplerBase`: the settings and state the modes share
``records``        what a rollout produces: :class:`Sample` (keyed by its :class:`GroupKey`),
                   :class:`EpisodeSummary`, :class:`DroppedEpisode`, :class:`FinishedEnv`
``rounds``         a round's parts shared by the modes: ask each acting agent, read a step's outcome,
                   make its sample, tally each episode's steps, return and drop
``tree``           :meth:`RolloutSampler.collect_tree`: K candidates per (env, turn, agent), one
                   continued; ``step_workers`` threads step the candidates
``parallel``       :meth:`RolloutSampler.collect_parallel`: K independent episodes per env
``streaming``      :meth:`RolloutSampler.stream`: continuous batching over either mode's rounds
=================  =================================================================================

The names of those modules are re-exported here (``from rllib_integration.core.rollout import
RolloutSampler, GroupKey, Sample, group_ids`` keeps working).

Sandbox infrastructure faults: dropped, never scored
----------------------------------------------------
When stepping raises :class:`sandboxes.SandboxInfrastructureError` (the sandbox lost its worker
under a program, also on the fresh workers it retried it on: the program's outcome is unknown),
the episode it belongs to is dropped: tree mode, the env whose candidate it was; parallel mode,
that one episode. None of its samples are returned (those of earlier turns neither), it has no
:class:`EpisodeSummary` (no return, no success), a :class:`DroppedEpisode` goes to
:attr:`RolloutSampler.last_dropped` (streaming: :attr:`FinishedEnv.dropped`), a warning is
logged, and the other envs play on. Any other exception from an env's code propagates.
"""

from __future__ import annotations

from typing import Any, Callable, ContextManager, Iterator, Optional, Sequence

from .backends.base import GenerationBackend, SamplingParams
from .parallel import collect_parallel
from .records import DroppedEpisode, EpisodeSummary, FinishedEnv, GroupKey, Sample, group_ids
from .rounds import episode_over
from .sampler import AUTO_STEP_THRESHOLD_S, DEFAULT_STEP_WORKERS, TREE_SELECT, PolicyMap, SamplerBase
from .streaming import stream
from .tree import collect_tree

__all__ = ["GroupKey", "Sample", "EpisodeSummary", "DroppedEpisode", "FinishedEnv", "RolloutSampler", "TREE_SELECT",
           "DEFAULT_STEP_WORKERS", "AUTO_STEP_THRESHOLD_S", "group_ids", "episode_over"]

class RolloutSampler(SamplerBase):
    """Collects AT-GRPO tree rollouts (or parallel episodes) with a :class:`GenerationBackend`.

    Args:
        backend: the generation backend.
        policy_mapping: agent -> policy id: a callable, a dict, or one policy id for all agents.
        params: sampling parameters (``n`` is overridden: K in tree mode, 1 in parallel mode).
        k: candidates per (env, turn, agent) in tree mode / episodes per task in parallel mode.
        chat: send prompts as chat messages (rendered with the policy's chat template) instead
            of raw text.
        system_prompt: optional system message (chat mode).
        max_steps: safety bound on agent steps per episode.
        step_workers: tree mode: threads that step the candidates of a round concurrently, each
            on its own copy of the env (see :mod:`.tree`); 1 = one after another on the
            env itself; ``None`` (default) = :data:`DEFAULT_STEP_WORKERS` threads when the first
            candidate step of a call takes >= :data:`AUTO_STEP_THRESHOLD_S` (it ran a sandbox),
            else sequential. Same samples either way.
        tree_select: tree mode: which candidate is continued: ``"best"`` (highest immediate reward) or
            ``"sample"`` (uniformly among the valid ones; seeded by ``params.seed``); see :mod:`.tree`.
    """

    def __init__(self, backend: GenerationBackend, policy_mapping: PolicyMap, params: SamplingParams,
                 k: int = 4, *, chat: bool = True, system_prompt: Optional[str] = None, max_steps: int = 1000,
                 step_workers: Optional[int] = None, tree_select: str = "best"):
        super().__init__(backend, policy_mapping, params, k, chat=chat, system_prompt=system_prompt,
                         max_steps=max_steps, step_workers=step_workers, tree_select=tree_select)
        self.last_episodes: list[EpisodeSummary] = []
        #: the episodes of the last ``collect_*`` call dropped for a sandbox infrastructure fault
        self.last_dropped: list[DroppedEpisode] = []

    def collect_tree(self, envs: Sequence[Any], seeds: Optional[Sequence[int]] = None) -> list[Sample]:
        """Play every env to its end with K-candidate tree sampling (:mod:`.tree`); return all candidates.

        ``envs`` are reset with ``seeds`` if given (else they must be reset already).
        Episode outcomes go to :attr:`last_episodes`.
        """
        self._reset(envs, seeds)
        samples, self.last_episodes, self.last_dropped = collect_tree(self, envs)
        return samples

    def collect_parallel(self, envs: Sequence[Any], seeds: Optional[Sequence[int]] = None) -> list[Sample]:
        """K independent episodes per env (deep copies), one sampled action per step (:mod:`.parallel`)."""
        self._reset(envs, seeds)
        samples, self.last_episodes, self.last_dropped = collect_parallel(self, envs)
        return samples

    def stream(self, next_env: Callable[[int], Optional[tuple[int, Any]]], slots: int, *, mode: str,
               round_guard: Optional[Callable[[], ContextManager[int]]] = None) -> Iterator[FinishedEnv]:
        """Continuous batching (``mode``: ``tree`` or ``parallel``; :mod:`.streaming`): ``slots`` envs play at
        once, and an env's slot is refilled as soon as its rollout ends, so a ``generate`` call never waits for
        the slowest env of a batch. Yields each env's :class:`FinishedEnv` (every sample of its rollout, so every
        group of it: tree mode, its K candidates of each (turn, agent); parallel mode, its K episodes) when the
        env is done.

        ``next_env(slot)`` gives the next env for a slot, reset, with the ``env_idx`` its group keys carry
        (unique in the stream), or None when there is none. ``round_guard()`` is entered around each round
        (one ``generate`` call and the steps); its value is the policy version stamped on the round's samples
        (``Sample.policy_version``; a rollout worker swaps weights there). The rounds run between the
        yields: a consumer that stops taking pauses the stream."""
        return stream(self, next_env, slots, mode=mode, round_guard=round_guard)
