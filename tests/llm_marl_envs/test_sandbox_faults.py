"""No infrastructure fault is scored (issue 31): a warm sandbox worker killed while idle or while the
program runs does not change an action's validity or reward (the sandbox retries the run on a fresh
worker); a fault that persists raises ``SandboxInfrastructureError`` out of ``step`` with the step not
taken; and an exception in a task's own ``apply_action`` surfaces instead of becoming an invalid action.
Real bwrap workers, killed with real SIGKILLs (the ``worker_faults`` fixture of tests/conftest.py)."""

from __future__ import annotations

import dataclasses

import pettingzoo
import pytest

import llm_marl_envs  # noqa: F401  (registers the tasks)
from llm_marl_envs import LLMTeamEnv, StepOutcome
from sandboxes import SandboxInfrastructureError
from sandboxes.warm import WarmBwrapSandbox

DOUBLE = {"id": "double", "statement": "Return twice x.", "kind": "call", "fn_name": "double",
          "golden_tests": [{"args": [2], "expected": 4}, {"args": [-3], "expected": -6}],
          "reference_solution": "def double(x):\n    return 2 * x\n"}
# correct, and still running when the killer sees it (the two golden tests run in one sandbox run)
SLOW_DOUBLE = "```python\nimport time\n\ndef double(x):\n    time.sleep(0.5)\n    return x + x\n```"


@pytest.fixture
def pool(make_sandbox):
    box = make_sandbox(warm=True, pool_size=1, preload=(), timeout_s=10, memory_mb=256)
    if not isinstance(box, WarmBwrapSandbox):
        box.close()
        pytest.skip("needs the bwrap warm pool (LLM_MARL_TEST_SANDBOX names another backend)")
    yield box
    box.close()


def test_planpath_tool_step_stays_valid_when_the_idle_worker_was_killed(pool, worker_faults):
    # before: BrokenPipeError inside apply_action became an invalid action, for this and every later tool step
    env = pettingzoo.make("aec", "llm_marl/PlanPath-v0", sandbox=pool)
    env.reset(seed=0)
    assert pool.run("print(1)").status == "ok"  # one idle worker in the pool
    worker_faults.kill_idle(pool)
    env.step(env.unwrapped.expert_action("tool"))
    info = env.infos["tool"]
    assert info["action_valid"] and info["tool_status"] == "ok" and info["proposal"], info
    assert pool.fault_counts()["dead_workers_replaced"] == 1


def test_code_env_scores_a_correct_program_fully_when_its_worker_is_killed(pool, worker_faults):
    # before: the run came back "killed" and the correct program scored 0.1 instead of 2.0
    env = pettingzoo.make("aec", "llm_marl/Code-v0", problems=[DOUBLE], sandbox=pool)
    env.reset(seed=0)
    pool.warmup()
    with worker_faults.kill_busy(pool, times=1) as killed:
        env.step(SLOW_DOUBLE)
    assert len(killed) == 1
    info = env.infos["coder"]
    assert env.rewards["coder"] == pytest.approx(2.0), info
    assert info["golden_pass_rate"] == 1.0 and info["action_valid"], info
    assert pool.fault_counts()["runs_retried"] == 1


def test_a_persistent_sandbox_fault_raises_out_of_step_unscored(pool, worker_faults):
    # before: a status "killed" scored as the program's failure, never an exception
    pool.infra_retries = 0
    env = pettingzoo.make("aec", "llm_marl/Code-v0", problems=[DOUBLE], sandbox=pool)
    env.reset(seed=0)
    raw = env.unwrapped
    pool.warmup()
    before = (raw.agent_selection, raw.turn, raw.transcript, raw.game_state, dict(raw.rewards),
              dict(raw._cumulative_rewards))
    with worker_faults.kill_busy(pool, times=1):
        with pytest.raises(SandboxInfrastructureError) as err:
            env.step(SLOW_DOUBLE)
    assert any("the step was not taken" in note for note in getattr(err.value, "__notes__", []))
    assert (raw.agent_selection, raw.turn, raw.transcript, raw.game_state, dict(raw.rewards),
            dict(raw._cumulative_rewards)) == before
    assert pool.fault_counts()["infrastructure_errors"] == 1
    env.step(SLOW_DOUBLE)  # the same action again, on a healthy pool: scored as usual
    assert env.rewards["coder"] == pytest.approx(2.0)


def test_math_tool_step_raises_a_persistent_sandbox_fault(pool, worker_faults):
    # before: Math-v0 caught every sandbox exception as the program's failure ("sandbox_error")
    pool.infra_retries = 0
    env = pettingzoo.make("aec", "llm_marl/Math-v0", problems=[{"id": "p-42", "problem": "6*7?", "answer": "42"}],
                          split="all", sandbox=pool, tool_timeout_s=5.0)
    env.reset(seed=0)
    env.step("I think \\boxed{41}")  # reasoner
    pool.warmup()
    with worker_faults.kill_busy(pool, times=1):
        with pytest.raises(SandboxInfrastructureError):
            env.step("```python\nimport time\ntime.sleep(0.5)\nprint(42)\n```")
    assert env.agent_selection == "tool" and env.rewards["tool"] == 0.0


@dataclasses.dataclass(frozen=True)
class _Task:
    task_id: str


class _Buggy(LLMTeamEnv):
    roles = ("a", "b")
    metadata = {"name": "buggy", "render_modes": ["ansi"], "is_parallelizable": False}

    def load_task(self, seed, split):
        return _Task(f"buggy/{seed}")

    def initial_state(self, task):
        return 0

    def prompt(self, agent):
        return agent

    def apply_action(self, agent, text):
        self.game_state += 1  # changed, then the task's own bug
        return StepOutcome(valid=True, local=1.0 / (len(text) - 3))


def test_a_bug_in_apply_action_surfaces_instead_of_an_invalid_action():
    # before: a RuntimeWarning and an invalid action with the penalty, scored as the model's doing
    env = _Buggy()
    env.reset(seed=0)
    env.step("four")
    assert env.rewards["a"] == 1.0
    with pytest.raises(ZeroDivisionError) as err:
        env.step("bug")
    assert any("_Buggy.apply_action on b's action" in note for note in err.value.__notes__)
    assert env.agent_selection == "b" and env.game_state == 1 and len(env.transcript) == 1
    assert env.rewards == {"a": 1.0, "b": 0.0}
