"""Per-role correctness is a hook every task can implement (issue 33): an env class's ``role_metrics(samples)`` is
what an evaluation reports as ``roles/*``; without one, the grid tasks' tool -> executor rule. Router-v0 defines one
(the share of router steps that call the lookup agent, the lookup agent's correctness)."""

from __future__ import annotations

import math

import pytest

from llm_marl_envs.examples.router import RouterEnv
from rllib_integration.core.records import GroupKey, Sample


def _sample(agent, text, team, valid=True):
    key = GroupKey("t", 0, 0, agent)
    return Sample(prompt="", prompt_token_ids=[], completion=text, completion_token_ids=[], logprobs=[],
                  reward=team, group_key=key, policy_id=agent, valid=valid, candidate=0, chosen=True,
                  finish_reason="stop", reward_parts={"team": team})


def test_router_role_metrics_count_calls_and_each_roles_correctness():
    samples = [_sample("router", "0", 0.0), _sample("router", "0", 0.0), _sample("router", "e", 1.0),
               _sample("router", "a", 0.0), _sample("router", "zz", 0.0, valid=False),
               _sample("lookup", "e", 1.0), _sample("lookup", "o", 0.0)]
    m = RouterEnv.role_metrics(samples)
    assert m["router_calls"] == 0.5 and m["n_router"] == 4  # the invalid step is no decision
    assert m["router_correct_direct"] == 0.5 and m["n_router_direct"] == 2
    assert m["lookup_correct"] == 0.5 and m["n_lookup"] == 2
    assert math.isnan(RouterEnv.role_metrics([_sample("router", "0", 0.0)])["lookup_correct"])


@pytest.mark.slow
def test_an_evaluation_reports_the_tasks_own_role_metrics():
    from rllib_integration import ATGRPOConfig
    from rllib_integration.core.models import build_tiny_model

    algo = (ATGRPOConfig().environment("llm_marl/Router-v0").llm(model_path=str(build_tiny_model()))
            .sampling(k=2, max_new_tokens=1, chat=False).rollouts(num_rollout_actors=0, envs_per_iteration=2)
            .evaluation(evaluation_num_episodes=8).debugging(seed=0)).build_algo()
    try:
        roles = algo.evaluate()["roles"]
    finally:
        algo.stop()
    assert {"router_calls", "n_router", "lookup_correct", "n_lookup"} <= set(roles), roles
    assert "tool_correct" not in roles
    assert roles["n_router"] <= 8
