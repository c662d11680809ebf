"""Math-v0: PettingZoo API/seed tests, documented rewards with known outputs, fuzz, splits, snapshots."""

from __future__ import annotations

import pickle
import warnings

import pettingzoo
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test

import llm_marl_envs  # noqa: F401
import llm_marl_envs.math  # noqa: F401  (registers llm_marl/Math-v0)
from llm_marl_envs.math import is_equivalent
from llm_marl_envs.math.env import MathEnv, parse_reasoner_answer, parse_tool_output

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:pettingzoo.test.api_test")

ID = "llm_marl/Math-v0"
PROBLEM = {"id": "p-42", "problem": "What is $6 \\times 7$?", "answer": "42"}


@pytest.fixture(scope="module")
def sandbox(make_sandbox):
    box = make_sandbox(memory_mb=512)
    yield box
    box.close()


def fixed_env(sandbox, **kw) -> MathEnv:
    kw.setdefault("tool_timeout_s", 6.0)  # generous: the CPU may be shared
    env = pettingzoo.make("aec", ID, problems=[PROBLEM], split="all", sandbox=sandbox, **kw)
    env.reset(seed=0)
    return env


def code(body: str) -> str:
    return f"Here is my program.\n```python\n{body}\n```\n"


# ------------------------------------------------------------------ PettingZoo's own tests
def test_pettingzoo_api_parallel_and_seed_tests(sandbox):
    api_test(pettingzoo.make("aec", ID, sandbox=sandbox), num_cycles=20)
    seed_test(lambda: pettingzoo.make("aec", ID, sandbox=sandbox), num_cycles=20)
    parallel_api_test(pettingzoo.make("parallel", ID, sandbox=sandbox), num_cycles=20)
    parallel_seed_test(lambda: pettingzoo.make("parallel", ID, sandbox=sandbox), num_cycles=20)


def test_make_shortcut_and_roles(sandbox):
    env = llm_marl_envs.make("Math-v0", sandbox=sandbox)
    assert isinstance(env, MathEnv)
    assert env.possible_agents == ["reasoner", "tool"]
    env.reset(seed=1)
    assert "\\boxed" in env.observe("reasoner")["prompt"]
    assert "```python" in env.observe("tool")["prompt"]


# ------------------------------------------------------------------ rewards with known outputs
def test_correct_answers_agree_and_end_the_episode(sandbox):
    env = fixed_env(sandbox)
    env.step("6 times 7 is \\boxed{42}.")
    assert env.rewards["reasoner"] == pytest.approx(1.0 * 1 + (0.2 + 0.8))
    assert env.infos["reasoner"]["reward_parts"] == {"team": 1.0, "local": pytest.approx(1.0)}
    assert env.infos["reasoner"]["answer"] == "42" and env.infos["reasoner"]["correct"] is True
    env.step(code("print('thinking...')\nprint(6 * 7)"))
    info = env.infos["tool"]
    assert info["status"] == "ok" and info["answer"] == "42" and info["agree"] is True
    assert env.rewards["tool"] == pytest.approx(1.0 + 0.1 + 0.1 + 0.8)
    assert all(env.terminations.values()) and not any(env.truncations.values())
    assert info["success"] is True and info["episode_end"] is True


def test_equivalent_forms_agree(sandbox):
    env = fixed_env(sandbox)
    env.step("\\boxed{42.0}")
    env.step(code("from fractions import Fraction\nprint(float(Fraction(84, 2)))"))
    assert env.infos["tool"]["agree"] and env.infos["tool"]["success"]


def test_wrong_answers(sandbox):
    env = fixed_env(sandbox)
    env.step("\\boxed{41}")
    assert env.infos["reasoner"]["reward_parts"] == {"team": 0.0, "local": pytest.approx(0.2)}
    env.step(code("print(43)"))
    assert env.infos["tool"]["reward_parts"] == {"team": 0.0, "local": pytest.approx(0.2)}
    assert not any(env.terminations.values())
    prompt = env.observe("reasoner")["prompt"]
    assert "Your previous answer: 41" in prompt and "latest answer (printed by its program): 43" in prompt
    # the reasoner now gives the right answer: team = 1 (the team answer is the latest one)
    env.step("\\boxed{42}")
    assert env.rewards["reasoner"] == pytest.approx(2.0)
    assert "The reasoner's latest answer: 42" in env.observe("tool")["prompt"]


def test_wrong_agreement_ends_without_success(sandbox):
    env = fixed_env(sandbox)
    env.step("\\boxed{41}")
    env.step(code("print(41)"))
    assert all(env.terminations.values())
    assert env.infos["tool"]["success"] is False
    assert env.infos["tool"]["reward_parts"]["team"] == 0.0


def test_crashing_code(sandbox):
    env = fixed_env(sandbox)
    env.step("\\boxed{42}")
    env.step(code("print(42)\nraise ValueError('boom')"))
    info = env.infos["tool"]
    assert info["status"] == "error" and info["runs"] is False and info["answer"] is None
    assert info["action_valid"] is True
    # no tool answer: the team answer is still the reasoner's correct 42
    assert info["reward_parts"] == {"team": 1.0, "local": 0.0}
    assert not any(env.terminations.values())
    assert "ValueError" in env.observe("tool")["prompt"]


def test_hanging_code_times_out(sandbox):
    env = fixed_env(sandbox, rewards={"team_correct": 0.5}, tool_timeout_s=1.0)
    env.step("no box here")
    assert env.infos["reasoner"]["action_valid"] is False
    assert env.infos["reasoner"]["reward_parts"] == {"team": 0.0, "local": pytest.approx(-0.1)}
    env.step(code("while True:\n    pass"))
    info = env.infos["tool"]
    assert info["status"] == "timeout" and info["reward_parts"] == {"team": 0.0, "local": 0.0}


def test_output_flood_is_cut(sandbox):
    env = fixed_env(sandbox)
    env.step("\\boxed{42}")
    env.step(code("import sys\nwhile True:\n    sys.stdout.write('42\\n' * 10000)"))
    info = env.infos["tool"]
    assert info["status"] == "output_limit" and info["answer"] is None
    assert info["reward_parts"]["local"] == 0.0
    assert len(env.observe("tool")["prompt"]) < 5000  # the flood is truncated in the prompt


def test_no_code_block_is_invalid_and_truncation_at_max_turns(sandbox):
    env = fixed_env(sandbox, max_turns=2, invalid_penalty=0.25)
    for _ in range(2):
        env.step("\\boxed{7}")
        env.step("I would compute it but I forgot the code block. 42")
        assert env.infos["tool"]["action_valid"] is False
        assert env.infos["tool"]["reward_parts"]["local"] == pytest.approx(-0.25)
    assert all(env.truncations.values()) and env.infos["reasoner"]["success"] is False


def test_custom_reward_weights_and_alpha(sandbox):
    env = fixed_env(sandbox, alpha=0.5, rewards={"reasoner_format": 0.5, "reasoner_correct": 0.5,
                                                  "tool_runs": 0.3, "tool_prints": 0.2, "tool_correct": 0.5})
    env.step("\\boxed{42}")
    assert env.rewards["reasoner"] == pytest.approx(0.5 * 1.0 + 1.0)
    env.step(code("print(42)"))
    assert env.rewards["tool"] == pytest.approx(0.5 * 1.0 + 0.3 + 0.2 + 0.5)
    with pytest.raises(ValueError, match="unknown reward weight"):
        MathEnv(rewards={"bonus": 1.0})


def test_parsers():
    assert parse_reasoner_answer("so \\boxed{1} then \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert parse_reasoner_answer("\\boxed{ }") is None and parse_reasoner_answer("42") is None
    assert parse_tool_output("a\n42\n\n  \n") == "42" and parse_tool_output("\n\n") is None


@pytest.mark.parametrize("stdout, answer", [
    ("a\n3.25\n", "3.25"), ("x = 3abc\n", "x = 3abc"),
    pytest.param("1" * 600 + "\n", "1" * 600, id="600-digits"),
    pytest.param("1" * 500 + "7", "1" * 500 + "7", id="501-digits"),
    pytest.param("1" * 20_001, None, id="over-MAX_INPUT_CHARS"),
])
def test_tool_answer_is_the_whole_last_line(stdout, answer):
    """Issue 40: the last line was cut to 500 characters, so a long number was read as its prefix (a wrong
    answer equal to a 500-digit reference, a right one of 600 digits wrong); a line too long to read whole
    (over MAX_INPUT_CHARS, what the checker reads) is no answer."""
    assert parse_tool_output(stdout) == answer
    if answer is not None and len(answer) > 500:
        assert is_equivalent(parse_tool_output(stdout), answer)
        assert not is_equivalent(parse_tool_output(stdout), answer[:500])  # never its prefix


def test_parsers_extraction_modes():
    text = "I think \\boxed{2} and also \\boxed{3}; so the answer is 5."
    assert parse_reasoner_answer(text) == "3"
    assert parse_reasoner_answer(text, "all_boxed") == "2, 3"
    assert parse_reasoner_answer(text, "answer_phrase") == "3"  # a boxed answer wins over a phrase
    assert parse_reasoner_answer("So the final answer is $\\frac{1}{2}$.", "answer_phrase") == "\\frac{1}{2}"
    assert parse_reasoner_answer("Answer: 42\nthanks", "answer_phrase") == "42"
    assert parse_reasoner_answer("So the answer is 42.", "last_boxed") is None
    with pytest.raises(ValueError, match="answer extraction mode"):
        parse_reasoner_answer("\\boxed{1}", "first_boxed")


@pytest.mark.parametrize("text, answer", [
    ("Answer $9$", "9"),
    ("Answer $ \\frac{1}{2} $ at last", "\\frac{1}{2}"),
    ("so\nAnswer \\[ \n 9 \n \\]", "9"),
    ("The answer is $$x^2$$.", "x^2"),
    ("Final Answer: The largest $n$ is 34.", "34"),
    ("**Final Answer:** 12<|im_end|>", "12"),
    ("The answer is 42.", "42"),
])
def test_answer_phrase_mode_reads_phrases_as_the_checker_does(text, answer):
    """The env's ``answer_phrase`` mode and ``final_answer`` (what ``is_equivalent`` reads) share one
    reading of an answer phrase; the default mode still reads boxes only."""
    from llm_marl_envs.math.extraction import final_answer

    assert parse_reasoner_answer(text, "answer_phrase") == answer
    assert final_answer(text) == answer
    assert parse_reasoner_answer(text) is None


def test_answer_phrase_mode_needs_a_phrase_where_the_checker_reads_prose():
    """The other way: without a phrase the mode gives no answer (an invalid action), while the checker
    reads the value the prose's last sentence states."""
    from llm_marl_envs.math.extraction import final_answer

    text = "Adding the parts, the total is $\\frac72$."
    assert parse_reasoner_answer(text, "answer_phrase") is None
    assert final_answer(text) == "\\frac72"
    assert parse_reasoner_answer("The answer is", "answer_phrase") is None


def test_answer_extraction_option(sandbox):
    env = fixed_env(sandbox, answer_extraction="answer_phrase")
    env.step("6 times 7 is 42, so the answer is 42.")
    info = env.infos["reasoner"]
    assert info["action_valid"] and info["answer"] == "42" and info["correct"]
    env = fixed_env(sandbox)  # default: last \boxed{} only, the phrase is not read
    env.step("6 times 7 is 42, so the answer is 42.")
    assert env.infos["reasoner"]["action_valid"] is False
    two = {"id": "p-roots", "problem": "Solve $x^2 - 5x + 6 = 0$.", "answer": "2, 3"}
    env = pettingzoo.make("aec", ID, problems=[two], split="all", sandbox=sandbox, answer_extraction="all_boxed")
    env.reset(seed=0)
    env.step("$x = \\boxed{3}$ or $x = \\boxed{2}$")
    assert env.infos["reasoner"]["answer"] == "3, 2" and env.infos["reasoner"]["correct"]
    with pytest.raises(ValueError, match="answer_extraction='first'.*last_boxed"):
        MathEnv(answer_extraction="first")


# ------------------------------------------------------------------ problems, datasets, splits
def test_train_and_eval_tasks_are_disjoint():
    env = MathEnv()
    train = {env.load_task(s, "train").problem for s in range(150)}
    evals = {env.load_task(s, "eval").problem for s in range(150)}
    assert not train & evals and len(train) > 50


def test_seeded_reset_is_deterministic(sandbox):
    a, b = MathEnv(sandbox=sandbox), MathEnv(sandbox=sandbox)
    a.reset(seed=11)
    b.reset(seed=11)
    assert a.task == b.task and a.observe("reasoner") == b.observe("reasoner")


def test_dataset_config_and_problem_errors(tmp_path):
    import os

    path = os.path.join(os.path.dirname(__file__), "data", "math_good.jsonl")
    env = MathEnv(dataset={"format": "math", "path": path, "split": "all"})
    env.reset(seed=1)
    assert env.task.answer == "\\frac{1}{2}" and env.task_id.startswith("math-")
    with pytest.raises(ValueError, match="field 'answer'"):
        MathEnv(problems=[{"problem": "x?"}], split="all")
    with pytest.raises(ValueError, match="either problems"):
        MathEnv(problems=[PROBLEM], dataset={"path": path})
    with pytest.raises(ValueError, match="unknown problem families"):
        MathEnv(families=["topology"])


def test_snapshot_restore_and_pickle(sandbox):
    env = fixed_env(sandbox)
    env.step("\\boxed{41}")
    snap = env.snapshot()
    prompt = env.observe("tool")["prompt"]
    env.step(code("print(41)"))
    assert all(env.terminations.values())
    env.restore(pickle.loads(pickle.dumps(snap)))
    assert env.observe("tool")["prompt"] == prompt and env.agent_selection == "tool"
    assert not any(env.terminations.values())
    env.render_mode = "ansi"
    assert "reference: 42" in env.render()


# ------------------------------------------------------------------ fuzz
_TEXT = st.one_of(
    st.text(max_size=300),
    st.builds(lambda a, b: f"{a}\\boxed{{{b}}}", st.text(max_size=50), st.text(max_size=50)),
    st.builds(lambda b: f"```python\n{b}\n```", st.text(max_size=80)),
    st.sampled_from(["```python\nprint(42)\n```", "```\nprint('\\\\frac{84}{2}')\n```", "```python\n```",
                     "\\boxed{42}", "\\boxed{", "```python\nimport os; os._exit(3)\n```"]),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.lists(_TEXT, min_size=1, max_size=6))
def test_fuzz_any_text_for_any_role_never_raises(sandbox, actions):
    env = pettingzoo.make("aec", ID, problems=[PROBLEM], split="all", sandbox=sandbox, tool_timeout_s=2.0,
                          max_turns=2)
    env.reset(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # nothing may warn (apply_action exceptions propagate)
        for text in actions:
            if not env.agents:
                break
            agent = env.agent_selection
            if env.terminations[agent] or env.truncations[agent]:
                env.step(None)
                continue
            env.step(text)
            info = env.infos[agent]
            assert isinstance(info["action_valid"], bool) and isinstance(env.rewards[agent], float)
            assert set(info["reward_parts"]) == {"team", "local"}


def test_long_answers_are_cut_in_prompts(sandbox):
    env = fixed_env(sandbox)
    env.step("\\boxed{" + "1+" * 5000 + "1}")
    assert env.infos["reasoner"]["action_valid"] is True and env.infos["reasoner"]["correct"] is False
    assert len(env.observe("tool")["prompt"]) < 2000


def test_lazy_exports():
    import llm_marl_envs.math as m

    assert m.MathEnv is MathEnv and callable(m.generate_problem) and callable(m.load_dataset)
    with pytest.raises(AttributeError):
        m.no_such_name  # noqa: B018
