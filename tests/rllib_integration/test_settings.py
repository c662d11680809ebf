"""The run-settings schema (rllib_integration.settings) and everything derived from it.

No Ray instance is started here: these are the checks that run before Ray starts.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from rllib_integration.settings import (SETTINGS, ConfigError, load_config, markdown, settings_of,
                                        validate_config, validate_settings)

REPO = Path(__file__).resolve().parents[2]
ENV = "llm_marl/PlanPath-v0"


def test_committed_config_reference_is_the_generated_one():
    assert (REPO / "docs" / "config_reference.md").read_text() == markdown(), \
        "regenerate it: python -m rllib_integration.settings --markdown > docs/config_reference.md"
    out = subprocess.run([sys.executable, "-m", "rllib_integration.settings", "--markdown"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout == markdown()


def test_exponent_numbers_are_numbers_in_yaml_files_and_in_set(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("training: {lr: 1e-3, kl_coef: 2E-2}\nenv:\n  config: {size: 3, invalid_penalty: 1e-1}\n")
    full = load_config(str(cfg), check_paths=False)
    assert full["training"]["lr"] == pytest.approx(1e-3) and isinstance(full["training"]["lr"], float)
    assert full["training"]["kl_coef"] == pytest.approx(0.02)
    assert full["env"]["config"]["invalid_penalty"] == pytest.approx(0.1)  # env arguments too
    full = load_config(sets=["training.lr=1e-4", "sampling.temperature=5e-1", "lora.alpha=1.5e1"],
                       check_paths=False)
    assert (full["training"]["lr"], full["sampling"]["temperature"], full["lora"]["alpha"]) == (1e-4, 0.5, 15.0)
    with pytest.raises(ConfigError, match=r"training\.lr: expected a number, got 'fast'"):
        load_config(sets=["training.lr=fast"], check_paths=False)
    with pytest.raises(ConfigError, match=r"sampling\.k: expected an integer, got 2\.5"):
        load_config(sets=["sampling.k=2.5"], check_paths=False)


def test_per_policy_overrides_keep_the_checks_of_the_global_setting():
    with pytest.raises(ConfigError, match=r"policies\.tool\.clip_low: must be <= 1, got 2"):
        validate_config({"specialization": "L2", "policies": {"tool": {"clip_low": 2}}})
    with pytest.raises(ConfigError, match=r"training\.clip_low: must be <= 1, got 2"):
        validate_config({"training": {"clip_low": 2}})
    full = validate_config({"specialization": "L2", "policies": {"tool": {"lr": "1e-4"}, "executor": None}})
    assert full["policies"] == {"tool": {"lr": 1e-4}, "executor": {}}


def test_kl_estimator_is_a_setting():
    from rllib_integration import ATGRPOConfig

    assert validate_config({})["training"]["kl_estimator"] == "k3"
    c = ATGRPOConfig.from_run_config(load_config(sets=["training.kl_estimator=k1"], check_paths=False))
    assert c.kl_estimator == "k1"
    with pytest.raises(ConfigError, match=r"training\.kl_estimator: 'k2' is not one of \['k1', 'k3'\]"):
        validate_config({"training": {"kl_estimator": "k2"}})
    with pytest.raises(ConfigError, match=r"ATGRPOConfig\.kl_estimator: 'k2' is not one of"):
        ATGRPOConfig().environment(ENV).training(kl_estimator="k2").validate()


def test_config_attributes_defaults_and_builder_keywords_come_from_the_schema():
    from rllib_integration import ATGRPOConfig

    c = ATGRPOConfig()
    yaml_defaults = validate_config({}, check_paths=False)
    for s in SETTINGS:
        if s.attr is None or s.key.startswith("policies") or s.key in ("env.id", "policy_mapping", "policies"):
            continue
        value = getattr(c, s.attr)
        if s.section in ("lora", "warm_start"):  # sections held as one dict attribute
            value = value[s.name]
        expected = yaml_defaults[s.section][s.name] if s.section else yaml_defaults[s.key]
        if s.key == "evaluation.interval":
            expected = None  # RLlib: no evaluation
        if s.key == "evaluation.final_iteration":
            expected = None  # a run config fills it with run.iterations; the builder's default is unset
        assert value == expected, s.key
        if not s.rllib and s.builder in ("llm", "sampling", "rollouts", "training", "evaluation"):
            assert s.attr in inspect.signature(getattr(ATGRPOConfig, s.builder)).parameters, (s.builder, s.attr)
    # one name: the builder keyword is the attribute
    c.rollouts(num_rollout_actors=3, sandbox="cold").llm(model_dtype="bfloat16")
    c.training(agg="seq-mean-token-mean")
    assert (c.num_rollout_actors, c.sandbox, c.model_dtype, c.agg) == (3, "cold", "bfloat16",
                                                                                   "seq-mean-token-mean")


def test_unknown_builder_keywords_suggest_the_setting():
    from rllib_integration import ATGRPOConfig

    with pytest.raises(ConfigError, match=r"ATGRPOConfig\.rollouts\(\) got an unknown keyword 'sandbox_kind' "
                                          r"\(did you mean 'sandbox'\?\)"):
        ATGRPOConfig().rollouts(sandbox_kind="warm")
    with pytest.raises(ConfigError, match=r"ATGRPOConfig\.training\(\) got an unknown keyword 'aggr' "
                                          r"\(did you mean 'agg'\?\)"):
        ATGRPOConfig().training(aggr="token-mean")
    c = ATGRPOConfig().training(lr=5e-4, gamma=0.9)  # RLlib's own keywords still reach RLlib
    assert (c.lr, c.gamma) == (5e-4, 0.9)


def test_validate_checks_values_and_model_paths_like_the_yaml(tmp_path):
    from rllib_integration import ATGRPOConfig

    with pytest.raises(ConfigError, match=r"ATGRPOConfig\.lr: must be > 0, got -1\.0"):
        ATGRPOConfig().environment(ENV).training(lr=-1.0).validate()
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match=r"ATGRPOConfig\.model_path: no model checkpoint at .*nope.*config\.json"):
        ATGRPOConfig().environment(ENV).llm(model_path=str(missing)).validate()
    with pytest.raises(ConfigError, match=r"ATGRPOConfig\.lora\['r'\]: must be >= 1, got 0"):
        ATGRPOConfig().environment(ENV).llm(lora={"r": 0}).validate()
    with pytest.raises(ConfigError, match=r"ATGRPOConfig\.algorithm_config_overrides_per_module\['a'\]\['lr'\]"):
        (ATGRPOConfig().environment(ENV).llm(specialization="L2")
         .rl_module(algorithm_config_overrides_per_module={"a": {"lr": 0}}).validate())
    with pytest.raises(ConfigError, match=r"ATGRPOConfig\.env: set an env"):
        ATGRPOConfig().validate()
    ATGRPOConfig().environment(ENV).training(lr=1e-2).validate()


ALL_CONFIGS = sorted(str(p.relative_to(REPO / "configs")) for p in (REPO / "configs").rglob("*.yaml"))


@pytest.mark.parametrize("name", ALL_CONFIGS)
def test_from_run_config_holds_exactly_the_run_config(name):
    """YAML -> ATGRPOConfig -> the run config its attributes amount to: the same settings."""
    from rllib_integration import ATGRPOConfig

    full = load_config(str(REPO / "configs" / name), check_paths=False)
    back = validate_settings(settings_of(ATGRPOConfig.from_run_config(full)), check_paths=False)
    for section in ("run", "policy_mapping"):  # the CLI's own; a function on the config
        full.pop(section), back.pop(section)
    assert back == full


def test_every_atgrpo_attribute_is_a_schema_setting():
    """ATGRPOConfig holds no setting of its own beside the schema (the drift kl_estimator once had)."""
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    from rllib_integration import ATGRPOConfig

    ours = set(vars(ATGRPOConfig())) - set(vars(AlgorithmConfig()))
    assert ours, "ATGRPOConfig adds attributes"
    assert ours <= {s.attr for s in SETTINGS}, sorted(ours - {s.attr for s in SETTINGS})


def test_l1_means_one_policy_in_the_yaml_the_mapping_and_the_specs():
    """One rule (settings.schema.several_policies_at_l1), checked in three places, each message naming its setting."""
    from types import SimpleNamespace

    from rllib_integration.policies import YAML_NAMES, AgentTableMapping, _policy_specs, resolve_mapping

    with pytest.raises(ConfigError, match=r"^specialization: L1 trains one shared model; give at most one policy "
                                          r"\(or use L2/L3 for a policy per role\)$"):
        validate_config({"specialization": "L1", "policy_mapping": {"tool": "a", "executor": "b"}})
    assert validate_config({"specialization": "L1", "policies": {"a": None}})["policies"] == {"a": {}}
    config = SimpleNamespace(specialization="L1", policies={"a": None, "b": None},
                             policy_mapping_fn=AgentTableMapping({"tool": "a", "executor": "b"}))
    with pytest.raises(ConfigError, match=r"^policy_mapping: specialization L1 trains one shared model, but agents "
                                          r"map to \['a', 'b'\]; map every agent to one policy or use L2/L3$"):
        resolve_mapping(config, ["tool", "executor"], names=YAML_NAMES)
    config.policy_mapping_fn = AgentTableMapping({"tool": "a", "executor": "a"})
    assert resolve_mapping(config, ["tool", "executor"])[1] == {"tool": "a", "executor": "a"}
    specs = SimpleNamespace(specialization="L1", model_tiny={}, model_dtype="float32", seed=0, master_weights=True,
                            gradient_checkpointing=False, logprob_chunk_tokens=8, share_prompts=False,
                            compile_layers=False, activation_memory_budget=1.0)
    with pytest.raises(ConfigError, match=r"^specialization L1 trains one shared model, but policies are "
                                          r"\['a', 'b'\]; map every agent to one policy or use L2/L3$"):
        _policy_specs(specs, ["a", "b"])


def test_a_missing_checkpoint_is_named_the_same_way_everywhere(tmp_path):
    from rllib_integration.settings import resolve_model_spec

    expected = f"no model checkpoint at {str(tmp_path)!r} (expected {str(tmp_path / 'config.json')!r})"
    with pytest.raises(ConfigError) as e:
        resolve_model_spec(str(tmp_path))
    assert str(e.value) == expected
    with pytest.raises(ConfigError) as e:
        validate_config({"model": {"path": str(tmp_path)}})
    assert str(e.value).startswith(f"model.path: {expected}. Give a directory written by save_pretrained")
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model_spec(str(tmp_path)) == str(tmp_path)


def test_lora_settings_reach_peft():
    """Every key of the `lora` section reaches peft's LoraConfig (dropout was once lost inside a comment)."""
    pytest.importorskip("peft")
    from rllib_integration.policies import lora_config

    cfg = lora_config({"r": 4, "alpha": 8, "dropout": 0.3, "target_modules": ["q_proj"]})
    assert (cfg.r, cfg.lora_alpha, cfg.lora_dropout, sorted(cfg.target_modules)) == (4, 8.0, 0.3, ["q_proj"])
