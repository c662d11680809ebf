"""A rollout worker's ``timings.sandbox_s``: the time its envs (and the copies a tree steps) spent in their
sandbox during that ``sample`` call, read from ``LLMTeamEnv.sandbox_seconds`` (the env's method is not
patched), with a real sandbox and a tiny model."""

import os
import threading

import pytest
import torch

from llm_marl_envs import LLMTeamEnv, StepOutcome
from tests.conftest import SANDBOX_VAR

SLEEP_S = 0.05
PROGRAM = f"import time\ntime.sleep({SLEEP_S})\nprint('ok')"


class Runs:
    n = 0
    lock = threading.Lock()


class SandboxEnv(LLMTeamEnv):
    """Two roles; every action runs :data:`PROGRAM` in the sandbox (counted in :class:`Runs`)."""

    roles = ("a", "b")
    default_max_turns = 2

    def load_task(self, seed, split):
        return type("T", (), {"task_id": f"sandbox/{seed}"})()

    def initial_state(self, task):
        return 0

    def prompt(self, agent):
        return f"turn {self.turn} {agent}"

    def apply_action(self, agent, text):
        ok = self.run_program(PROGRAM).stdout == "ok\n"
        with Runs.lock:
            Runs.n += 1
        return StepOutcome(valid=ok, team=0.0, local=float(len(text) % 2), done=False, success=False)


@pytest.fixture(scope="module")
def worker():
    from rllib_integration.core.backends import HFBackend
    from rllib_integration.core.models import build_tiny_model, load_model
    from rllib_integration.envs import resolve_env
    from rllib_integration.rollout_worker import RolloutWorker, WorkerSpec

    model, tok = load_model(build_tiny_model(), dtype=torch.float32, device="cpu")
    spec = WorkerSpec(env=resolve_env(SandboxEnv), env_config={"sandbox": os.environ.get(SANDBOX_VAR, "bwrap")},
                      eval_env_config={}, policy_specs={}, policy_mapping={"a": "p", "b": "p"},
                      temperatures={"p": 1.0}, max_new_tokens=4, chat=False, step_workers=2)
    w = RolloutWorker(spec, 0, backend=HFBackend({"p": (model, tok)}, device="cpu"))
    yield w
    w.close()


@pytest.mark.parametrize(("mode", "step_workers"), [("tree", 1), ("tree", 2), ("parallel", 1)])
def test_sandbox_time_is_the_calls_own_and_counts_the_copies(worker, mode, step_workers):
    """Tree with one step worker: the envs themselves; with two, deep copies in threads (their times add up, so
    they may exceed the wall time); parallel: a deep copy per episode."""
    worker.spec.step_workers = step_workers
    for _ in range(2):  # the second call reports its own time, not the envs' total
        Runs.n = 0
        part = worker.sample([0, 1], sampling_seed=3, mode=mode, k=2)
        tm = part["timings"]
        assert Runs.n >= 8  # 2 envs x 2 turns x 2 roles, x k candidates (tree) or episodes (parallel)
        assert tm["sandbox_s"] >= Runs.n * SLEEP_S
        if step_workers == 1:
            assert tm["sandbox_s"] <= tm["rollout_s"]
            assert tm["generate_s"] + tm["env_s"] + tm["sandbox_s"] == pytest.approx(tm["rollout_s"], abs=1e-6)
    envs = worker._env_list("train", 2)
    assert sum(e.unwrapped.sandbox_seconds for e in envs) > tm["sandbox_s"]
    assert not any("run_program" in vars(e.unwrapped) for e in envs)  # the env's own method, unpatched


def test_a_stream_reports_its_sandbox_time(worker):
    """Streaming: each finished env's part carries the sandbox time of the worker's envs since the part before
    (it was always 0.0); over the parts taken it covers at least the finished envs' own runs."""
    import queue

    from rllib_integration.rollout_worker import TrainSeeds

    worker.spec.step_workers = 1
    out: queue.Queue = queue.Queue(maxsize=4)
    worker.start_stream(out, first=0, stride=1, seeds=TrainSeeds(seed=0), slots=2, sampling_seed=5, mode="tree", k=2)
    try:
        parts = [out.get(timeout=120) for _ in range(3)]
    finally:
        worker.stop_stream()
    assert not any("error" in p for p in parts), parts
    tm = [p["timings"] for p in parts]
    runs = sum(len(p["samples"]) for p in parts)  # tree: one sandbox run per candidate
    assert runs >= 3 * 8
    assert sum(t["sandbox_s"] for t in tm) >= runs * SLEEP_S
    for t in tm:
        assert t["env_s"] >= 0.0 and t["sandbox_s"] <= t["rollout_s"] + 1e-6
