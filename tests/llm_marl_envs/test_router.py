"""llm_marl/Router-v0 (llm_marl_envs/examples/router.py): the router answers or calls the lookup agent, who
reads the table; PettingZoo's tests pass on it, the order follows the router's decision, only the final answer
scores, and the router cannot learn a key's value from the training split (the split is by key)."""

import pettingzoo
import pytest
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test

import llm_marl_envs
from llm_marl_envs.base import split_of
from llm_marl_envs.examples import router

ID = "llm_marl/Router-v0"


@pytest.mark.filterwarnings("ignore::UserWarning:pettingzoo.test.api_test")
def test_pettingzoo_tests_pass():
    api_test(pettingzoo.make("aec", ID), num_cycles=20)
    parallel_api_test(pettingzoo.make("parallel", ID), num_cycles=20)
    seed_test(lambda: llm_marl_envs.make(ID), num_cycles=20)
    parallel_seed_test(lambda: llm_marl_envs.make_parallel(ID), num_cycles=20)


def play(env, *texts):
    env.reset(seed=3)
    for text in texts:
        env.step(text)
    return env


def test_the_call_pays_only_through_the_lookup_agents_answer():
    env = router.env()
    env.reset(seed=3)
    value = env.unwrapped.task.value
    env.step("0")                                                  # router: calls lookup
    assert env.agent_selection == "lookup" and env.rewards["router"] == 0.0
    assert not env.terminations["router"] and env.infos["router"]["delegated"]
    assert "table" in env.observe("lookup")["prompt"] and value in env.observe("lookup")["prompt"]
    assert value not in env.observe("router")["prompt"].split("?")[0]  # the router sees the key only
    env.step(f"{value} it is")
    assert env.rewards == {"router": 0.0, "lookup": 1.0} and env.terminations["lookup"]
    assert env.unwrapped.success and [e.agent for e in env.unwrapped.transcript] == ["router", "lookup"]

    wrong = next(v for v in router.VALUES if v != value)
    env = play(router.env(), "0", wrong)
    assert env.rewards["lookup"] == 0.0 and env.terminations["lookup"] and not env.unwrapped.success


def test_a_direct_answer_ends_the_episode_and_invalid_text_truncates_it():
    env = play(router.env())
    value = env.unwrapped.task.value
    env.step(f"  {value}")                                         # router answers itself, right
    assert env.rewards["router"] == 1.0 and env.terminations["router"] and env.unwrapped.success
    assert env.infos["router"]["delegated"] is False and len(env.unwrapped.transcript) == 1

    env = play(router.env(), "xyz")                                # no value, no digit: invalid
    assert env.rewards["router"] == -0.1 and env.truncations["router"] and not env.unwrapped.success
    env = play(router.env(), "0", "7")                             # the lookup agent cannot call
    assert env.rewards["lookup"] == -0.1 and env.truncations["lookup"]
    assert router.read_letter("Zx9e") == "9" and router.read_letter("XYZ") is None


def test_the_expert_delegates_and_solves_every_problem():
    for seed in range(20):
        env = router.env(split="eval" if seed % 2 else "train", table_size=4)
        env.reset(seed=seed)
        assert env.unwrapped.expert_action() == "0"
        for agent in env.agent_iter():
            if env.terminations[agent] or env.truncations[agent]:
                env.step(None)
            else:
                env.step(env.unwrapped.expert_action())
        assert env.unwrapped.final_infos["lookup"]["success"]


def test_the_splits_hold_disjoint_keys_with_every_value():
    seen = {"train": set(), "eval": set()}
    for split in seen:
        env = router.raw_env(split=split)
        for seed in range(200):
            env.reset(seed=seed)
            seen[split].add((env.task.key, env.task.value))
            assert split_of(env.task.key) == split
    keys = {s: {k for k, _ in pairs} for s, pairs in seen.items()}
    assert not keys["train"] & keys["eval"] and keys["train"] | keys["eval"] == set(router.KEYS)
    for key in keys["train"]:                                      # a train key comes with every value
        assert {v for k, v in seen["train"] if k == key} == set(router.VALUES)


def test_table_size_is_checked():
    env = router.raw_env(table_size=3)
    env.reset(seed=0)
    assert len(env.task.rows) == 3 and env.task.key in dict(env.task.rows)
    assert all(f"{k} {v}" in env.prompt("lookup") for k, v in env.task.rows)
    for bad in (0, 17, 2.5, True):
        with pytest.raises(ValueError, match="table_size=.* must be an integer in 1..16"):
            router.raw_env(table_size=bad)


@pytest.mark.parametrize("text, letter", [
    ("0", "0"), ("12", "1"), ("3.25", "3"), ("3abc", "3"), ("-1", "1"), ("1e5", "1"),  # any digit is the call
    ("e", "e"), ("  o.", "o"), ("E", None), ("xyz", None),
    ("\u0663", None), ("\uff13", None), ("\u00b2", None), ("\u0663 a", "a"),  # ASCII digits only call
])
def test_a_reply_is_read_by_one_character_never_a_number(text, letter):
    """Already exact before issue 40: no number's value is read (any ASCII digit is the one call, agent 0),
    so a decimal, a prefix or a Unicode digit cannot be misread as another number."""
    assert router.read_letter(text) == letter
    env = play(router.env(), text)
    assert env.infos["router"]["action_valid"] is (letter is not None)
    assert env.infos["router"].get("delegated", False) is (letter is not None and letter in router.CALL)
