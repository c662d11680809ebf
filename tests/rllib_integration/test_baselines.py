"""The faithful baselines' advantages (issue 24), against hand-computed numbers: DrMAS per-agent GRPO
(``drmas_grpo``), GRPO on episode returns (``episode_grpo``), the advantage normalisations (``norm=``:
``std``, ``none``, ``per_role_std``), and what ``ATGRPO._advantages`` runs for each setting."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from rllib_integration.core.advantages import compute_advantages, parallel_episodes
from rllib_integration.core.records import GroupKey

# One task, K = 3 parallel episodes, roles A and B; e1 plays two turns:
#   e0: A 0, B 1            R = 1
#   e1: A 0, B 0, A 0, B 0  R = 0
#   e2: A 0, B 2            R = 2
REWARDS = [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0]
EPISODES = ["e0", "e0", "e1", "e1", "e1", "e1", "e2", "e2"]
AGENTS = ["A", "B", "A", "B", "A", "B", "A", "B"]


def test_drmas_grpo_gives_each_step_its_episode_return_with_every_step_an_entry():
    # per agent: entries R = 1, 0, 0, 2 (e1 twice): mean 0.75, centred 0.25, -0.75, -0.75, 1.25
    adv = compute_advantages(REWARDS, AGENTS, "drmas_grpo", episode_ids=EPISODES, norm="none")
    assert adv.tolist() == [0.25, 0.25, -0.75, -0.75, -0.75, -0.75, 1.25, 1.25]
    std = np.sqrt((0.25 ** 2 + 2 * 0.75 ** 2 + 1.25 ** 2) / 4)  # population std: sqrt(0.6875)
    adv = compute_advantages(REWARDS, AGENTS, "drmas_grpo", episode_ids=EPISODES)
    np.testing.assert_allclose(adv, np.array([0.25, 0.25, -0.75, -0.75, -0.75, -0.75, 1.25, 1.25]) / (std + 1e-6),
                               rtol=1e-12)


def test_episode_grpo_counts_each_episode_once():
    # per agent: entries R = 1, 0, 2: mean 1, centred 0, -1, 1, std sqrt(2/3)
    adv = compute_advantages(REWARDS, AGENTS, "episode_grpo", episode_ids=EPISODES, norm="none")
    assert adv.tolist() == [0.0, 0.0, -1.0, -1.0, -1.0, -1.0, 1.0, 1.0]
    adv = compute_advantages(REWARDS, AGENTS, "episode_grpo", episode_ids=EPISODES)
    np.testing.assert_allclose(adv, np.array([0, 0, -1, -1, -1, -1, 1, 1]) / (np.sqrt(2 / 3) + 1e-6), rtol=1e-12)
    # one shared group for both roles (GRPO with one policy): the same episodes, the same advantages
    pooled = compute_advantages(REWARDS, [0] * 8, "episode_grpo", episode_ids=EPISODES, norm="none")
    assert pooled.tolist() == [0.0, 0.0, -1.0, -1.0, -1.0, -1.0, 1.0, 1.0]
    # ... where drmas_grpo pooled counts steps: entries 1, 1, 0 x4, 2, 2, mean 0.75
    drmas = compute_advantages(REWARDS, [0] * 8, "drmas_grpo", episode_ids=EPISODES, norm="none")
    assert drmas.tolist() == [0.25, 0.25, -0.75, -0.75, -0.75, -0.75, 1.25, 1.25]


def test_episode_estimators_give_zero_to_constant_groups():
    adv = compute_advantages([1.0, 0.0, 0.0, 1.0], ["A", "A", "B", "B"], "episode_grpo",
                             episode_ids=["e0", "e0", "e1", "e1"])  # each agent's two episodes both return 1
    assert adv.tolist() == [0.0, 0.0, 0.0, 0.0]


# at_grpo groups: coder g0 differs by the task outcome (0 / 1), coder g1 only by a format penalty (-0.1 / 0);
# tester g2 is constant, tester g3 differs by 0 / 2.
NORM_REWARDS = [0.0, 1.0, -0.1, 0.0, 0.0, 0.0, 0.0, 2.0]
NORM_GROUPS = [0, 0, 1, 1, 2, 2, 3, 3]
ROLES = ["coder"] * 4 + ["tester"] * 4


def test_std_norm_blows_a_format_penalty_up_to_the_task_signal_and_none_keeps_the_scale():
    std = compute_advantages(NORM_REWARDS, NORM_GROUPS, "at_grpo")
    np.testing.assert_allclose(std, [-1, 1, -1, 1, 0, 0, -1, 1], atol=1e-4)  # both coder groups at unit size
    none = compute_advantages(NORM_REWARDS, NORM_GROUPS, "at_grpo", norm="none")
    np.testing.assert_allclose(none, [-0.5, 0.5, -0.05, 0.05, 0, 0, -1, 1], atol=1e-12)
    assert none.tolist() == compute_advantages(NORM_REWARDS, NORM_GROUPS, "dr_grpo").tolist()


def test_per_role_std_divides_by_the_std_of_the_roles_centred_advantages():
    adv = compute_advantages(NORM_REWARDS, NORM_GROUPS, "at_grpo", norm="per_role_std", roles=ROLES)
    # coder: centred -0.5, 0.5, -0.05, 0.05 -> std sqrt(0.505 / 4) = 0.35531...; the format group stays 10x smaller
    s = np.sqrt((2 * 0.25 + 2 * 0.0025) / 4)
    # tester: the constant group g2 is left out of the std: centred -1, 1 -> std 1
    np.testing.assert_allclose(adv, [-0.5 / (s + 1e-6), 0.5 / (s + 1e-6), -0.05 / (s + 1e-6), 0.05 / (s + 1e-6),
                                     0.0, 0.0, -1 / (1 + 1e-6), 1 / (1 + 1e-6)], rtol=1e-12)
    assert adv[0] == pytest.approx(-1.40719, abs=1e-5) and adv[2] == pytest.approx(-0.140719, abs=1e-6)
    # keep= leaves samples out of the std (not trained): the coder's std over g0 only is 0.5
    keep = np.array([True, True, False, False, True, True, True, True])
    adv = compute_advantages(NORM_REWARDS, NORM_GROUPS, "at_grpo", norm="per_role_std", roles=ROLES, keep=keep)
    np.testing.assert_allclose(adv[:4], np.array([-0.5, 0.5, -0.05, 0.05]) / (0.5 + 1e-6), rtol=1e-12)
    # at_grpo per role = reinforce_pp whitened per role
    ref = compute_advantages(NORM_REWARDS, NORM_GROUPS, "reinforce_pp", whiten_by=ROLES)
    np.testing.assert_array_equal(
        compute_advantages(NORM_REWARDS, NORM_GROUPS, "at_grpo", norm="per_role_std", roles=ROLES), ref)


def test_default_norm_is_todays_at_grpo_bit_for_bit():
    rng = np.random.default_rng(0)
    r, g = rng.standard_normal(500), rng.integers(0, 60, 500)
    old = np.zeros(500)
    for k in np.unique(g):  # the formula before adv_norm existed
        m = g == k
        c = r[m] - r[m].mean()
        old[m] = 0.0 if m.sum() == 1 else c / (np.sqrt((c * c).mean()) + 1e-6)
    for est in ("at_grpo", "grpo_per_agent"):
        a = compute_advantages(r, g, est)
        np.testing.assert_array_equal(a, compute_advantages(r, g, est, norm="std"))
        np.testing.assert_allclose(a, old, rtol=1e-12, atol=1e-12)


def test_bad_combinations_are_refused():
    with pytest.raises(ValueError, match="norm='none' applies to the std-normalised"):
        compute_advantages([0.0, 1.0], [0, 0], "dr_grpo", norm="none")
    with pytest.raises(ValueError, match="unknown advantage normalisation"):
        compute_advantages([0.0, 1.0], [0, 0], "at_grpo", norm="l2")
    with pytest.raises(TypeError, match="roles="):
        compute_advantages([0.0, 1.0], [0, 0], "at_grpo", norm="per_role_std")
    with pytest.raises(TypeError, match="episode_ids="):
        compute_advantages([0.0, 1.0], [0, 0], "drmas_grpo")
    with pytest.raises(TypeError, match="episode_ids="):
        compute_advantages([0.0, 1.0], [0, 0], "at_grpo", episode_ids=[0, 1])


# --------------------------------------------------------------------------- ATGRPO._advantages
def _sample(env_idx, cand, turn, agent, reward, task="t0", chosen=True):
    return SimpleNamespace(group_key=GroupKey(task, env_idx, turn, agent), env_idx=env_idx, candidate=cand,
                           agent=agent, policy_id=agent, reward=reward, chosen=chosen, prompt=f"{agent}{turn}")


def _parallel_batch():
    """Env 0 (K = 3 episodes, the episodes above) and env 1 of the same task id (K = 2: returns 1 and 1)."""
    out = [_sample(0, int(e[1]), t, a, r) for e, a, r, t in
           zip(EPISODES, AGENTS, REWARDS, [0, 0, 0, 0, 1, 1, 0, 0], strict=True)]
    return out + [_sample(1, 0, 0, "A", 1.0), _sample(1, 0, 0, "B", 0.0), _sample(1, 1, 0, "A", 0.0),
                  _sample(1, 1, 0, "B", 1.0)]


def _run_advantages(samples, **cfg):
    pytest.importorskip("ray.rllib")
    from rllib_integration.algorithm import ATGRPO

    config = SimpleNamespace(**{"estimator": "at_grpo", "group_by": ["task_id", "env_idx", "turn", "agent"],
                                "adv_norm": "std", "filter_zero_variance": True, "flip_advantages": False, **cfg})
    return ATGRPO._advantages(SimpleNamespace(config=config), samples)


def test_run_drmas_grpo_groups_per_agent_over_the_k_episodes_of_each_env():
    samples = _parallel_batch()
    adv, gids, keep = _run_advantages(samples, estimator="drmas_grpo", group_by=["task_id", "env_idx", "agent"],
                                      adv_norm="none")
    assert adv[:8].tolist() == [0.25, 0.25, -0.75, -0.75, -0.75, -0.75, 1.25, 1.25]
    assert adv[8:].tolist() == [0.0] * 4 and keep.tolist() == [True] * 8 + [False] * 4  # env 1: both return 1
    assert len(set(gids[:8].tolist())) == 2 and set(gids[:8].tolist()).isdisjoint(gids[8:].tolist())
    # per (task, agent) instead: env 1's episodes join env 0's (entries 1, 0, 0, 2, 1, 1: mean 5/6)
    adv, _, keep = _run_advantages(samples, estimator="drmas_grpo", group_by=["task_id", "agent"], adv_norm="none")
    np.testing.assert_allclose(adv[[0, 2, 6, 8]], np.array([1, 0, 2, 1]) - 5 / 6, atol=1e-12)
    assert keep.all()


def test_run_episode_grpo_pooled_roles_is_the_shared_policy_grpo():
    adv, _, _ = _run_advantages(_parallel_batch(), estimator="episode_grpo", group_by=["task_id", "env_idx"],
                                adv_norm="none")
    assert adv[:8].tolist() == [0.0, 0.0, -1.0, -1.0, -1.0, -1.0, 1.0, 1.0] and adv[8:].tolist() == [0.0] * 4


def test_run_at_grpo_in_parallel_mode_is_the_papers_parallel_baseline():
    """The paper's (PettingLLMs') parallel-sampling baseline groups by (env, turn, agent) over the K independent
    episodes of one env: at turn 0 the K episodes' A steps (rewards 0, 0, 0) and B steps (1, 0, 2); at turn 1 only
    e1 is left (a singleton: 0). Env 1 is a group of its own although its task id is the same."""
    samples = _parallel_batch()
    adv, gids, keep = _run_advantages(samples, adv_norm="none")
    assert adv.tolist() == [0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 1.0, 0.5, -0.5, -0.5, 0.5]
    assert keep.tolist() == [False, True, False, True, False, False, False, True, True, True, True, True]
    key = [(s.group_key.env_idx, s.group_key.turn, s.agent) for s in samples]
    assert all((gids[i] == gids[j]) == (key[i] == key[j]) for i in range(12) for j in range(12))


def test_run_per_role_std_and_default_equal_the_estimator_directly():
    samples = _parallel_batch()
    r = [s.reward for s in samples]
    adv, gids, keep = _run_advantages(samples, adv_norm="per_role_std")
    np.testing.assert_array_equal(adv, compute_advantages(r, gids, "at_grpo", norm="per_role_std",
                                                          roles=[s.agent for s in samples], keep=keep))
    adv, gids, _ = _run_advantages(samples)
    np.testing.assert_array_equal(adv, compute_advantages(r, gids, "at_grpo"))


def test_episode_estimators_refuse_tree_samples():
    with pytest.raises(ValueError, match="drmas_grpo needs parallel sampling"):
        parallel_episodes([_sample(0, 0, 0, "A", 1.0, chosen=False)], what="drmas_grpo")


def test_run_settings_refuse_what_the_estimators_cannot_do():
    from rllib_integration.settings import ConfigError, validate_config

    for est in ("drmas_grpo", "episode_grpo"):
        with pytest.raises(ConfigError, match=rf"training\.estimator: {est} compares the returns of K independent "
                                              r"episodes.*sampling\.mode: parallel"):
            validate_config({"training": {"estimator": est}}, check_paths=False)
        full = validate_config({"training": {"estimator": est, "group_by": ["task_id", "env_idx", "agent"]},
                                "sampling": {"mode": "parallel"}}, check_paths=False)
        assert full["training"]["adv_norm"] == "std"
        with pytest.raises(ConfigError, match=r"training\.group_by: .* other than turn"):
            validate_config({"training": {"estimator": est, "group_by": ["turn"]}, "sampling": {"mode": "parallel"}},
                            check_paths=False)
    for est in ("dr_grpo", "rloo", "reinforce_pp"):
        with pytest.raises(ConfigError, match=rf"training\.adv_norm: none rescales .* not {est}"):
            validate_config({"training": {"estimator": est, "adv_norm": "none"}}, check_paths=False)
    assert validate_config({"training": {"adv_norm": "per_role_std"}}, check_paths=False)["training"]["adv_norm"] == (
        "per_role_std")
