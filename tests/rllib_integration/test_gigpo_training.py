"""ATGRPO with ``training.estimator: gigpo``: one short run on the tiny model in parallel mode (Ray, in-process
rollouts), and the refusal of tree sampling before Ray starts."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from llm_marl_envs import LLMTeamEnv, StepOutcome, register_task
from rllib_integration.settings import ConfigError

torch.set_num_threads(1)


@dataclasses.dataclass(frozen=True)
class _LadderTask:
    rung: int
    task_id: str


class LadderEnv(LLMTeamEnv):
    """Roles `up`/`down` alternate for 2 turns on a ladder of 3 rungs; a reply climbs one rung when its length
    is odd. The top rung ends the episode (team 1). Few states: K episodes of a task meet in the same ones."""

    roles = ("up", "down")
    default_max_turns = 2
    metadata = {"name": "ladder_test_v0", "render_modes": ["ansi"], "is_parallelizable": False}

    def load_task(self, seed, split):
        return _LadderTask(seed % 2, f"ladder/{seed % 2}")

    def initial_state(self, task):
        return task.rung

    def prompt(self, agent):
        return f"rung {self.game_state} of 3 ; {agent}"

    def apply_action(self, agent, text):
        self.game_state += len(text) % 2
        top = self.game_state >= 3
        return StepOutcome(valid=True, local=0.0, team=float(top), done=top, success=top)

    def render_text(self):
        return str(self.game_state)


LADDER = register_task("llm_marl_test/Ladder-v0", LadderEnv, invalid_penalty=0.0)


@pytest.fixture(scope="module")
def tiny_model_path():
    from rllib_integration.core.models import build_tiny_model

    return str(build_tiny_model())  # cached under ~/.cache/llm-marl/tiny/<config hash>


def gigpo_config(model_path, mode="parallel"):
    from rllib_integration import ATGRPOConfig

    return (ATGRPOConfig().environment(LADDER, env_config={})
            .llm(model_path=model_path).sampling(mode=mode, k=4, max_new_tokens=3, chat=False)
            .rollouts(num_rollout_actors=0, envs_per_iteration=2, train_task_pool=2)
            .training(lr=1e-2, estimator="gigpo", gigpo_step_weight=0.5, gigpo_gamma=0.8).debugging(seed=0))


def test_tree_sampling_is_refused_before_ray(tiny_model_path):
    with pytest.raises(ConfigError, match=r"ATGRPOConfig\.estimator: gigpo .*sampling\.mode: parallel"):
        gigpo_config(tiny_model_path, mode="tree").validate()


@pytest.mark.slow
def test_gigpo_run_uses_the_configured_estimator_and_trains(ray_session, tiny_model_path):
    from rllib_integration.core.advantages import gigpo_of_samples
    from rllib_integration.core.options import GiGPOOptions

    algo = gigpo_config(tiny_model_path).build_algo()
    try:
        samples = algo._sample_trees()["samples"]
        adv, gids, keep = algo._advantages(samples)
        ref = gigpo_of_samples(samples, options=GiGPOOptions(step_weight=0.5, gamma=0.8))
        np.testing.assert_array_equal(adv, ref.advantages)
        np.testing.assert_array_equal(gids, ref.step_groups)
        np.testing.assert_array_equal(keep, ref.informative)
        assert np.abs(ref.step_advantages).sum() > 0  # the tiny model's episodes share states and differ after
        before = {k: v.copy() for k, v in algo.learner_group.get_weights()["shared"].items()}
        result = algo.train()
        assert result["num_updates"] > 0 and result["throughput"]["samples_trained"] > 0
        after = algo.learner_group.get_weights()["shared"]
        assert any(not np.array_equal(before[k], after[k]) for k in before)
    finally:
        algo.stop()
