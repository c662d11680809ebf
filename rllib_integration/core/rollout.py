"""Tree-structured (AT-GRPO) and plain parallel rollouts over llm_marl team envs: :class:`RolloutSampler`.

Works with any env following the design's env contract (a PettingZoo AEC env whose
observation is ``{"prompt": str}``, whose action is text, whose ``rewards[agent]`` is set
when ``agent`` steps, whose ``infos[agent]`` carry ``turn``/``task_id``/``action_valid``,
and which has ``snapshot()``/``restore()``), e.g. every :class:`llm_marl_envs.LLMTeamEnv`.

The sampler holds what every mode shares (the policy mapping, the requests it sends, the seed of each
``generate`` call, the tree rule's generator); each mode reads top to bottom in its own module:

=================  =================================================================================
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

from typing import Any, Callable, ContextManager, Iterator, Mapping, Optional, Sequence

import numpy as np

from . import seeding
from .backends.base import GenerationBackend, GenerationRequest, SamplingParams
from .parallel import collect_parallel
from .records import DroppedEpisode, EpisodeSummary, FinishedEnv, GroupKey, Sample, group_ids
from .rounds import episode_over
from .streaming import stream
from .tree import AUTO_STEP_THRESHOLD_S, DEFAULT_STEP_WORKERS, TREE_SELECT, collect_tree

__all__ = ["GroupKey", "Sample", "EpisodeSummary", "DroppedEpisode", "FinishedEnv", "RolloutSampler", "TREE_SELECT",
           "DEFAULT_STEP_WORKERS", "AUTO_STEP_THRESHOLD_S", "group_ids", "episode_over"]

PolicyMap = Callable[[str], str] | Mapping[str, str] | str


class RolloutSampler:
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
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if tree_select not in TREE_SELECT:
            raise ValueError(f"tree_select must be one of {list(TREE_SELECT)}, got {tree_select!r}")
        self.tree_select = tree_select
        #: ``tree_select='sample'``'s generator: one stream over the sampler's calls
        self.select_rng = np.random.default_rng(params.seed)
        #: ``step_workers=None``: decided at each tree call's first candidate step
        self.auto_step_workers = step_workers is None
        if step_workers is None:
            step_workers = DEFAULT_STEP_WORKERS
        if isinstance(step_workers, bool) or not isinstance(step_workers, int) or step_workers < 1:
            raise ValueError(f"step_workers must be an int >= 1 (1 = sequential), got {step_workers!r}")
        self.step_workers = step_workers
        self.backend = backend
        if isinstance(policy_mapping, str):
            pid = policy_mapping
            self._map: Callable[[str], str] = lambda agent: pid
        elif callable(policy_mapping):
            self._map = policy_mapping
        else:
            table = dict(policy_mapping)

            def _lookup(agent: str) -> str:
                if agent not in table:
                    raise KeyError(f"policy_mapping has no policy for agent {agent!r}; known: {sorted(table)}")
                return table[agent]

            self._map = _lookup
        self.params = params
        self.k = int(k)
        self.chat = chat
        self.system_prompt = system_prompt
        self.max_steps = int(max_steps)
        self.last_episodes: list[EpisodeSummary] = []
        #: the episodes of the last ``collect_*`` call dropped for a sandbox infrastructure fault
        self.last_dropped: list[DroppedEpisode] = []
        self._calls = 0

    def policy_for(self, agent: str) -> str:
        """The policy id that ``agent`` maps to (the mapping given to the constructor)."""
        return self._map(agent)

    def request(self, policy_id: str, prompt: str) -> GenerationRequest:
        """The generation request this sampler sends for ``prompt``: chat messages (with the
        optional system prompt) or raw text. The warm start encodes demonstrations with it."""
        if not self.chat:
            return GenerationRequest(policy_id, prompt=prompt)
        msgs = ([{"role": "system", "content": self.system_prompt}] if self.system_prompt else [])
        return GenerationRequest(policy_id, messages=msgs + [{"role": "user", "content": prompt}])

    def call_params(self, n: int) -> SamplingParams:
        """The sampling parameters of this sampler's next ``generate`` call: ``n`` completions per request,
        the call's own seed (:func:`~.seeding.generate_call_seed` of the sampler's seed and the call count)."""
        seed = seeding.generate_call_seed(self.params.seed, self._calls)
        self._calls += 1
        return SamplingParams(temperature=self.params.temperature, top_p=self.params.top_p,
                              max_new_tokens=self.params.max_new_tokens, n=n, stop=self.params.stop, seed=seed)

    @staticmethod
    def _reset(envs: Sequence[Any], seeds: Optional[Sequence[int]]) -> None:
        if seeds is not None:
            if len(seeds) != len(envs):
                raise ValueError(f"got {len(seeds)} seeds for {len(envs)} envs")
            for env, s in zip(envs, seeds, strict=True):
                env.reset(seed=int(s))

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
