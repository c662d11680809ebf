"""Per-policy train batches for the learner: minibatch rounds over the kept samples.

Each policy's kept samples are shuffled (seeded by ``(seed, iteration, epoch)``) and cut into
that policy's minibatch size; round ``r`` holds the ``r``-th minibatch of every policy that
has one, and is one ``LearnerGroup.update`` (one optimizer step per policy in it).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from .core.seeding import minibatch_rng

__all__ = ["minibatch_rounds", "multi_agent_batch"]


def minibatch_rounds(policy_ids: Sequence[str], keep: np.ndarray, *, seed: int, iteration: int, epoch: int,
                     minibatch_size: Callable[[str], Optional[int]]) -> list[dict[str, list[int]]]:
    """Sample indices per round: ``[{policy_id: [i, ...]}, ...]``.

    ``policy_ids[i]`` is sample ``i``'s policy, ``keep[i]`` whether it is trained on;
    ``minibatch_size(pid)`` is that policy's minibatch size (None: all its samples at once).
    """
    by_policy: dict[str, list[int]] = defaultdict(list)
    for i, pid in enumerate(policy_ids):
        if keep[i]:
            by_policy[pid].append(i)
    rng = minibatch_rng(seed, iteration, epoch)
    rounds: dict[int, dict[str, list[int]]] = defaultdict(dict)
    for pid, idx in sorted(by_policy.items()):
        order = [idx[j] for j in rng.permutation(len(idx))]
        mb = int(minibatch_size(pid) or len(order))
        for r, s0 in enumerate(range(0, len(order), mb)):
            rounds[r][pid] = order[s0:s0 + mb]
    return [rounds[r] for r in sorted(rounds)]


def multi_agent_batch(samples: Sequence[Any], advantages: np.ndarray, round_: dict[str, list[int]],
                      *, pad_token_id: int = 0, behavior_logprobs: Optional[Mapping[int, Any]] = None) -> Any:
    """One round as RLlib's ``MultiAgentBatch``: a ``SampleBatch`` of collated samples + advantages per policy.

    ``behavior_logprobs`` (sample index -> log-probs of its completion tokens; ``training.behavior_logprobs:
    learner``): they are ``old_logprobs``, and the sampler's go to the column ``sampler_logprobs``."""
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

    from .core.loss import collate_samples

    policy_batches = {}
    for pid, idx in round_.items():
        behavior = [behavior_logprobs[i] for i in idx] if behavior_logprobs is not None else None
        cols = {k: v.numpy() for k, v in collate_samples([samples[i] for i in idx], pad_token_id=pad_token_id,
                                                         behavior_logprobs=behavior).items()}
        cols["advantages"] = advantages[idx].astype(np.float32)
        policy_batches[pid] = SampleBatch(cols)
    return MultiAgentBatch(policy_batches, env_steps=sum(len(v) for v in round_.values()))
