"""What every sampling mode reads from the sampler: :class:`SamplerBase`.

The modes (:mod:`.tree`, :mod:`.parallel`, :mod:`.streaming`) and the round parts they share (:mod:`.rounds`)
take a :class:`SamplerBase`: the policy of each agent, the request sent for a prompt, the sampling parameters and
seed of each ``generate`` call, the tree rule and its generator, and the bounds. :class:`.rollout.RolloutSampler`
is a :class:`SamplerBase` that dispatches to the modes; it sits above them, this module below them, so the
imports go one way.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from . import seeding
from .backends.base import GenerationBackend, GenerationRequest, SamplingParams

__all__ = ["SamplerBase", "PolicyMap", "DEFAULT_STEP_WORKERS", "AUTO_STEP_THRESHOLD_S", "TREE_SELECT"]

PolicyMap = Callable[[str], str] | Mapping[str, str] | str

#: Threads stepping tree candidates when ``RolloutSampler(step_workers=None)``; chosen from
#: benchmarks/rollout_bench.py (see benchmarks/RESULTS.md "Rollouts").
DEFAULT_STEP_WORKERS = 8
#: ``step_workers=None`` goes concurrent only when the first candidate step of a ``collect_tree``
#: takes at least this long (a sandbox run); a pure-Python step stays sequential, where copies and thread
#: hand-offs would cost more than the step.
AUTO_STEP_THRESHOLD_S = 0.002
#: tree mode's rules for the continued candidate (``RolloutSampler(tree_select=...)``)
TREE_SELECT = ("best", "sample")


class SamplerBase:
    """The sampler's settings and the state its modes share; the arguments are
    :class:`.rollout.RolloutSampler`'s."""

    def __init__(self, backend: GenerationBackend, policy_mapping: PolicyMap, params: SamplingParams, k: int, *,
                 chat: bool, system_prompt: Optional[str], max_steps: int, step_workers: Optional[int],
                 tree_select: str):  # the defaults are RolloutSampler's, the public constructor
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
