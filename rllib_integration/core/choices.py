"""The vocabularies of the training core, in one place (no heavy imports: the run-settings
schema imports them without loading torch).

``ESTIMATORS`` and ``KEY_FIELDS`` are :mod:`.advantages`' estimators and group-key fields,
``AGG_MODES`` and ``KL_ESTIMATORS`` :mod:`.loss`' aggregation modes and KL estimators, ``LOGPROB_MODES``
the HF backend's ways of taking the sampled tokens' log-probs.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["ESTIMATORS", "KEY_FIELDS", "AGG_MODES", "KL_ESTIMATORS", "Estimator", "KeyField", "AggMode",
           "KlEstimator", "LOGPROB_MODES", "LogprobMode"]

# Each vocabulary is written once, as a Literal type (for the settings schema and type checkers); the
# tuples of values are read off it.
Estimator = Literal["at_grpo", "grpo_per_agent", "dr_grpo", "rloo", "reinforce_pp", "gigpo"]
KeyField = Literal["task_id", "env_idx", "turn", "agent"]
AggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KlEstimator = Literal["k1", "k3"]
LogprobMode = Literal["sampled", "forward"]

ESTIMATORS: tuple[str, ...] = get_args(Estimator)
KEY_FIELDS: tuple[str, ...] = get_args(KeyField)
AGG_MODES: tuple[str, ...] = get_args(AggMode)
KL_ESTIMATORS: tuple[str, ...] = get_args(KlEstimator)
LOGPROB_MODES: tuple[str, ...] = get_args(LogprobMode)
