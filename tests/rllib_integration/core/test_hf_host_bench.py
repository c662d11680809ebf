"""Smoke test of benchmarks/hf_host_bench.py on CPU (embedded tiny model, small sizes)."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def test_hf_host_bench_counts_ops_per_step_and_host_time(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import hf_host_bench
    finally:
        sys.path.pop(0)
    res = hf_host_bench.main(["--rows", "4", "--new-tokens", "8", "--repeats", "1", "--out", str(tmp_path / "r.json")])
    raw, be = res["ops_per_step"]["raw_generate_static"], res["ops_per_step"]["hf_backend_static"]
    assert raw["ops"] > raw["kernels"] > 50  # a whole forward's operators per step
    # The backend's own per-step work is the sampled-token recorder: log_softmax and gather (2 kernels)
    # plus views; the old logit - logsumexp recorder added 35 operators, 12 of them kernels.
    assert 0 < be["ops"] - raw["ops"] <= 20, (raw, be)
    assert be["kernels"] - raw["kernels"] == 2, (raw, be)
    host = res["host_outside_generate"]
    assert host["min_ms"] > 0 and host["tokens"] > 0
    assert (tmp_path / "r.json").exists()
    with pytest.raises(ValueError, match="new_tokens must be >= 2"):
        hf_host_bench.main(["--rows", "2", "--new-tokens", "1"])
