"""llm_marl/MathVerify-v0: an orchestrated solver-verifier loop on the AEC API. The role order
follows the verifier's answers, rewards are the docstring's formulas, snapshots cover the loop."""

from __future__ import annotations

import pickle

import pettingzoo
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test

import llm_marl_envs
from llm_marl_envs.math.verify import MathVerifyEnv, parse_verdict

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:pettingzoo.test.api_test")

ID = "llm_marl/MathVerify-v0"
PROBLEM = [{"problem": "What is 6 * 7?", "answer": "42"}]
WRONG, RIGHT = r"so \boxed{48}", r"so \boxed{42}"


def make(**kwargs) -> MathVerifyEnv:
    env = MathVerifyEnv(problems=PROBLEM, split="all", **kwargs)
    env.reset(seed=0)
    return env


def play(env, texts):
    """Step ``texts`` in order; the (agent, turn) that acted each time."""
    order = []
    for text in texts:
        agent = env.agent_selection
        env.step(text)
        order.append((agent, env.infos[agent]["turn"]))
    return order


def test_pettingzoo_api_parallel_and_seed_tests():
    api_test(pettingzoo.make("aec", ID), num_cycles=20)
    seed_test(lambda: pettingzoo.make("aec", ID), num_cycles=20)
    parallel_api_test(pettingzoo.make("parallel", ID), num_cycles=20)
    parallel_seed_test(lambda: pettingzoo.make("parallel", ID), num_cycles=20)


def test_approve_ends_the_episode_at_once():
    env = make()
    assert play(env, [RIGHT, "Looks right.\nAPPROVE"]) == [("solver", 0), ("verifier", 0)]
    assert all(env.terminations.values()) and not any(env.truncations.values())
    assert env.success and env.infos["verifier"]["success"] and env.infos["solver"]["episode_end"]


def test_approving_a_wrong_answer_ends_as_a_failure():
    env = make()
    play(env, [WRONG, "approve."])
    assert all(env.terminations.values()) and not env.success
    assert env.rewards["verifier"] == -1.0                       # team 0 + verifier_wrong


def test_reject_loops_back_to_the_solver_with_the_feedback():
    env = make()
    assert play(env, [WRONG, "REJECT: recompute 6 * 7"]) == [("solver", 0), ("verifier", 0)]
    assert env.agent_selection == "solver" and env.turn == 1 and not any(env.terminations.values())
    prompt = env.observe("solver")["prompt"]
    assert "Attempt 2 of 3." in prompt and "REJECT: recompute 6 * 7" in prompt and "48" in prompt
    assert play(env, [RIGHT, "APPROVE"]) == [("solver", 1), ("verifier", 1)]
    assert env.success


def test_the_attempt_limit_truncates():
    env = make(max_attempts=2)
    order = play(env, [WRONG, "REJECT: no", RIGHT, "REJECT: still no"])
    assert order == [("solver", 0), ("verifier", 0), ("solver", 1), ("verifier", 1)]
    assert all(env.truncations.values()) and not any(env.terminations.values())
    assert not env.success and env.infos["verifier"]["success"] is False   # a correct answer, never approved
    assert env.rewards["verifier"] == 1.0 - 1.0                  # team 1 (correct answer) + verifier_wrong


def test_a_solver_without_an_answer_tries_again_and_the_verifier_is_skipped():
    env = make()
    order = play(env, ["I do not know", RIGHT, "APPROVE"])
    assert order == [("solver", 0), ("solver", 1), ("verifier", 1)]
    assert env.success and env.infos["solver"]["attempt"] == 2
    env = make(max_attempts=1)
    play(env, ["no answer"])
    assert all(env.truncations.values()) and env.transcript[-1].agent == "solver"


def test_an_invalid_verdict_is_penalised_and_the_solver_tries_again():
    env = make(invalid_penalty=0.25)
    play(env, [WRONG])
    for text in ("APPROVE it", "REJECT:", "reject the answer", "", "Verdict: maybe"):
        snap = env.snapshot()
        env.step(text)
        info = env.infos["verifier"]
        assert not info["action_valid"] and info["verdict"] is None, text
        assert env.rewards["verifier"] == -0.25 and env.agent_selection == "solver" and env.turn == 1
        assert "(no valid verdict)" in env.observe("solver")["prompt"]
        env.restore(snap)


@pytest.mark.parametrize("answer,verdict,team,local", [
    (RIGHT, "APPROVE", 1.0, 1.0), (RIGHT, "REJECT: wrong", 1.0, -1.0),
    (WRONG, "REJECT: wrong", 0.0, 1.0), (WRONG, "APPROVE", 0.0, -1.0)])
def test_rewards_are_the_formulas(answer, verdict, team, local):
    env = make(alpha=0.5, rewards={"solver_format": 0.3})
    play(env, [answer])
    correct = answer == RIGHT
    assert env.infos["solver"]["reward_parts"] == {"team": float(correct), "local": 0.3 + 0.8 * correct}
    assert env.rewards["solver"] == 0.5 * correct + 0.3 + 0.8 * correct
    play(env, [verdict])
    assert env.infos["verifier"]["reward_parts"] == {"team": team, "local": local}
    assert env.rewards["verifier"] == 0.5 * team + local
    assert env.infos["verifier"]["judgement"] == ("approve" if correct else "reject")


def test_parse_verdict_is_strict():
    assert parse_verdict("reasoning...\n  Approve.  \n") == ("approve", "")
    assert parse_verdict("REJECT:  check the sign ") == ("reject", "check the sign")
    assert parse_verdict("REJECT: " + "x" * 50, feedback_chars=10) == ("reject", "x" * 10)
    for text in ("", "APPROVE\nthanks", "I approve", "REJECT", "REJECT: ", "approved"):
        assert parse_verdict(text) is None, text


ISSUE_40_SOLVER = [  # (solver's reply, correct; None: no boxed answer, invalid), the verifier approves
    (r"\boxed{42}", True), (r"\boxed{42.0}", True), (r"So it is \boxed{42}.", True), (r"\boxed{4.2e1}", True),
    (r"\boxed{42/1}", True), (r"\boxed{42,000}", False), (r"\boxed{42.5}", False), (r"\boxed{42abc}", False),
    (r"\boxed{42x}", False), (r"\boxed{420}", False), ("Answer: the value is 42abc", None),
]
ISSUE_40_VERIFIER = [  # (verifier's reply, verdict; None: invalid), after the right answer
    ("APPROVE", "approve"), ("approve.", "approve"), ("REJECT: 42.5 is wrong", "reject"),
    ("APPROVED", None), ("APPROVE!", None), ("APPROVE 1", None), ("APPROVE..", None), ("REJECTED: x", None),
    ("\uff21\uff30\uff30\uff32\uff2f\uff36\uff25", None),  # fullwidth letters
]


@pytest.mark.parametrize("solver, correct, verifier, verdict",
                         [(s, c, "APPROVE", "approve") for s, c in ISSUE_40_SOLVER]
                         + [(RIGHT, True, v, d) for v, d in ISSUE_40_VERIFIER])
def test_issue_40_answers_and_verdicts_are_read_whole(solver, correct, verifier, verdict):
    """Already exact before issue 40: the boxed answer is read whole and compared by value (42.0 = 42), and the
    verdict line must be all of APPROVE or REJECT: <feedback>."""
    env = make()
    env.step(solver)
    info = env.infos["solver"]
    assert info["correct"] is bool(correct) and info["action_valid"] is (correct is not None)
    if correct is None:
        return
    env.step(verifier)
    info = env.infos["verifier"]
    assert info["verdict"] == verdict and info["action_valid"] is (verdict is not None)


def test_snapshot_restore_mid_loop_is_exact():
    env = make()
    play(env, [WRONG, "REJECT: recompute"])
    snap = pickle.loads(pickle.dumps(env.snapshot()))
    prompt, turn, agent = env.observe("solver")["prompt"], env.turn, env.agent_selection
    play(env, [RIGHT, "APPROVE"])
    assert env.success
    env.restore(snap)
    assert (env.observe("solver")["prompt"], env.turn, env.agent_selection) == (prompt, turn, agent)
    assert play(env, ["nothing", RIGHT, "REJECT: again"]) == [("solver", 1), ("solver", 2), ("verifier", 2)]
    assert all(env.truncations.values())


def test_deterministic_in_the_seed():
    texts = [WRONG, "REJECT: a", "hmm", RIGHT, "APPROVE"]

    def run(seed):
        env = llm_marl_envs.make("MathVerify-v0", difficulty=2)
        env.reset(seed=seed)
        prompts = []
        for text in texts:
            if env.terminations[env.agent_selection] or env.truncations[env.agent_selection]:
                break
            prompts.append(env.observe(env.agent_selection)["prompt"])
            env.step(text)
        return env.task_id, prompts, env.transcript

    assert run(3) == run(3) and run(3)[0] != run(4)[0]


def test_max_attempts_is_max_turns():
    assert make(max_attempts=5).max_turns == 5 == make(max_turns=5, max_attempts=5).max_turns
    assert make().max_turns == 3
    with pytest.raises(ValueError, match="max_attempts=2 and max_turns=4 disagree"):
        MathVerifyEnv(max_attempts=2, max_turns=4)
    with pytest.raises(ValueError, match="feedback_chars"):
        MathVerifyEnv(feedback_chars=0)
    with pytest.raises(ValueError, match="unknown reward weight"):
        MathVerifyEnv(rewards={"verifier_rigth": 1})


def test_max_turns_bounds_the_attempts_whatever_the_order():
    # An orchestrated order has no cycle of one action per role: the env takes no max_cycles (PettingZoo's
    # max_cycles_test counts such cycles), and max_turns bounds the attempts: random text and a verifier that
    # always rejects play exactly max_turns attempts, then every role is truncated.
    for form in ("aec", "parallel"):
        with pytest.raises(TypeError, match="orchestrated task"):
            pettingzoo.make(form, ID, max_cycles=4)
    for seed in range(3):
        env = pettingzoo.make("aec", ID, max_turns=4)
        env.reset(seed=seed)
        env.action_space("solver").seed(seed)
        solver_steps = 0
        for agent in env.agent_iter(max_iter=100):
            _, _, term, trunc, _ = env.last()
            if term or trunc:
                env.step(None)
                continue
            solver_steps += agent == "solver"
            text = env.action_space(agent).sample() if agent == "solver" else "REJECT: no"
            env.step(text if seed else (RIGHT if agent == "solver" else "REJECT: no"))
        assert solver_steps == 4 and env.turn == 4 and not env.success


def test_the_expert_solves_and_judges():
    env = llm_marl_envs.make("MathVerify-v0", difficulty=2)
    for seed in range(3):
        env.reset(seed=seed)
        env.step(env.expert_action())             # solver
        assert env.agent_selection == "verifier"
        env.step(env.expert_action())             # verifier: approves the correct answer
        assert env.success and all(env.terminations.values())
    env = make()
    play(env, [WRONG])
    assert parse_verdict(env.expert_action())[0] == "reject"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(max_size=40) | st.sampled_from([RIGHT, WRONG, "APPROVE", "REJECT: x"]), max_size=8))
def test_any_text_never_raises_and_each_role_acts_once_per_turn(texts):
    env = make(max_attempts=3)
    seen = set()
    for text in texts:
        agent = env.agent_selection
        if env.terminations[agent] or env.truncations[agent]:
            break
        env.step(text)
        key = (env.infos[agent]["turn"], agent)
        assert key not in seen           # (turn, agent) names one step: AT-GRPO's group key within a tree
        seen.add(key)
    assert env.turn <= env.max_turns
