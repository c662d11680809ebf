"""Per-policy sampling settings (``policies.<id>.temperature`` and ``policies.<id>.top_p``): from the run
config to the rollout worker's backend wrapper, which splits a generate call by (temperature, top-p)."""

import pytest

from rllib_integration.core.backends.base import Completion, GenerationBackend, GenerationRequest, SamplingParams
from rllib_integration.settings import ConfigError, validate_config


class _Recorder(GenerationBackend):
    """A backend that answers every request with one empty completion and records each call's params."""

    def __init__(self):
        self.calls: list[tuple[list[str], SamplingParams]] = []

    def generate(self, requests, params):
        self.calls.append(([r.policy_id for r in requests], params))
        return [[Completion("", [1], [0.0], [1], "stop", r.policy_id)] for r in requests]

    def update_weights(self, policy_id, state_dict):
        pass

    def policies(self):
        return ["coder", "tester"]

    def tokenizer(self, policy_id):
        return None


def _requests(*pids):
    return [GenerationRequest(policy_id=p, prompt=f"prompt {i}") for i, p in enumerate(pids)]


def test_policies_top_p_is_a_per_policy_setting():
    full = validate_config({"policies": {"coder": {"top_p": 0.5}, "tester": {}}, "specialization": "L3"},
                           check_paths=False)
    assert full["policies"] == {"coder": {"top_p": 0.5}, "tester": {}}
    assert full["sampling"]["top_p"] == 1.0
    for bad in (0, 1.5):
        with pytest.raises(ConfigError, match=r"policies\.coder\.top_p"):
            validate_config({"policies": {"coder": {"top_p": bad}}, "specialization": "L3"}, check_paths=False)


def test_timed_backend_samples_each_policy_with_its_temperature_and_top_p():
    from rllib_integration.rollout_worker import _TimedBackend

    inner = _Recorder()
    b = _TimedBackend(inner, {"coder": 0.3, "tester": 1.0}, {"coder": 0.5, "tester": 1.0})
    out = b.generate(_requests("tester", "coder", "tester"), SamplingParams(temperature=1.0, top_p=1.0, seed=7))
    assert [c[0].policy_id for c in out] == ["tester", "coder", "tester"]  # answers in request order
    # one call per (temperature, top_p), sorted: (0.3, 0.5) first with the seed, then (1.0, 1.0) with seed + 104729
    assert [(pids, p.temperature, p.top_p, p.seed) for pids, p in inner.calls] == [
        (["coder"], 0.3, 0.5, 7), (["tester", "tester"], 1.0, 1.0, 7 + 104729)]
    # evaluation's temperature override replaces the temperatures, the policies' top-p stay
    inner.calls.clear()
    b.override_temperature = 0.0
    b.generate(_requests("coder", "tester"), SamplingParams(seed=3))
    assert [(pids, p.temperature, p.top_p, p.seed) for pids, p in inner.calls] == [
        (["coder"], 0.0, 0.5, 3), (["tester"], 0.0, 1.0, 3 + 104729)]


def test_timed_backend_with_one_setting_for_all_policies_makes_one_call_with_the_given_params():
    """The default (every policy at the global temperature and top-p): one inner call, the params unchanged."""
    from rllib_integration.rollout_worker import _TimedBackend

    inner = _Recorder()
    b = _TimedBackend(inner, {"coder": 1.0, "tester": 1.0}, {"coder": 0.9, "tester": 0.9})
    params = SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=5, seed=11)
    b.generate(_requests("coder", "tester"), params)
    assert inner.calls == [(["coder", "tester"], params)]
    b2 = _TimedBackend(_Recorder(), {"coder": 1.0})  # no top-p map (older callers): the params' top-p
    b2.generate(_requests("coder"), params)
    assert b2.inner.calls == [(["coder"], params)]


def test_worker_spec_takes_each_policys_top_p_from_the_run_config():
    pytest.importorskip("ray.rllib")
    from rllib_integration import ATGRPOConfig
    from rllib_integration.envs import resolve_env
    from rllib_integration.rollout_worker import WorkerSpec

    cfg = ATGRPOConfig.from_run_config(validate_config({
        "env": {"id": "llm_marl/PlanPath-v0", "config": {"size": 3}}, "specialization": "L3",
        "sampling": {"top_p": 0.95, "temperature": 0.8},
        "policies": {"tool": {"top_p": 0.3, "temperature": 0.2}, "executor": {}}}, check_paths=False))
    entry = resolve_env("llm_marl/PlanPath-v0")
    spec = WorkerSpec.of_config(cfg, entry, entry({"size": 3}), {"tool": None, "executor": None},
                                {"tool": "tool", "executor": "executor"})
    assert spec.top_ps == {"tool": 0.3, "executor": 0.95}
    assert spec.temperatures == {"tool": 0.2, "executor": 0.8}
    assert spec.top_p == 0.95
