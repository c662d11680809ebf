"""Tree and parallel sampling on an orchestrated task (MathVerify-v0): the sampler follows the env's
role order, and the AT-GRPO group key (task_id, env_idx, turn, agent) stays one node's K candidates
when envs take branches of different lengths."""

from collections import Counter, defaultdict

from llm_marl_envs.math.verify import MathVerifyEnv
from rllib_integration.core.backends.base import Completion, GenerationBackend, SamplingParams
from rllib_integration.core.rollout import RolloutSampler

PROBLEMS = [{"id": "mul", "problem": "What is 6 * 7?", "answer": "42"},
            {"id": "add", "problem": "What is 2 + 2?", "answer": "4"}]
SOLVER = ["no answer", r"\boxed{42}", r"\boxed{4}", "still nothing"]
VERIFIER = ["APPROVE", "REJECT: recheck", "no verdict", "APPROVE"]
HARSH = ["REJECT: a", "REJECT: b", "REJECT: c", "REJECT: d"]   # first attempt at 2 + 2: always rejected


class ScriptedBackend(GenerationBackend):
    def generate(self, requests, params):
        out = []
        for r in requests:
            if r.policy_id == "solver":
                texts = SOLVER
            elif "2 + 2" in r.prompt and "Attempt 1 of" in r.prompt:
                texts = HARSH
            else:
                texts = VERIFIER
            out.append([Completion(texts[c % len(texts)], [c], [0.0], [1], "stop", r.policy_id)
                        for c in range(params.n)])
        return out

    def update_weights(self, policy_id, state_dict):
        pass

    def policies(self):
        return ["solver", "verifier"]


def sampler(k=4):
    return RolloutSampler(ScriptedBackend(), {"solver": "solver", "verifier": "verifier"}, SamplingParams(seed=0),
                          k=k, chat=False)


def envs():
    return [MathVerifyEnv(problems=PROBLEMS, split="all") for _ in range(2)]


def test_tree_sampling_follows_the_verifier_and_groups_one_node_each():
    s = sampler()
    samples = s.collect_tree(envs(), seeds=[0, 1])        # env 0: 6 * 7; env 1: 2 + 2
    groups = defaultdict(list)
    for x in samples:
        groups[x.group_key].append(x)
    assert [(k.task_id, k.env_idx, k.turn, k.agent) for k in groups] == [
        ("mul", 0, 0, "solver"), ("add", 1, 0, "solver"), ("mul", 0, 0, "verifier"), ("add", 1, 0, "verifier"),
        ("add", 1, 1, "solver"), ("add", 1, 1, "verifier")]
    for members in groups.values():                        # one node: K candidates of one prompt
        assert [m.candidate for m in members] == [0, 1, 2, 3]
        assert len({m.prompt for m in members}) == 1 and sum(m.chosen for m in members) == 1
    # env 1's rejected first attempt: every REJECT is wrong (the answer was right) -> reward 1 - 1 = 0
    assert [m.reward for m in groups[("add", 1, 0, "verifier")]] == [0.0] * 4
    assert "REJECT: a" in groups[("add", 1, 1, "solver")][0].prompt
    assert [(e.env_idx, e.steps, e.success, e.terminated) for e in s.last_episodes] == [(0, 2, True, True),
                                                                                       (1, 4, True, True)]


def test_parallel_sampling_groups_episodes_that_reached_a_step():
    s = sampler(k=3)
    samples = s.collect_parallel(envs(), seeds=[0, 1])
    sizes = Counter(x.group_key for x in samples)
    # K episodes per env; the solver's first candidate ("no answer") loops back to the solver at once
    assert all(n <= 3 for n in sizes.values())
    assert all(len({(x.turn, x.agent) for x in samples if x.env_idx == e and x.candidate == c})
               == len([x for x in samples if x.env_idx == e and x.candidate == c])
               for e in (0, 1) for c in range(3))             # each episode visits a (turn, agent) once
