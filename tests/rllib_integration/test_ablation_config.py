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
        assert c["training"]["seed"] == 1 and c["evaluation"]["interval"] > 5  # the trial evaluates itself
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
    # the factorial: each cell differs from AT-GRPO (tree, node groups, L3) in exactly its factors
    node, agent = ["task_id", "env_idx", "turn", "agent"], ["task_id", "env_idx", "agent"]
    for name, (mode, group_by, level) in {
            "at_grpo_l3": ("tree", node, "L3"), "at_grpo_parallel_l3": ("parallel", node, "L3"),
            "agent_groups_l3": ("tree", agent, "L3"), "agent_groups_parallel_l3": ("parallel", agent, "L3"),
            "at_grpo_l1": ("tree", node, "L1"), "at_grpo_parallel_l1": ("parallel", node, "L1"),
            "agent_groups_l1": ("tree", agent, "L1"), "agent_groups_parallel_l1": ("parallel", agent, "L1")}.items():
        c = cfgs[name]
        assert (c["sampling"]["mode"], c["training"]["group_by"], c["specialization"]) == (mode, group_by, level)
        assert c["training"]["estimator"] == "at_grpo"
        assert c["policies"] == (at["policies"] if level == "L3" else {})
    lowlr = cfgs["at_grpo_l1_tool_lr"]  # the tree/node-groups L1 cell, at the L3 tool's lr: only the lr differs
    assert lowlr["training"] == {**l1["training"], "lr": at["policies"]["tool"]["lr"]}
    assert {k: v for k, v in lowlr.items() if k != "training"} == {k: v for k, v in l1.items() if k != "training"}
    assert set(ablation.SWEEP) == set(ablation.VARIANTS) - {"grpo_parallel_l3", "at_grpo_l1_tool_lr",
                                                            "at_grpo_flipped_l3"}


def test_param_space_is_a_grid_over_variants_and_seeds_and_builds_atgrpo_configs(ablation):
    from rllib_integration import ATGRPOConfig

    space = ablation.param_space(["at_grpo_l3", "at_grpo_l1"], [0, 1], iterations=2, sets=["sampling.k=4"],
                                 tokens=1000, points=3, eval_episodes=32)
    grid = space["trial"]["grid_search"]
    assert all(t["checkpoints"] == [333, 667, 1000] for t in grid)
    assert all(t["run_config"]["evaluation"]["num_episodes"] == 32 for t in grid)
    assert [(t["variant"], t["seed"]) for t in grid] == [("at_grpo_l3", 0), ("at_grpo_l1", 0), ("at_grpo_l3", 1),
                                                         ("at_grpo_l1", 1)]
    assert all(t["run_config"]["sampling"]["k"] == 4 for t in grid)
    c = ATGRPOConfig.from_run_config(grid[0]["run_config"])
    assert c.warm_start["episodes"] > 0 and c.k == 4 and c.seed == 0


def test_paper_regime_changes_the_task_and_budget_per_iteration_only(ablation):
    emb = ablation.variant_config("drmas_grpo_l3", 0, 5)
    paper = ablation.variant_config("drmas_grpo_l3", 0, 5, regime="paper_planpath")
    assert (paper["env"]["config"]["size"], paper["env"]["config"]["max_turns"]) == (6, 4)
    assert (paper["sampling"]["k"], paper["rollout"]["envs_per_iteration"]) == (4, emb["rollout"]["envs_per_iteration"])
    assert paper["env"]["config"]["prompt_style"] == emb["env"]["config"]["prompt_style"]
    assert (paper["training"], paper["warm_start"], paper["policies"]) == (emb["training"], emb["warm_start"],
                                                                            emb["policies"])
    sudoku = ablation.variant_config("drmas_grpo_l3", 0, 5, regime="paper_sudoku")
    assert (sudoku["env"]["id"], sudoku["env"]["config"]) == (
        "llm_marl/Sudoku-v0", {"size": 4, "max_turns": 4, "prompt_style": "compact"})  # no plan-path keys
    assert (sudoku["sampling"]["k"], sudoku["sampling"]["mode"], sudoku["sampling"]["temperature"]) == (
        4, "parallel", 0.5)
    assert sudoku["warm_start"] == {**emb["warm_start"], "episodes": 256, "epochs": 10}
    assert (sudoku["training"], sudoku["policies"]) == (emb["training"], emb["policies"])
    from rllib_integration import ATGRPOConfig

    c = ATGRPOConfig.from_run_config(sudoku)
    assert c.env_config["size"] == 4
    with pytest.raises(ValueError, match="unknown regime 'atari'"):
        ablation.variant_config("at_grpo_l3", 0, 5, regime="atari")


def test_bad_variant_or_budget_is_refused(ablation):
    with pytest.raises(ValueError, match="unknown variant 'ppo'"):
        ablation.variant_config("ppo", 0, 5)
    with pytest.raises(ValueError, match="iterations must be >= 1"):
        ablation.variant_config("at_grpo_l3", 0, 0)


def test_confidence_interval_and_checkpoints(ablation):
    m, h = ablation.mean_ci([0.25, 0.5, 0.75])  # sd 0.25, t(2) = 4.303
    assert m == 0.5 and abs(h - 4.303 * 0.25 / 3 ** 0.5) < 1e-9
    assert ablation.mean_ci([0.4]) == (0.4, 0.0)
    with pytest.raises(ValueError, match="budget"):
        ablation.checkpoints(-1, 4)
    assert ablation.checkpoints(0, 4) == [ablation.NO_BUDGET]  # the main job: its iterations, then one evaluation


def test_summary_pairs_gains_by_seed_and_reports_roles(ablation, tmp_path):
    def rows(variant, seed, after, end):
        return [{"variant": variant, "seed": seed, "point": 0, "tokens": 0, "train_s": 0.0, "iterations": 0,
                 "eval_after_ws": after, "eval_success": after, "eval_before_ws": 0.0},
                {"variant": variant, "seed": seed, "point": 1, "tokens": 1000 + seed, "train_s": 10.0, "iterations": 4,
                 "eval_after_ws": after, "eval_success": end, "eval_tool_correct": 0.5,
                 "eval_executor_correct_given_tool_correct": 1.0, "eval_executor_correct_without": 0.0}]

    rs = [*rows("at_grpo_l3", 0, 0.2, 0.6), *rows("at_grpo_l3", 1, 0.2, 0.4),
          *rows("drmas_grpo_l3", 0, 0.2, 0.3), *rows("drmas_grpo_l3", 1, 0.2, 0.1)]
    table = ablation.summary(rs).splitlines()
    at = next(line for line in table if line.startswith("| AT-GRPO"))
    drmas = next(line for line in table if line.startswith("| DrMAS"))
    assert "| +0.30 ± 1.27 |" in at and "| -0.30 ± 0.00 |" in drmas   # gains 0.4, 0.2 vs 0.1, -0.1: paired -0.3
    assert "| 0.50 ± 0.00 | 1.00 ± 0.00 / 0.00 ± 0.00 |" in drmas
    curves = ablation.curves(rs)
    assert curves["at_grpo_l3"][1][:3] == (1000.5, 10.0, 0.5)
    ablation.write_outputs(rs, tmp_path, header="test")
    assert (tmp_path / "ablation.png").stat().st_size > 0
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == 8


def test_a_config_file_is_the_base_and_the_control_flips_only_the_sign(ablation):
    """--config (issue 40): every trial starts from the recipe's run config; the control changes only the sign."""
    from rllib_integration.settings import load_config

    base = load_config(str(REPO / "configs" / "smollm2_cpu.yaml"), check_paths=False)
    at = ablation.variant_config("at_grpo_l3", seed=2, iterations=7, base=base)
    flipped = ablation.variant_config("at_grpo_flipped_l3", seed=2, iterations=7, base=base)
    assert at["env"] == base["env"] and at["specialization"] == "L2" and at["model"] == base["model"]
    assert at["training"]["seed"] == 2 and at["warm_start"] == base["warm_start"]
    assert flipped["training"]["flip_advantages"] is True and at["training"]["flip_advantages"] is False
    flipped["training"]["flip_advantages"] = False
    assert flipped == at
    assert "at_grpo_flipped_l3" not in ablation.SWEEP


def test_recipe_table_splits_the_gain_into_format_and_skill(tmp_path):
    """benchmarks/recipe_table.py: success among the deciding role's valid replies is success / valid ratio."""
    import json
    import subprocess
    import sys

    rows = []
    for seed, (ws, end, vws) in enumerate([(0.5, 0.8, 0.5), (0.4, 0.6, 0.8)]):
        rows.append({"variant": "at_grpo_l3", "seed": seed, "point": 0, "tokens": 0, "iterations": 0,
                     "eval_success": ws, "eval_valid_checker": vws})
        rows.append({"variant": "at_grpo_l3", "seed": seed, "point": 1, "tokens": 1000, "iterations": 3,
                     "eval_success": end, "eval_valid_checker": 1.0})
    rows.append({"variant": "at_grpo_flipped_l3", "seed": 0, "point": 0, "tokens": 0, "iterations": 0,
                 "eval_success": 0.5, "eval_valid_checker": 0.5})  # died at its start: left out
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "recipe_table.py"), str(path)],
                         capture_output=True, text=True, check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("| at_grpo_l3"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    # gains +0.3, +0.2; valid 0.5 -> 1, 0.8 -> 1; among valid 1.0 -> 0.8 and 0.5 -> 0.6: skill -0.2, +0.1
    assert cells[1] == "2 (0, 1)" and cells[4].startswith("+0.25 ±") and cells[5].startswith("0.65 ±")
    assert cells[6].startswith("0.75 ±") and cells[6].endswith("-> 0.70 ± 1.27") and cells[7].startswith("-0.05 ±")
    assert "at_grpo_flipped_l3" not in out
