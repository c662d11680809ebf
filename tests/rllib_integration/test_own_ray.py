"""``build_algo()`` from Python starts a Ray of the run's own unless ``RAY_ADDRESS`` names a cluster (issue 31): a
``ray_current_cluster`` file that ``ray start`` left on this machine (another user's cluster, or one that is gone)
made a plain ``ray.init()`` join it, skip the resource check, or hang on a dead address. (The CLI's runs: test_resume's
SIGTERM-at-each-moment test, whose runs start where a dead cluster is recorded.)"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.mark.slow
def test_build_algo_starts_its_own_ray_where_a_dead_cluster_is_recorded(tmp_path, monkeypatch):
    """In this process (no Ray running: build_algo() is the one to start it), as a user's script: Ray's temp dir
    records a cluster at 127.0.0.1:9, where nothing answers; build_algo() starts a one-node Ray of its own, elsewhere,
    and the algorithm trains an iteration on it."""
    import ray

    from rllib_integration import ATGRPOConfig
    from rllib_integration.core.models import build_tiny_model

    assert not ray.is_initialized()
    raytmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's socket paths live under it
    try:
        (raytmp / "ray").mkdir()
        (raytmp / "ray" / "ray_current_cluster").write_text("127.0.0.1:9\n")  # nothing answers there
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        monkeypatch.setenv("RAY_TMPDIR", str(raytmp))
        monkeypatch.chdir(tmp_path)
        config = (ATGRPOConfig().environment("llm_marl/PlanPath-v0", env_config={"size": 3, "max_turns": 2})
                  .llm(model_path=str(build_tiny_model())).sampling(k=2, max_new_tokens=1, chat=False)
                  .rollouts(num_rollout_actors=1, envs_per_iteration=2).debugging(seed=0))
        algo = config.build_algo()
        try:
            algo.train()
            nodes, address = len(ray.nodes()), ray.get_runtime_context().gcs_address
        finally:
            algo.stop()
            ray.shutdown()
    finally:
        shutil.rmtree(raytmp, ignore_errors=True)
    assert nodes == 1 and "127.0.0.1:9" not in address and not address.endswith(":9"), (nodes, address)
