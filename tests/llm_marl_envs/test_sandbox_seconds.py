"""``LLMTeamEnv.sandbox_seconds``: the time an env and its deep copies spend in ``run_program``, counted by the
env itself (a rollout worker reads it instead of patching the env's method), in a real sandbox."""

import copy
import os
import pickle
import threading
import time

from llm_marl_envs import LLMTeamEnv, StepOutcome
from tests.conftest import SANDBOX_VAR

SLEEP_S = 0.2
PROGRAM = f"import time\ntime.sleep({SLEEP_S})\nprint('ok')"


class SleepEnv(LLMTeamEnv):
    """One role whose every action runs :data:`PROGRAM` in the sandbox."""

    roles = ("runner",)

    def load_task(self, seed, split):
        return type("T", (), {"task_id": f"sleep/{seed}"})()

    def initial_state(self, task):
        return 0

    def prompt(self, agent):
        return "run"

    def apply_action(self, agent, text):
        ok = self.run_program(PROGRAM).stdout == "ok\n"
        return StepOutcome(valid=ok, team=0.0, local=0.0, done=False, success=False)


def test_run_program_time_is_counted_once_for_an_env_and_its_copies(make_sandbox):
    box = make_sandbox()
    try:
        env = SleepEnv(sandbox=box)
        assert env.sandbox_seconds == 0.0
        t0 = time.perf_counter()
        assert env.run_program(PROGRAM).stdout == "ok\n"
        wall = time.perf_counter() - t0
        assert SLEEP_S <= env.sandbox_seconds <= wall
        assert "run_program" not in vars(env)  # the method is the class's

        # deep copies (a tree's candidates) add to the same total, from several threads at once
        copies = [copy.deepcopy(env) for _ in range(4)]
        before = env.sandbox_seconds
        threads = [threading.Thread(target=c.run_program, args=(PROGRAM,)) for c in copies]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert env.sandbox_seconds >= before + 4 * SLEEP_S
        assert all(c.sandbox_seconds == env.sandbox_seconds for c in copies)
    finally:
        box.close()


def test_a_pickled_env_keeps_its_total_and_counts_apart():
    env = SleepEnv(sandbox=os.environ.get(SANDBOX_VAR, "bwrap"))
    env.run_program(PROGRAM)
    clone = pickle.loads(pickle.dumps(env))
    assert clone.sandbox_seconds == env.sandbox_seconds > 0
    total = env.sandbox_seconds
    clone.run_program(PROGRAM)
    assert env.sandbox_seconds == total and clone.sandbox_seconds >= total + SLEEP_S
