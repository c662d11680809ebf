"""Asynchronous (one-step-off / k-step-off) training: ``training.max_staleness`` (rllib_integration/pipeline.py).

Real ATGRPO runs with a tiny model built locally, on the test task GuessNumber-v0 (guess_task.py: a random
tiny model gets reward variance, so every iteration updates): the in-process rollout worker (its batches run
in a background thread while the learner updates) and one Ray rollout actor."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("ray.rllib")

torch.set_num_threads(1)

TASK_FILE = Path(__file__).resolve().parent / "guess_task.py"


@pytest.fixture(scope="module")
def tiny():
    from rllib_integration.core.models import build_tiny_model

    return str(build_tiny_model())


def config(model_path, **training):
    from rllib_integration import ATGRPOConfig

    return (ATGRPOConfig().environment("my_tasks/GuessNumber-v0", env_modules=[str(TASK_FILE)])
            .llm(model_path=model_path).sampling(k=4, max_new_tokens=1, chat=False)
            .rollouts(num_rollout_actors=0, envs_per_iteration=4)
            .training(lr=1e-2, **training).debugging(seed=0))


def run(cfg, iterations):
    algo = cfg.build_algo()
    try:
        results = [algo.train() for _ in range(iterations)]
        weights = algo.learner_group.get_weights()
    finally:
        algo.stop()
    return results, weights


def test_stale_parts():
    from rllib_integration.pipeline import stale_parts

    assert stale_parts([5, 4, 3, -1], current=5, max_staleness=1) == [False, False, True, False]
    assert stale_parts([2, 2], current=4, max_staleness=2) == [False, False]
    assert stale_parts([1], current=4, max_staleness=2) == [True]


def test_max_staleness_0_is_the_synchronous_run_bit_for_bit(tiny):
    sync, w_sync = run(config(tiny), 2)
    zero, w_zero = run(config(tiny, max_staleness=0), 2)
    assert "async" not in sync[-1] and "async" not in zero[-1]
    for a, b in zip(sync, zero, strict=True):
        for key in ("reward_mean", "candidate_reward_mean", "num_updates", "success_rate"):
            assert a[key] == b[key], key
        assert a["learner"] == b["learner"]
    for pid in w_sync:
        for k in w_sync[pid]:
            np.testing.assert_array_equal(w_zero[pid][k], w_sync[pid][k])


def test_one_step_off_trains_on_samples_one_version_old_in_process(tiny):
    """max_staleness=1: the first batch is sampled with the learner's weights (staleness 0); from then on each
    batch was generated while the learner updated on the previous one, with the weights one version older
    than the learner's when it is trained on; none is older, none is dropped, every iteration updates; the
    problems (seeds) are the synchronous run's."""
    sync, _ = run(config(tiny), 3)
    results, weights = run(config(tiny, max_staleness=1), 3)
    reports = [r["async"] for r in results]
    assert [r["staleness_max"] for r in reports] == [0, 1, 1], reports
    assert [r["staleness_mean"] for r in reports] == [0.0, 1.0, 1.0]
    assert all(r["dropped_stale"] == 0 and r["in_flight"] == 1 for r in reports), reports
    assert all(r["num_updates"] > 0 for r in results)
    # the first batch is the synchronous run's own (same weights, same seeds); later ones differ (older weights)
    assert results[0]["candidate_reward_mean"] == sync[0]["candidate_reward_mean"]
    assert [r["env_runners"]["num_episodes"] for r in results] == [4, 4, 4]


@pytest.mark.slow
def test_k_step_off_with_a_ray_rollout_actor(tiny, guess_task_ray):
    """max_staleness=2 with one Ray rollout actor: two batches in flight; the actor takes new weights between
    batches (its calls run in order), so a batch trained at iteration i was generated with weights at most two
    versions old; evaluation runs on the newest weights."""
    cfg = (config(tiny, max_staleness=2).rollouts(num_rollout_actors=1, num_cpus_per_rollout_worker=1)
           .evaluation(evaluation_interval=4, evaluation_num_episodes=2))
    results, _ = run(cfg, 4)
    reports = [r["async"] for r in results]
    assert [r["staleness_max"] for r in reports] == [0, 1, 2, 2], reports
    assert all(r["in_flight"] == 2 and r["dropped_stale"] == 0 for r in reports), reports
    assert results[-1]["evaluation"]["episodes"] == 2


@pytest.mark.slow
def test_one_dead_actor_costs_one_restart_with_batches_in_flight(tiny, guess_task_ray):
    """One-step-off with one Ray actor that dies right after a batch is submitted to it, so the batch and the
    weight push queued behind it both fail: one new actor redoes the batch (the dead actor's failed push does not
    restart it a second time), and training goes on with staleness <= 1."""
    import types

    ray = guess_task_ray
    algo = config(tiny, max_staleness=1).rollouts(num_rollout_actors=1).build_algo()
    try:
        first = algo.train()
        victim = algo.rollout_workers.actors[0]

        def sample_then_die(*args, **kwargs):
            ref = victim.sample.remote(*args, **kwargs)
            ray.kill(victim)
            return ref

        # the next batch (submitted during the next iteration) kills the actor; a push follows it
        algo.rollout_workers.workers[0].actor = types.SimpleNamespace(
            sample=types.SimpleNamespace(remote=sample_then_die), set_weights=victim.set_weights)
        rest = [algo.train() for _ in range(3)]
    finally:
        algo.stop()
    assert first["num_rollout_worker_restarts"] == 0
    assert [r["num_rollout_worker_restarts"] for r in rest] == [0, 1, 1]
    assert all(r["async"]["staleness_max"] <= 1 and r["num_updates"] > 0 for r in rest), [r["async"] for r in rest]


def test_rllib_aliases_only_in_rllibs_own_builder():
    """``num_env_runners`` is RLlib's ``env_runners()`` keyword (it sets the rollout actors) and
    ``evaluation_duration`` its ``evaluation()`` keyword; another builder rejects them, as RLlib's would."""
    from rllib_integration import ATGRPOConfig
    from rllib_integration.settings import ConfigError

    assert ATGRPOConfig().env_runners(num_env_runners=3).num_rollout_actors == 3
    assert ATGRPOConfig().evaluation(evaluation_duration=5).evaluation_num_episodes == 5
    for builder, kw in (("training", "num_env_runners"), ("training", "evaluation_duration"),
                        ("environment", "num_env_runners")):
        with pytest.raises(ConfigError, match=f"got an unknown keyword '{kw}'"):
            getattr(ATGRPOConfig(), builder)(**{kw: 3})
