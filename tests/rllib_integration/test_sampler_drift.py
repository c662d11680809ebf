"""The sampler's log-probs against the learner's in the RLlib layer: ``training.behavior_logprobs``,
``training.tis_cap`` and the drift metrics ``learner/<policy>/sampler_*``.

``ATGRPO._update`` (the run's loop over epochs and minibatch rounds) on a real local ``LearnerGroup`` (no Ray
cluster) with samples whose sampler log-probs are the learner's own plus a known perturbation (a sampler in another
dtype or engine); the config error before Ray starts; one short ``ATGRPO`` run that reports the metrics."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from rllib_integration._rllib import local_learner

pytest.importorskip("ray.rllib")

torch.set_num_threads(1)

TASK_FILE = Path(__file__).resolve().parent / "guess_task.py"
DRIFT = ("sampler_logp_diff_mean", "sampler_logp_diff_max", "sampler_k3_kl")


@pytest.fixture(scope="module")
def tiny_path():
    from rllib_integration.core.models import build_tiny_model

    return str(build_tiny_model())


def _algo(path, **training):
    """What ``ATGRPO._update`` reads of its algorithm: the config, the iteration, a real local ``LearnerGroup``
    (whose ``update`` also records each call's batch and metrics), the per-policy settings."""
    import gymnasium as gym
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from rllib_integration import ATGRPOConfig
    from rllib_integration.policies import policy_setting
    from rllib_integration.rl_module import LLMRLModule

    cfg = ATGRPOConfig().llm(model_path=path).sampling(max_new_tokens=8).training(**training).debugging(seed=0)
    space = gym.spaces.Text(64)
    spec = RLModuleSpec(module_class=LLMRLModule, observation_space=space, action_space=space, model_config={
        "policy_id": "shared", "model_path": path, "level": "L1", "dtype": "float32", "seed": 0})
    torch.manual_seed(0)
    group = cfg.build_learner_group(rl_module_spec=MultiRLModuleSpec(rl_module_specs={"shared": spec}))
    steps: list[dict] = []
    update = group.update

    def recording_update(batch, **kwargs):
        res = update(batch=batch, **kwargs)
        one = res[0] if isinstance(res, list) else res  # a list of one learner's results
        steps.append({"batch": {k: np.array(v) for k, v in batch.policy_batches["shared"].items()},
                      "metrics": {k: float(v.peek()) for k, v in one["shared"].items()}})
        return res

    group.update = recording_update
    return SimpleNamespace(config=cfg, iteration=0, learner_group=group, steps=steps,
                           _policy_setting=lambda pid, key: policy_setting(cfg, pid, key))


def _perturbed(samples, seed=0):
    """The samples' sampler log-probs (the learner's own) plus a known per-token perturbation ``delta`` (returned,
    flat in sample order): a sampler in another dtype or engine."""
    rng = np.random.default_rng(seed)
    deltas = [rng.uniform(-0.4, 0.4, len(s.logprobs)) for s in samples]
    for s, delta in zip(samples, deltas, strict=True):
        s.logprobs = (np.asarray(s.logprobs) + delta).tolist()
    return samples, np.concatenate(deltas)


def _run(algo, samples):
    from rllib_integration.algorithm import ATGRPO

    adv = np.array([1.0, -1.0] * (len(samples) // 2))
    return ATGRPO._update(algo, samples, adv, np.ones(len(samples), dtype=bool))


def _expected_drift(delta):
    d = -delta  # learner minus sampler
    return {"sampler_logp_diff_mean": float(np.abs(d).mean()), "sampler_logp_diff_max": float(np.abs(d).max()),
            "sampler_k3_kl": float(np.mean(np.exp(d) - d - 1))}


def test_sampler_log_probs_off_the_learners_move_the_first_ratio_and_the_drift_metric_says_so(tiny_path,
                                                                                             on_policy_samples):
    algo = _algo(tiny_path, lr=0.05)
    samples, delta = _perturbed(on_policy_samples(local_learner(algo.learner_group)))
    metrics, num_updates = _run(algo, samples)
    assert num_updates == len(algo.steps) == 1
    first = algo.steps[0]["metrics"]
    assert "sampler_logprobs" not in algo.steps[0]["batch"]
    # ratio = exp(learner - sampler) = exp(-delta) on the first step: not 1
    assert first["ratio_max"] == pytest.approx(math.exp(-delta.min()), rel=1e-4)
    assert first["ratio_min"] == pytest.approx(math.exp(-delta.max()), rel=1e-4)
    for k, v in _expected_drift(delta).items():
        assert metrics["shared"][k] == pytest.approx(v, abs=1e-5), k


def test_learner_behavior_log_probs_make_the_first_ratio_exactly_one(tiny_path, on_policy_samples):
    """``behavior_logprobs: learner``: the learner recomputes the log-probs (no grad, the update's micro-batches)
    before the first update; they are ``old_logprobs`` of every update of the iteration, so the first step's
    ratio is exactly 1 (fp32, CPU), while the sampler's stay in ``sampler_logprobs`` and the drift metric still
    reports the perturbation. ``tis_cap`` weighs the tokens by ``min(exp(learner - sampler), cap)``."""
    cap = 1.1
    algo = _algo(tiny_path, lr=0.05, behavior_logprobs="learner", tis_cap=cap, micro_batch_tokens=24, num_epochs=2,
                 minibatch_size=4)
    samples, delta = _perturbed(on_policy_samples(local_learner(algo.learner_group)))
    metrics, num_updates = _run(algo, samples)
    assert num_updates == len(algo.steps) == 4  # 2 epochs x 2 minibatches (4 + 2 samples)
    first = algo.steps[0]["metrics"]
    assert first["ratio_min"] == 1.0 and first["ratio_max"] == 1.0 and first["clip_frac"] == 0.0
    assert algo.steps[-1]["metrics"]["ratio_max"] != 1.0  # the policy moved: later steps see it
    # every update of the iteration got the recomputed old log-probs and the sampler's beside them
    by_sample: dict[tuple, list] = {}
    for step in algo.steps:
        b = step["batch"]
        for row in range(len(b["advantages"])):
            m = b["completion_mask"][row] > 0
            key = tuple(b["input_ids"][row][b["attention_mask"][row] > 0])
            by_sample.setdefault(key, []).append(b["old_logprobs"][row][m])
            s = next(s for s in samples if tuple(s.prompt_token_ids + s.completion_token_ids) == key)
            np.testing.assert_array_equal(b["sampler_logprobs"][row][m], np.float32(s.logprobs))
    assert len(by_sample) == len(samples) and all(len(v) == 2 for v in by_sample.values())  # once per epoch
    for old in by_sample.values():
        np.testing.assert_array_equal(old[0], old[1])
    # the metrics of the first step (its minibatch's tokens): the drift from the sampler, the truncated weights
    first_delta = _first_minibatch_delta(algo, samples, delta)
    for k, v in _expected_drift(first_delta).items():
        assert metrics["shared"][k] == pytest.approx(v, abs=1e-5), k
    w = np.exp(-first_delta)
    assert metrics["shared"]["tis_truncated_frac"] == pytest.approx(float((w > cap).mean()), abs=1e-6)
    assert metrics["shared"]["tis_weight_mean"] == pytest.approx(float(np.minimum(w, cap).mean()), abs=1e-5)
    assert 0 < metrics["shared"]["tis_truncated_frac"] < 1


def _first_minibatch_delta(algo, samples, delta):
    """The perturbations of the tokens of the first update's minibatch, in its row order."""
    b = algo.steps[0]["batch"]
    offsets = np.cumsum([0] + [len(s.completion_token_ids) for s in samples])
    out = []
    for row in range(len(b["advantages"])):
        key = tuple(b["input_ids"][row][b["attention_mask"][row] > 0])
        i = next(i for i, s in enumerate(samples) if tuple(s.prompt_token_ids + s.completion_token_ids) == key)
        out.append(delta[offsets[i]:offsets[i + 1]])
    return np.concatenate(out)


def test_tis_cap_needs_learner_behavior_log_probs_before_ray(tiny_path, heavy_steps):
    from rllib_integration import ATGRPOConfig
    from rllib_integration.settings import ConfigError, validate_config

    with pytest.raises(ConfigError, match=r"training\.tis_cap.*training\.behavior_logprobs: learner"):
        validate_config({"training": {"tis_cap": 2.0}}, check_paths=False)
    with pytest.raises(ConfigError, match=r"tis_cap.*behavior_logprobs"):
        ATGRPOConfig().environment("llm_marl/PlanPath-v0").llm(model_path=tiny_path).training(tis_cap=2.0).build_algo()
    assert heavy_steps == []  # failed before a model was loaded or Ray started
    with pytest.raises(ConfigError, match="tis_cap"):
        validate_config({"training": {"tis_cap": 0, "behavior_logprobs": "learner"}}, check_paths=False)
    with pytest.raises(ConfigError, match="behavior_logprobs"):
        validate_config({"training": {"behavior_logprobs": "vllm"}}, check_paths=False)
    ok = validate_config({"training": {"tis_cap": 2.0, "behavior_logprobs": "learner"}}, check_paths=False)
    assert ok["training"]["tis_cap"] == 2.0


def test_a_run_reports_the_drift_and_the_importance_weights(tiny_path):
    """One short ATGRPO iteration (in-process rollouts, HF backend in fp32) with the learner's log-probs and
    TIS: the metrics are in the result as ``learner/<policy>/...``, the sampler agrees with the learner (fp32),
    and the one optimizer step has ratio exactly 1."""
    from rllib_integration import ATGRPOConfig
    from rllib_integration.core.metrics import flatten

    cfg = (ATGRPOConfig().environment("my_tasks/GuessNumber-v0", env_modules=[str(TASK_FILE)])
           .llm(model_path=tiny_path).sampling(k=4, max_new_tokens=1, chat=False)
           .rollouts(num_rollout_actors=0, envs_per_iteration=4)
           .training(lr=1e-2, behavior_logprobs="learner", tis_cap=2.0).debugging(seed=0))
    algo = cfg.build_algo()
    try:
        result = algo.train()
    finally:
        algo.stop()
    assert result["num_updates"] == 1
    row = flatten(result)
    for k in (*DRIFT, "tis_weight_mean", "tis_truncated_frac"):
        assert f"learner/shared/{k}" in row, k
    assert row["learner/shared/sampler_logp_diff_max"] < 1e-4  # same weights, same dtype
    assert row["learner/shared/tis_truncated_frac"] == 0.0
    assert row["learner/shared/tis_weight_mean"] == pytest.approx(1.0, abs=1e-4)
    assert row["learner/shared/ratio_min"] == row["learner/shared/ratio_max"] == 1.0
