"""Smoke test of benchmarks/gpu_bench.py on CPU (tiny shape): every part runs and reports."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_gpu_bench_quick_runs_every_part(tmp_path, capsys, monkeypatch):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_bench
    finally:
        sys.path.pop(0)
    out = tmp_path / "bench.json"
    calls = []  # (input_ids shape, tokens per row, cache implementation) of every generate call
    build = gpu_bench.build_model

    def spied_build(*a, **k):
        model = build(*a, **k)
        inner = model.generate

        def generate(**kw):
            cfg = kw["generation_config"]
            calls.append((tuple(kw["input_ids"].shape), kw["attention_mask"].sum(1).tolist(),
                          cfg.cache_implementation))
            return inner(**kw)
        model.generate = generate
        return model

    monkeypatch.setattr(gpu_bench, "build_model", spied_build)
    res = gpu_bench.main(["--quick", "--device", "cpu", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(res))
    variants = [(r["part"], r["variant"]) for r in res["rows"]]
    assert [v for p, v in variants if p == "generate"] == [
        "raw generate", "raw generate static", "raw generate static, padded", "HFBackend", "HFBackend static",
        "HFBackend static, warmed up", "HFBackend static logprobs=forward"]  # --quick: 16-token prompts padded to 64
    for r in res["rows"][:7]:
        assert 0 < r["extra"]["steps"] <= 8, r  # decode steps within --new-tokens
    # Each row: a warm-up call and one timed call (--gen-repeats 1). The padded raw row gets what the
    # backend's static cache feeds generate: 4 rows of 64 tokens (16 of them real), a static cache.
    gen = [c for c in calls if c[0][0] == 4]
    raw_padded, hf_static = gen[4:6], gen[8:10]
    assert raw_padded == hf_static and raw_padded[0] == ((4, 64), [16] * 4, "static"), gen
    assert gen[2][0] == (4, 16)  # raw static: unpadded
    assert [v for p, v in variants if p == "learner"] == ["micro_batch_tokens=off", "micro_batch_tokens=64"]
    for r in res["rows"]:
        assert r["tokens_per_s"] > 0 and r["seconds"] > 0, r
    (it,) = [r for r in res["rows"] if r["part"] == "iteration"]
    phases = ("generate_s", "env_s", "sandbox_s", "advantage_s", "update_s", "sync_s")
    for k in ("generate_s", "advantage_s", "update_s", "sync_s"):  # each timed (a phase left out reads 0)
        assert it["extra"][k] > 0, k
    # the phases lie within the iteration's time (env_s is the rollout's rest: not counted twice)
    assert sum(it["extra"][k] for k in phases) <= it["extra"]["total_s"] + 1e-9 and it["seconds"] == it["extra"][
        "total_s"], it
    assert it["extra"]["samples"] > 0
    assert "HFBackend static" in capsys.readouterr().out


def test_gpu_bench_learner_variants(tmp_path):
    """--learner-variants: each scheme builds its own model and reports; a bad spec names the key."""
    import pytest

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_bench
    finally:
        sys.path.pop(0)
    specs = ["precision=low,mb=0", "gc=1,mb=64"]
    res = gpu_bench.main(["--quick", "--device", "cpu", "--parts", "learner", "--learner-variants", *specs])
    rows = [r for r in res["rows"] if r["part"] == "learner"]
    assert [r["variant"] for r in rows] == specs
    assert all(r["tokens_per_s"] > 0 and r["extra"]["params"] > 0 for r in rows)
    assert gpu_bench.parse_variant("compile=1,budget=0.5,mb=4096") == \
        {"precision": "autocast", "gc": 0, "compile": 1, "budget": 0.5, "mb": 4096}
    with pytest.raises(SystemExit, match="unknown key 'micro'"):
        gpu_bench.parse_variant("micro=4")


def test_fresh_decoding_compile_forgets_the_compiled_step(tiny_model_path):
    """Each static-cache row of the generation part compiles its own decoding step: the model's cached
    compiled call is dropped (transformers would reuse it, dynamic after a second shape)."""
    import torch

    from rllib_integration.core.models import load_model

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_bench
    finally:
        sys.path.pop(0)
    model, _ = load_model(tiny_model_path, dtype=torch.float32, device="cpu")
    model._compiled_call = torch.compile(model.__call__)
    gpu_bench.fresh_decoding_compile(model)
    assert "_compiled_call" not in vars(model)
    gpu_bench.fresh_decoding_compile(model)  # nothing compiled: a no-op
