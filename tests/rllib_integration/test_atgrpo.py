"""ATGRPO on real Ray/RLlib with tiny models built locally: Tune for L1/L2/L3, weight sync,
checkpoint/restore/continue, worker restart, config errors before Ray starts, the CLI.

Runs on 2 shared CPU cores: tiny envs (2x2 plan-path, 1-2 turns), 1-3 tokens per reply.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from llm_marl_envs import LLMTeamEnv, StepOutcome, register_task

torch.set_num_threads(1)

ENV = "llm_marl/PlanPath-v0"
ENV_CONFIG = {"size": 2, "obstacle_density": 0.0, "max_turns": 1, "invalid_penalty": 0.0}
REPO = Path(__file__).resolve().parents[2]


# A test task with plenty of reward variance from a random tiny model (every group learns):
# roles first/second, one turn; a reply is valid if it has a letter, and scores 1 if its first
# letter is a vowel. Used in-process (num_rollout_actors=0) where a test-defined task is visible.

@dataclasses.dataclass(frozen=True)
class _VowelTask:
    n: int
    task_id: str


class VowelEnv(LLMTeamEnv):
    roles = ("first", "second")
    default_max_turns = 1
    metadata = {"name": "vowel_test_v0", "render_modes": ["ansi"], "is_parallelizable": False}

    def load_task(self, seed, split):
        return _VowelTask(seed % 4, f"vowel/{seed % 4}")

    def initial_state(self, task):
        return 0

    def prompt(self, agent):
        return f"task {self.task.n} . {agent} : say a vowel"

    def apply_action(self, agent, text):
        letters = [c for c in text.lower() if c.isalpha()]
        if not letters:
            return StepOutcome(valid=False)
        good = letters[0] in "aeiou"
        if agent == "first":
            self.game_state = int(good)
            return StepOutcome(valid=True, local=float(good))
        both = good and self.game_state == 1
        return StepOutcome(valid=True, local=float(good), team=float(both), done=True, success=both)

    def render_text(self):
        return str(self.task)


VOWEL = register_task("llm_marl_test/Vowel-v0", VowelEnv, invalid_penalty=0.0)


def vowel_config(model_path):
    from rllib_integration import ATGRPOConfig

    return (ATGRPOConfig().environment(VOWEL, env_config={})
            .llm(model_path=model_path).sampling(k=8, max_new_tokens=2, chat=False)
            .rollouts(num_rollout_actors=0, envs_per_iteration=4, train_task_pool=4)
            .training(lr=1e-2).debugging(seed=0))


# ------------------------------------------------------------------ config errors (no Ray)
def test_config_errors_name_the_key_before_ray(tmp_path):
    from rllib_integration.settings import ConfigError, load_config, validate_config

    with pytest.raises(ConfigError, match=r"unknown config key training\.lrr \(did you mean training\.lr\?\)"):
        validate_config({"training": {"lrr": 1e-3}})
    with pytest.raises(ConfigError, match=r"unknown config key sampling \(did you mean sampling\?\)|"
                                          r"unknown config key samplng \(did you mean sampling\?\)"):
        validate_config({"samplng": {"k": 2}})
    with pytest.raises(ConfigError, match=r"sampling\.k: must be >= 1, got 0"):
        validate_config({"sampling": {"k": 0}})
    with pytest.raises(ConfigError, match=r"training\.estimator: 'at-grpo' is not one of .*did you mean 'at_grpo'"):
        validate_config({"training": {"estimator": "at-grpo"}})
    with pytest.raises(ConfigError, match=r"specialization: 'L4' is not one of"):
        validate_config({"specialization": "L4"})
    missing = tmp_path / "no_such_model"
    with pytest.raises(ConfigError, match=r"model\.path: no model checkpoint at .*no_such_model.*config\.json"):
        validate_config({"model": {"path": str(missing)}})
    with pytest.raises(ConfigError, match=r"policies\.tool\.model: no model checkpoint"):
        validate_config({"specialization": "L3", "policies": {"tool": {"model": str(missing)}}})
    with pytest.raises(ConfigError, match=r"unknown config key policies\.tool\.temperatur .*temperature"):
        validate_config({"specialization": "L2", "policies": {"tool": {"temperatur": 0.5}}})
    with pytest.raises(ConfigError, match=r"a model per policy needs specialization L3"):
        validate_config({"specialization": "L2", "policies": {"tool": {"model": "tiny"}}})
    from rllib_integration import ATGRPOConfig

    with pytest.raises(ConfigError, match=r"ATGRPOConfig\.estimator: 'bogus' is not one of"):
        ATGRPOConfig().environment(ENV).training(estimator="bogus").validate()
    with pytest.raises(ConfigError, match=r"ATGRPOConfig\.policy_models: a model per policy needs specialization L3"):
        ATGRPOConfig().environment(ENV).llm(policy_models={"tool": "tiny"}).validate()
    cfg = tmp_path / "c.yaml"
    cfg.write_text("training: {lr: 0.01}\n")
    full = load_config(str(cfg), ["sampling.k=3", "env.config={size: 3}"])
    assert full["training"]["lr"] == 0.01 and full["sampling"]["k"] == 3 and full["env"]["config"] == {"size": 3}
    with pytest.raises(ConfigError, match=r"run\.iterations: expected an integer, got 'many'"):
        load_config(str(cfg), ["run.iterations=many"])


def test_rollout_sandbox_kinds_and_step_workers_before_ray():
    import sandboxes
    from rllib_integration import ATGRPOConfig
    from rllib_integration.settings import ConfigError, load_config
    from rllib_integration.rollout_worker import with_sandbox

    warm = with_sandbox({"size": 2, "sandbox_limits": {"timeout_s": 3}}, "warm")
    if "bwrap" in sandboxes.available_backends():
        assert warm == {"size": 2, "sandbox": "bwrap", "sandbox_limits": {"timeout_s": 3, "warm": True}}
    else:
        assert warm["sandbox"] == "auto"
    assert with_sandbox({}, "cold") == {"sandbox": "auto"}
    assert with_sandbox({}, "local") == {"sandbox": "local"}
    assert with_sandbox({"sandbox": "docker"}, "warm") == {"sandbox": "docker"}  # env.config wins
    full = load_config(check_paths=False)
    assert full["rollout"]["sandbox"] == "warm" and full["rollout"]["step_workers"] is None
    with pytest.raises(ConfigError, match=r"rollout\.sandbox: 'hot' is not one of"):
        load_config(sets=["rollout.sandbox=hot"], check_paths=False)
    c = ATGRPOConfig.from_run_config(load_config(sets=["rollout.sandbox=cold", "rollout.step_workers=2"],
                                                 check_paths=False))
    assert (c.sandbox, c.step_workers) == ("cold", 2)
    with pytest.raises(ConfigError, match=r"ATGRPOConfig\.sandbox: 'hot' is not one of"):
        ATGRPOConfig().environment(ENV).rollouts(sandbox="hot").validate()
    with pytest.raises(ConfigError, match=r"ATGRPOConfig\.step_workers: must be >= 1, got 0"):
        ATGRPOConfig().environment(ENV).rollouts(step_workers=0).validate()


def test_every_shipped_config_validates():
    from rllib_integration.settings import load_config

    names = sorted(p.name for p in (REPO / "configs").glob("*.yaml"))
    assert {"default.yaml", "sokoban_l1.yaml", "sudoku_l1.yaml", "planpath_l1.yaml", "code_l2_lora.yaml",
            "math_l3.yaml"} <= set(names)
    for name in names:
        cfg = load_config(str(REPO / "configs" / name), check_paths=False)
        assert cfg["specialization"] in ("L1", "L2", "L3")


def test_default_yaml_is_the_embedded_default():
    from rllib_integration.settings import DEFAULT_CONFIG, load_config

    assert load_config(str(REPO / "configs" / "default.yaml"), check_paths=False) == load_config(check_paths=False)
    # the embedded default evaluates on the eval split, which shares no board with the train split
    assert DEFAULT_CONFIG["evaluation"]["interval"] > 0 and "split" not in DEFAULT_CONFIG["env"]["config"]


def test_cli_rejects_bad_config_before_ray_starts(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_ADDRESS": ""}
    proc = subprocess.run([sys.executable, "-m", "rllib_integration.cli", "train", "--set", "training.lrr=1",
                           "--output-dir", str(tmp_path / "out")], capture_output=True, text=True, env=env,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "unknown config key training.lrr (did you mean training.lr?)" in proc.stderr
    assert "Started a local Ray instance" not in proc.stderr + proc.stdout
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def tiny_paths():
    from rllib_integration.core.models import build_tiny_model

    a = build_tiny_model()
    b = build_tiny_model(hidden=32, layers=1, heads=2, vocab=384)
    return str(a), str(b)


def base_config(model_path, **rollouts):
    from rllib_integration import ATGRPOConfig

    return (ATGRPOConfig()
            .environment(ENV, env_config=dict(ENV_CONFIG))
            .llm(model_path=model_path)
            .sampling(k=4, max_new_tokens=1, chat=False)
            .rollouts(**{"num_rollout_actors": 0, "envs_per_iteration": 4, "train_task_pool": 4, **rollouts})
            .training(lr=1e-2)
            .debugging(seed=0))


def tune_fit(config, tmp_path, iters=2, use_run=False, checkpoint_at_end=False):
    from ray import tune

    import rllib_integration

    rllib_integration.register()
    if use_run:
        analysis = tune.run("ATGRPO", config=config, stop={"training_iteration": iters},
                            storage_path=str(tmp_path), verbose=0)
        trial = analysis.trials[0]
        assert trial.status == "TERMINATED", trial.error_file
        return trial.last_result
    tuner = tune.Tuner("ATGRPO", param_space=config,
                       run_config=tune.RunConfig(stop={"training_iteration": iters}, storage_path=str(tmp_path),
                                                 verbose=0,
                                                 checkpoint_config=tune.CheckpointConfig(
                                                     checkpoint_at_end=checkpoint_at_end)))
    results = tuner.fit()
    assert not results.errors, results.errors
    if checkpoint_at_end:
        return results[0].metrics, results[0].checkpoint
    return results[0].metrics


def check_agent_metrics(m, agents=("tool", "executor")):
    for a in agents:
        assert 0.0 <= m["agents"][a]["valid_ratio"] <= 1.0
        assert m["agents"][a]["num_samples"] > 0
    assert m["training_iteration"] == 2
    assert m["timers"]["generate_s"] > 0 and m["throughput"]["tokens_per_s"] > 0
    assert 0.0 <= m["success_rate"] <= 1.0


# ------------------------------------------------------------------ Tune: L1 / L2 / L3
@pytest.mark.slow
def test_tuner_l1_with_rollout_actor_and_eval(ray_session, tiny_paths, tmp_path):
    # One rollout-worker actor inside the trial: only works because its bundle is reserved.
    cfg = base_config(tiny_paths[0], num_rollout_actors=1).evaluation(evaluation_interval=2,
                                                                       evaluation_num_episodes=4)
    m = tune_fit(cfg, tmp_path)
    check_agent_metrics(m)
    assert m["policies"] == {"shared": {"level": "L1", "trainable_params": m["policies"]["shared"]["total_params"],
                                        "total_params": m["policies"]["shared"]["total_params"]}}
    assert m["evaluation"]["episodes"] == 4 and "success_rate" in m["evaluation"]
    assert set(m["evaluation"]["agents"]) == {"tool", "executor"}


@pytest.mark.slow
def test_tuner_l2_lora_trains_only_adapters(ray_session, tiny_paths, tmp_path):
    cfg = (base_config(tiny_paths[0]).llm(specialization="L2", lora={"r": 4, "alpha": 8})
           .multi_agent(policies={"tool", "executor"}, policy_mapping_fn=lambda aid, *a, **k: aid)
           .rl_module(algorithm_config_overrides_per_module={"executor": {"lr": 5e-3, "temperature": 0.7}}))
    m, ckpt = tune_fit(cfg, tmp_path, checkpoint_at_end=True)
    check_agent_metrics(m)
    for pid in ("tool", "executor"):
        p = m["policies"][pid]
        assert p["level"] == "L2" and 0 < p["trainable_params"] < p["total_params"] / 5, p
    # Tune's checkpoint is an ATGRPO checkpoint holding only the adapters
    from rllib_integration import ATGRPO

    algo = ATGRPO.from_checkpoint(ckpt.path)
    try:
        assert algo.iteration == 2 and algo.policy_mapping == {"tool": "tool", "executor": "executor"}
        assert all(all("lora_" in k for k in w) for w in algo.learner_group.get_weights().values())
    finally:
        algo.stop()


@pytest.mark.slow
def test_tune_run_l3_two_different_models(ray_session, tiny_paths, tmp_path):
    a, b = tiny_paths
    cfg = (base_config(a).llm(specialization="L3", policy_models={"tool": a, "executor": b})
           .multi_agent(policies={"tool", "executor"}, policy_mapping_fn=lambda aid, *x, **k: aid))
    m = tune_fit(cfg, tmp_path, use_run=True)
    check_agent_metrics(m)
    sizes = {pid: m["policies"][pid]["total_params"] for pid in ("tool", "executor")}
    assert sizes["tool"] != sizes["executor"], sizes  # two different base models
    assert all(m["policies"][p]["trainable_params"] == sizes[p] for p in sizes)


# ------------------------------------------------------------------ weight sync, L2 adapters
def test_l2_update_changes_only_adapters_and_syncs_them(ray_session, tiny_paths):
    cfg = (vowel_config(tiny_paths[0]).llm(specialization="L2", lora={"r": 4, "alpha": 8})
           .multi_agent(policies={"first", "second"})  # default mapping: agent -> policy of that name
           .rl_module(algorithm_config_overrides_per_module={"first": {"minibatch_size": 4}}))
    algo = cfg.build_algo()
    try:
        # rollout.sandbox defaults to warm: the workers' llm_marl envs get the warm pool
        import sandboxes

        if "bwrap" in sandboxes.available_backends():
            env = algo.rollout_workers.local._env_list("train", 1)[0].unwrapped
            assert (env._sandbox_spec, env._sandbox_limits) == ("bwrap", {"warm": True})
        before = {pid: {k: v.copy() for k, v in w.items()} for pid, w in algo.learner_group.get_weights().items()}
        assert all(all("lora_" in k for k in w) for w in before.values())
        updated = False
        for _ in range(2):
            r = algo.train()
            updated |= r["num_updates"] > 0
            # per-policy minibatch size: 'first' takes one optimizer step per 4 samples
            kept = r["groups"]["kept_samples"]
            if kept > 8:
                assert r["num_updates"] > 1, r["num_updates"]
        assert updated, "no group with reward variance in 2 iterations"
        after = algo.learner_group.get_weights()
        changed = [pid for pid in after if any(not np.array_equal(before[pid][k], after[pid][k]) for k in after[pid])]
        assert changed
        # the backend serves exactly the learner's adapters after the sync
        from peft import get_peft_model_state_dict

        backend = algo.rollout_workers.local.backend.inner
        for pid in after:
            served = get_peft_model_state_dict(backend.model(pid), adapter_name=pid)
            for k, v in after[pid].items():
                np.testing.assert_array_equal(served[k].detach().numpy(), v)
        # and the base stays frozen and shared: one base tensor set in the learner
        learner = algo.learner_group._learner
        mods = [learner.module[p].lm for p in ("first", "second")]
        emb = [m.get_base_model().model.embed_tokens.weight for m in mods]
        assert emb[0] is emb[1] and not emb[0].requires_grad
    finally:
        algo.stop()


def test_bf16_sync_sends_the_sampling_dtype_and_the_worker_serves_the_learner_weights(ray_session, tiny_paths):
    """fp32 master weights, bf16 sampling: the sync payload is bf16 (half the bytes; tagged raw bits
    through Ray) and after an update the worker's model equals the learner's weights rounded to bf16."""
    import torch

    from rllib_integration.core.tensor_codec import DTYPE_KEY

    cfg = vowel_config(tiny_paths[0]).llm(model_dtype="bfloat16").training(filter_zero_variance=False)
    algo = cfg.build_algo()
    try:
        learner = algo.learner_group._learner
        payload = learner.get_sync_weights()
        (pid,) = payload
        assert all(v[DTYPE_KEY] == "bfloat16" for v in payload[pid].values())
        r = algo.train()
        assert r["num_updates"] > 0 and r["timers"]["weight_sync_s"] > 0
        master = learner.module[pid].lm.state_dict()
        assert {v.dtype for v in master.values()} == {torch.float32}
        served = algo.rollout_workers.local.backend.inner.model(pid).state_dict()
        for k, v in master.items():
            assert served[k].dtype == torch.bfloat16 and torch.equal(served[k], v.to(torch.bfloat16)), k
        # the checkpoint path still holds full precision
        assert {np.asarray(v).dtype for v in algo.learner_group.get_weights()[pid].values()} == {np.dtype("float32")}
    finally:
        algo.stop()


@pytest.mark.slow
def test_sync_from_a_remote_learner_actor(ray_session, tiny_paths):
    """``resources.num_learners: 1`` (the learner in its own Ray actor): the sync asks that learner for its
    weights and the worker serves exactly them after an update."""
    import torch

    cfg = (vowel_config(tiny_paths[0]).training(filter_zero_variance=False)
           .learners(num_learners=1, num_cpus_per_learner=1))
    algo = cfg.build_algo()
    try:
        assert not algo.learner_group.is_local
        r = algo.train()
        assert r["num_updates"] > 0 and r["timers"]["weight_sync_s"] > 0
        (pid, learned), = algo.learner_group.get_weights().items()
        served = algo.rollout_workers.local.backend.inner.model(pid).state_dict()
        for k, v in learned.items():
            assert torch.equal(served[k], torch.as_tensor(np.asarray(v))), k
    finally:
        algo.stop()


# ------------------------------------------------------------------ checkpoints
@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_save_restore_continue_matches_straight_run(ray_session, tiny_paths, tmp_path, precision):
    """bfloat16: pure bf16 weights and Adam state (master_weights=False), micro-batched; RLlib's numpy
    state used to crash on bf16 (tensor_codec stores it as raw bits)."""
    from rllib_integration import ATGRPO

    config = vowel_config(tiny_paths[0])
    if precision == "bfloat16":
        config = config.llm(model_dtype="bfloat16").training(master_weights=False, micro_batch_tokens=64)
    algo = config.build_algo()
    try:
        straight = [algo.train() for _ in range(2)]
        ckpt = tmp_path / "ckpt"
        algo.save_to_path(str(ckpt))
        straight.append(algo.train())
        w_straight = algo.learner_group.get_weights()
    finally:
        algo.stop()
    restored = ATGRPO.from_checkpoint(str(ckpt))
    try:
        assert restored.iteration == 2
        r3 = restored.train()
        w_restored = restored.learner_group.get_weights()
    finally:
        restored.stop()
    assert r3["training_iteration"] == 3
    assert all(r["num_updates"] > 0 for r in straight), [r["num_updates"] for r in straight]
    assert r3["learner"]["shared"]["loss"] == pytest.approx(straight[2]["learner"]["shared"]["loss"], abs=1e-6)
    for key in ("success_rate", "reward_mean", "candidate_reward_mean", "num_updates"):
        assert r3[key] == pytest.approx(straight[2][key], abs=1e-9), key
    assert r3["agents"] == straight[2]["agents"]
    for pid in w_straight:
        for k in w_straight[pid]:
            np.testing.assert_allclose(w_restored[pid][k], w_straight[pid][k], rtol=0, atol=1e-6)


# ------------------------------------------------------------------ worker restart
@pytest.mark.slow
def test_killed_rollout_worker_is_restarted_and_batch_redone(ray_session, tiny_paths):
    import ray

    # Reference: the same two iterations sampled in-process (a batch part depends only on the
    # seeds, the iteration and the weights, not on which process samples it).
    ref = base_config(tiny_paths[0], num_rollout_actors=0).build_algo()
    try:
        expected = [ref.train() for _ in range(2)]
    finally:
        ref.stop()
    algo = base_config(tiny_paths[0], num_rollout_actors=1).build_algo()
    try:
        r1 = algo.train()
        victim = algo.rollout_workers.actors[0]

        class KillAfterSubmit:  # the actor dies while its part of iteration 2 is in flight
            def __init__(self, actor):
                self.actor = actor

            def __getattr__(self, name):
                return getattr(self.actor, name)

            @property
            def sample(self):
                actor = self.actor

                class _M:
                    @staticmethod
                    def remote(*a, **k):
                        ref = actor.sample.remote(*a, **k)
                        ray.kill(actor)
                        return ref
                return _M

        algo.rollout_workers.workers[0].actor = KillAfterSubmit(victim)
        r2 = algo.train()
        assert r2["num_rollout_worker_restarts"] == 1
        restarted = algo.rollout_workers.actors[0]
        assert restarted is not victim and not isinstance(restarted, KillAfterSubmit)
        assert ray.get(algo.rollout_workers.actors[0].ping.remote()) == 1
        for got, want in ((r1, expected[0]), (r2, expected[1])):
            assert got["env_runners"]["num_episodes"] == 4
            for key in ("success_rate", "reward_mean", "candidate_reward_mean"):
                assert got[key] == pytest.approx(want[key], abs=1e-9), key
            assert got["throughput"]["samples"] == want["throughput"]["samples"]
            assert got["agents"] == want["agents"]
    finally:
        algo.stop()


# ------------------------------------------------------------------ CLI end to end
def test_cli_train_writes_outputs_and_eval_restores(ray_session, tmp_path, capsys):
    import json

    from rllib_integration.cli import main

    out = tmp_path / "run"
    sets = ["--set", "rollout.num_rollout_actors=0", "--set", "rollout.envs_per_iteration=2",
            "--set", "sampling.k=2", "--set", "evaluation.interval=2", "--set", "evaluation.num_episodes=2",
            "--set", "env.config={size: 2, obstacle_density: 0.0, max_turns: 1, prompt_style: compact}",
            "--set", "warm_start={episodes: 2, epochs: 1, heldout_episodes: 1}",
            "--set", "sampling.max_new_tokens=2"]
    rc = main(["train", "--iterations", "2", "--output-dir", str(out), "--quiet", *sets])
    assert rc == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    # -1: eval before the warm start, 0: after it (before RL)
    assert [r["training_iteration"] for r in rows] == [-1, 0, 1, 2]
    assert all("evaluation/success_rate" in r and "success_rate" not in r for r in rows[:2])
    assert "agents/executor/valid_ratio" in rows[2] and "evaluation/success_rate" in rows[3]
    assert rows[2]["warm_start/heldout_loss_after"] < rows[2]["warm_start/heldout_loss_before"]
    assert (out / "metrics.csv").read_text().count("\n") == 5
    png = (out / "learning_curve.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert (out / "checkpoint" / "COMPLETE.json").is_file() and (out / "checkpoint" / "tensors.safetensors").is_file()
    rc = main(["eval", str(out / "checkpoint"), "--episodes", "3"])
    assert rc == 0
    assert main(["eval", str(tmp_path)]) == 2  # not a checkpoint: a clear error, no traceback
    # the same config's model(s) untrained: the run's eval before its warm start (iteration -1), value for value
    capsys.readouterr()
    assert main(["eval", "--config", *sets]) == 0
    untrained = json.loads(capsys.readouterr().out)
    before = {k.removeprefix("evaluation/"): v for k, v in rows[0].items() if k.startswith("evaluation/")}
    differ = [k for k in before if k != "time_s" and before[k] != untrained[k] and before[k] == before[k]]
    assert before and untrained["episodes"] == 2 and not differ, (differ, before, untrained)


# ------------------------------------------------------------------ no signal, no optimizer step
class _FlatEnv(VowelEnv):
    """Like Vowel, but ``first`` scores its vowel only on tasks 0 and 1 (on tasks 2 and 3 it
    always scores 0: every group of its candidates has zero variance), and ``second`` scores
    its vowel only if ``second_learns``."""

    metadata = {"name": "flat_test_v0", "render_modes": ["ansi"], "is_parallelizable": False}

    def __init__(self, second_learns: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.second_learns = bool(second_learns)

    def apply_action(self, agent, text):
        vowel = text[:1].lower() in tuple("aeiou")
        if agent == "first":
            return StepOutcome(valid=True, local=float(vowel and self.task.n < 2))
        good = self.second_learns and vowel
        return StepOutcome(valid=True, local=float(good), done=True, success=good)


FLAT = register_task("llm_marl_test/Flat-v0", _FlatEnv, invalid_penalty=0.0)


def test_no_optimizer_step_without_reward_variance(ray_session, tiny_paths):
    """Zero-variance groups are dropped (filter_zero_variance) and a policy with no group left
    takes no optimizer step at all: its weights stay bit-identical, even right after an
    iteration that did update it (Adam's momentum would otherwise keep moving them on a zero
    gradient). An iteration without any signal makes no update and no weight sync."""
    def weights(algo):
        return {pid: {k: v.copy() for k, v in w.items()} for pid, w in algo.learner_group.get_weights().items()}

    def same(a, b):
        return all(np.array_equal(a[k], b[k]) for k in a)

    # 2 envs per iteration from a pool of 4 tasks: iteration 1 plays tasks 0, 1; iteration 2 tasks 2, 3
    base = (vowel_config(tiny_paths[0]).llm(specialization="L3").multi_agent(policies={"first", "second"})
            .rollouts(envs_per_iteration=2, train_task_pool=4))
    algo = base.copy(copy_frozen=False).environment(FLAT, env_config={"second_learns": True}).build_algo()
    try:
        w0 = weights(algo)
        r1 = algo.train()
        w1 = weights(algo)
        assert r1["num_updates"] > 0
        assert not same(w0["first"], w1["first"]), "'first' had no signal on tasks 0, 1; pick another seed"
        r2 = algo.train()
        w2 = weights(algo)
        assert r2["num_updates"] > 0 and not same(w1["second"], w2["second"])
        assert same(w1["first"], w2["first"])  # no group with variance for 'first': not stepped
    finally:
        algo.stop()

    # 'second' never scores: iteration 2 has no group with variance at all -> no update, no sync
    algo = base.copy(copy_frozen=False).environment(FLAT, env_config={"second_learns": False}).build_algo()
    try:
        assert algo.train()["num_updates"] > 0
        w1 = weights(algo)
        r2 = algo.train()
        assert r2["num_updates"] == 0 and r2["throughput"]["samples_trained"] == 0
        assert r2["timers"]["weight_sync_s"] == 0.0
        w2 = weights(algo)
        assert all(same(w1[pid], w2[pid]) for pid in w1)
    finally:
        algo.stop()
