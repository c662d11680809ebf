"""Specialization levels: which model (or adapter) serves which policy.

=====  ==================================================================================
L1     One shared model. Every agent maps to the same policy (default id ``"shared"``).
L2     One base model, one LoRA adapter per policy. Only adapter weights are trained
       (the learner's modules share the frozen base tensors) and synced to the generation
       backend (``HFBackend.with_lora``: one base, adapters switched per request).
L3     A full model per policy; base models and tokenizers may differ per policy.
=====  ==================================================================================

:func:`resolve_policies` turns an ``ATGRPOConfig`` and the env's agents into the policy ids
(RLlib's ``config.multi_agent(policies=...)``, or one per level's default), the agent -> policy
mapping (``policy_mapping_fn``) and one :class:`LLMPolicySpec` per policy.

:class:`LLMPolicySpec` is the resolved, picklable description of one policy; the learner's
RLModule (:mod:`.rl_module`) and the rollout workers' backend (:func:`make_backend`) are
both built from it, so the two sides always agree on what a policy is.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Mapping, Optional

from .settings import LEVELS, LORA_DEFAULTS, ConfigError, default_of, resolve_model_spec
from .settings.schema import L1_ONE_MODEL, several_policies_at_l1

__all__ = ["LLMPolicySpec", "LEVELS", "SHARED", "LORA_DEFAULTS", "PolicySetup", "resolve_policies",
           "policy_setting", "AgentTableMapping", "resolve_mapping", "YAML_NAMES", "ATTR_NAMES", "default_policy_ids",
           "make_backend", "lora_config"]

#: the policy id of the one shared model at L1
SHARED = "shared"


@dataclasses.dataclass(frozen=True)
class LLMPolicySpec:
    """One policy: its checkpoint directory and, at L2, its LoRA settings."""

    policy_id: str
    model_path: str
    level: str = "L1"
    lora: Optional[Mapping[str, Any]] = None  # L2 only: {r, alpha, dropout, target_modules}
    # the defaults of the run settings of the same name (default_of: written once, in the schema)
    dtype: str = default_of("model.dtype")
    seed: int = default_of("training.seed")
    with_entropy: bool = False  # the loss has an entropy bonus: forward_train returns entropies
    with_reference: bool = False  # the loss has a KL term: keep a frozen reference (initial) model
    master_weights: bool = default_of("training.master_weights")  # low-precision: fp32 weights + autocast
    gradient_checkpointing: bool = default_of("training.gradient_checkpointing")
    logprob_chunk_tokens: int = default_of("training.logprob_chunk_tokens")  # LM-head rows per log-prob chunk
    share_prompts: bool = default_of("training.share_prompts")  # a prompt shared by several rows runs once
    compile_layers: bool = default_of("training.compile_layers")  # torch.compile each decoder layer
    activation_memory_budget: float = default_of("training.activation_memory_budget")  # ... keeping this share

    def module_config(self) -> dict[str, Any]:
        """The ``model_config`` dict of this policy's RLModule."""
        return dataclasses.asdict(self)


def default_policy_ids(level: str, agents: Optional[list[str]] = None) -> list[str]:
    """L1: ``["shared"]``; L2/L3: one policy per agent (role)."""
    if level == "L1":
        return [SHARED]
    if not agents:
        raise ValueError(f"specialization {level} needs the env's agents (roles) to name one policy per role")
    return list(agents)


def lora_config(spec: Mapping[str, Any]) -> Any:
    """A ``peft.LoraConfig`` from ``{r, alpha, dropout, target_modules}`` (missing keys: :data:`LORA_DEFAULTS`)."""
    from peft import LoraConfig

    full = {**LORA_DEFAULTS, **dict(spec)}
    # peft types lora_alpha as int; it scales by alpha / r, so a float is fine
    return LoraConfig(r=int(full["r"]), lora_alpha=float(full["alpha"]),  # type: ignore[arg-type]
                      lora_dropout=float(full["dropout"]), target_modules=list(full["target_modules"]))


def torch_dtype(name: str) -> Any:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def make_backend(specs: Mapping[str, LLMPolicySpec], *, backend: str = default_of("rollout.backend"),
                 device: Optional[str] = None, max_batch_size: Optional[int] = None,
                 options: Optional[Mapping[str, Any]] = None) -> Any:
    """The generation backend serving ``specs`` (HF separate models / LoRA adapters, or vLLM).

    The backend's initial weights do not matter: the algorithm pushes the learner's weights
    (full state dicts, or LoRA adapter weights at L2) before the first rollout.
    ``options``: HF backend keywords (``static_cache``, ``compile``, ``logprobs``, ``max_batch_size``) or, for vLLM,
    ``{"engine_options": {...}}`` passed to ``vllm.LLM``. ``max_batch_size`` (None: the HF backend's default,
    :class:`~.core.options.HFOptions`) is the HF backend's; vLLM batches by itself.
    """
    from .core.backends import make_backend as _make

    opts = dict(options or {})
    max_batch_size = opts.pop("max_batch_size", max_batch_size)
    hf_opts = opts if max_batch_size is None else {**opts, "max_batch_size": int(max_batch_size)}

    specs = dict(specs)
    levels = {s.level for s in specs.values()}
    if len(levels) != 1:
        raise ValueError(f"all policies must share one specialization level, got {sorted(levels)}")
    level = levels.pop()
    dtype = torch_dtype(next(iter(specs.values())).dtype)
    if level == "L2":
        bases = {s.model_path for s in specs.values()}
        if len(bases) != 1:
            raise ValueError(f"L2 puts every adapter on one base model; got several: {sorted(bases)}")
        base = bases.pop()
        if backend == "hf":
            from .core.backends import HFBackend

            return HFBackend.with_lora(base, {pid: lora_config(s.lora or {}) for pid, s in specs.items()},
                                       device=device, dtype=dtype, **hf_opts)
        from .core.backends.vllm import backend_dir

        root = backend_dir()  # the backend deletes it when it closes (or the next one, if this process dies)
        return _make("vllm", base=base, lora_adapters=_initial_adapter_dirs(base, specs, root), owned_dirs=[root],
                     max_lora_rank=max(int((s.lora or {}).get("r", LORA_DEFAULTS["r"])) for s in specs.values()),
                     dtype=next(iter(specs.values())).dtype, **opts)
    if level == "L1":
        paths = {s.model_path for s in specs.values()}
        if len(paths) != 1:
            raise ValueError("L1 shares one model between all policies")
    if backend == "hf":
        return _make("hf", {pid: s.model_path for pid, s in specs.items()}, device=device, dtype=dtype, **hf_opts)
    # the policy's dtype goes to vLLM (unless rollout.vllm sets one): vLLM would sample fp32 weights in bf16
    return _make("vllm", {pid: s.model_path for pid, s in specs.items()}, dtype=next(iter(specs.values())).dtype,
                 **opts)


def _initial_adapter_dirs(base: str, specs: Mapping[str, LLMPolicySpec], root: str) -> dict[str, str]:
    """vLLM loads LoRA adapters from directories: write fresh ones under ``root`` (weights arrive with the
    first sync)."""
    from peft import get_peft_model

    from .core.models import load_model

    out = {}
    for pid, s in specs.items():
        model, _ = load_model(base, device="cpu")
        peft_model = get_peft_model(model, lora_config(s.lora or {}), adapter_name=pid)
        peft_model.save_pretrained(f"{root}/{pid}", selected_adapters=[pid])
        # peft writes non-default adapters under a sub-directory named after the adapter
        import os

        sub = f"{root}/{pid}/{pid}"
        out[pid] = sub if os.path.isdir(sub) else f"{root}/{pid}"
    return out


# ------------------------------------------------------------------------------ resolution
class AgentTableMapping:
    """A picklable ``policy_mapping_fn`` from a table {agent: policy id}."""

    def __init__(self, table: Mapping[str, str]) -> None:
        self.table = dict(table)

    def __call__(self, agent_id: str, episode: Any = None, *args: Any, **kwargs: Any) -> str:
        if agent_id not in self.table:
            raise KeyError(f"policy_mapping has no policy for agent {agent_id!r}; known: {sorted(self.table)}")
        return self.table[agent_id]


@dataclasses.dataclass(frozen=True)
class PolicySetup:
    """The resolved policies of a run: ids, agent -> policy id, and one spec per policy."""

    policy_ids: list[str]
    mapping: dict[str, str]
    specs: dict[str, LLMPolicySpec]


def policy_setting(config: Any, pid: str, key: str) -> Any:
    """A per-policy override (``algorithm_config_overrides_per_module``) or the global value."""
    over = (config.algorithm_config_overrides_per_module or {}).get(pid, {})
    return over[key] if key in over else getattr(config, key)


def _policy_ids(config: Any, agents: list[str]) -> list[str]:
    names = sorted(config.policies) if config.policies else []
    if names in ([], ["default_policy"]):
        return default_policy_ids(config.specialization, agents)
    return names


def _is_default_mapping(fn: Any) -> bool:
    if fn is None or getattr(fn, "__name__", "") == "DEFAULT_POLICY_MAPPING_FN":
        return True
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    return fn is AlgorithmConfig.DEFAULT_POLICY_MAPPING_FN


def _map_agent(config: Any, agent: str, pids: list[str], names: Mapping[str, str]) -> str:
    fn = config.policy_mapping_fn
    if _is_default_mapping(fn):
        if len(pids) == 1:
            return pids[0]
        if agent in pids:
            return agent
        raise ConfigError(f"{names['mapping']}: none given and agent {agent!r} is not a policy id ({pids}); "
                          "map every agent (role) to a policy (.multi_agent(policy_mapping_fn=...) or "
                          "policy_mapping:), "
                          "or name the policies after this env's roles (the embedded default's are PlanPath's; start "
                          "a task of your own from configs/base.yaml)")
    try:
        try:
            return fn(agent, None, worker=None)
        except TypeError:
            return fn(agent, None)
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(f"{names['mapping']}: mapping agent {agent!r} failed ({type(e).__name__}: {e})") from None


#: what policy-mapping errors call the settings: YAML keys, or ``ATGRPOConfig`` attributes
YAML_NAMES = {"mapping": "policy_mapping", "policies": "policies"}
ATTR_NAMES = {"mapping": "ATGRPOConfig.policy_mapping_fn", "policies": "ATGRPOConfig.policies"}


def resolve_mapping(config: Any, agents: list[str], *, env_name: str = "the env",
                    names: Mapping[str, str] = ATTR_NAMES) -> tuple[list[str], dict[str, str]]:
    """Policy ids and the agent -> policy mapping, checked against the env's agents (roles).

    ``config`` needs ``policies``, ``specialization`` and ``policy_mapping_fn`` (an
    ``ATGRPOConfig``, or any object with them). A mapping table naming a role the env does not
    have, an agent mapped to a policy not in ``policies``, or several policies at L1 raise
    :class:`ConfigError` naming the setting. Ray-free.
    """
    table = getattr(config.policy_mapping_fn, "table", None)
    if table is not None:
        for role in table:
            if role not in agents:
                hint = difflib.get_close_matches(str(role), agents, n=1, cutoff=0.5)
                key = f"{names['mapping']}.{role}" if names is YAML_NAMES else f"{names['mapping']}[{role!r}]"
                raise ConfigError(f"{key}: {role!r} is not a role of {env_name}"
                                  + (f" (did you mean {hint[0]!r}?)" if hint else "") + f"; its roles: {agents}")
        for role in agents:
            if role not in table:
                key = f"{names['mapping']}.{role}" if names is YAML_NAMES else f"{names['mapping']}[{role!r}]"
                raise ConfigError(f"{key}: role {role!r} of {env_name} has no policy; map every role "
                                  f"({agents}) to a policy")
    pids = _policy_ids(config, agents)
    mapping = {a: _map_agent(config, a, pids, names) for a in agents}
    missing = sorted(set(mapping.values()) - set(pids))
    if missing:
        raise ConfigError(f"{names['mapping']} maps agents to {missing}, which are not in {names['policies']} {pids}")
    if several_policies_at_l1(config.specialization, mapping.values()):
        raise _l1_error(f"agents map to {sorted(set(mapping.values()))}", where=f"{names['mapping']}: ")
    return pids, mapping


def _l1_error(what: str, *, where: str = "") -> ConfigError:
    return ConfigError(f"{where}specialization {L1_ONE_MODEL}, but {what}; map every agent to one policy or use L2/L3")


def _policy_specs(config: Any, pids: list[str]) -> dict[str, LLMPolicySpec]:
    level = config.specialization
    tiny = dict(config.model_tiny or {})
    common = dict(level=level, dtype=config.model_dtype, seed=int(config.seed or 0),
                  master_weights=bool(config.master_weights),
                  gradient_checkpointing=bool(config.gradient_checkpointing),
                  logprob_chunk_tokens=int(config.logprob_chunk_tokens),
                  share_prompts=bool(config.share_prompts),
                  compile_layers=bool(config.compile_layers),
                  activation_memory_budget=float(config.activation_memory_budget))
    if several_policies_at_l1(level, pids):
        raise _l1_error(f"policies are {pids}")
    base = resolve_model_spec(config.model_path, tiny)
    specs = {}
    for pid in pids:
        path = resolve_model_spec(config.policy_models.get(pid, config.model_path), tiny) if level == "L3" else base
        specs[pid] = LLMPolicySpec(policy_id=pid, model_path=path,
                                   lora=dict(config.lora) if level == "L2" else None,
                                   with_entropy=bool(policy_setting(config, pid, "entropy_coef")),
                                   with_reference=bool(policy_setting(config, pid, "kl_coef")), **common)
    return specs


def resolve_policies(config: Any, agents: list[str]) -> PolicySetup:
    """Policy ids, the agent -> policy mapping (:func:`resolve_mapping`) and the per-policy specs.

    Builds the tiny model if the config asks for one.
    """
    pids, mapping = resolve_mapping(config, agents)
    return PolicySetup(policy_ids=pids, mapping=mapping, specs=_policy_specs(config, pids))
