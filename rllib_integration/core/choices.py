"""The vocabularies of the training core, in one place (no heavy imports: the run-settings
schema imports them without loading torch).

``ESTIMATORS`` and ``KEY_FIELDS`` are :mod:`.advantages`' estimators and group-key fields,
``AGG_MODES`` and ``KL_ESTIMATORS`` :mod:`.loss`' aggregation modes and KL estimators, ``LOGPROB_MODES``
the HF backend's ways of taking the sampled tokens' log-probs, ``ADV_NORMS`` the advantage normalisations,
``BEHAVIOR_LOGPROBS`` where the loss's behaviour (old) log-probs come from.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["ESTIMATORS", "KEY_FIELDS", "AGG_MODES", "KL_ESTIMATORS", "Estimator", "KeyField", "AggMode",
           "KlEstimator", "LOGPROB_MODES", "LogprobMode", "ADV_NORMS", "AdvNorm", "EPISODE_ESTIMATORS",
           "STD_ESTIMATORS", "BEHAVIOR_LOGPROBS", "BehaviorLogprobs"]

# Each vocabulary is written once, as a Literal type (for the settings schema and type checkers); the
# tuples of values are read off it.
Estimator = Literal["at_grpo", "grpo_per_agent", "dr_grpo", "rloo", "reinforce_pp", "gigpo", "drmas_grpo",
                    "episode_grpo"]
KeyField = Literal["task_id", "env_idx", "turn", "agent"]
AggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KlEstimator = Literal["k1", "k3"]
LogprobMode = Literal["sampled", "forward"]
#: how a group-normalised estimator scales its centred advantages (``training.adv_norm``)
AdvNorm = Literal["std", "none", "per_role_std"]
#: the behaviour log-probs of the PPO ratio (``training.behavior_logprobs``): the sampler's, as generated, or the
#: learner's own, recomputed before the iteration's first update
BehaviorLogprobs = Literal["sampler", "learner"]

ESTIMATORS: tuple[str, ...] = get_args(Estimator)
KEY_FIELDS: tuple[str, ...] = get_args(KeyField)
AGG_MODES: tuple[str, ...] = get_args(AggMode)
KL_ESTIMATORS: tuple[str, ...] = get_args(KlEstimator)
LOGPROB_MODES: tuple[str, ...] = get_args(LogprobMode)
ADV_NORMS: tuple[str, ...] = get_args(AdvNorm)
BEHAVIOR_LOGPROBS: tuple[str, ...] = get_args(BehaviorLogprobs)
#: the estimators that compare K independent episodes of a task (``sampling.mode: parallel`` in a run)
EPISODE_ESTIMATORS: tuple[str, ...] = ("gigpo", "drmas_grpo", "episode_grpo")
#: the estimators whose default divides by the group std, and so take ``adv_norm`` (``none``, ``per_role_std``)
STD_ESTIMATORS: tuple[str, ...] = ("at_grpo", "grpo_per_agent", "drmas_grpo", "episode_grpo")
