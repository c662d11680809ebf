"""GPU settings flow from a YAML run config to the learner, the RLModule and the generation backend;
per-policy KL / entropy coefficients give only those policies a reference model / entropies."""

import pytest

from rllib_integration.policies import _policy_specs
from rllib_integration.settings import ConfigError, validate_config


def _run_config(**sections):
    base = {"env": {"id": "llm_marl/PlanPath-v0"}, "model": {"path": "tiny", "dtype": "bfloat16"}}
    for k, v in sections.items():
        base[k] = v
    return validate_config(base, check_paths=False)


def test_gpu_keys_reach_atgrpo_config_specs_and_backend():
    from rllib_integration import ATGRPOConfig
    from rllib_integration.rollout_worker import backend_options

    cfg = _run_config(training={"micro_batch_tokens": 4096, "logprob_chunk_tokens": 256,
                                "gradient_checkpointing": True, "master_weights": False, "compile_layers": True,
                                "activation_memory_budget": 0.5},
                      rollout={"static_cache": True, "compile": False, "logprobs": "forward", "max_batch_size": 24,
                               "warmup": False,
                               "vllm": {"gpu_memory_utilization": 0.3}})
    c = ATGRPOConfig.from_run_config(cfg)
    assert (c.micro_batch_tokens, c.logprob_chunk_tokens, c.gradient_checkpointing, c.master_weights) == \
        (4096, 256, True, False)
    spec = _policy_specs(c, ["shared"])["shared"].module_config()
    assert (spec["master_weights"], spec["gradient_checkpointing"], spec["logprob_chunk_tokens"]) == (False, True, 256)
    assert (spec["compile_layers"], spec["activation_memory_budget"]) == (True, 0.5)
    opts = backend_options(c)
    assert opts == {"static_cache": True, "compile": False, "logprobs": "forward", "max_batch_size": 24,
                    "warmup": False}
    from rllib_integration.core.models import build_tiny_model
    from rllib_integration.policies import LLMPolicySpec, make_backend

    be = make_backend({"shared": LLMPolicySpec("shared", str(build_tiny_model()))}, device="cpu", options=opts)
    assert (be.max_batch_size, be.static_cache, be.logprobs_mode) == (24, True, "forward")
    c.backend = "vllm"
    assert backend_options(c) == {"engine_options": {"gpu_memory_utilization": 0.3}, "sleep_mode": False}


def test_per_policy_kl_and_entropy_coefficients():
    from rllib_integration import ATGRPOConfig

    c = (ATGRPOConfig().llm(model_path="tiny", specialization="L3")
         .multi_agent(policies={"tool", "executor"}, policy_mapping_fn=lambda a, *x, **k: a)
         .rl_module(algorithm_config_overrides_per_module={"tool": {"kl_coef": 0.05, "entropy_coef": 0.01}}))
    specs = _policy_specs(c, ["executor", "tool"])
    assert (specs["tool"].with_reference, specs["tool"].with_entropy) == (True, True)
    assert (specs["executor"].with_reference, specs["executor"].with_entropy) == (False, False)
    cfg = _run_config(specialization="L3", policies={"tool": {"kl_coef": 0.1}, "executor": {}},
                      policy_mapping={"tool": "tool", "executor": "executor"})
    assert ATGRPOConfig.from_run_config(cfg).algorithm_config_overrides_per_module == {"tool": {"kl_coef": 0.1}}


@pytest.mark.parametrize("key,value,match", [
    ("training.micro_batch_tokens", -1, "training.micro_batch_tokens"),
    ("rollout.logprobs", "full", "rollout.logprobs"),
    ("training.master_weights", "yes", "training.master_weights"),
    ("training.activation_memory_budget", 1.5, "training.activation_memory_budget"),
    ("rollout.max_batch_size", 0, "rollout.max_batch_size"),
])
def test_bad_gpu_settings_name_the_key(key, value, match):
    sec, k = key.split(".")
    with pytest.raises(ConfigError, match=match):
        _run_config(**{sec: {k: value}})

