"""Streaming episodes: ``training.streaming`` (rllib_integration/pipeline.py ``StreamPipeline``, the rollout
workers' ``start_stream``).

Real ATGRPO runs with a tiny model built locally, on the test task GuessNumber-v0 (guess_task.py), with the
in-process rollout worker (its stream runs in a thread of the learner's process) and one Ray rollout actor
(its stream runs in a thread of the actor and fills a ``ray.util.queue.Queue``). Each training batch is
recorded through RLlib's ``on_sample_end`` callback (the samples that reach the advantages and the loss)."""

from __future__ import annotations

import time
from collections import Counter, defaultdict

import numpy as np
import pytest
import torch

from .test_async import TASK_FILE, run

pytest.importorskip("ray.rllib")

torch.set_num_threads(1)

K = 4


@pytest.fixture(scope="module")
def tiny():
    from rllib_integration.core.models import build_tiny_model

    return str(build_tiny_model())


def config(model_path, batches=None, *, envs=4, mode="tree", **training):
    from rllib_integration import ATGRPOConfig

    cfg = (ATGRPOConfig().environment("my_tasks/GuessNumber-v0", env_modules=[str(TASK_FILE)])
           .llm(model_path=model_path).sampling(k=K, max_new_tokens=1, chat=False, mode=mode)
           .rollouts(num_rollout_actors=0, envs_per_iteration=envs)
           .training(lr=1e-2, **training).debugging(seed=0))
    if batches is not None:
        cfg = cfg.callbacks(on_sample_end=lambda samples, **_: batches.append(list(samples)))
    return cfg


def assert_groups_whole(batches, by=("task_id", "env_idx", "turn", "agent"), size=K):
    """Every group (the group key restricted to ``by``) lies in one batch, with all its samples; every env too."""
    where: dict[tuple, set[int]] = defaultdict(set)
    sizes: Counter = Counter()
    for b, samples in enumerate(batches):
        for s in samples:
            key = tuple(getattr(s.group_key, f) for f in by)
            where[key].add(b)
            where[("env", s.env_idx)].add(b)
            sizes[key] += 1
    split = {k: v for k, v in where.items() if len(v) > 1}
    assert not split, split
    if size is not None:
        assert set(sizes.values()) == {size}, sizes


def test_streaming_settings_are_checked():
    from rllib_integration.settings import ConfigError, load_config

    with pytest.raises(ConfigError, match="training.streaming: streaming needs training.max_staleness >= 1"):
        load_config(None, ["training.streaming=true"])
    with pytest.raises(ConfigError, match="keep env_idx in training.group_by"):
        load_config(None, ["training.streaming=true", "training.max_staleness=1",
                           "training.group_by=[task_id, turn, agent]"])
    cfg = load_config(None, ["training.streaming=true", "training.max_staleness=1"])
    assert cfg["training"]["stream_min_samples"] is None and cfg["training"]["stream_queue_size"] is None


def test_stale_groups_are_dropped_whole():
    """A streamed env whose first turn was generated 3 versions before the learner's and its second turn 1: with
    max_staleness 1 the first turn's groups go (all K candidates of each), the second turn's stay; grouped
    without the turn (an episode estimator's groups span the env's turns) the env goes whole."""
    from rllib_integration.core.records import GroupKey, Sample
    from rllib_integration.pipeline import drop_stale

    def sample(turn, agent, cand, version):
        return Sample(prompt="", prompt_token_ids=[], completion="", completion_token_ids=[], logprobs=[], reward=0.0,
                      group_key=GroupKey("t", 7, turn, agent), policy_id="p", valid=True, candidate=cand,
                      policy_version=version)

    env = {"samples": [sample(t, a, c, 2 if t == 0 else 4) for t in (0, 1) for a in ("x", "y") for c in range(K)],
           "episodes": ["ep"]}
    kept, report = drop_stale([env], current=5, max_staleness=1, by=("task_id", "env_idx", "turn", "agent"))
    assert [(s.turn, s.agent) for s in kept[0]["samples"]] == [(1, "x")] * K + [(1, "y")] * K
    assert report["dropped_stale"] == 2 * K and report["staleness_max"] == 1 and kept[0]["episodes"] == ["ep"]
    kept, report = drop_stale([env], current=5, max_staleness=1, by=("task_id", "env_idx", "agent"))
    assert kept[0]["samples"] == [] and report["dropped_stale"] == 4 * K
    kept, report = drop_stale([env], current=5, max_staleness=3, by=("task_id", "env_idx", "turn", "agent"))
    assert kept == [env] and report["dropped_stale"] == 0 and report["staleness_max"] == 3


def test_streaming_off_is_the_default_run_bit_for_bit(tiny):
    base, w_base = run(config(tiny), 2)
    off, w_off = run(config(tiny, streaming=False), 2)
    for a, b in zip(base, off, strict=True):
        for key in ("reward_mean", "candidate_reward_mean", "num_updates", "success_rate"):
            assert a[key] == b[key], key
        assert a["learner"] == b["learner"] and "async" not in b
    for pid in w_base:
        for k in w_base[pid]:
            np.testing.assert_array_equal(w_off[pid][k], w_base[pid][k])


def test_streamed_batches_keep_every_group_whole_in_process(tiny):
    """Two envs at a time, a batch of at least 12 samples: two finished envs (8 samples each: K candidates of
    guesser and judge). No group (nor env) is split between two batches, each has its K candidates; the envs are
    the run's training envs in order, none twice; every iteration updates (every group trained), and samples are
    at most one version old."""
    batches: list = []
    results, _ = run(config(tiny, batches, envs=2, streaming=True, max_staleness=1, stream_min_samples=12,
                                 filter_zero_variance=False), 4)
    assert len(batches) == 4
    assert_groups_whole(batches)
    reports = [r["async"] for r in results]
    assert all(r["streaming"] and r["envs"] == 2 and not r["timed_out"] for r in reports), reports
    assert [len(b) for b in batches] == [16] * 4
    envs = [s.env_idx for b in batches for s in b]
    assert sorted(set(envs)) == list(range(8))  # the stream's first 8 training envs (seeds 0..7), each once
    assert reports[0]["staleness_max"] == 0 and all(r["staleness_max"] <= 1 for r in reports), reports
    assert all(r["dropped_stale"] == 0 for r in reports) and all(r["num_updates"] > 0 for r in results)
    assert max(r["staleness_max"] for r in reports) == 1  # later batches were generated during updates


def test_streamed_parallel_episodes_come_with_their_env(tiny):
    """Parallel mode with DrMAS per-agent GRPO (groups: the K episodes of an env, per agent): the K episodes of
    an env arrive together, so each group of a batch has its K episodes."""
    batches: list = []
    run(config(tiny, batches, mode="parallel", estimator="drmas_grpo", group_by=["task_id", "env_idx", "agent"],
               streaming=True, max_staleness=1), 3)
    assert_groups_whole(batches, by=("task_id", "env_idx", "agent"), size=None)
    for samples in batches:
        episodes = defaultdict(set)
        for s in samples:
            episodes[(s.env_idx, s.agent)].add(s.candidate)
        assert all(e == set(range(K)) for e in episodes.values()), episodes
        assert len({s.env_idx for s in samples}) == 4  # stream_min_samples null: envs_per_iteration envs


def _wait_paused(stats, quiet_s=1.5, limit_s=60.0):
    """Poll ``stats()`` until its ``rounds`` stop changing for ``quiet_s``; return the stats then."""
    t_end = time.monotonic() + limit_s
    last, since = stats(), time.monotonic()
    while time.monotonic() < t_end:
        time.sleep(0.25)
        now = stats()
        if now["rounds"] != last["rounds"]:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return now
    raise AssertionError(f"the stream did not pause: {last}")


def test_backpressure_bounds_the_queue_in_process(tiny):
    """Queue of one env: after a batch of two envs is taken, the worker fills the queue, finishes what it is
    playing and then waits (no more rounds) with the queue full: two taken + one queued were put, no more; the
    next batch starts it again."""
    algo = config(tiny, envs=2, streaming=True, max_staleness=1, stream_queue_size=1).build_algo()
    try:
        algo.train()
        worker = algo.rollout_workers.local
        paused = _wait_paused(worker.stream_stats)
        assert algo.rollout_workers.stream_queue.qsize() == 1
        assert paused["emitted"] == 2 + 1, paused
        time.sleep(1.0)
        assert worker.stream_stats()["rounds"] == paused["rounds"]  # still paused
        algo.train()
        assert worker.stream_stats()["emitted"] > paused["emitted"]
    finally:
        algo.stop()
    assert not worker.streaming()  # stop() ends the stream's thread


@pytest.mark.slow
def test_streaming_with_a_ray_rollout_actor(tiny, guess_task_ray):
    """One Ray rollout actor streaming into a ``ray.util.queue.Queue`` of one env: groups whole, staleness <= 1,
    the queue bounds what the actor runs ahead (backpressure), evaluation runs beside the stream and after the
    run's last batch the stream is stopped."""
    ray = guess_task_ray  # the actor imports the test task
    batches: list = []
    cfg = (config(tiny, batches, envs=2, streaming=True, max_staleness=1, stream_queue_size=1)
           .rollouts(num_rollout_actors=1, num_cpus_per_rollout_worker=1)
           .evaluation(evaluation_interval=2, evaluation_num_episodes=2, evaluation_final_iteration=4))
    algo = cfg.build_algo()
    try:
        results = [algo.train()]
        actor = algo.rollout_workers.actors[0]
        paused = _wait_paused(lambda: ray.get(actor.stream_stats.remote()))
        assert paused["emitted"] == 2 + 1 and algo.rollout_workers.stream_queue.qsize() == 1, paused
        results += [algo.train() for _ in range(3)]
        assert algo.rollout_workers.stream_queue is None  # stopped after the last iteration's batch
    finally:
        algo.stop()
    assert_groups_whole(batches)
    reports = [r["async"] for r in results]
    assert all(r["envs"] == 2 and r["staleness_max"] <= 1 and r["dropped_stale"] == 0 for r in reports), reports
    assert [r.get("evaluation", {}).get("episodes") for r in results] == [None, 2, None, 2]


@pytest.mark.slow
def test_a_dead_streaming_actor_is_restarted_and_resumes(tiny, guess_task_ray):
    """The rollout actor dies while streaming: when the queue stays empty, the learner finds it dead, starts a
    new one (one restart, the latest weights) whose stream resumes after the last env taken, and training goes on
    with whole groups, no env twice."""
    ray = guess_task_ray
    batches: list = []
    algo = (config(tiny, batches, envs=2, streaming=True, max_staleness=1).rollouts(num_rollout_actors=1)
            .build_algo())
    algo._pipeline.check_s = 1.0  # look for a dead actor after 1 s without a finished env (default 10 s)
    try:
        results = [algo.train()]
        ray.kill(algo.rollout_workers.actors[0])
        results += [algo.train() for _ in range(2)]
    finally:
        algo.stop()
    assert [r["num_rollout_worker_restarts"] for r in results] == [0, 1, 1]
    assert_groups_whole(batches)
    assert all(r["async"]["envs"] == 2 and r["async"]["staleness_max"] <= 1 for r in results), results
