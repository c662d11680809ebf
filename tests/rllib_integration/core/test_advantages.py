"""Advantage estimators, checked against values computed by hand."""

import math

import numpy as np
import pytest

from rllib_integration.core.advantages import (
    compute_advantages,
    dynamic_sampling_mask,
    group_ids_from_keys,
)

EPS = 1e-6

# Two groups: A = [1, 0, 1, 1] (mean 0.75, population std sqrt(3)/4), B = [2, 4] (mean 3, std 1)
REWARDS = [1.0, 0.0, 2.0, 1.0, 4.0, 1.0]
GROUPS = ["A", "A", "B", "A", "B", "A"]
SA = math.sqrt(3) / 4


def test_at_grpo_by_hand():
    adv = compute_advantages(REWARDS, GROUPS, "at_grpo")
    expected = [
        0.25 / (SA + EPS), -0.75 / (SA + EPS), -1 / (1 + EPS), 0.25 / (SA + EPS), 1 / (1 + EPS), 0.25 / (SA + EPS)
    ]
    np.testing.assert_allclose(adv, expected, rtol=1e-12)


def test_population_std_convention():
    # DrMAS example [1,0,1,1]: population std is sqrt(3)/4 = 0.433, the sample std 0.5 would
    # give 0.5 for the first sample. We use the population std.
    adv = compute_advantages([1, 0, 1, 1], [7, 7, 7, 7])
    assert adv[0] == pytest.approx(0.25 / (SA + EPS))
    assert adv[0] != pytest.approx(0.5)


def test_eps_option():
    adv = compute_advantages([0.0, 2.0], [0, 0], eps=1.0)  # mean 1, std 1 -> -1/2, 1/2
    np.testing.assert_allclose(adv, [-0.5, 0.5])


def test_dr_grpo_by_hand():
    adv = compute_advantages(REWARDS, GROUPS, "dr_grpo")
    np.testing.assert_allclose(adv, [0.25, -0.75, -1.0, 0.25, 1.0, 0.25])


def test_rloo_by_hand():
    adv = compute_advantages(REWARDS, GROUPS, "rloo")
    # A: r - (3 - r)/3 ; B: r - (6 - r)/1
    expected = [1 - 2 / 3, 0 - 1, 2 - 4, 1 - 2 / 3, 4 - 2, 1 - 2 / 3]
    np.testing.assert_allclose(adv, expected)


def test_reinforce_pp_by_hand():
    adv = compute_advantages(REWARDS, GROUPS, "reinforce_pp")
    centred = np.array([0.25, -0.75, -1.0, 0.25, 1.0, 0.25])
    gstd = math.sqrt((3 * 0.25**2 + 0.75**2 + 1 + 1) / 6)  # population std of the batch
    np.testing.assert_allclose(adv, centred / (gstd + EPS))


def test_grpo_per_agent_grouping_by_hand():
    # One problem, two turns, two agents. Keys are (task_id, env_idx, turn, agent).
    keys = [
        ("p", 0, 0, "solver"), ("p", 0, 0, "solver"),
        ("p", 0, 1, "solver"), ("p", 0, 1, "solver"),
        ("p", 0, 0, "verifier"), ("p", 0, 0, "verifier"),
    ]
    rewards = [1.0, 0.0, 3.0, 2.0, 5.0, 5.0]
    per_agent = group_ids_from_keys(keys, by=("task_id", "agent"))
    assert per_agent.tolist() == [0, 0, 0, 0, 1, 1]
    adv = compute_advantages(rewards, per_agent, "grpo_per_agent")
    # solver group [1,0,3,2]: mean 1.5, population std sqrt(1.25); verifier constant -> 0
    s = math.sqrt(1.25)
    np.testing.assert_allclose(adv, [-0.5 / (s + EPS), -1.5 / (s + EPS), 1.5 / (s + EPS), 0.5 / (s + EPS), 0, 0])
    # AT-GRPO grouping of the same data: per turn as well
    at = group_ids_from_keys(keys)
    assert len(set(at.tolist())) == 3
    adv_at = compute_advantages(rewards, at, "at_grpo")
    unit = 1 / (1 + 2 * EPS)
    np.testing.assert_allclose(adv_at, [unit, -unit, unit, -unit, 0, 0], rtol=1e-9)
    # plain GRPO (per problem) mixes everything into one group
    assert group_ids_from_keys(keys, by=("task_id",)).tolist() == [0] * 6


def test_group_ids_from_keys_distinguishes_problems_and_instances():
    keys = [("p1", 0, 0, "a"), ("p2", 0, 0, "a"), ("p1", 1, 0, "a"), ("p1", 0, 0, "a"), ("p1", 0, 0, "b")]
    codes = group_ids_from_keys(keys)
    assert codes[0] == codes[3]
    assert len({codes[0], codes[1], codes[2], codes[4]}) == 4
    with pytest.raises(ValueError, match="subset"):
        group_ids_from_keys(keys, by=("nope",))


@pytest.mark.parametrize("estimator", ["at_grpo", "grpo_per_agent", "dr_grpo", "rloo", "reinforce_pp"])
def test_singleton_and_constant_groups_give_zero(estimator):
    rewards = [0.1, 0.1, 0.1, 5.0, 1.0, 3.0]
    groups = [0, 0, 0, 1, 2, 2]  # group 0 constant (0.1 is inexact in binary), group 1 singleton
    adv = compute_advantages(rewards, groups, estimator)
    assert adv[:4].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert adv[4] < 0 < adv[5]


@pytest.mark.parametrize("estimator", ["at_grpo", "dr_grpo", "rloo", "reinforce_pp"])
def test_group_label_types_agree(estimator):
    r = np.array([3.0, 1.0, 2.0, 0.0, 7.0])
    ints = compute_advantages(r, np.array([5, 9, 5, 9, 5]), estimator)
    strs = compute_advantages(r, ["x", "y", "x", "y", "x"], estimator)
    tups = compute_advantages(r, [("t", 1), ("t", 2), ("t", 1), ("t", 2), ("t", 1)], estimator)
    np.testing.assert_allclose(ints, strs)
    np.testing.assert_allclose(ints, tups)
    # 1 and "1" are different labels
    mixed = compute_advantages([0.0, 1.0], [1, "1"], "dr_grpo")
    assert mixed.tolist() == [0.0, 0.0]


def test_errors_are_clear():
    with pytest.raises(ValueError, match="unknown advantage estimator"):
        compute_advantages([1.0], [0], "ppo")
    with pytest.raises(TypeError, match="unknown option"):
        compute_advantages([1.0], [0], bogus=1)
    with pytest.raises(ValueError, match="differ in length"):
        compute_advantages([1.0, 2.0], [0])
    assert compute_advantages([], []).shape == (0,)


def test_dynamic_sampling_mask():
    rewards = [1.0, 1.0, 0.0, 1.0, 2.0, 0.3, 0.3]
    groups = [0, 0, 1, 1, 2, 3, 3]
    assert dynamic_sampling_mask(rewards, groups).tolist() == [False, False, True, True, False, False, False]


def test_large_batch_is_vectorised_and_matches_loop(python_lines):
    """No Python loop over samples or groups, for any estimator: 200,000 samples run the same Python lines
    as 2,000 (the time it takes: benchmarks/core_bench.py)."""
    rng = np.random.default_rng(0)
    n = 200_000
    groups = rng.integers(0, n // 8, size=n)
    rewards = rng.normal(size=n)
    for estimator in ("at_grpo", "dr_grpo", "rloo", "reinforce_pp"):
        small = python_lines(compute_advantages, rewards[:2_000], groups[:2_000], estimator)[1]
        big = python_lines(compute_advantages, rewards, groups, estimator)[1]
        assert big == small, estimator
    adv = compute_advantages(rewards, groups)
    # spot-check a few groups against a direct computation
    for g in groups[:5]:
        m = groups == g
        x = rewards[m]
        if m.sum() > 1:
            np.testing.assert_allclose(adv[m], (x - x.mean()) / (x.std() + EPS), rtol=1e-9)


# ---------------------------------------------------------------- REINFORCE++ whitening set
def test_reinforce_pp_whitens_over_kept_samples_only():
    """Zero-variance groups (dropped by dynamic sampling) do not shrink the std of the rest."""
    rewards = np.array([0.0, 1.0, 0.0, 2.0, 5.0, 5.0, 5.0, 5.0])
    gids = np.array([0, 0, 1, 1, 2, 2, 3, 3])
    adv = compute_advantages(rewards, gids, "reinforce_pp", eps=0.0)
    kept = np.array([-0.5, 0.5, -1.0, 1.0])
    np.testing.assert_allclose(adv[:4], kept / kept.std(), atol=1e-12)
    np.testing.assert_array_equal(adv[4:], 0.0)


def test_reinforce_pp_whitens_per_policy_and_respects_keep():
    rewards = np.array([0.0, 1.0, 0.0, 10.0, 0.0, 4.0])
    gids = np.array([0, 0, 1, 1, 2, 2])
    policy = np.array(["a", "a", "b", "b", "b", "b"])
    adv = compute_advantages(rewards, gids, "reinforce_pp", eps=0.0, whiten_by=policy)
    np.testing.assert_allclose(adv[:2], [-1.0, 1.0], atol=1e-12)  # policy a alone: std 0.5
    b = np.array([-5.0, 5.0, -2.0, 2.0])
    np.testing.assert_allclose(adv[2:], b / b.std(), atol=1e-12)
    keep = np.array([True, True, True, True, False, False])
    adv_k = compute_advantages(rewards, gids, "reinforce_pp", eps=0.0, whiten_by=policy, keep=keep)
    np.testing.assert_allclose(adv_k[2:4], [-1.0, 1.0], atol=1e-12)
    with pytest.raises(ValueError, match="keep must be a bool mask"):
        compute_advantages(rewards, gids, "reinforce_pp", keep=[True])
