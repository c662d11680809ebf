"""The option records of the training core and their defaults, written once (torch-free).

A plain script builds these records itself; a run builds them from its settings, and the
run-settings schema (:mod:`rllib_integration.settings.schema`) takes the defaults of those settings
from here, so ``LossConfig()`` in a script and a run with no ``training:`` keys use the same values.

=================  ==========================================================================
:class:`LossConfig`   the PPO-clip loss: clip ranges, KL and entropy terms, aggregation
:class:`HFOptions`    the options of :class:`~.backends.hf.HFBackend` (and ``with_lora``)
:data:`LORA_DEFAULTS` the LoRA adapter of a policy at L2 (``r``, ``alpha``, ``dropout``, modules)
:class:`GiGPOOptions` the GiGPO advantage estimator: step-level weight, discount, std normalisation
:data:`DEFAULT_ADV_NORM` the advantage normalisation of the std-normalised estimators (``std``)
:data:`DEFAULT_SHARE_PROMPTS` the learner runs a prompt shared by several samples once (off)
=================  ==========================================================================

No heavy imports here (the command line reads the schema before torch or Ray load).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from .choices import AGG_MODES, KL_ESTIMATORS, LOGPROB_MODES

__all__ = ["LossConfig", "HFOptions", "LORA_DEFAULTS", "GiGPOOptions", "DEFAULT_ADV_NORM", "DEFAULT_SHARE_PROMPTS"]

#: the advantage normalisation of the group-normalised estimators (``compute_advantages(norm=)``, a run's
#: ``training.adv_norm``): divide by the group std
DEFAULT_ADV_NORM = "std"

#: the learner's forward runs a prompt shared by several samples of a micro-batch once, and their completions on its
#: KV cache (``completion_logprobs(share_prompts=)``, the micro-batchers' ``share_prompts``, a run's
#: ``training.share_prompts``). Off: equal to the per-sample pass up to float rounding, not bit for bit
DEFAULT_SHARE_PROMPTS = False

#: the LoRA settings of an L2 adapter (``peft.LoraConfig(r=, lora_alpha=, lora_dropout=, target_modules=)``)
LORA_DEFAULTS: dict[str, Any] = {"r": 8, "alpha": 16, "dropout": 0.0,
                                 "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}


@dataclass
class LossConfig:
    """Loss hyper-parameters (see :mod:`.loss`). ``clip_low``/``clip_high`` are the DAPO clip ranges
    ``[1-clip_low, 1+clip_high]``; the defaults are a run's (``training.*`` of the run settings)."""

    clip_low: float = 0.2
    clip_high: float = 0.28
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    entropy_coef: float = 0.0
    agg: str = "token-mean"
    norm_tokens: Optional[int] = None  # normaliser of seq-mean-token-sum-norm; None -> mask.shape[1]
    #: truncated importance sampling: each token's policy-gradient term times ``min(exp(old - sampler), tis_cap)``
    #: (needs the sampler's log-probs besides the behaviour ``old`` ones); None: off
    tis_cap: Optional[float] = None

    def __post_init__(self) -> None:
        if self.agg not in AGG_MODES:
            raise ValueError(f"LossConfig.agg={self.agg!r} is not one of {AGG_MODES}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"LossConfig.kl_estimator={self.kl_estimator!r} is not one of {KL_ESTIMATORS}")
        if self.clip_low < 0 or self.clip_high < 0 or self.clip_low >= 1:
            raise ValueError(f"clip ranges must satisfy 0 <= clip_low < 1, clip_high >= 0; got "
                             f"{self.clip_low}, {self.clip_high}")
        if self.tis_cap is not None and not self.tis_cap > 0:
            raise ValueError(f"LossConfig.tis_cap must be > 0 (or None: no importance-sampling correction), "
                             f"got {self.tis_cap!r}")


@dataclass(frozen=True)
class HFOptions:
    """The options of the Hugging Face generation backend: keywords of ``HFBackend(...)`` and
    ``HFBackend.with_lora(...)`` (see :mod:`.backends.hf`). A run sets them from ``rollout.*``."""

    max_batch_size: int = 64
    static_cache: bool = False
    compile: Optional[bool] = None
    logprobs: str = "sampled"
    #: compile the decoding step while the backend is built (a run's workers do: ``rollout.warmup``)
    warmup: bool = False

    def __post_init__(self) -> None:
        if self.logprobs not in LOGPROB_MODES:
            raise ValueError(f"HFBackend logprobs={self.logprobs!r} is not one of {LOGPROB_MODES}")
        if int(self.max_batch_size) < 1:
            raise ValueError(f"HFBackend max_batch_size must be >= 1, got {self.max_batch_size}")

    @classmethod
    def of(cls, owner: str, options: dict[str, Any]) -> "HFOptions":
        """The options from keyword arguments; an unknown keyword raises TypeError naming the known ones."""
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise TypeError(f"{owner} got unexpected keyword argument(s) {unknown}; its options: {known}")
        return cls(**options)


@dataclass(frozen=True)
class GiGPOOptions:
    """The GiGPO estimator's options (:func:`~.advantages.gigpo_advantages`; a run: ``training.gigpo_*``).

    ``step_weight`` is omega in ``A = A_episode + omega * A_step``; ``gamma`` discounts the step-level
    return-to-go; ``std_norm`` divides by the group std (verl-agent's ``mean_std_norm``; false:
    ``mean_norm``, centring only, like ``dr_grpo``). The defaults are verl-agent's examples'
    (``step_advantage_w=1.0``, ``gamma=0.95``) and the paper's std normalisation.
    """

    step_weight: float = 1.0
    gamma: float = 0.95
    std_norm: bool = True

    def __post_init__(self) -> None:
        if not self.step_weight >= 0:
            raise ValueError(f"GiGPO step_weight must be >= 0, got {self.step_weight!r}")
        if not 0 <= self.gamma <= 1:
            raise ValueError(f"GiGPO gamma must be in [0, 1], got {self.gamma!r}")
