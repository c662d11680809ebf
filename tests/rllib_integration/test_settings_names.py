"""One name per setting: the ``ATGRPOConfig`` attribute and builder keyword follow from the YAML key by one
rule (rllib_integration/settings/__init__.py), checked here for every setting against RLlib's own
``AlgorithmConfig``; and the names of the previous release still work, with a DeprecationWarning naming
the new one (YAML and ``--set`` keys, attributes, builder keywords, an older checkpoint's
``algorithm_config.json``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import warnings
from collections import Counter

import pytest
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from rllib_integration import ATGRPOConfig
from rllib_integration.checkpoints import algorithm_config, read_checkpoint, write_checkpoint
from rllib_integration.settings import (OLD_ATTRIBUTES, OLD_KEYS, SETTINGS, ConfigError, RunSettings,
                                        apply_overrides, load_config)

ENV = "llm_marl/PlanPath-v0"


def _rllib_names() -> set[str]:
    """Every attribute of RLlib's AlgorithmConfig: its settings, methods and (deprecated) properties."""
    return set(dir(AlgorithmConfig)) | set(vars(AlgorithmConfig()))


def _flat_settings(settings=SETTINGS):
    """The settings held one attribute each (not a section held as one dict, not per-policy, not the CLI's)."""
    held_as_dict = {name for name, f in RunSettings.model_fields.items() if getattr(f.annotation, "_as_attr", None)}
    return [s for s in settings if s.attr and not s.key.startswith("policies.") and s.section not in held_as_dict]


def _rule_breaks(settings) -> tuple[list[str], list[str]]:
    """The rule, computed: the attribute is the YAML key; in a section RLlib keeps a config of
    (``<section>_config``: env, model, evaluation) it is ``<section>_<key>``, and so where the bare key would
    clash (one of RLlib's attributes, or a key of another section). Returns (breaks, the settings under RLlib's
    own name): only RLlib's own settings may keep RLlib's name instead, and say why."""
    rllib, flat = _rllib_names(), _flat_settings(settings)
    prefixed = {s.section for s in flat if s.section and f"{s.section}_config" in rllib}
    declared = {name for name, f in RunSettings.model_fields.items() if getattr(f.annotation, "_prefix", False)}
    breaks = [] if prefixed == declared else [f"sections prefixed {sorted(declared)}, by RLlib {sorted(prefixed)}"]
    bare = Counter(s.name for s in flat if s.section not in prefixed)
    by_rllib = []
    for s in flat:
        clash = s.section not in prefixed and ((s.name in rllib and not s.rllib) or bare[s.name] > 1)
        expected = f"{s.section}_{s.name}" if s.section and (s.section in prefixed or clash) else s.name
        if s.attr == expected:
            continue
        if s.rllib and s.attr in rllib and s.why:
            by_rllib.append(s.key)
        else:
            breaks.append(f"{s.key}: attribute {s.attr!r}, by the rule {expected!r}")
    breaks += [f"two settings hold {a!r}" for a, n in Counter(s.attr for s in flat).items() if n > 1]
    return breaks, by_rllib


def test_every_attribute_is_the_yaml_key_by_the_rule():
    breaks, by_rllib = _rule_breaks(SETTINGS)
    assert breaks == []
    # RLlib's names: the env (`.environment(env=)`) and the mapping (a function, `.multi_agent(policy_mapping_fn=)`)
    assert sorted(by_rllib) == ["env.id", "policy_mapping"]


def test_the_rule_check_finds_a_setting_that_breaks_it():
    """The check above can fail: the previous release's names break the rule."""
    by_key = {s.key: s for s in SETTINGS}
    old = [dataclasses.replace(by_key[new], key=old_key, attr=by_key[new].attr) for old_key, new in OLD_KEYS.items()]
    old += [dataclasses.replace(s, attr=s.old_attr) for s in SETTINGS if s.old_attr]
    breaks, _ = _rule_breaks([s for s in SETTINGS if s.key not in OLD_KEYS.values() and not s.old_attr] + old)
    assert "rollout.num_rollout_workers: attribute 'num_rollout_actors', by the rule 'rollout_num_rollout_workers'" \
        in breaks  # the bare key is RLlib's deprecated alias of num_env_runners
    assert "rollout.backend: attribute 'generation_backend', by the rule 'backend'" in breaks
    assert len(breaks) == len(OLD_KEYS) + len(OLD_ATTRIBUTES)


def test_old_yaml_keys_still_load_with_a_warning(tmp_path):
    cfg = tmp_path / "old.yaml"
    cfg.write_text("rollout: {num_rollout_workers: 0, num_cpus_per_worker: 2, num_gpus_per_worker: 0}\n")
    with pytest.warns(FutureWarning, match=r"'rollout\.num_rollout_workers' is deprecated.*"
                                                r"use 'rollout\.num_rollout_actors'"):
        full = load_config(str(cfg), check_paths=False)
    r = full["rollout"]
    assert (r["num_rollout_actors"], r["num_cpus_per_rollout_worker"], r["num_gpus_per_rollout_worker"]) == (0, 2, 0)
    assert not set(OLD_KEYS) & {f"rollout.{k}" for k in r}
    with pytest.warns(FutureWarning, match=r"--set key 'rollout\.num_rollout_workers'"):
        full = load_config(str(cfg), ["rollout.num_rollout_workers=3"], check_paths=False)
    assert full["rollout"]["num_rollout_actors"] == 3  # the --set wins over the file, old name or new
    cfg.write_text("rollout: {num_rollout_workers: 0, num_rollout_actors: 1}\n")
    with pytest.raises(ConfigError, match=r"rollout\.num_rollout_workers: the previous name of "
                                          r"rollout\.num_rollout_actors, which the run config gives too"):
        load_config(str(cfg), check_paths=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new names warn of nothing
        assert apply_overrides({}, ["rollout.num_rollout_actors=2"]) == {"rollout": {"num_rollout_actors": 2}}


def test_every_old_attribute_reads_and_sets_the_new_one_with_a_warning():
    c = ATGRPOConfig()
    for old, new in OLD_ATTRIBUTES.items():
        with pytest.warns(DeprecationWarning, match=rf"attribute '{old}' is deprecated.*use '{new}'"):
            assert getattr(c, old) == getattr(c, new)
    with pytest.warns(DeprecationWarning):
        c.generation_backend = "vllm"
    assert c.backend == "vllm" and "generation_backend" not in vars(c) and "generation_backend" not in c.to_dict()


def test_old_builder_keywords_set_the_new_setting_with_a_warning():
    c = ATGRPOConfig().environment(ENV)
    with pytest.warns(DeprecationWarning, match=r"ATGRPOConfig\.rollouts\(\) keyword 'rollout_sandbox'.*'sandbox'"):
        c.rollouts(rollout_sandbox="cold", max_batch_size=8)
    with pytest.warns(DeprecationWarning, match=r"ATGRPOConfig\.training\(\) keyword 'loss_agg'.*'agg'"):
        c.training(loss_agg="token-mean", lr=1e-4)  # an RLlib builder: RLlib's keywords still reach RLlib
    with pytest.warns(DeprecationWarning, match=r"keyword 'sampling_mode'"):
        c.sampling(sampling_mode="parallel")
    with pytest.warns(DeprecationWarning, match=r"keyword 'eval_env_config'"):
        c.evaluation(eval_env_config={"size": 3})
    with pytest.warns(DeprecationWarning, match=r"keyword 'tiny_model'"):
        c.llm(tiny_model={"layers": 1})
    assert (c.sandbox, c.max_batch_size, c.agg, c.lr, c.mode, c.env_eval_config, c.model_tiny) == (
        "cold", 8, "token-mean", 1e-4, "parallel", {"size": 3}, {"layers": 1})
    with pytest.raises(ConfigError, match="unknown keyword 'loss_agg'"):  # an old name only in its own builder
        c.sampling(loss_agg="token-mean")
    with pytest.raises(ConfigError, match=r"sampling\(\): 'sampling_mode' is the previous name of 'mode', which is "
                                          r"given too"):  # the old name no longer wins over the new one
        c.sampling(mode="tree", sampling_mode="parallel")
    assert c.mode == "parallel"


def test_a_checkpoint_of_the_previous_release_loads(tmp_path):
    """An algorithm_config.json written with the old attribute names (and a run's config.yaml with the old keys)."""
    old = {"env": ENV, "generation_backend": "hf", "rollout_sandbox": "cold", "loss_agg": "seq-mean-token-sum-norm",
           "sampling_mode": "parallel", "eval_env_config": {"size": 3}, "tiny_model": {"layers": 1},
           "max_rollout_worker_restarts": 5, "rollout_start_timeout_s": 30.0, "num_rollout_actors": 0}
    ck = write_checkpoint(tmp_path / "checkpoint", {"iteration": 1}, iteration=1,
                          config={"settings": old, "policy_mapping": {}},
                          run_config={"rollout": {"num_rollout_workers": 0, "num_cpus_per_worker": 1}})
    assert json.loads((ck / "algorithm_config.json").read_text())["settings"]["rollout_sandbox"] == "cold"
    with pytest.warns(FutureWarning, match=r"algorithm_config\.json names settings by the previous release's "
                                                r"names.*'rollout_sandbox' \(now 'sandbox'\)"):
        c = algorithm_config(read_checkpoint(ck), config_cls=ATGRPOConfig)
    assert (c.backend, c.sandbox, c.agg, c.mode, c.env_eval_config, c.model_tiny, c.max_worker_restarts,
            c.start_timeout_s, c.num_rollout_actors) == ("hf", "cold", "seq-mean-token-sum-norm", "parallel",
                                                         {"size": 3}, {"layers": 1}, 5, 30.0, 0)
    c.validate()
    with pytest.warns(FutureWarning, match="num_rollout_workers"):
        full = load_config(ck / "config.yaml", check_paths=False)
    assert full["rollout"]["num_rollout_actors"] == 0
    # the old name of the sandbox is checked like the new one: a received checkpoint cannot ask for `local`
    old["rollout_sandbox"] = "local"
    ck = write_checkpoint(tmp_path / "local", {"iteration": 1}, iteration=1, config={"settings": old,
                                                                                     "policy_mapping": {}})
    with pytest.raises(ConfigError, match=r"unisolated `local` sandbox \(rollout\.sandbox\)"), \
            pytest.warns(FutureWarning):
        algorithm_config(read_checkpoint(ck), config_cls=ATGRPOConfig)


def test_the_cli_shows_an_old_key_s_warning(tmp_path):
    """Names a user writes (YAML, --set) warn with a FutureWarning, which Python shows by default: a
    DeprecationWarning raised inside the package was never printed by ``llm-marl``."""
    cfg = tmp_path / "old.yaml"
    cfg.write_text("rollout: {num_rollout_workers: 0}\ntraining: {lrr: 1.0e-4}\n")  # plus a typo: stops before Ray
    res = subprocess.run([sys.executable, "-m", "rllib_integration.cli", "train", str(cfg),
                          "--set", "rollout.num_cpus_per_worker=1"], capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"})
    assert res.returncode == 2, res.stderr[-2000:]
    assert "FutureWarning: run config key 'rollout.num_rollout_workers' is deprecated" in res.stderr, res.stderr
    assert "--set key 'rollout.num_cpus_per_worker' is deprecated" in res.stderr, res.stderr
    assert "training.lrr" in res.stderr
