"""Validation of a run config against :class:`~.schema.RunSettings`: each value by the schema, then the
checks across settings (:func:`validate_settings`; :func:`validate_config` for a YAML run config)."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from pydantic import ValidationError

from ..core.advantages import estimator_names, get_estimator
from ..core.options import DEFAULT_ADV_NORM
from .errors import ConfigError, pydantic_message
from .schema import L1_ONE_MODEL, RunSettings, several_policies_at_l1
from .table import renamed_keys

__all__ = ["validate_settings", "validate_config"]


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
    if several_policies_at_l1(level, [*full["policy_mapping"].values(), *policies]):
        out.append((("specialization",), f"{L1_ONE_MODEL}; give at most one policy (or use L2/L3 for a policy "
                    "per role)"))
    samp = full["sampling"]
    if samp["mode"] == "tree" and samp["k"] < 2 and full["training"]["filter_zero_variance"]:
        out.append((("sampling", "k"), "tree sampling with k=1 gives one-sample groups (zero advantage); use k >= 2"))
    train = full["training"]
    est = train["estimator"]
    if get_estimator(est).episodes:
        if samp["mode"] != "parallel":
            why = ("gigpo compares K independent episodes of a task and their identical states, which tree sampling "
                   "does not produce (one continued trajectory per task; its nodes are AT-GRPO's groups already)"
                   if est == "gigpo" else f"{est} compares the returns of K independent episodes of a task, which "
                   "tree sampling does not produce (one continued trajectory per task)")
            out.append((("training", "estimator"), f"{why}; set sampling.mode: parallel "
                        "(ATGRPOConfig.sampling(mode='parallel'))"))
        if not [f for f in train["group_by"] if f != "turn"]:
            out.append((("training", "group_by"), f"{est} groups episodes by the fields other than turn; give at "
                        "least one of task_id, env_idx, agent"))
    if train["streaming"]:
        if train["max_staleness"] < 1:
            out.append((("training", "streaming"), "streaming needs training.max_staleness >= 1: the workers go on "
                        "generating while the learner updates, so a batch's samples are at least one version old "
                        "(set training.max_staleness: 1)"))
        if "env_idx" not in train["group_by"]:
            out.append((("training", "group_by"), "streaming hands over finished envs one by one, so a group must "
                        "lie in one env: keep env_idx in training.group_by (or turn training.streaming off)"))
    if train["tis_cap"] is not None and train["behavior_logprobs"] != "learner":
        out.append((("training", "tis_cap"), "truncated importance sampling (training.tis_cap) weighs each token by "
                    "exp(learner log-prob - sampler log-prob), with the learner's own recomputed log-probs: set "
                    "training.behavior_logprobs: learner (ATGRPOConfig.training(behavior_logprobs='learner')), or "
                    f"training.tis_cap: null (training.behavior_logprobs is {train['behavior_logprobs']!r})"))
    if train["adv_norm"] != DEFAULT_ADV_NORM and not get_estimator(est).normalised:
        out.append((("training", "adv_norm"), f"{train['adv_norm']} rescales the std-normalised estimators "
                    f"{list(estimator_names(normalised=True))}, not {est} (dr_grpo and rloo only centre; "
                    "reinforce_pp whitens per policy; gigpo: training.gigpo_std_norm); use estimator at_grpo with "
                    "adv_norm none for Dr.GRPO"))
    if full["rollout"]["backend"] == "vllm":
        out.extend(_vllm_checks(full))
    roll = full["rollout"]
    if roll["vllm_sleep"]:
        if roll["backend"] != "vllm":
            out.append((("rollout", "vllm_sleep"), "sleep mode is vLLM's: set rollout.backend: vllm, or "
                        "rollout.vllm_sleep: false"))
        elif float(roll["num_gpus_per_rollout_worker"]) <= 0:
            out.append((("rollout", "vllm_sleep"), "vLLM's sleep mode frees GPU memory; these rollout workers "
                        "generate on the CPU (rollout.num_gpus_per_rollout_worker: 0), where vLLM has no sleep mode: "
                        "set rollout.vllm_sleep: false"))
        if train["max_staleness"] > 0 or train["streaming"]:
            out.append((("rollout", "vllm_sleep"), "the engines sleep while the learner updates, so sampling "
                        "cannot overlap the update: set training.max_staleness: 0 and training.streaming: false, "
                        "or rollout.vllm_sleep: false"))
    return out


def _vllm_checks(full: Mapping[str, Any]) -> list[tuple[tuple, str]]:
    """``rollout.backend: vllm``: vLLM importable here, and on CPU rollout workers (vLLM's CPU build) every
    model's attention head size one that vLLM's CPU attention runs."""
    import importlib.util
    import inspect

    from ..core.backends.vllm import VLLM_MISSING, cpu_head_size_problem, head_size

    try:
        missing = importlib.util.find_spec("vllm") is None
    except ValueError:  # a module object put in sys.modules by hand has no spec: it is importable
        missing = False
    if missing:
        return [(("rollout", "backend"), f"{VLLM_MISSING}; or use rollout.backend: hf")]
    roll = full["rollout"]
    if float(roll["num_gpus_per_rollout_worker"]) > 0 or str(full["model"].get("device") or "").startswith("cuda"):
        return []
    from ..core.models import build_tiny_model

    tiny_defaults = {k: p.default for k, p in inspect.signature(build_tiny_model).parameters.items()}

    def size(spec: Any, tiny: Mapping[str, Any]) -> Any:
        if spec == "tiny" or isinstance(spec, Mapping):
            args = {**tiny_defaults, **dict(tiny), **(dict(spec["tiny"]) if isinstance(spec, Mapping) else {})}
            return int(args["hidden"]) // int(args["heads"])
        return head_size(spec) if isinstance(spec, str) and spec != "smollm2" else None

    out = []
    models: list[tuple[tuple[str, ...], Any]] = [
        (("model", "tiny" if full["model"]["path"] == "tiny" else "path"), full["model"]["path"])]
    models += [(("policies", pid, "model"), p["model"]) for pid, p in full["policies"].items()
               if p.get("model") is not None]
    for loc, spec in models:
        problem = cpu_head_size_problem(size(spec, full["model"]["tiny"]), f"{'.'.join(loc)} ({spec!r})")
        if problem:
            out.append((loc, f"rollout.backend: vllm on CPU rollout workers: {problem}"))
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
    raw = renamed_keys(raw)
    try:
        s = RunSettings.model_validate(raw, context={"check_paths": check_paths})
    except ValidationError as e:
        loc, msg = pydantic_message(RunSettings, e.errors()[0])
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

