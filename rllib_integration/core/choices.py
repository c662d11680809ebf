"""The vocabularies of the training core, in one place (no heavy imports: the run-settings
schema imports them without loading torch).

``KEY_FIELDS`` are :mod:`.advantages`' group-key fields (its estimators are a registry there: ``ESTIMATORS``),
``AGG_MODES`` and ``KL_ESTIMATORS`` :mod:`.loss`' aggregation modes and KL estimators, ``LOGPROB_MODES``
the HF backend's ways of taking the sampled tokens' log-probs, ``ADV_NORMS`` the advantage normalisations,
``BEHAVIOR_LOGPROBS`` where the loss's behaviour (old) log-probs come from.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["KEY_FIELDS", "AGG_MODES", "KL_ESTIMATORS", "KeyField", "AggMode", "KlEstimator", "LOGPROB_MODES",
           "LogprobMode", "ADV_NORMS", "AdvNorm", "BEHAVIOR_LOGPROBS", "BehaviorLogprobs"]

# Each vocabulary is written once, as a Literal type (for the settings schema and type checkers); the
# tuples of values are read off it.
KeyField = Literal["task_id", "env_idx", "turn", "agent"]
AggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KlEstimator = Literal["k1", "k3"]
LogprobMode = Literal["sampled", "forward"]
#: how a group-normalised estimator scales its centred advantages (``training.adv_norm``)
AdvNorm = Literal["std", "none", "per_role_std"]
#: the behaviour log-probs of the PPO ratio (``training.behavior_logprobs``): the sampler's, as generated, or the
#: learner's own, recomputed before the iteration's first update
BehaviorLogprobs = Literal["sampler", "learner"]

KEY_FIELDS: tuple[str, ...] = get_args(KeyField)
AGG_MODES: tuple[str, ...] = get_args(AggMode)
KL_ESTIMATORS: tuple[str, ...] = get_args(KlEstimator)
LOGPROB_MODES: tuple[str, ...] = get_args(LogprobMode)
ADV_NORMS: tuple[str, ...] = get_args(AdvNorm)
BEHAVIOR_LOGPROBS: tuple[str, ...] = get_args(BehaviorLogprobs)
