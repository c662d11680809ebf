"""An algorithm built outside Tune leaves nothing in ~/ray_results (issue 33: RLlib's Trainable made an empty
folder there per build; 79 piled up in one session)."""

from __future__ import annotations

import os
import re

import pytest

from .test_atgrpo import base_config


@pytest.mark.slow
def test_build_outside_tune_leaves_no_folder_in_ray_results():
    from ray.tune.trainable import trainable

    from rllib_integration.core.models import build_tiny_model

    def trainable_dirs() -> set[str]:  # RLlib's per-build folders (mkdtemp with a date prefix; Tune's are named)
        root = trainable.DEFAULT_STORAGE_PATH
        names = os.listdir(root) if os.path.isdir(root) else []
        return {n for n in names if re.match(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d", n)}

    before = trainable_dirs()
    algo = base_config(str(build_tiny_model())).build_algo()
    logdir = algo.logdir
    try:
        assert not logdir.startswith(str(trainable.DEFAULT_STORAGE_PATH)), logdir
        algo.train()
    finally:
        algo.stop()
    after = trainable_dirs()
    assert after == before, sorted(after - before)
    assert not os.path.exists(logdir)  # the temporary folder went with the algorithm (nothing was written there)
