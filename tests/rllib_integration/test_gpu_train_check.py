"""Smoke test of benchmarks/gpu_train_check.py on CPU (tiny model, its own Ray in a subprocess):
train, save, free the old algorithm, restore into a fresh one (weights byte-identical), continue --
with the learner's decoder layers compiled, as the 1.7B GPU check runs it (``gpu_session.sh big``)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_train_check_resume_on_cpu(tmp_path):
    out = tmp_path / "check.json"
    sets = ["warm_start.episodes=0", "evaluation.interval=0", "rollout.envs_per_iteration=1", "sampling.k=2",
            "sampling.max_new_tokens=8", "training.filter_zero_variance=false",
            "training.compile_layers=true", "training.activation_memory_budget=0.5",
            f"run.output_dir={tmp_path / 'run'}"]
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu_train_check.py"), "--resume", "--iterations", "1",
           "--num-cpus", "2", "--out", str(out)]
    for s in sets:
        cmd += ["--set", s]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [r["iteration"] for r in report["rows"]] == [1]
    assert report["rows"][0]["timers"]["update_s"] > 0  # an update ran (zero-variance filter off)
    assert report["restored_weights_identical"] is True
    # every decoder layer of every policy's learner compiled, before and after the restore
    layers = report["compiled_layers"]  # policy -> [compiled, all]
    assert set(layers) == {"tool", "executor"} and all(c == n >= 1 for c, n in layers.values()), layers
    assert report["restored_compiled_layers"] == layers
    assert report["continued"]["iteration"] == 2 and report["save_s"] > 0 and report["restore_s"] > 0
