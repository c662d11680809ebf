"""An orchestrated task trains with ATGRPO like the others: llm_marl/MathVerify-v0 (solver-verifier
loop) with a tiny model, a warm start from both roles' experts and two iterations of tree rollouts."""

from __future__ import annotations

import pytest
import torch

torch.set_num_threads(1)


@pytest.mark.slow
def test_math_verify_trains_with_atgrpo(ray_session):
    from rllib_integration import ATGRPOConfig
    from rllib_integration.core.models import build_tiny_model

    # the warm start (both roles' experts, 4 episodes) teaches the random tiny model to box an answer,
    # so the verifier acts in some episodes and the episodes of one iteration take different branches
    config = (ATGRPOConfig()
              .environment("llm_marl/MathVerify-v0", env_config={"max_attempts": 2})
              .llm(model_path=str(build_tiny_model()))
              .sampling(k=4, max_new_tokens=32, chat=False)
              .rollouts(num_rollout_actors=0, envs_per_iteration=2, train_task_pool=2)
              .training(lr=1e-2, warm_start={"episodes": 4, "epochs": 30, "heldout_episodes": 1})
              .debugging(seed=0))
    algo = config.build_algo()
    try:
        agents, updates = set(), 0
        for iteration in (1, 2):
            result = algo.train()
            assert result["training_iteration"] == iteration
            if iteration == 1:    # one solver and one verifier demonstration per expert episode
                assert result["warm_start"]["num_demonstrations"] == 8
                assert result["warm_start"]["heldout_loss_after"] < result["warm_start"]["heldout_loss_before"]
            assert result["groups"]["mean_size"] == 4.0     # a group is the K candidates of one node
            assert result["agents"]["solver"]["num_samples"] > 0 and 0.0 <= result["success_rate"] <= 1.0
            agents |= set(result["agents"])
            updates += result["num_updates"]
        assert agents == {"solver", "verifier"} and updates > 0
    finally:
        algo.stop()
