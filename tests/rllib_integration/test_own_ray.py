"""``build_algo()`` from Python starts a Ray of the run's own unless ``RAY_ADDRESS`` names a cluster (issue 31): a
``ray_current_cluster`` file that ``ray start`` left on this machine (another user's cluster, or one that is gone)
made a plain ``ray.init()`` join it, skip the resource check, or hang on a dead address."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import ray
    from rllib_integration import ATGRPOConfig
    from rllib_integration.core.models import build_tiny_model

    config = (ATGRPOConfig().environment("llm_marl/PlanPath-v0", env_config={"size": 3, "max_turns": 2})
              .llm(model_path=str(build_tiny_model())).sampling(k=2, max_new_tokens=1, chat=False)
              .rollouts(num_rollout_actors=1, envs_per_iteration=2).debugging(seed=0))
    algo = config.build_algo()
    algo.train()
    print("nodes", len(ray.nodes()), "address", ray.get_runtime_context().gcs_address)
    algo.stop()
    ray.shutdown()
""")


@pytest.mark.slow
def test_build_algo_starts_its_own_ray_where_a_dead_cluster_is_recorded(tmp_path):
    raytmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's socket paths live under it
    try:
        (raytmp / "ray").mkdir()
        (raytmp / "ray" / "ray_current_cluster").write_text("127.0.0.1:9\n")  # nothing answers there
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update(RAY_TMPDIR=str(raytmp), PYTHONPATH=str(ROOT))
        proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=400)
    finally:
        shutil.rmtree(raytmp, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "nodes 1 " in proc.stdout and "127.0.0.1:9" not in proc.stdout, proc.stdout
