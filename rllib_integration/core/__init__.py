"""The Ray-free training core of AT-GRPO, usable from a plain Python script.

=================  =========================================================================
``models``         tiny Llama models built from a config + a locally trained tokenizer;
                   SmolLM2; ``load_model``
``backends``       generation behind one interface: :class:`GenerationBackend`,
                   ``HFBackend`` (transformers, CPU/GPU), ``VLLMBackend`` (GPU)
``rollout``        :class:`RolloutSampler`: tree-structured (AT-GRPO) and parallel rollouts, and
                   streaming (continuous batching); each mode in its own module: ``tree``,
                   ``parallel``, ``streaming``, their shared round parts in ``rounds``
``records``        what a rollout produces: ``Sample`` (keyed by its ``GroupKey``),
                   ``EpisodeSummary``, ``DroppedEpisode``, ``FinishedEnv``; ``group_ids``
``advantages``     the estimator registry (``register_estimator``; ``ESTIMATORS``: ``at_grpo``,
                   ``grpo_per_agent``, ``dr_grpo``, ``rloo``, ``reinforce_pp``, ``gigpo``,
                   ``drmas_grpo``, ``episode_grpo``); ``compute_advantages``, ``advantages_of_samples``
``loss``           ``policy_loss`` (clipped, KL, entropy, aggregation modes, truncated importance
                   sampling), ``collate_samples``, ``sampler_drift`` (sampler vs learner log-probs)
``options``        ``LossConfig``, ``HFOptions``, ``LORA_DEFAULTS``: records whose defaults the run
                   settings read (torch-free)
``logprobs``       ``completion_logprobs``: log-probs/entropy at completion positions only
                   (LM head in chunks; never a float32 batch x length x vocab tensor)
``microbatch``     token-budget micro-batches with gradient accumulation
``tensor_codec``   numpy-safe encoding of any-dtype tensors (bf16 checkpoints)
``seeding``        every seed of a run (train envs, generation calls, warm-start demos, minibatch
                   order) derived from the run's seeds, one function each (torch-free)
``warm_start``     expert demonstrations (train split) and the supervised warm start
                   (``core.warm_start.warm_start``: the package's ``warm_start`` is this module)
``metrics``        rollout/episode metrics and the JSON-lines/CSV writer
``plotting``       ``plot_learning_curve``
=================  =========================================================================

Importing this package (or any module under it) never imports Ray; the names below are
loaded lazily, so ``from rllib_integration.core import compute_advantages`` does not import
torch either::

    from rllib_integration.core import HFBackend, RolloutSampler, compute_advantages, policy_loss
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

#: public name -> the core module defining it
_EXPORTS: dict[str, str] = {
    **{n: "advantages" for n in ("ESTIMATORS", "EPISODE_ESTIMATORS", "STD_ESTIMATORS", "KEY_FIELDS",
                                 "AdvantageEstimator", "register_estimator", "get_estimator", "estimator_names",
                                 "compute_advantages", "SampleAdvantages", "advantages_of_samples",
                                 "dynamic_sampling_mask", "group_ids_from_keys", "group_codes", "gigpo_advantages",
                                 "gigpo_of_samples")},
    **{n: "loss" for n in ("LossConfig", "AGG_MODES", "KL_ESTIMATORS", "policy_loss", "aggregate", "kl_penalty",
                           "sequence_token_logprobs", "collate_samples", "sampler_drift",
                           "truncated_is_weights")},
    **{n: "records" for n in ("GroupKey", "Sample", "EpisodeSummary", "DroppedEpisode", "FinishedEnv",
                              "group_ids")},
    "RolloutSampler": "rollout",
    "episode_over": "rounds",
    **{n: "metrics" for n in ("rollout_metrics", "episode_metrics", "flatten", "MetricsWriter")},
    "plot_learning_curve": "plotting",
    **{n: "options" for n in ("HFOptions", "LORA_DEFAULTS")},
    "completion_logprobs": "logprobs",
    # not the function ``warm_start``: that name is its module's (``core.warm_start.warm_start``), which
    # importing the module would put over any package attribute of the same name
    **{n: "warm_start" for n in ("Demonstration", "collect_demonstrations", "demonstration_loss", "save_policies")},
    **{n: "microbatch" for n in ("accumulate_policy_loss", "iter_micro_batches", "micro_batch_indices",
                                 "micro_batch_logprobs")},
    **{n: "models" for n in ("build_tiny_model", "load_model", "smollm2_path", "load_smollm2", "train_tokenizer")},
    **{n: "backends" for n in ("Completion", "GenerationBackend", "GenerationRequest", "SamplingParams",
                               "HFBackend", "VLLMBackend", "make_backend")},
}

__all__ = sorted(_EXPORTS)


#: read off the estimator registry at each access (an estimator registered later is in them), never cached
_LIVE = frozenset({"ESTIMATORS", "EPISODE_ESTIMATORS", "STD_ESTIMATORS"})


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        if name not in _LIVE:
            globals()[name] = value
        return value
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:  # a module of the core: ``core.warm_start``
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
