"""Reward shaping (the base env's ``reward_shaping``): PettingLLMs' turn discount, hop weighting,
binary and normalized rewards, against hand-computed values; off by default (rewards unchanged)."""

from __future__ import annotations

import dataclasses

import pytest

from llm_marl_envs import LLMTeamEnv, StepOutcome
from llm_marl_envs.base import RewardShaping
from llm_marl_envs.math.verify import MathVerifyEnv

PROBLEM = [{"problem": "What is 6 * 7?", "answer": "42"}]
WRONG, RIGHT = r"\boxed{48}", r"\boxed{42}"
# (agent, turn, hop, text, unshaped reward): reject a wrong answer, then a correct answer approved
EPISODE = [("solver", 0, 0, WRONG, 0.2), ("verifier", 0, 1, "REJECT: no", 1.0),
           ("solver", 1, 2, RIGHT, 2.0), ("verifier", 1, 3, "APPROVE", 2.0)]


def rewards(**kwargs):
    env = MathVerifyEnv(problems=PROBLEM, split="all", max_attempts=3, **kwargs)
    env.reset(seed=0)
    out = []
    for agent, turn, _, text, _ in EPISODE:
        assert env.agent_selection == agent
        env.step(text)
        assert env.infos[agent]["turn"] == turn and env.rewards[agent] == env.infos[agent]["reward"]
        out.append(env.rewards[agent])
    return out, env


def test_off_by_default_is_the_unshaped_reward():
    got, env = rewards()
    assert got == [r for *_, r in EPISODE]
    assert "reward_unshaped" not in env.infos["verifier"]


@pytest.mark.parametrize("spec, expected", [
    # r * 0.5 ** (max_turns - turn), max_turns = 3
    ({"name": "turn_discount", "discount": 0.5}, [0.2 * 0.125, 1.0 * 0.125, 2.0 * 0.25, 2.0 * 0.25]),
    ("turn_discount", [0.2 * 0.99 ** 3, 0.99 ** 3, 2.0 * 0.99 ** 2, 2.0 * 0.99 ** 2]),
    # r * min(1, (hop + 1) / max_hops); default max_hops = max_turns * roles = 6
    ("hop_weighted", [0.2 / 6, 2 / 6, 2.0 * 3 / 6, 2.0 * 4 / 6]),
    ({"name": "hop_weighted", "max_hops": 2}, [0.2 / 2, 1.0, 2.0, 2.0]),
    # 1 if r > threshold else 0
    ("binary", [0.0, 1.0, 1.0, 1.0]),
    ({"name": "binary", "threshold": 1.5}, [0.0, 0.0, 1.0, 1.0]),
    # clip(r, -1, 1)
    ("normalized", [0.2, 1.0, 1.0, 1.0]),
])
def test_shaped_rewards_are_the_formulas(spec, expected):
    got, env = rewards(reward_shaping=spec)
    assert got == pytest.approx(expected)
    assert env.infos["verifier"]["reward_unshaped"] == 2.0                      # the unshaped one is kept
    assert env.infos["verifier"]["reward_parts"] == {"team": 1.0, "local": 1.0}  # parts stay unshaped
    assert [e.reward for e in env.transcript] == pytest.approx(expected)


def test_normalized_clips_negative_rewards_and_invalid_penalties():
    env = MathVerifyEnv(problems=PROBLEM, split="all", reward_shaping="normalized", invalid_penalty=3.0)
    env.reset(seed=0)
    env.step("no answer")
    assert env.rewards["solver"] == -1.0 and env.infos["solver"]["reward_unshaped"] == -3.0


def test_bad_specs_are_clear_errors():
    with pytest.raises(ValueError, match="reward_shaping='discount' is unknown"):
        MathVerifyEnv(reward_shaping="discount")
    with pytest.raises(ValueError, match="unknown key"):
        RewardShaping.from_config({"name": "binary", "gamma": 0.9})
    with pytest.raises(ValueError, match="discount=1.5"):
        RewardShaping.from_config({"name": "turn_discount", "discount": 1.5})
    with pytest.raises(ValueError, match="max_hops=0"):
        RewardShaping.from_config({"name": "hop_weighted", "max_hops": 0})
    with pytest.raises(TypeError, match="name or a mapping"):
        RewardShaping.from_config(3)


@dataclasses.dataclass(frozen=True)
class _Task:
    task_id: str


class _Count(LLMTeamEnv):
    roles = ("a", "b")
    default_max_turns = 2
    metadata = {"name": "count", "render_modes": ["ansi"], "is_parallelizable": False}

    def load_task(self, seed, split):
        return _Task(f"count/{seed}")

    def initial_state(self, task):
        return 0

    def prompt(self, agent):
        return agent

    def apply_action(self, agent, text):
        return StepOutcome(valid=True, team=1.0, local=0.5)


def test_fixed_cycle_turn_discount_and_snapshots():
    env = _Count(reward_shaping={"name": "turn_discount", "discount": 0.5}, alpha=2.0)
    env.reset(seed=0)
    got = []
    for _ in range(4):
        snap = env.snapshot()
        agent = env.agent_selection
        env.step("x")
        got.append(env.rewards[agent])
        after = env.rewards[agent]
        env.restore(snap)
        env.step("x")                                   # a restored env shapes the same way
        assert env.rewards[agent] == after
    assert got == [2.5 * 0.25, 2.5 * 0.25, 2.5 * 0.5, 2.5 * 0.5]   # turns 0, 0, 1, 1 of max_turns 2
