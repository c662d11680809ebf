"""A sandbox infrastructure fault during sampling drops that episode and is counted (issue 31): when an env's
step raises ``sandboxes.SandboxInfrastructureError`` (its sandbox lost its worker under the program, also on the
retries), that env's episode (tree mode) or that episode (parallel mode) is left out of the batch, with no return
or success scored, the other envs play on, and the results carry ``sandbox/*`` counters; too many dropped
episodes stop the run loudly; any other exception from an env's code still propagates.

Real bwrap warm pools: the failing one has its busy workers SIGKILLed (the ``worker_faults`` fixture of
tests/conftest.py) and no retries, so every run in it fails; the others run normally."""

from __future__ import annotations

import dataclasses
import logging

import pytest

import llm_marl_envs
from llm_marl_envs import LLMTeamEnv, StepOutcome, shared_sandbox
from rllib_integration.core.backends.base import Completion, GenerationBackend, SamplingParams
from rllib_integration.core.rollout import RolloutSampler
from rllib_integration.results import SANDBOX_COUNTERS, SandboxFaultError, sandbox_counters
from sandboxes.warm import WarmBwrapSandbox

#: the pools (process-wide shared sandboxes, made by name like a training run's): distinct limits make two pools
HEALTHY = {"warm": True, "pool_size": 1, "preload": (), "timeout_s": 10, "memory_mb": 256}
#: a worker for each candidate stepped at once (up to 8 threads): a caller waiting for a busy worker of a pool
#: while it is killed is never woken (sandboxes.warm: the dead worker's slot is freed, but a checkout blocked on
#: the idle queue waits on; a hang to fix there)
FAULTY = {**HEALTHY, "timeout_s": 9.5, "pool_size": 8}
#: the program every step runs: still running when the killer looks
SLOW_OK = "import time\ntime.sleep(0.4)\nprint(45)\n"


@dataclasses.dataclass(frozen=True)
class Job:
    task_id: str
    faulty: bool


class Runner(LLMTeamEnv):
    """One role whose every step runs a program in its sandbox (the text only adds a small reward, so a random
    model's steps run programs too); the episodes of ``faulty_seeds`` run it in the pool ``faulty_limits``."""

    roles = ("coder",)
    default_max_turns = 1
    metadata = {"name": "runner", "render_modes": ["ansi"], "is_parallelizable": False}

    def __init__(self, faulty_seeds=(), faulty_limits=None, **kwargs):
        super().__init__(**kwargs)
        self.faulty_seeds, self.faulty_limits = {int(s) for s in faulty_seeds}, dict(faulty_limits or {})

    def load_task(self, seed, split):
        return Job(f"job/{seed}", int(seed) in self.faulty_seeds)

    def initial_state(self, task):
        return 0

    def prompt(self, agent):
        return "run it"

    def apply_action(self, agent, text):
        box = shared_sandbox("bwrap", **self.faulty_limits) if self.task.faulty else self.sandbox
        ok = box.run(SLOW_OK).stdout == "45\n"
        return StepOutcome(valid=True, team=float(ok), local=0.01 * (len(text) % 3), done=True, success=ok)

    def render_text(self):
        return "runner"


def runner(**kw):
    return Runner(sandbox="bwrap", sandbox_limits=HEALTHY, faulty_limits=FAULTY, **kw)


@pytest.fixture(scope="module")
def faulty():
    box = shared_sandbox("bwrap", **FAULTY)
    if not isinstance(box, WarmBwrapSandbox):
        pytest.skip("needs the bwrap warm pool")
    box.infra_retries = 0  # a lost worker is an error at once
    assert shared_sandbox("bwrap", **HEALTHY).run("print(1)").stdout == "1\n"
    yield box
    box.close()


class Scripted(GenerationBackend):
    def generate(self, requests, params):
        return [[Completion("x" * (c + 1), [c], [0.0], [1], "stop", r.policy_id) for c in range(params.n)]
                for r in requests]

    def update_weights(self, policy_id, state_dict):
        pass

    def policies(self):
        return ["p"]


def _sample(mode, step_workers, faulty, worker_faults):
    sampler = RolloutSampler(Scripted(), "p", SamplingParams(seed=0), k=2, chat=False, step_workers=step_workers)
    envs = [runner(faulty_seeds=[11]) for _ in range(3)]
    collect = sampler.collect_tree if mode == "tree" else sampler.collect_parallel
    before = llm_marl_envs.sandbox_fault_counts()
    with worker_faults.kill_busy(faulty, times=100) as killed:
        samples = collect(envs, seeds=[10, 11, 12])
    after = llm_marl_envs.sandbox_fault_counts()
    assert killed, "the killer found the faulty pool's worker busy"
    return sampler, samples, {k: after[k] - before[k] for k in after}


@pytest.mark.parametrize("mode, step_workers", [("tree", 1), ("tree", 4), ("parallel", 1)])
def test_a_failing_sandbox_drops_its_episode_and_the_others_are_kept(faulty, worker_faults, caplog, mode,
                                                                     step_workers):
    # before: SandboxInfrastructureError propagated out of collect_*: the whole batch was lost
    caplog.set_level(logging.WARNING, logger="rllib_integration.core.rollout")
    sampler, samples, delta = _sample(mode, step_workers, faulty, worker_faults)
    assert {s.task_id for s in samples} == {"job/10", "job/12"}
    assert len(samples) == 4 and all(s.reward >= 1.0 for s in samples)  # 2 envs x K=2 (parallel: 2 x 2 episodes)
    per_env = 1 if mode == "tree" else 2  # parallel: K=2 episodes per env
    assert sorted(e.task_id for e in sampler.last_episodes) == sorted(["job/10", "job/12"] * per_env)
    assert all(e.success for e in sampler.last_episodes)
    dropped = sampler.last_dropped
    assert [(d.env_idx, d.task_id, d.turn, d.agent) for d in dropped][:1] == [(1, "job/11", 0, "coder")]
    assert len(dropped) == (1 if mode == "tree" else 2)  # parallel: each of the env's K episodes
    assert all("SandboxInfrastructureError" in d.error for d in dropped)
    assert delta["infrastructure_errors"] >= len(dropped) and delta["dead_workers_replaced"] >= len(dropped)
    assert any("sandbox infrastructure fault" in r.getMessage() and "job/11" in r.getMessage()
               for r in caplog.records)


def test_the_stream_drops_a_failing_env_whole(faulty, worker_faults):
    sampler = RolloutSampler(Scripted(), "p", SamplingParams(seed=0), k=2, chat=False, step_workers=1)
    envs = [runner(faulty_seeds=[1]) for _ in range(2)]
    seeds = iter(range(3))

    def next_env(slot):
        n = next(seeds, None)
        if n is None:
            return None
        envs[slot].reset(seed=n)
        return n, envs[slot]

    with worker_faults.kill_busy(faulty, times=100):
        finished = sorted(sampler.stream(next_env, 2, mode="tree"), key=lambda f: f.env_idx)
    assert [(f.env_idx, len(f.samples), len(f.episodes), len(f.dropped)) for f in finished] == [
        (0, 2, 1, 0), (1, 0, 0, 1), (2, 2, 1, 0)]


class _Buggy(Runner):
    def apply_action(self, agent, text):
        raise ZeroDivisionError("a bug in the task")


def test_any_other_exception_from_env_code_still_propagates():
    sampler = RolloutSampler(Scripted(), "p", SamplingParams(seed=0), k=2, chat=False, step_workers=1)
    with pytest.raises(ZeroDivisionError, match="a bug in the task"):
        sampler.collect_tree([_Buggy(sandbox="local")], seeds=[0])


def test_sandbox_counters_sum_the_parts_and_stop_when_too_many_are_dropped():
    def part(n_episodes, dropped, errors=0):
        return {"episodes": [object()] * n_episodes,
                "sandbox": {"infrastructure_errors": errors, "dropped_episodes": len(dropped)},
                "dropped": [{"env_idx": i, "task_id": f"job/{i}", "turn": 0, "agent": "coder",
                             "error": "SandboxInfrastructureError: lost"} for i in dropped]}

    out = sandbox_counters([part(3, [3], 1), part(2, [], 0)])
    assert set(out) == set(SANDBOX_COUNTERS)
    assert out["dropped_episodes"] == 1 and out["infrastructure_errors"] == 1 and out["runs_retried"] == 0
    assert sandbox_counters([part(1, [1])])["dropped_episodes"] == 1  # half: not more than half
    with pytest.raises(SandboxFaultError, match=r"evaluation: 2 of 3 episodes .* infrastructure fault.*job/0"):
        sandbox_counters([part(1, [0, 2])], what="evaluation")
    with pytest.raises(SandboxFaultError, match="1 of 4 episodes"):
        sandbox_counters([part(3, [0])], max_dropped_fraction=0.2)


@pytest.mark.slow
def test_atgrpo_results_count_sandbox_faults_and_dropped_episodes(ray_session, faulty, worker_faults):
    """Through ATGRPO (tiny model, in-process worker): iteration 1 drops the one env whose sandbox fails, trains on
    the other two and reports the counters; iteration 2, whose envs all fail, stops the run naming the fault."""
    from rllib_integration import ATGRPOConfig
    from rllib_integration.core.models import build_tiny_model

    config = (ATGRPOConfig().environment(Runner, env_config={"sandbox": "bwrap", "sandbox_limits": HEALTHY,
                                                             "faulty_limits": FAULTY, "faulty_seeds": [1, 3, 4, 5]})
              .llm(model_path=str(build_tiny_model())).sampling(k=2, max_new_tokens=1, chat=False)
              .rollouts(num_rollout_actors=0, envs_per_iteration=3, train_task_pool=6).training(lr=1e-3)
              .debugging(seed=0))
    algo = config.build_algo()
    try:
        with worker_faults.kill_busy(faulty, times=100):
            result = algo.train()
            sandbox = result["sandbox"]
            assert set(sandbox) == set(SANDBOX_COUNTERS)
            assert sandbox["dropped_episodes"] == 1, sandbox
            assert sandbox["infrastructure_errors"] >= 1 and sandbox["dead_workers_replaced"] >= 1, sandbox
            assert result["env_runners"]["num_episodes"] == 2 and result["throughput"]["samples"] == 4
            with pytest.raises(SandboxFaultError, match="3 of 3 episodes .* sandbox infrastructure fault"):
                algo.train()
    finally:
        algo.stop()
