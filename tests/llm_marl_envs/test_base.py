"""The shared base env, exercised through the small example task of docs/adding_a_task.md."""

import copy
import pickle
import re

import pettingzoo
import pytest
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test

import llm_marl_envs
from llm_marl_envs import split_of
from llm_marl_envs.examples.arithmetic import ArithmeticEnv, parse_answer

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:pettingzoo.test.api_test")


def test_example_task_passes_pettingzoo_api_tests():
    api_test(pettingzoo.make("aec", "llm_marl/Arithmetic-v0"), num_cycles=10)
    parallel_api_test(pettingzoo.make("parallel", "llm_marl/Arithmetic-v0"), num_cycles=10)
    seed_test(lambda: llm_marl_envs.make("Arithmetic-v0"), num_cycles=10)
    parallel_seed_test(lambda: llm_marl_envs.make_parallel("Arithmetic-v0"), num_cycles=10)


def test_rewards_infos_and_termination_of_a_known_episode():
    env = ArithmeticEnv(alpha=0.5, invalid_penalty=0.25)
    env.reset(seed=3)
    value = env.task.value
    env.step("I am not sure")                       # solver: invalid
    assert env.rewards["solver"] == -0.25
    assert env.infos["solver"]["action_valid"] is False
    assert env.infos["solver"]["reward_parts"] == {"team": 0.0, "local": -0.25}
    env.step(f"Answer: {value + 1}")                 # checker: wrong, turn 0 ends
    assert env.rewards == {"solver": 0.0, "checker": 0.0}
    assert env.turn == 1 and not any(env.terminations.values())
    env.step(f"Answer: {value}")                     # solver: right
    assert env.rewards["solver"] == 1.0 and env.infos["solver"]["turn"] == 1
    assert f"The solver answered: {value}" in env.observe("checker")["prompt"]
    env.step(f"work...\nAnswer: {value}")            # checker: right -> team success
    assert env.rewards["checker"] == 0.5 * 1.0 + 0.0
    assert all(env.terminations.values()) and not any(env.truncations.values())
    assert env.infos["checker"]["success"] is True and env.infos["solver"]["success"] is True
    assert env.infos["checker"]["task_id"] == env.task.task_id
    for _ in range(2):
        env.step(None)
    assert env.agents == []


@pytest.mark.parametrize("text, value", [
    ("Answer: 3", 3), ("answer=-3", -3), ("Answer:3", 3), ("Answer: 21.", 21), ("Answer: 21!", 21),
    ("Answer: 3, since 1 + 2 = 3", 3), ("Answer: 3 apples", 3), ("work...\nAnswer: 7\n", 7),
    ("**Answer: 3**", 3), ("(Answer: 3)", 3),
    ("Answer: 5\nFinal answer: x", 5),            # the last label followed by a number is read
    # a number is read only when the whole token is an integer: never its leading digits
    ("Answer: 3.25", None), ("Answer: 3.0", None), ("Answer: 3abc", None), ("Answer: 12x", None),
    ("Answer: 3/4", None), ("Answer: 1e5", None), ("Answer: 3,000", None), ("Answer: 3-4", None),
    ("Answer: 3_000", None), ("Answer: 0x10", None), ("Answer: --3", None), ("Answer: +3", None),
    ("Answer: .5", None), ("Answer: 3 + 4", None), ("Answer: 3 000", None),
    ("Answer: \u0663", None), ("Answer: \uff13", None), ("Answer: 3\u0663", None),  # ASCII digits only
    ("Answer: 5\nAnswer: 3.25", None),            # the last answer is malformed: not the earlier 5
    # over 4,000 digits: invalid, not int()'s ValueError (its limit is 4,300)
    pytest.param("Answer: " + "7" * 4301, None, id="4301-digits"),
    pytest.param("Answer: -" + "7" * 4001, None, id="minus-4001-digits"),
    pytest.param("Answer: " + "7" * 4000, int("7" * 4000), id="4000-digits"),
])
def test_answer_is_read_only_as_a_whole_integer(text, value):
    assert parse_answer(text) == value
    env = ArithmeticEnv()
    env.reset(seed=0)
    env.step(text)
    assert env.infos["solver"]["action_valid"] is (value is not None)


def test_max_turns_truncates_and_timeout_is_not_success():
    env = ArithmeticEnv(max_turns=1)
    env.reset(seed=0)
    env.step("Answer: -1")
    env.step("Answer: -1")
    assert all(env.truncations.values()) and not any(env.terminations.values())
    assert env.infos["solver"]["success"] is False and env.infos["checker"]["episode_end"] is True


def test_non_string_actions_are_invalid_not_errors():
    env = ArithmeticEnv()
    env.reset(seed=0)
    for action in (None, 42, ["Answer: 1"], b"\xff\xfe"):
        agent = env.agent_selection
        env.step(action)
        assert env.infos[agent]["action_valid"] is False


def test_snapshot_restore_is_exact_and_picklable():
    env = ArithmeticEnv()
    env.reset(seed=5)
    env.step("Answer: 1")
    snap = env.snapshot()
    before = (env.observe("checker"), dict(env.rewards), copy.deepcopy(env.infos), env.agent_selection)
    env.step(f"Answer: {env.task.value}")
    env.step(None)
    env.restore(pickle.loads(pickle.dumps(snap)))
    assert (env.observe("checker"), env.rewards, env.infos, env.agent_selection) == before
    other = ArithmeticEnv()
    other.restore(snap)
    assert other.observe("checker") == before[0]


def test_reset_without_seed_follows_the_seeded_rng():
    a, b = ArithmeticEnv(), ArithmeticEnv()
    a.reset(seed=11)
    b.reset(seed=11)
    a.reset()
    b.reset()
    assert a.task == b.task


@pytest.mark.parametrize("seed", range(30))
def test_example_splits_are_disjoint(seed):
    train, ev = ArithmeticEnv(split="train"), ArithmeticEnv(split="eval")
    train.reset(seed=seed)
    ev.reset(seed=seed)
    assert split_of(train.task.expression) == "train" and split_of(ev.task.expression) == "eval"
    assert train.task.task_id != ev.task.task_id


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="split"):
        ArithmeticEnv(split="test")
    with pytest.raises(ValueError, match="max_turns"):
        ArithmeticEnv(max_turns=0)
    with pytest.raises(ValueError, match="render_mode"):
        ArithmeticEnv(render_mode="rgb_array")


def test_docs_show_the_example_task_verbatim():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    source = (root / "llm_marl_envs" / "examples" / "arithmetic.py").read_text()
    doc = (root / "docs" / "adding_a_task.md").read_text()
    assert f"```python\n{source}```" in doc


def test_docs_usage_snippet_runs():
    env = pettingzoo.make("aec", "llm_marl/Arithmetic-v0", max_operand=9)
    env.reset(seed=0)
    value = env.task.value
    env.step(f"Answer: {value}")
    env.step(f"Answer: {value}")
    assert env.rewards["checker"] == 1.0 and all(env.terminations.values())


def test_expression_templates_and_the_expert():
    env = ArithmeticEnv(expression="(a - b) * c", min_operand=2, max_operand=5)
    for seed in range(20):
        env.reset(seed=seed)
        a, b, c = (int(x) for x in re.findall(r"\d+", env.task.expression))
        assert all(2 <= v <= 5 for v in (a, b, c)) and env.task.value == (a - b) * c
        assert env.expert_action("solver") == f"{env.task.expression} = {env.task.value}\nAnswer: {env.task.value}"
        env.step(env.expert_action())
        env.step(env.expert_action())
        assert env.rewards["checker"] == 1.0 and all(env.terminations.values())
    default = ArithmeticEnv(max_operand=9)
    default.reset(seed=0)
    assert default.task.expression == "5 + 9 * 9"  # the default template draws what the old code drew
    # the prompt text is built from the tree: a comment's word is no operand (KeyError 'sum' before), Python's spacing
    for template, shape in [("a + b  # sum", r"\d+ \+ \d+"), ("( a-b )*c   # the product", r"\(\d+ - \d+\) \* \d+")]:
        spaced = ArithmeticEnv(expression=template)
        spaced.reset(seed=0)
        assert re.fullmatch(shape, spaced.task.expression), spaced.task.expression
    # refused at construction, not at the first reset (KeyError, RecursionError, MemoryError, str() of the value before)
    for bad in ["a ** b", "__import__('os')", "a / b", "a +", "a.b", "f(a)",
                "a + 0x10", "a + 1_000", "a+0b1", "a + 1.5",                   # decimal integers only
                "+".join(["a"] * 1200), "-" * 100_000 + "a", "-" * 300 + "a",  # too deep to evaluate or parse
                "(a - b) * " + "9" * 4000]:                                     # values over 4,000 digits
        with pytest.raises(ValueError, match="expression"):
            ArithmeticEnv(expression=bad, max_operand=10**6)
    with pytest.raises(ValueError, match="min_operand"):
        ArithmeticEnv(min_operand=5, max_operand=3)
    # fewer than 16 distinct problems: no train and eval split (RuntimeError "no train problem found" at reset before)
    for template, low, high in [("a", 5, 5), ("a", 1, 15), ("a + b", 1, 3), ("1 + 2", 1, 20)]:
        with pytest.raises(ValueError, match="min_operand"):
            ArithmeticEnv(expression=template, min_operand=low, max_operand=high)
    ArithmeticEnv(expression="a", min_operand=1, max_operand=16).reset(seed=0)


def test_example_ids_are_known_without_importing_their_modules():
    """``llm_marl/Arithmetic-v0`` and ``llm_marl/Router-v0`` are made by id after ``import llm_marl_envs`` alone,
    which imports neither example module (each is imported on its first make); importing one afterwards
    registers nothing new (no PettingZoo "Overriding environment" warning)."""
    import subprocess
    import sys

    code = """
import sys, warnings
warnings.simplefilter("error")
import pettingzoo
import llm_marl_envs
examples = ("llm_marl_envs.examples.arithmetic", "llm_marl_envs.examples.router")
assert not set(examples) & set(sys.modules), "imported eagerly"
assert {"llm_marl/Arithmetic-v0", "llm_marl/Router-v0"} <= set(llm_marl_envs.registered_tasks())
router = pettingzoo.make("aec", "llm_marl/Router-v0")
assert type(router).__module__ == examples[1] and examples[0] not in sys.modules
from llm_marl_envs.examples.arithmetic import ArithmeticEnv   # registers Arithmetic-v0 again: no warning
assert type(pettingzoo.make("parallel", "llm_marl/Arithmetic-v0").unwrapped) is ArithmeticEnv
assert type(llm_marl_envs.make("Arithmetic-v0")) is ArithmeticEnv
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
