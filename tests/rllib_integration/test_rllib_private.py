"""The RLlib internals this package uses (rllib_integration/_rllib.py), run against the installed RLlib: an
upgrade that moves one fails here, with the version they were checked against."""

from __future__ import annotations

import pytest

pytest.importorskip("ray.rllib")


def test_checked_against_the_installed_rllib():
    import ray

    from rllib_integration._rllib import CHECKED_RLLIB_VERSION

    assert ray.__version__.startswith(CHECKED_RLLIB_VERSION + "."), (
        f"rllib_integration/_rllib.py was checked against RLlib {CHECKED_RLLIB_VERSION}, this is {ray.__version__}: "
        "check each wrapper there, then update CHECKED_RLLIB_VERSION")


def test_unfrozen_changes_a_frozen_config_and_freezes_it_again():
    from rllib_integration import ATGRPOConfig
    from rllib_integration._rllib import unfrozen

    cfg = ATGRPOConfig()
    cfg.freeze()
    with pytest.raises(AttributeError):
        cfg.evaluation_num_episodes = 3
    with unfrozen(cfg) as c:
        c.evaluation_num_episodes = 3
    assert cfg.evaluation_num_episodes == 3
    with pytest.raises(AttributeError):
        cfg.evaluation_num_episodes = 4


def test_bundles_and_local_learner_group(tmp_path):
    import gymnasium as gym
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from rllib_integration import ATGRPOConfig
    from rllib_integration._rllib import learner_bundles, local_learner, main_process_bundle, one_remote_learner
    from rllib_integration.core.models import build_tiny_model
    from rllib_integration.rl_module import LLMRLModule

    cfg = ATGRPOConfig().resources(num_cpus_for_main_process=1)
    assert main_process_bundle(cfg) == {"CPU": 1, "GPU": 0}
    assert learner_bundles(cfg) == []  # num_learners=0: the learner lives in the algorithm's process
    assert learner_bundles(ATGRPOConfig().learners(num_learners=2)) == [{"CPU": 1, "GPU": 0}] * 2

    path = str(build_tiny_model())
    space = gym.spaces.Text(16)
    spec = RLModuleSpec(module_class=LLMRLModule, observation_space=space, action_space=space,
                        model_config={"policy_id": "shared", "model_path": path, "level": "L1"})
    lg = ATGRPOConfig().llm(model_path=path).build_learner_group(
        rl_module_spec=MultiRLModuleSpec(rl_module_specs={"shared": spec}))
    try:
        learner = local_learner(lg)
        assert learner is not None and "shared" in learner.module.keys()
        assert one_remote_learner(lg) == {}
    finally:
        lg.shutdown()
