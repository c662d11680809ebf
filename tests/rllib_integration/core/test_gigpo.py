"""GiGPO (episode-level + step-level advantages over identical anchor states), checked by hand."""

import dataclasses
import math

import numpy as np
import pytest

import llm_marl_envs
from llm_marl_envs import LLMTeamEnv, StepOutcome, register_task
from rllib_integration.core.advantages import (ESTIMATORS, anchor_id, compute_advantages, gigpo_advantages,
                                               gigpo_of_samples)
from rllib_integration.core.options import GiGPOOptions
from rllib_integration.core.records import GroupKey, Sample

EPS = 1e-6
GAMMA = 0.5

# Two tasks, K=3 episodes each, played step by step (list order = step 0 of every episode, then step 1, ...).
# Anchor labels are reused across the tasks on purpose: a state only groups within its task.
#
# task A   e0: s0 -> s1        rewards 0, 1      return 1   G = [0.5, 1]
#          e1: s0 -> s2        rewards 0, 0      return 0   G = [0, 0]
#          e2: s0 -> s1 -> s3  rewards 0, 0, 2   return 2   G = [0.5, 1, 2]
# task B   f0: s0 -> s1        rewards 1, 0      return 1   G = [1, 0]
#          f1: s0 -> s2        rewards 0, 1      return 1   G = [0.5, 1]
#          f2: s0 -> s1        rewards 1, 0      return 1   G = [1, 0]
ROWS = [  # (task, episode, anchor, reward)
    ("A", "e0", "s0", 0.0), ("A", "e1", "s0", 0.0), ("A", "e2", "s0", 0.0),
    ("B", "f0", "s0", 1.0), ("B", "f1", "s0", 0.0), ("B", "f2", "s0", 1.0),
    ("A", "e0", "s1", 1.0), ("A", "e1", "s2", 0.0), ("A", "e2", "s1", 0.0),
    ("B", "f0", "s1", 0.0), ("B", "f1", "s2", 1.0), ("B", "f2", "s1", 0.0),
    ("A", "e2", "s3", 2.0),
]
TASK, EPISODE, ANCHOR, REWARD = (list(c) for c in zip(*ROWS, strict=True))
S3 = math.sqrt(1 / 18)  # population std of [1/2, 0, 1/2] and of [1, 1/2, 1]
SA = math.sqrt(2 / 3)  # population std of task A's returns [1, 0, 2]

EPISODE_ADV = [0, -1 / (SA + EPS), 1 / (SA + EPS), 0, 0, 0,
               0, -1 / (SA + EPS), 1 / (SA + EPS), 0, 0, 0, 1 / (SA + EPS)]
# A/s0: G [1/2, 0, 1/2], mean 1/3; B/s0: G [1, 1/2, 1], mean 5/6; A/s1: G [1, 1] (zero variance);
# B/s1: G [0, 0]; A/s2, B/s2, A/s3: singletons
STEP_ADV = [(1 / 6) / (S3 + EPS), -(1 / 3) / (S3 + EPS), (1 / 6) / (S3 + EPS),
            (1 / 6) / (S3 + EPS), -(1 / 3) / (S3 + EPS), (1 / 6) / (S3 + EPS),
            0, 0, 0, 0, 0, 0, 0]


def _gigpo(**kw):
    return gigpo_advantages(REWARD, TASK, EPISODE, ANCHOR, gamma=kw.pop("gamma", GAMMA), **kw)


def test_hand_built_batch_returns_and_both_levels():
    g = _gigpo()
    np.testing.assert_allclose(g.episode_returns, [1, 0, 2, 1, 1, 1, 1, 0, 2, 1, 1, 1, 2])
    np.testing.assert_allclose(g.step_returns, [0.5, 0, 0.5, 1, 0.5, 1, 1, 0, 1, 0, 1, 0, 2])
    np.testing.assert_allclose(g.episode_advantages, EPISODE_ADV, rtol=1e-12, atol=0)
    np.testing.assert_allclose(g.step_advantages, STEP_ADV, rtol=1e-12, atol=0)
    np.testing.assert_allclose(g.advantages, np.add(EPISODE_ADV, STEP_ADV), rtol=1e-12)
    # singleton and zero-variance groups give exactly 0 at either level
    assert g.episode_advantages[[0, 3, 4, 5, 6, 9, 10, 11]].tolist() == [0.0] * 8
    assert g.step_advantages[6:].tolist() == [0.0] * 7
    # s0 of task A and s0 of task B are different step groups; s1 of A (twice) is one group
    assert g.step_groups[0] != g.step_groups[3] and g.step_groups[6] == g.step_groups[8]
    assert len(set(g.step_groups.tolist())) == 7
    # no signal: task B's episodes all return 1, and its s1 (G 0, 0) and s2 (singleton) steps are flat
    assert g.informative.tolist() == [True] * 9 + [False, False, False, True]


def test_step_weight_combines_the_levels():
    for w in (0.0, 0.25, 2.0):
        g = _gigpo(step_weight=w)
        np.testing.assert_allclose(g.advantages, np.asarray(EPISODE_ADV) + w * np.asarray(STEP_ADV), rtol=1e-12)
    assert _gigpo(step_weight=0.0).advantages[3:6].tolist() == [0.0, 0.0, 0.0]  # task B: step level only


def test_without_std_normalisation_centres_only():
    g = _gigpo(std_norm=False)
    np.testing.assert_allclose(g.episode_advantages, [0, -1, 1, 0, 0, 0, 0, -1, 1, 0, 0, 0, 1], atol=1e-12)
    np.testing.assert_allclose(g.step_advantages, [1 / 6, -1 / 3, 1 / 6, 1 / 6, -1 / 3, 1 / 6] + [0] * 7,
                               atol=1e-12)


def test_gamma_one_makes_the_first_step_return_the_episode_return():
    g = _gigpo(gamma=1.0)
    np.testing.assert_allclose(g.step_returns[:6], g.episode_returns[:6])
    np.testing.assert_allclose(g.step_returns, [1, 0, 2, 1, 1, 1, 1, 0, 2, 0, 1, 0, 2])
    assert _gigpo(gamma=0.0).step_returns.tolist() == REWARD  # gamma 0: the step's own reward


def test_invariances():
    base = _gigpo()
    # any order of the rows, with each step's position given: the same advantages, permuted
    perm = np.random.default_rng(0).permutation(len(ROWS))
    step = [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2]
    g = gigpo_advantages(np.asarray(REWARD)[perm], np.asarray(TASK)[perm], np.asarray(EPISODE)[perm],
                         np.asarray(ANCHOR)[perm], order=np.asarray(step)[perm], gamma=GAMMA)
    np.testing.assert_allclose(g.advantages, base.advantages[perm], rtol=1e-12)
    # ... but without `order` the list order is the step order: shuffled rows give other returns
    shuffled = gigpo_advantages(np.asarray(REWARD)[perm], np.asarray(TASK)[perm], np.asarray(EPISODE)[perm],
                                np.asarray(ANCHOR)[perm], gamma=GAMMA)
    assert not np.allclose(shuffled.step_returns, base.step_returns[perm])
    # labels: integers, strings or tuples name the same groups
    codes = {v: i for i, v in enumerate(sorted(set(EPISODE)))}
    g = gigpo_advantages(REWARD, [(t,) for t in TASK], [codes[e] for e in EPISODE], [hash(a) for a in ANCHOR],
                         gamma=GAMMA)
    np.testing.assert_allclose(g.advantages, base.advantages)
    # rewards times c > 0: std-normalised advantages unchanged (up to eps), centred ones times c
    np.testing.assert_allclose(gigpo_advantages(np.multiply(REWARD, 8.0), TASK, EPISODE, ANCHOR, gamma=GAMMA,
                                                eps=0.0).advantages,
                               gigpo_advantages(REWARD, TASK, EPISODE, ANCHOR, gamma=GAMMA, eps=0.0).advantages,
                               rtol=1e-12)
    np.testing.assert_allclose(gigpo_advantages(np.multiply(REWARD, 8.0), TASK, EPISODE, ANCHOR, gamma=GAMMA,
                                                std_norm=False).advantages,
                               8.0 * _gigpo(std_norm=False).advantages, rtol=1e-12)


def test_one_step_episodes_from_one_state_are_grpo_counted_twice():
    """One-step episodes all starting in the task's one state: the step group is the episode group and
    G = R, so A = (1 + omega) * GRPO advantage of the returns."""
    rewards = [1.0, 0.0, 0.0, 3.0, 5.0, 4.0]
    tasks = [0, 0, 0, 1, 1, 1]
    g = gigpo_advantages(rewards, tasks, range(6), tasks, step_weight=0.5)
    np.testing.assert_allclose(g.advantages, 1.5 * compute_advantages(rewards, tasks, "at_grpo"), rtol=1e-12)


def test_revisited_state_counts_once_per_visit():
    # one task, two episodes; e0 visits x twice (rewards 0 then 1), e1 once (reward 0)
    g = gigpo_advantages([0.0, 1.0, 0.0], [0, 0, 0], ["e0", "e0", "e1"], ["x", "x", "x"], gamma=1.0, eps=0.0)
    np.testing.assert_allclose(g.step_returns, [1.0, 1.0, 0.0])
    np.testing.assert_allclose(g.step_advantages, [1 / math.sqrt(2), 1 / math.sqrt(2), -math.sqrt(2)], rtol=1e-12)


def test_selectable_through_compute_advantages():
    assert "gigpo" in ESTIMATORS
    adv = compute_advantages(REWARD, TASK, "gigpo", episode_ids=EPISODE, anchor_ids=ANCHOR, gamma=GAMMA,
                             step_weight=2.0)
    np.testing.assert_allclose(adv, np.asarray(EPISODE_ADV) + 2.0 * np.asarray(STEP_ADV), rtol=1e-12)
    with pytest.raises(TypeError, match=r"needs \['anchor_ids'\]"):
        compute_advantages(REWARD, TASK, "gigpo", episode_ids=EPISODE)
    with pytest.raises(TypeError, match="only apply to estimator='gigpo'"):
        compute_advantages(REWARD, TASK, "at_grpo", gamma=0.9)
    with pytest.raises(TypeError, match="unknown option"):
        compute_advantages(REWARD, TASK, "gigpo", episode_ids=EPISODE, anchor_ids=ANCHOR, keep=None)
    with pytest.raises(ValueError, match="gamma must be in"):
        _gigpo(gamma=1.5)
    with pytest.raises(ValueError, match="differ in length"):
        gigpo_advantages([1.0, 2.0], [0, 0], [0], [0, 0])
    assert gigpo_advantages([], [], [], []).advantages.shape == (0,)


def test_defaults_are_the_options_record():
    d = GiGPOOptions()
    assert (d.step_weight, d.gamma, d.std_norm) == (1.0, 0.95, True)
    np.testing.assert_allclose(gigpo_advantages(REWARD, TASK, EPISODE, ANCHOR).advantages,
                               _gigpo(gamma=0.95, step_weight=1.0, std_norm=True).advantages)


def test_run_settings_select_gigpo_with_parallel_sampling():
    from rllib_integration.settings import ConfigError, validate_config

    with pytest.raises(ConfigError, match=r"training\.estimator: gigpo .*set sampling\.mode: parallel"):
        validate_config({"training": {"estimator": "gigpo"}}, check_paths=False)
    full = validate_config({"training": {"estimator": "gigpo", "gigpo_gamma": 1.0},
                            "sampling": {"mode": "parallel"}}, check_paths=False)
    assert (full["training"]["gigpo_gamma"], full["training"]["gigpo_step_weight"],
            full["training"]["gigpo_std_norm"]) == (1.0, GiGPOOptions().step_weight, GiGPOOptions().std_norm)
    with pytest.raises(ConfigError, match=r"training\.group_by: gigpo groups episodes by the fields other than turn"):
        validate_config({"training": {"estimator": "gigpo", "group_by": ["turn"]}, "sampling": {"mode": "parallel"}},
                        check_paths=False)
    with pytest.raises(ConfigError, match=r"training\.gigpo_gamma"):
        validate_config({"training": {"gigpo_gamma": 1.5}}, check_paths=False)


def test_vectorised(python_lines):
    """No Python loop over samples: 200,000 samples in 5-step episodes run the same lines as 2,000."""
    rng = np.random.default_rng(0)
    n = 200_000
    idx = np.arange(n)
    args = (rng.normal(size=n), idx // 40, idx // 5, rng.integers(0, 3, size=n))
    small = python_lines(gigpo_advantages, *(a[:2_000] for a in args))[1]
    big = python_lines(gigpo_advantages, *args)[1]
    assert big == small


# ------------------------------------------------------------------------ rollout samples
def _sample(task, env_idx, episode, turn, agent, prompt, reward, chosen=True):
    return Sample(prompt=prompt, prompt_token_ids=[], completion="", completion_token_ids=[], logprobs=[],
                  reward=reward, group_key=GroupKey(task, env_idx, turn, agent), policy_id="p", valid=True,
                  candidate=episode, chosen=chosen)


def test_samples_anchor_on_agent_and_prompt():
    # one task, two episodes, two roles that see the same text: the roles never share a step group
    samples = [_sample("t", 0, 0, 0, "coder", "same", 1.0), _sample("t", 0, 1, 0, "coder", "same", 0.0),
               _sample("t", 0, 0, 0, "tester", "same", 0.0), _sample("t", 0, 1, 0, "tester", "same", 0.0)]
    g = gigpo_of_samples(samples, options=GiGPOOptions(gamma=1.0), eps=0.0)
    assert g.step_groups.tolist()[0] == g.step_groups[1] != g.step_groups[2] == g.step_groups[3]
    assert anchor_id("coder", "same") != anchor_id("tester", "same") == anchor_id("tester", "same")
    # episode returns are the team's (both roles' rewards): e0 1, e1 0, per role group
    np.testing.assert_allclose(g.episode_advantages, [1, -1, 1, -1])
    np.testing.assert_allclose(g.step_returns, [1, 0, 0, 0])
    np.testing.assert_allclose(g.step_advantages, [1, -1, 0, 0])
    # `turn` in the group fields is ignored (GiGPO compares whole episodes and states, not turns)
    same = gigpo_of_samples(samples, by=("task_id", "env_idx", "turn", "agent"), options=GiGPOOptions(gamma=1.0),
                            eps=0.0)
    np.testing.assert_array_equal(same.advantages, g.advantages)
    with pytest.raises(ValueError, match="other than 'turn'"):
        gigpo_of_samples(samples, by=("turn",))
    tree = [dataclasses.replace(s, chosen=i % 2 == 0) for i, s in enumerate(samples)]
    with pytest.raises(ValueError, match="parallel sampling"):
        gigpo_of_samples(tree)


@dataclasses.dataclass(frozen=True)
class _WalkState:
    pos: int


@dataclasses.dataclass(frozen=True)
class _WalkTask:
    task_id: str


class WalkEnv(LLMTeamEnv):
    """Two roles take turns moving a token by ``len(text) % 2``; reaching 2 solves it (team 1), every move
    earns its length as local reward. Few states, so K episodes of one task revisit the same prompts."""

    roles = ("left", "right")
    default_max_turns = 2
    metadata = {"name": "gigpo_walk_test_v0", "render_modes": ["ansi"], "is_parallelizable": False}

    def load_task(self, seed, split):
        return _WalkTask(f"walk/{seed % 2}")

    def initial_state(self, task):
        return _WalkState(0)

    def prompt(self, agent):
        return f"pos={self.game_state.pos} {agent} moves"

    def apply_action(self, agent, text):
        step = len(text) % 2
        self.game_state = _WalkState(self.game_state.pos + step)
        done = self.game_state.pos >= 2
        return StepOutcome(valid=True, team=float(done), local=0.1 * step, done=done, success=done)


register_task("llm_marl_test/GiGPOWalk-v0", WalkEnv)


def _loop_reference(samples, gamma, w):
    """GiGPO written out with Python loops, straight from the definitions (an independent implementation)."""
    eps = {}
    for i, s in enumerate(samples):
        eps.setdefault((s.env_idx, s.candidate), []).append(i)
    ret = {e: sum(samples[i].reward for i in idx) for e, idx in eps.items()}
    G = [0.0] * len(samples)
    for idx in eps.values():
        run = 0.0
        for i in reversed(idx):
            run = samples[i].reward + gamma * run
            G[i] = run

    def norm(value, pool):
        m = sum(pool) / len(pool)
        sd = math.sqrt(sum((x - m) ** 2 for x in pool) / len(pool))
        return 0.0 if max(pool) == min(pool) else (value - m) / (sd + EPS)

    out = []
    for i, s in enumerate(samples):
        task = (s.task_id, s.env_idx, s.agent)
        mates = {e for e, idx in eps.items() if any((samples[j].task_id, samples[j].env_idx, samples[j].agent) == task
                                                    for j in idx)}
        a_ep = norm(ret[(s.env_idx, s.candidate)], [ret[e] for e in sorted(mates)])
        pool = [G[j] for j, t in enumerate(samples)
                if (t.task_id, t.env_idx, t.agent) == task and t.prompt == s.prompt]
        out.append(a_ep + w * norm(G[i], pool))
    return np.array(out)


def test_real_parallel_rollout_matches_the_loop_reference(tiny_model_path):
    from rllib_integration.core.backends import HFBackend, SamplingParams
    from rllib_integration.core.rollout import RolloutSampler

    backend = HFBackend({"p": tiny_model_path}, device="cpu")
    sampler = RolloutSampler(backend, "p", SamplingParams(temperature=1.0, max_new_tokens=5, seed=0), k=4,
                             chat=False)
    samples = sampler.collect_parallel([llm_marl_envs.make("llm_marl_test/GiGPOWalk-v0") for _ in range(2)],
                                       seeds=[0, 1])
    g = gigpo_of_samples(samples, options=GiGPOOptions(step_weight=0.7, gamma=0.9))
    np.testing.assert_allclose(g.advantages, _loop_reference(samples, 0.9, 0.7), rtol=1e-9, atol=1e-12)
    # the K episodes of a task start in one state: their first steps form one step group per task
    first = [i for i, s in enumerate(samples) if s.turn == 0 and s.agent == "left"]
    assert len(first) == 8 and len({int(g.step_groups[i]) for i in first}) == 2
    assert np.abs(g.advantages).sum() > 0
