"""Every seed of a run, derived in one place from the run's seeds (``training.seed``, ``warm_start.seed``).

A run has two seeds of its own; everything random in it is seeded by a number derived from them here, so
the whole derivation reads on one screen and two derivations cannot silently collide (torch-free, Ray-free).

==========================================  =================================================================
derived seed                                formula
==========================================  =================================================================
:func:`train_env_seed` (``n``-th train env)  ``seed * 1_000_000 + n``; with ``rollout.train_task_pool: N``,
                                            ``n % N`` (the same ``N`` problems in turn)
:func:`sampling_seed` (an iteration's       ``(seed * 1_000_003 + iteration * 10_007 + salt) % (2**31 - 1)``
generation)
:func:`eval_sampling_seed` (evaluation)     ``sampling_seed(seed, 0, salt=999_983)``
:func:`part_seed` (a rollout worker's part  ``sampling_seed + 7_919 * part``
of a batch, its share of a stream)
:func:`generate_call_seed` (a sampler's     ``seed + 7_919 * call``
``call``-th ``generate``)
:func:`params_group_seed` (the ``j``-th     ``seed + 104_729 * j``
(temperature, top-p) group of a call)
:func:`batch_seed` (a backend's ``i``-th    ``seed + i``
prompt or chunk within a call)
:func:`demo_seed` (warm start: the          ``seed * 100_003 + i`` (held-out episodes follow the
``i``-th expert episode)                    training ones)
:func:`module_init_seed` (an L2 policy's    ``(seed * 1_000_003 + crc32(policy_id)) % 2**31``
LoRA adapter initialisation)
:func:`minibatch_rng` (the order of an      ``numpy.random.default_rng([seed, iteration, epoch])``
epoch's minibatches)
==========================================  =================================================================

Evaluation episodes are the eval split's seeds ``0..N-1`` (disjoint from the train split by the env).
The formulas are the ones the project has always used (a run's metrics are identical before and after they
moved here); a seed ``None`` means unseeded and stays ``None``.
"""

from __future__ import annotations

import zlib
from typing import Optional

import numpy as np

__all__ = ["train_env_seed", "sampling_seed", "eval_sampling_seed", "part_seed", "generate_call_seed",
           "params_group_seed", "batch_seed", "demo_seed", "module_init_seed", "minibatch_rng"]

#: the largest seed the generation backends take (a signed 32-bit int)
MAX_SEED = 2**31 - 1
#: a run's train envs: ``seed * TRAIN_ENV_STRIDE + n`` (a million envs per run seed before two runs overlap)
TRAIN_ENV_STRIDE = 1_000_000
#: primes that spread the run seed, the iteration and the evaluation salt over the sampling seeds
RUN_PRIME, ITERATION_PRIME, EVAL_SALT = 1_000_003, 10_007, 999_983
#: the stride between the seeds of a batch's parts and of a sampler's successive generate calls
CALL_PRIME = 7_919
#: the stride between the (temperature, top-p) groups of one generate call
GROUP_PRIME = 104_729
#: the warm start's expert episodes: ``warm_start.seed * DEMO_PRIME + i``
DEMO_PRIME = 100_003


def _maybe(seed: Optional[int], offset: int) -> Optional[int]:
    return None if seed is None else int(seed) + offset


def train_env_seed(seed: int, n: int, pool: Optional[int] = None) -> int:
    """The env seed of a run's ``n``-th training env (iteration ``i``'s ``j``-th env is ``n = i * envs + j``):
    a fresh problem ``seed * 1_000_000 + n``, or with a task pool of ``pool`` problems ``n % pool``."""
    return int(n) % int(pool) if pool else int(seed) * TRAIN_ENV_STRIDE + int(n)


def sampling_seed(seed: int, iteration: int, salt: int = 0) -> int:
    """The generation seed of iteration ``iteration`` of a run seeded ``seed`` (``salt`` tells other uses
    of the same iteration apart, e.g. :func:`eval_sampling_seed`)."""
    return (int(seed) * RUN_PRIME + int(iteration) * ITERATION_PRIME + int(salt)) % MAX_SEED


def eval_sampling_seed(seed: int) -> int:
    """The generation seed of every evaluation of a run seeded ``seed`` (the same for each evaluation, so
    evaluations differ only by the weights)."""
    return sampling_seed(seed, 0, salt=EVAL_SALT)


def part_seed(seed: int, part: int) -> int:
    """The generation seed of part ``part`` of a batch split between rollout workers (or worker ``part``'s
    share of a stream), from the batch's :func:`sampling_seed` ``seed``."""
    return int(seed) + CALL_PRIME * int(part)


def generate_call_seed(seed: Optional[int], call: int) -> Optional[int]:
    """The seed of a sampler's ``call``-th ``generate`` call (counted from 0), from its own seed."""
    return _maybe(seed, CALL_PRIME * int(call))


def params_group_seed(seed: Optional[int], group: int) -> Optional[int]:
    """The seed of the ``group``-th (temperature, top-p) group of requests that one ``generate`` call splits
    into (groups in sorted order; group 0 keeps the call's seed)."""
    return _maybe(seed, GROUP_PRIME * int(group))


def batch_seed(seed: Optional[int], index: int) -> Optional[int]:
    """The seed a generation backend gives the ``index``-th prompt (vLLM) or the chunk starting at flattened
    row ``index`` (HF) of one call seeded ``seed``."""
    return _maybe(seed, int(index))


def demo_seed(seed: int, i: int = 0) -> int:
    """The env seed of the warm start's ``i``-th expert episode (``warm_start.seed`` = ``seed``): training
    demonstrations are ``i = 0..episodes-1``, held-out ones the ``heldout_episodes`` after them."""
    return int(seed) * DEMO_PRIME + int(i)


def module_init_seed(seed: int, policy_id: str) -> int:
    """The torch seed of a policy's LoRA adapter initialisation (different per policy, the same in every
    process that builds it, so learner and rollout workers start from the same adapter)."""
    return (int(seed) * RUN_PRIME + zlib.crc32(policy_id.encode())) % (MAX_SEED + 1)


def minibatch_rng(seed: int, iteration: int, epoch: int) -> np.random.Generator:
    """The generator that orders iteration ``iteration``'s epoch ``epoch`` of minibatches."""
    return np.random.default_rng([int(seed), int(iteration), int(epoch)])
