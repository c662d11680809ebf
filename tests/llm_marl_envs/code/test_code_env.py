"""Code-v0 on real sandbox runs: PettingZoo API/seed tests, documented rewards for known
programs and testers, episode end, prompts with mismatches, snapshots, datasets, fuzz."""

import json
import pickle
from pathlib import Path

import pettingzoo
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test

import llm_marl_envs
from llm_marl_envs.code import CodeEnv, builtin_problems

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:pettingzoo.test.api_test")
DATA = Path(__file__).parent / "data"
F = "```"

# A stdio problem with two golden tests and no public tests (runs_first then uses golden test 1).
ADD = {"id": "t-add", "title": "Add", "statement": "Read a and b; print a + b.", "kind": "stdio",
       "golden_tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "-5 5\n", "output": "0\n"}],
       "reference_solution": "a, b = map(int, input().split())\nprint(a + b)\n", "difficulty": "easy"}
# A call problem with a public test that is not golden.
TWICE = {"id": "t-twice", "statement": "Return 2 * x.", "kind": "call", "fn_name": "twice",
         "starter": "def twice(x):\n    ...\n",
         "golden_tests": [{"args": [1], "expected": 2}, {"args": [0], "expected": 0}, {"args": [-4], "expected": -8}],
         "public_tests": [{"args": [5], "expected": 10}],
         "reference_solution": "def twice(x):\n    return 2 * x\n"}

CORRECT = f"Here:\n{F}python\na, b = map(int, input().split())\nprint(a + b)\n{F}"
HALF = f"{F}python\na, b = map(int, input().split())\nprint(a + b if a > 0 else 1)\n{F}"  # passes test 1 only
WRONG = f"{F}python\nprint(42)\n{F}"
CRASH = f"{F}python\nraise ValueError('boom')\n{F}"
HANG = f"{F}python\nwhile True:\n    pass\n{F}"
FLOOD = f"{F}python\nwhile True:\n    print('x' * 10000)\n{F}"
SYNTAX = f"{F}python\nprint(1 +\n{F}"
GOOD_TESTS = f'{F}json\n[{{"input": "2 2\\n", "output": "4\\n"}}, {{"input": "0 7\\n", "output": "7\\n"}}]\n{F}'
WRONG_TESTS = f'{F}json\n[{{"input": "2 2\\n", "output": "5\\n"}}, {{"input": "0 7\\n", "output": "7\\n"}}]\n{F}'


@pytest.fixture(scope="module")
def box(make_sandbox):
    sb = make_sandbox()
    yield sb
    sb.close()


def make(box, problems=(ADD,), **kw):
    kw.setdefault("test_timeout_s", 2.0)  # generous: the CPU is shared; only the hang test waits it out
    env = CodeEnv(problems=list(problems), sandbox=box, **kw)
    env.reset(seed=0)
    return env


def step(env, text):
    agent = env.agent_selection
    env.step(text)
    info = env.infos[agent]
    assert "env_error" not in info, info  # the env itself never failed
    return env.rewards[agent], info


# ---------------------------------------------------------------------------- PettingZoo
def test_registered_and_pettingzoo_api_tests():
    assert "llm_marl/Code-v0" in llm_marl_envs.registered_tasks()
    api_test(pettingzoo.make("aec", "llm_marl/Code-v0"), num_cycles=20)
    parallel_api_test(pettingzoo.make("parallel", "llm_marl/Code-v0"), num_cycles=20)
    seed_test(lambda: llm_marl_envs.make("Code-v0"), num_cycles=20)
    parallel_seed_test(lambda: llm_marl_envs.make_parallel("Code-v0"), num_cycles=20)


def test_seeds_visit_the_split_and_splits_are_disjoint():
    train, evals = CodeEnv(split="train"), CodeEnv(split="eval")
    assert {p.id for p in train.problems}.isdisjoint({p.id for p in evals.problems})
    assert len(train.problems) + len(evals.problems) == len(builtin_problems())
    seen = set()
    for s in range(len(train.problems)):
        train.reset(seed=s)
        seen.add(train.task.id)
        assert train.infos["coder"]["task_id"] == f"code/{train.task.id}"
    assert seen == {p.id for p in train.problems}
    with pytest.raises(ValueError, match="unknown reward_weights"):
        CodeEnv(reward_weights={"coder_bulid": 1.0})
    with pytest.raises(ValueError, match="either problems"):
        CodeEnv(problems=[ADD], dataset={"format": "jsonl", "path": "x"})


# ---------------------------------------------------------------------------- coder rewards
@pytest.mark.parametrize("program, reward, builds, runs, golden", [
    (CORRECT, 1.0 + 0.1 + 0.1 + 0.8, True, True, 1.0),
    (HALF, 0.5 + 0.1 + 0.1 + 0.8 * 0.5, True, True, 0.5),
    (WRONG, 0.1 + 0.1, True, True, 0.0),
    (CRASH, 0.1, True, False, 0.0),
    (HANG, 0.1, True, False, 0.0),
    (FLOOD, 0.1, True, False, 0.0),
    (SYNTAX, 0.0, False, False, 0.0),
], ids=["correct", "half", "wrong", "crash", "hang", "flood", "syntax"])
def test_coder_rewards_for_known_programs(box, program, reward, builds, runs, golden):
    env = make(box)
    r, info = step(env, program)
    assert info["action_valid"] and info["builds"] is builds and info["runs_first"] is runs
    assert info["golden_pass_rate"] == golden and info["reward_parts"]["team"] == golden
    assert r == pytest.approx(reward)
    assert info["solved"] is (golden == 1.0)
    statuses = env.game_state.golden.statuses if env.game_state.golden else ()
    expected_status = {"hang": "timeout", "flood": "output_limit", "crash": "error"}
    for name, status in expected_status.items():
        if program == globals()[name.upper()]:
            assert set(statuses) == {status}


def test_coder_without_a_program_is_invalid(box):
    env = make(box)
    r, info = step(env, "I would sort the list and then think about it.")
    assert not info["action_valid"] and r == pytest.approx(-0.1)
    assert "The coder has no program yet." in env.observe("tester")["prompt"]
    step(env, GOOD_TESTS)
    prompt = env.observe("coder")["prompt"]
    assert "Your last answer had no Python program." in prompt and "one ```python code block" in prompt


def test_reward_weights_and_alpha_are_configurable(box):
    env = make(box, alpha=0.5, reward_weights={"coder_build": 0.0, "coder_runs": 0.5, "coder_golden": 0.5})
    r, _ = step(env, HALF)
    assert r == pytest.approx(0.5 * 0.5 + 0.5 + 0.5 * 0.5)


# ---------------------------------------------------------------------------- tester rewards, episode end
def test_correct_team_ends_with_success(box):
    env = make(box)
    step(env, CORRECT)
    r, info = step(env, GOOD_TESTS)
    assert info["tests_parsed"] == 2 and info["tests_run"] and info["tests_correct"] == 1.0
    assert r == pytest.approx(1.0 + 0.2 + 0.8)
    assert all(env.terminations.values()) and not any(env.truncations.values())
    assert env.infos["coder"]["success"] is True and env.infos["tester"]["episode_end"] is True


def test_tester_with_wrong_expectations(box):
    env = make(box)
    step(env, CORRECT)
    r, info = step(env, WRONG_TESTS)
    assert info["tests_run"] and info["tests_correct"] == 0.5
    assert r == pytest.approx(1.0 + 0.2 + 0.8 * 0.5)
    assert not any(env.terminations.values())  # the correct coder fails the wrong test: play on
    # the next prompts show each role the mismatch it needs
    coder_prompt = env.observe("coder")["prompt"]
    assert "passed 1 of 2" in coder_prompt and "expected: '5\\n'" in coder_prompt and "got: '4\\n'" in coder_prompt
    tester_prompt = env.observe("tester")["prompt"]
    assert "test 1: the reference solution disagrees with your expected output" in tester_prompt
    assert "reference solution gives" not in tester_prompt


def test_feedback_is_truncated(box):
    env = make(box, feedback_chars=50)
    step(env, WRONG)
    step(env, json.dumps([{"input": "1 2\n", "output": "9" * 1000}]))
    prompt = env.observe("coder")["prompt"]
    assert "9" * 50 + "... [950 more characters]" in prompt and "9" * 51 not in prompt
    assert "got: '42\\n'" in prompt


def test_weak_tests_end_the_episode_without_success(box):
    env = make(box)
    step(env, HALF)
    r, info = step(env, f'{F}json\n[{{"input": "1 1\\n", "output": "2\\n"}}]\n{F}')
    assert env.terminations["tester"] and env.infos["tester"]["success"] is False
    assert info["solved"] is False and r == pytest.approx(0.5 + 0.2 + 0.8)


def test_tester_input_the_reference_cannot_run(box):
    env = make(box)
    step(env, CORRECT)
    r, info = step(env, "Input:\nnot numbers\nOutput:\n3\n\nInput:\n1 1\nOutput:\n2\n")
    assert info["tests_parsed"] == 2 and info["tests_run"] is False and info["tests_correct"] == 0.5
    assert r == pytest.approx(1.0 + 0.8 * 0.5)
    assert "fails on this input (error)" in env.observe("tester")["prompt"]


def test_tester_garbage_is_invalid_and_truncation_at_max_turns(box):
    env = make(box, max_turns=2)
    step(env, WRONG)
    r, info = step(env, "looks fine to me")
    assert not info["action_valid"] and r == pytest.approx(0.0 - 0.1)
    assert "no readable tests" in env.observe("tester")["prompt"]
    step(env, WRONG)
    step(env, "still nothing")
    assert all(env.truncations.values()) and env.infos["coder"]["success"] is False
    assert env.infos["tester"]["turn"] == 1


def test_call_problem_rewards_solution_class_and_public_first(box):
    env = make(box, problems=[TWICE])
    prompt = env.observe("coder")["prompt"]
    assert "twice(5) == 10" in prompt and "def twice(x):" in prompt
    r, info = step(env, f"{F}python\nclass Solution:\n    def twice(self, x):\n        return x + x\n{F}")
    assert info["runs_first"] and info["golden_pass_rate"] == 1.0 and r == pytest.approx(2.0)
    r, info = step(env, 'Input: twice(3)\nOutput: 6\nInput: 7\nOutput: 15\nInput: x = 2\nOutput: 4\n')
    assert info["tests_parsed"] == 3 and info["tests_correct"] == pytest.approx(2 / 3)
    assert r == pytest.approx(1.0 + 0.2 + 0.8 * 2 / 3)
    prompt = env.observe("coder")["prompt"]
    assert "Test 3. twice(x=2) == 4" in prompt and "arguments: '7'; expected: '15'; got: '14'" in prompt
    env = make(box, problems=[TWICE])
    r, info = step(env, f"{F}python\ndef twice(x):\n    raise KeyError(x)\n{F}")
    assert not info["runs_first"] and r == pytest.approx(0.1)
    assert "KeyError" in env.game_state.golden.mismatches[0].actual


def test_no_reference_uses_a_golden_passing_coder_program(box):
    problem = {k: v for k, v in ADD.items() if k != "reference_solution"}
    env = make(box, problems=[problem])
    step(env, WRONG)
    r, info = step(env, GOOD_TESTS)
    assert info["reference"] == "none" and info["tests_correct"] == 0.0 and r == pytest.approx(0.2)
    step(env, CORRECT)
    r, info = step(env, WRONG_TESTS)
    assert info["reference"] == "coder" and info["tests_correct"] == 0.5


def test_dataset_config_plays_livecodebench_functional(box):
    env = CodeEnv(dataset={"format": "livecodebench", "path": str(DATA / "code_livecodebench.jsonl"), "split": "all"},
                  sandbox=box, test_timeout_s=2.0)
    ids = []
    for s in range(2):
        env.reset(seed=s)
        ids.append(env.task.id)
    assert sorted(ids) == ["lcb-9901", "lcb-abc900_a"]
    env.reset(seed=ids.index("lcb-9901"))
    program = ("class Solution:\n    def sumSquares(self, nums, k):\n        return sum(x * x for x in nums) + k\n")
    r, info = step(env, f"{F}python\n{program}{F}")
    assert info["golden_pass_rate"] == 1.0 and r == pytest.approx(2.0)


# ---------------------------------------------------------------------------- snapshots
def test_snapshot_restore_replays_exactly(box):
    env = make(box)
    step(env, HALF)
    snap = pickle.loads(pickle.dumps(env.snapshot()))
    first = step(env, WRONG_TESTS)
    prompt = env.observe("coder")["prompt"]
    env.restore(snap)
    assert env.agent_selection == "tester"
    assert step(env, WRONG_TESTS) == first and env.observe("coder")["prompt"] == prompt
    env.restore(snap)
    r, _ = step(env, GOOD_TESTS)
    assert r == pytest.approx(0.5 + 0.2 + 0.8)


def test_env_pickles_and_plays_on(box):
    env = make(box)
    step(env, HALF)
    again = pickle.loads(pickle.dumps(env))
    assert again.observe("tester") == env.observe("tester")
    assert step(again, GOOD_TESTS) == step(env, GOOD_TESTS)


# ---------------------------------------------------------------------------- fuzz
CODE_BITS = st.sampled_from(["```python\n", "```json\n", "```\n", "def f(x):\n", "print(", "input()", "Input:",
                             "Output:", "[", "]", "{", "}", '"input"', '"output"', '"args"', '"expected"', ":", ",",
                             "\n", "0", "x = 1\n", "\x00", "é", "    "])
TEXT = st.one_of(st.text(max_size=300), st.lists(CODE_BITS, max_size=30).map("".join))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(TEXT, min_size=1, max_size=6), st.sampled_from([ADD, TWICE]))
def test_fuzz_any_text_for_any_role_never_raises(box, texts, problem):
    env = CodeEnv(problems=[problem], sandbox=box, test_timeout_s=2.0, max_turns=3)
    env.reset(seed=0)
    for text in texts:
        if env.terminations[env.agent_selection] or env.truncations[env.agent_selection]:
            break
        agent = env.agent_selection
        env.step(text)
        info = env.infos[agent]
        assert "env_error" not in info
        assert isinstance(env.rewards[agent], float)
        lo = -0.1 - 1e-9
        assert lo <= info["reward_parts"]["local"] <= 1.0 + 1e-9 and 0.0 <= info["reward_parts"]["team"] <= 1.0
        for a in env.possible_agents:
            assert isinstance(env.observe(a)["prompt"], str)


def test_test_runs_count_as_sandbox_time(box):
    # Code-v0 runs programs through run_tests, not run_program: its time was not counted (sandbox_s 0)
    sleepy = f"{F}python\nimport time\ntime.sleep(0.2)\na, b = map(int, input().split())\nprint(a + b)\n{F}"
    env = make(box)
    assert env.sandbox_seconds == 0.0
    step(env, sleepy)  # the coder's program against golden test 1
    after_coder = env.sandbox_seconds
    assert after_coder >= 0.2
    step(env, GOOD_TESTS)  # the tester's two tests, each against the coder's program and the reference
    assert env.sandbox_seconds >= after_coder + 0.2
