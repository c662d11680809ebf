"""Every role stays in play (issue 33): in tree mode a router's delegation (no reward now, the role it calls
pays later) is never the continued candidate with ``tree_select="best"``, so the called role gets no samples;
``tree_select="sample"`` continues it as often as the policy proposes it. Every training result counts each
role's samples, and a role without samples for 3 iterations in a row is a loud warning (Python warning and
log) that names what to change."""

import dataclasses
import logging
from types import SimpleNamespace

import numpy as np
import pytest

from llm_marl_envs import LLMTeamEnv, StepOutcome
from rllib_integration.core.backends.base import Completion, GenerationBackend, SamplingParams
from rllib_integration.core.metrics import rollout_metrics
from rllib_integration.core.rollout import RolloutSampler
from rllib_integration.results import ROLE_STARVED_WARN_ITERATIONS, LearningSignalWatch, RoleWithoutSamplesWarning


@dataclasses.dataclass(frozen=True)
class Question:
    task_id: str


class Router(LLMTeamEnv):
    """The router answers ("ANSWER: n": a guess, 0.2 for answering at all, +1 if right) or calls the lookup
    agent ("CALL lookup": nothing now), which knows the answer (42)."""

    roles = ("router", "lookup")
    default_max_turns = 2
    metadata = {"name": "router", "render_modes": ["ansi"], "is_parallelizable": False}

    def load_task(self, seed, split):
        return Question(f"q{seed}")

    def initial_state(self, task):
        return ()

    def prompt(self, agent):
        return f"{agent}: what is the answer?"

    def apply_action(self, agent, text):
        if agent == "router" and text == "CALL lookup":
            return StepOutcome(valid=True)
        if text.startswith("ANSWER: "):
            right = text == "ANSWER: 42"
            return StepOutcome(valid=True, team=float(right), local=0.2 if agent == "router" else 0.0, done=True,
                               success=right)
        return StepOutcome(valid=False)

    def next_role(self, agent, outcome):
        return "lookup" if agent == "router" and self.transcript[-1].text == "CALL lookup" else "router"


#: what each role's policy writes (candidate c gets text c mod len)
TEXTS = {"router": ["ANSWER: 7", "CALL lookup", "no idea", "ANSWER: 9"], "lookup": ["ANSWER: 42"]}


class ScriptedBackend(GenerationBackend):
    def generate(self, requests, params):
        return [[Completion(TEXTS[r.policy_id][c % len(TEXTS[r.policy_id])], [c], [0.0], [1], "stop", r.policy_id)
                 for c in range(params.n)] for r in requests]

    def update_weights(self, policy_id, state_dict):
        pass

    def policies(self):
        return list(TEXTS)


def collect(select, envs=8):
    sampler = RolloutSampler(ScriptedBackend(), {"router": "router", "lookup": "lookup"}, SamplingParams(seed=0),
                             k=4, chat=False, tree_select=select)
    samples = sampler.collect_tree([Router() for _ in range(envs)], seeds=list(range(envs)))
    return samples, sampler.last_episodes


def test_best_never_continues_the_delegation_and_sample_does():
    samples, episodes = collect("best")
    assert {s.agent for s in samples} == {"router"}                     # the lookup role is never played
    assert all(s.completion == "ANSWER: 7" for s in samples if s.chosen)  # 0.2 now beats the call's 0
    assert not any(e.success for e in episodes)

    samples, episodes = collect("sample")
    chosen = [s.completion for s in samples if s.chosen and s.agent == "router"]
    assert "CALL lookup" in chosen and "no idea" not in chosen          # only valid candidates are continued
    lookup = [s for s in samples if s.agent == "lookup"]
    assert len(lookup) == 4 * chosen.count("CALL lookup") > 0           # K candidates per node, as for any role
    assert sum(e.success for e in episodes) == chosen.count("CALL lookup")
    assert collect("sample")[0] == samples                               # seeded by SamplingParams.seed


def test_tree_select_is_checked():
    with pytest.raises(ValueError, match="tree_select must be one of"):
        RolloutSampler(ScriptedBackend(), "router", SamplingParams(), tree_select="greedy")


def _result(select):
    samples, episodes = collect(select, envs=2)
    return rollout_metrics(samples, np.zeros(len(samples)), np.arange(len(samples)), np.ones(len(samples), bool),
                           episodes)


def test_every_result_counts_each_role_and_a_starved_role_warns_loudly(caplog):
    cfg = SimpleNamespace(mode="tree", tree_select="best", k=4, temperature=1.0, max_new_tokens=16,
                          warm_start={})
    watch = LearningSignalWatch(agents=["router", "lookup"])
    caplog.set_level(logging.WARNING, logger="rllib_integration.results")
    outs = []
    with pytest.warns(RoleWithoutSamplesWarning) as caught:
        for _ in range(ROLE_STARVED_WARN_ITERATIONS):
            out = _result("best")
            watch.update(cfg, out)
            outs.append(out)
    assert [o["samples_per_role"] for o in outs] == [{"router": 8, "lookup": 0}] * 3
    assert [o["roles_without_samples_streak"]["lookup"] for o in outs] == [1, 2, 3]
    (warned,) = [str(w.message) for w in caught if issubclass(w.category, RoleWithoutSamplesWarning)]
    assert "no samples of role(s) lookup (3 iterations) in a row" in warned
    assert "sampling.tree_select: sample" in warned and "sampling.mode: parallel" in warned
    assert [r.getMessage() for r in caplog.records if "no samples of role" in r.getMessage()] == [warned]

    out = _result("sample")                         # the role is played again: the streak ends
    watch.update(cfg, out)
    assert out["samples_per_role"]["lookup"] > 0 and out["roles_without_samples_streak"] == {"router": 0, "lookup": 0}


@pytest.mark.slow
def test_atgrpo_results_count_every_role_and_warn_of_a_starved_one(ray_session):
    """Through ATGRPO: the tiny untrained model never writes "CALL lookup", so the lookup role gets no
    samples; every training result says so (0, not a missing key), and the third iteration warns."""
    from rllib_integration import ATGRPOConfig
    from rllib_integration.core.models import build_tiny_model

    config = (ATGRPOConfig().environment(Router).llm(model_path=str(build_tiny_model()))
              .sampling(k=2, max_new_tokens=1, chat=False, tree_select="sample")
              .rollouts(num_rollout_actors=0, envs_per_iteration=2).training(lr=1e-3).debugging(seed=0))
    algo = config.build_algo()
    try:
        assert algo.rollout_workers.local.spec.tree_select == "sample"     # the setting reaches the sampler
        with pytest.warns(RoleWithoutSamplesWarning, match="no samples of role.*lookup"):
            results = [algo.train() for _ in range(ROLE_STARVED_WARN_ITERATIONS)]
    finally:
        algo.stop()
    assert [r["samples_per_role"]["lookup"] for r in results] == [0, 0, 0]
    assert all(r["samples_per_role"]["router"] > 0 for r in results)
    assert [r["roles_without_samples_streak"]["lookup"] for r in results] == [1, 2, 3]
