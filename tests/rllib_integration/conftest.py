"""Fixtures of the RLlib-layer tests."""

import pytest


def require_vllm() -> None:
    """At the top of a real-vLLM test module: skip it where ``vllm`` is not importable, unless
    ``LLM_MARL_REQUIRE_VLLM=1`` (scripts/test_vllm.sh), where a missing vLLM fails instead."""
    import importlib.util
    import os

    if importlib.util.find_spec("vllm") is None:
        if os.environ.get("LLM_MARL_REQUIRE_VLLM") == "1":
            raise RuntimeError("LLM_MARL_REQUIRE_VLLM=1 but vllm is not importable here (scripts/setup_vllm.sh)")
        pytest.skip("vllm is not importable here (scripts/setup_vllm.sh builds an environment with it)",
                    allow_module_level=True)


def _on_policy_samples(learner, n=6, seed=0):
    """Samples of the policy ``shared`` (random prompt and completion token ids) whose ``logprobs`` are the
    learner's own log-probs of their completions (as if it had just sampled them)."""
    from types import SimpleNamespace

    import numpy as np
    import torch

    from rllib_integration.core.loss import collate_samples

    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(n):
        p, c = int(rng.integers(3, 9)), int(rng.integers(2, 8))
        samples.append(SimpleNamespace(policy_id="shared", prompt_token_ids=rng.integers(5, 500, p).tolist(),
                                       completion_token_ids=rng.integers(5, 500, c).tolist(), logprobs=[0.0] * c))
    cols = collate_samples(samples, pad_token_id=0)
    with torch.no_grad():
        logp = learner.module["shared"]._forward(cols)["logp"]
    for b, s in enumerate(samples):
        s.logprobs = logp[b][cols["completion_mask"][b] > 0].tolist()
    return samples


@pytest.fixture
def on_policy_samples():
    """``make(learner, n=6, seed=0)``: samples of the policy ``shared`` whose ``logprobs`` are ``learner``'s own
    log-probs of their completions (a learner of one policy ``shared``)."""
    return _on_policy_samples


@pytest.fixture(scope="module")
def ray_session():
    """A local Ray instance for one test module (2 CPUs, one OMP thread per worker)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def guess_task_ray():
    """A local Ray instance for one test module whose workers import the test task ``my_tasks/GuessNumber-v0``
    (guess_task.py): 2 CPUs, one OMP thread per worker. Its tests share one start (several seconds each)."""
    from pathlib import Path

    import ray

    from rllib_integration.envs import task_runtime_env

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env=task_runtime_env([str(Path(__file__).resolve().parent / "guess_task.py")],
                                          {"env_vars": {"OMP_NUM_THREADS": "1"}}))
    yield ray
    ray.shutdown()


@pytest.fixture
def heavy_steps(monkeypatch):
    """The expensive steps of starting a run, in order, as they happen: ``"load model"``
    (``AutoModelForCausalLM.from_pretrained``), and where Ray is imported already ``"ray.init"`` and
    ``"actor"`` (an actor created). A config or usage error comes before all of them: a test asserts
    the list is empty rather than timing the error."""
    import sys

    from transformers import AutoModelForCausalLM

    seen: list[str] = []

    def spy(step, real):
        def call(*args, **kwargs):
            seen.append(step)
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained",
                        spy("load model", AutoModelForCausalLM.from_pretrained))
    ray = sys.modules.get("ray")
    if ray is not None:
        import ray.actor

        monkeypatch.setattr(ray, "init", spy("ray.init", ray.init))
        monkeypatch.setattr(ray.actor.ActorClass, "_remote", spy("actor", ray.actor.ActorClass._remote))
    return seen


#: ``llm-marl train`` arguments of a tiny run (no warm start, no eval, 2 envs x k=2, 2 new tokens, no rollout
#: actors: no Ray), for tests of what a run writes
TINY_TRAIN_ARGS = ("--quiet", "--set", "rollout.num_rollout_actors=0", "--set", "rollout.envs_per_iteration=2",
                   "--set", "sampling.k=2", "--set", "sampling.max_new_tokens=2", "--set", "warm_start.episodes=0",
                   "--set", "evaluation.interval=0",
                   "--set", "env.config={size: 2, obstacle_density: 0.0, max_turns: 1, prompt_style: compact}")


@pytest.fixture(scope="session")
def tiny_train_args():
    """:data:`TINY_TRAIN_ARGS` as a list."""
    return list(TINY_TRAIN_ARGS)
