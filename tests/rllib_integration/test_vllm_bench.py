"""Smoke test of benchmarks/vllm_bench.py against real vLLM (``--quick --models tiny``: two tiny-model engine starts,
~1.5-2 minutes on the 2-core machine): the script runs as a user runs it and its JSON holds every field.

Marked ``vllm``: skipped where ``import vllm`` fails, unless ``LLM_MARL_REQUIRE_VLLM=1`` (as tests/rllib_integration/
test_vllm.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

from .conftest import require_vllm  # noqa: E402

require_vllm()

ROOT = Path(__file__).resolve().parents[2]
BACKEND_FIELDS = {"load_before", "load_after", "start_s", "dtype_resolved", "warmup_s", "seconds", "cpu_s", "tokens",
                  "tokens_per_s", "drift", "memory", "children_after_close"}
VLLM_FIELDS = BACKEND_FIELDS | {"engine_start_s", "engine_options", "dtype_arg", "sync_state_mib", "sync_s",
                                "drift_after_sync"}
DRIFT_FIELDS = {"sampler_logp_diff_mean", "sampler_logp_diff_max", "sampler_k3_kl", "tokens"}
MEMORY_FIELDS = {"baseline_rss_mib", "peak_rss_mib", "pss_after_generate_mib", "peak_processes", "processes_seen"}


def test_quick_run_writes_every_field(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "vllm_bench.py"), "--quick", "--models", "tiny",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    res = json.loads(out.read_text())
    assert {"issue", "command", "started", "machine", "load_before", "load_after", "settings", "models",
            "wall_s", "children_at_end"} <= set(res)
    assert res["settings"]["quick"] is True and res["settings"]["prompts"] == 4
    assert list(res["models"]) == ["tiny"]
    m = res["models"]["tiny"]
    assert {"path", "params_m", "prompt_kind", "model_load_s", "backends", "bf16_row", "ratios"} <= set(m)
    assert m["prompt_kind"] == "text"
    assert set(m["ratios"]) >= {"vllm_fp32_vs_hf", "vllm_bf16_vs_hf"} and all(r > 0 for r in m["ratios"].values())
    backends = m["backends"]
    assert {"hf_fp32", "vllm_fp32", "vllm_auto"} <= set(backends) and m["bf16_row"] in backends
    assert "vllm_fp32_compiled" not in backends  # --quick starts no compiled engine
    for key, b in backends.items():
        assert (VLLM_FIELDS if key.startswith("vllm") else BACKEND_FIELDS) <= set(b), key
        assert DRIFT_FIELDS <= set(b["drift"]) and MEMORY_FIELDS <= set(b["memory"]), key
        assert b["tokens"] > 0 and b["tokens_per_s"] > 0 and b["drift"]["tokens"] == b["tokens"], key
        assert b["memory"]["peak_rss_mib"] >= b["memory"]["baseline_rss_mib"] > 0, key
        if key.startswith("vllm"):
            assert b["engine_start_s"] > 0 and len(b["sync_s"]["all"]) == 2 and b["sync_s"]["mean"] > 0, key
            assert DRIFT_FIELDS <= set(b["drift_after_sync"]), key
    fp32 = backends["vllm_fp32"]
    assert fp32["dtype_arg"] == "float32" and fp32["dtype_resolved"] == "float32"
    assert backends["vllm_auto"]["dtype_arg"] is None
    # the dtype fix: an fp32 policy sampled in fp32 agrees with the fp32 learner (before and after a sync)
    assert fp32["drift"]["sampler_logp_diff_max"] <= 1e-4
    assert fp32["drift_after_sync"]["sampler_logp_diff_max"] <= 1e-4
    assert "| tiny | vLLM fp32 (eager) | float32 |" in proc.stdout
