"""benchmarks/ablation.py builds one valid run config per (variant, seed) from the embedded default,
changing only what the variant is about, with the same budget (no training here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ablation():
    spec = importlib.util.spec_from_file_location("ablation", REPO / "benchmarks" / "ablation.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_variants_change_only_their_subject_with_the_same_budget(ablation):
    from rllib_integration.settings import DEFAULT_CONFIG

    cfgs = {v: ablation.variant_config(v, seed=1, iterations=5) for v in ablation.VARIANTS}
    at, par, l1 = cfgs["at_grpo_l3"], cfgs["grpo_parallel_l3"], cfgs["at_grpo_l1"]
    for c in cfgs.values():  # same task, warm start and budget
        assert c["env"]["config"] == DEFAULT_CONFIG["env"]["config"]
        assert c["warm_start"] == {**DEFAULT_CONFIG["warm_start"]} and c["warm_start"]["episodes"] > 0
        assert (c["sampling"]["k"], c["rollout"]["envs_per_iteration"], c["run"]["iterations"]) == (
            DEFAULT_CONFIG["sampling"]["k"], DEFAULT_CONFIG["rollout"]["envs_per_iteration"], 5)
        assert c["training"]["seed"] == 1 and c["evaluation"]["interval"] == 5  # evaluated at the end
    assert (at["sampling"]["mode"], at["training"]["estimator"], at["specialization"]) == ("tree", "at_grpo", "L3")
    assert at["training"]["group_by"] == ["task_id", "env_idx", "turn", "agent"]
    assert (par["sampling"]["mode"], par["training"]["estimator"]) == ("parallel", "grpo_per_agent")
    assert par["training"]["group_by"] == ["task_id", "agent"] and par["specialization"] == "L3"
    assert l1["specialization"] == "L1" and l1["policies"] == {} and l1["sampling"]["mode"] == "tree"
    atp = cfgs["at_grpo_parallel_l3"]  # AT-GRPO's groups, parallel episodes: only the sampler differs
    assert (atp["sampling"]["mode"], atp["training"]["estimator"]) == ("parallel", "at_grpo")
    assert atp["specialization"] == "L3"
    assert atp["training"]["group_by"] == at["training"]["group_by"] and atp["policies"] == at["policies"]
    drmas = cfgs["drmas_grpo_l3"]  # DrMAS: episode returns per (task, env, agent) over the K parallel episodes
    assert (drmas["sampling"]["mode"], drmas["training"]["estimator"], drmas["specialization"]) == (
        "parallel", "drmas_grpo", "L3")
    assert drmas["training"]["group_by"] == ["task_id", "env_idx", "agent"] and drmas["policies"] == at["policies"]
    shared = cfgs["grpo_shared_l1"]  # GRPO with one shared policy: roles pooled, one entry per episode
    assert (shared["sampling"]["mode"], shared["training"]["estimator"], shared["specialization"]) == (
        "parallel", "episode_grpo", "L1")
    assert shared["training"]["group_by"] == ["task_id", "env_idx"] and shared["policies"] == {}
    for c in cfgs.values():  # every variant keeps the default normalisation
        assert c["training"]["adv_norm"] == "std"


def test_param_space_is_a_grid_over_variants_and_seeds_and_builds_atgrpo_configs(ablation):
    from rllib_integration import ATGRPOConfig

    space = ablation.param_space(["at_grpo_l3", "at_grpo_l1"], [0, 1], iterations=2, sets=["sampling.k=4"])
    grid = space["trial"]["grid_search"]
    assert [(t["variant"], t["seed"]) for t in grid] == [("at_grpo_l3", 0), ("at_grpo_l3", 1), ("at_grpo_l1", 0),
                                                         ("at_grpo_l1", 1)]
    assert all(t["run_config"]["sampling"]["k"] == 4 for t in grid)
    c = ATGRPOConfig.from_run_config(grid[0]["run_config"])
    assert c.warm_start["episodes"] > 0 and c.k == 4 and c.seed == 0


def test_bad_variant_or_budget_is_refused(ablation):
    with pytest.raises(ValueError, match="unknown variant 'ppo'"):
        ablation.variant_config("ppo", 0, 5)
    with pytest.raises(ValueError, match="iterations must be >= 1"):
        ablation.variant_config("at_grpo_l3", 0, 0)
