"""The advantage estimators are one registry (rllib_integration/core/advantages.py): the vocabularies that name
them (the core's, the run settings', the builders', the docs') agree with it, and a new estimator is one
decorated function, registered here in the test, then usable through the core API, a run config and a run."""

from __future__ import annotations

import inspect
import re
import typing
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from rllib_integration.core import advantages as adv_mod
from rllib_integration.core.advantages import (advantages_of_samples, compute_advantages, estimator_names,
                                               get_estimator, register_estimator)
from rllib_integration.core.records import GroupKey

REPO = Path(__file__).resolve().parents[2]
BUILT_IN = ("at_grpo", "grpo_per_agent", "dr_grpo", "rloo", "reinforce_pp", "gigpo", "drmas_grpo", "episode_grpo")


@pytest.fixture
def registry(monkeypatch):
    """A copy of the registry for one test: what it registers is gone after it."""
    monkeypatch.setattr(adv_mod, "_REGISTRY", dict(adv_mod._REGISTRY))
    return adv_mod._REGISTRY


# ------------------------------------------------------------------ the vocabularies are the registry's
def test_the_core_vocabularies_are_the_registry():
    import rllib_integration.core as core

    assert estimator_names() == BUILT_IN == adv_mod.ESTIMATORS == core.ESTIMATORS
    assert adv_mod.EPISODE_ESTIMATORS == core.EPISODE_ESTIMATORS == ("gigpo", "drmas_grpo", "episode_grpo")
    assert adv_mod.STD_ESTIMATORS == ("at_grpo", "grpo_per_agent", "drmas_grpo", "episode_grpo")
    for name in BUILT_IN:
        e = get_estimator(name)
        assert e.name == name and callable(e.fn) and e.formula
        assert set(e.required) <= set(e.options) and set(e.settings) <= set(e.options)
    # the core package's docstring names every estimator (it once listed 6 of the 8)
    assert all(f"``{n}``" in core.__doc__ for n in BUILT_IN)


def test_the_settings_schema_and_builders_are_the_registry():
    from rllib_integration.config_builders import ConfigBuilders
    from rllib_integration.settings import ESTIMATORS
    from rllib_integration.settings.schema import TrainingSettings

    assert ESTIMATORS == estimator_names()
    ann = TrainingSettings.model_fields["estimator"].annotation
    assert typing.get_args(ann) == BUILT_IN  # the Literal the docs and the generated builders show
    # the generated builder's signature (scripts/gen_config_builders.py) lists the same names
    sig = str(inspect.signature(ConfigBuilders.training).parameters["estimator"].annotation)
    assert re.findall(r"'(\w+)'", sig) == list(BUILT_IN)
    row = next(line for line in (REPO / "docs/config_reference.md").read_text().splitlines()
               if line.startswith("| `estimator` |"))
    assert re.findall(r"`(\w+)`", re.split(r"(?<!\\)\|", row)[2]) == list(BUILT_IN)


def test_the_docs_table_is_the_registry():
    """docs/training_core.md "Advantages": one row per estimator, in the registry's order, with its formula; the
    module table names them all."""
    text = (REPO / "docs/training_core.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| (.+) \|$", text.split("| estimator | formula (group g) |", 1)[1].split(
        "\n\n", 1)[0], flags=re.M)
    assert rows == [(n, get_estimator(n).formula) for n in BUILT_IN]
    module_row = next(line for line in text.splitlines() if line.startswith("| `core/advantages.py` |"))
    assert re.findall(r"`(\w+)`", module_row.split("|")[2]) == list(BUILT_IN)


def test_a_name_is_registered_once(registry):
    with pytest.raises(ValueError, match="'rloo' is registered already"):
        register_estimator("rloo", formula="x")(lambda r, codes, n_groups, *, eps: r)
    with pytest.raises(ValueError, match=r"\['anchor'\] are not among its options"):
        register_estimator("bad", formula="x", required={"anchor": "?"})
    with pytest.raises(ValueError, match="unknown advantage estimator 'rlo'.*did you mean 'rloo'"):
        get_estimator("rlo")


# ------------------------------------------------------------------ a toy estimator: one place
def _register_toy(calls=None):
    """What adding an estimator takes: this one decorated function (and its formula and options)."""

    @register_estimator("toy_sign", formula="`scale * sign(r - mean_g)`", options=("scale",))
    def toy_sign(r, codes, n_groups, *, eps, scale=1.0):
        if calls is not None:
            calls.append(len(r))
        means = np.bincount(codes, weights=r, minlength=n_groups) / np.bincount(codes, minlength=n_groups)
        return scale * np.sign(r - means[codes])

    return toy_sign


def _sample(env_idx, turn, agent, reward, cand=0):
    return SimpleNamespace(group_key=GroupKey("t0", env_idx, turn, agent), env_idx=env_idx, candidate=cand,
                           agent=agent, policy_id=agent, reward=reward, chosen=True, prompt=f"{agent}{turn}")


def test_a_toy_estimator_through_the_core_api(registry):
    import rllib_integration.core as core

    assert "toy_sign" not in estimator_names()
    _register_toy()
    assert estimator_names()[-1] == "toy_sign" == core.ESTIMATORS[-1] and "toy_sign" not in core.STD_ESTIMATORS
    assert compute_advantages([0.0, 1.0, 2.0, 5.0], [0, 0, 0, 1], "toy_sign").tolist() == [-1.0, 0.0, 1.0, 0.0]
    assert compute_advantages([0.0, 2.0], [0, 0], "toy_sign", scale=0.5).tolist() == [-0.5, 0.5]
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['gamma'\].*gamma= only apply to estimator='gigpo'"):
        compute_advantages([0.0, 2.0], [0, 0], "toy_sign", gamma=0.9)
    with pytest.raises(ValueError, match="norm='none' applies to the std-normalised"):
        compute_advantages([0.0, 2.0], [0, 0], "toy_sign", norm="none")
    samples = [_sample(0, 0, "A", 1.0), _sample(0, 0, "A", 0.0), _sample(0, 0, "B", 1.0), _sample(0, 0, "B", 1.0)]
    out = advantages_of_samples(samples, "toy_sign")
    assert out.advantages.tolist() == [1.0, -1.0, 0.0, 0.0] and out.keep.tolist() == [True, True, False, False]


def test_a_toy_estimator_through_the_run_settings(registry):
    pytest.importorskip("ray.rllib")
    from rllib_integration import ATGRPOConfig
    from rllib_integration.algorithm import ATGRPO
    from rllib_integration.settings import ConfigError, validate_config

    with pytest.raises(ConfigError, match=r"training\.estimator: 'toy_sign' is not one of \["):
        validate_config({"training": {"estimator": "toy_sign"}})
    _register_toy()
    assert validate_config({"training": {"estimator": "toy_sign"}})["training"]["estimator"] == "toy_sign"
    cfg = ATGRPOConfig().environment("llm_marl/PlanPath-v0").training(estimator="toy_sign")
    cfg.validate()
    samples = [_sample(0, 0, "A", 1.0), _sample(0, 0, "A", 0.0), _sample(0, 0, "B", 1.0), _sample(0, 0, "B", 1.0)]
    adv, gids, keep = ATGRPO._advantages(SimpleNamespace(config=cfg), samples)
    assert adv.tolist() == [1.0, -1.0, 0.0, 0.0] and keep.tolist() == [True, True, False, False]
    with pytest.raises(ConfigError, match=r"training\.adv_norm: none rescales the std-normalised estimators"):
        validate_config({"training": {"estimator": "toy_sign", "adv_norm": "none"}})


@pytest.mark.slow
def test_a_toy_estimator_trains_a_run(registry, ray_session):
    """One iteration of the user-task config (tests/rllib_integration/guess_task.py) with the toy estimator: the
    advantages of the batch are the toy's (the algorithm computes them in this process)."""
    from rllib_integration import ATGRPOConfig
    from rllib_integration.settings import load_config

    calls: list[int] = []
    _register_toy(calls)
    here = Path(__file__).resolve().parent
    cfg = load_config(str(REPO / "configs/base.yaml"), [
        f"env.modules=['{here / 'guess_task.py'}']", "env.id=my_tasks/GuessNumber-v0", "run.iterations=1",
        "rollout.num_rollout_actors=0", "rollout.envs_per_iteration=2", "sampling.k=4", "evaluation.num_episodes=2",
        "training.estimator=toy_sign", "training.filter_zero_variance=false"])
    algo = ATGRPOConfig.from_run_config(cfg).build_algo()
    try:
        result = algo.train()
    finally:
        algo.stop()
    assert calls and calls[-1] == result["throughput"]["samples"] and result["num_updates"] > 0
