"""Concurrent candidate stepping (RolloutSampler(step_workers=N)) gives exactly the sequential
result, on Code-v0 with real sandbox runs."""

import dataclasses
import threading

import pytest

from llm_marl_envs.code import CodeEnv
from rllib_integration.core.backends.base import Completion, GenerationBackend, SamplingParams
from rllib_integration.core.rollout import DEFAULT_STEP_WORKERS, RolloutSampler

F = "```"
ADD = {"id": "t-add", "title": "Add", "statement": "Read a and b; print a + b.", "kind": "stdio",
       "golden_tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "-5 5\n", "output": "0\n"}],
       "reference_solution": "a, b = map(int, input().split())\nprint(a + b)\n"}
TWICE = {"id": "t-twice", "statement": "Return 2 * x.", "kind": "call", "fn_name": "twice",
         "golden_tests": [{"args": [1], "expected": 2}, {"args": [0], "expected": 0}, {"args": [-4], "expected": -8}],
         "public_tests": [{"args": [5], "expected": 10}],
         "reference_solution": "def twice(x):\n    return 2 * x\n"}

# Coder candidates by round (several rounds without a right answer, so episodes run several turns;
# equal rewards, so the tie rule matters). Programs for both problems: stdio ADD and call TWICE.
HALF = f"{F}python\nimport sys\nd = sys.stdin.read().split()\n" \
       "print(int(d[0]) + int(d[1]) if d and int(d[0]) > 0 else 1)\n" \
       f"def twice(x):\n    return 2 * x if x > 0 else 1\n{F}"
RIGHT = f"{F}python\nimport sys\nd = sys.stdin.read().split()\nprint(int(d[0]) + int(d[1]) if d else 0)\n" \
        f"def twice(x):\n    return 2 * x\n{F}"
WRONG = f"{F}python\nprint(42)\ndef twice(x):\n    return 42\n{F}"
CRASH = f"{F}python\nraise ValueError('boom')\n{F}"
SYNTAX = f"{F}python\nprint(1 +\n{F}"
CODER_ROUNDS = [[WRONG, HALF, CRASH, HALF], [SYNTAX, "no code here", WRONG, CRASH], [HALF, RIGHT, WRONG, RIGHT]]
ADD_TESTS = f'{F}json\n[{{"input": "2 2\\n", "output": "4\\n"}}, {{"input": "0 7\\n", "output": "7\\n"}}]\n{F}'
ADD_BAD = f'{F}json\n[{{"input": "2 2\\n", "output": "5\\n"}}]\n{F}'
TWICE_TESTS = f'{F}json\n[{{"args": [3], "expected": 6}}, {{"args": [-1], "expected": -2}}]\n{F}'
TWICE_BAD = f'{F}json\n[{{"args": [3], "expected": 7}}]\n{F}'
TESTER = [ADD_BAD, TWICE_TESTS, "none", ADD_TESTS, TWICE_BAD]


class ScriptedBackend(GenerationBackend):
    """Fixed candidate texts per call (deterministic), like a sampled model's K answers."""

    def __init__(self):
        self.coder_calls = 0

    def generate(self, requests, params):
        out = []
        for r in requests:
            if r.policy_id == "coder":
                texts = CODER_ROUNDS[min(self.coder_calls, len(CODER_ROUNDS) - 1)]
            else:
                texts = TESTER[self.coder_calls % 2:] + TESTER[:self.coder_calls % 2]
            out.append([Completion(texts[c % len(texts)], [c], [0.0], [1], "stop", r.policy_id)
                        for c in range(params.n)])
        self.coder_calls += any(r.policy_id == "coder" for r in requests)
        return out

    def update_weights(self, policy_id, state_dict):
        pass

    def policies(self):
        return ["coder", "tester"]


@pytest.fixture(scope="module")
def box(make_sandbox):
    sb = make_sandbox(warm=True, pool_size=2)
    yield sb
    sb.close()


def run(box, step_workers):
    envs = [CodeEnv(problems=[ADD, TWICE], sandbox=box, max_turns=3, test_timeout_s=5.0) for _ in range(3)]
    sampler = RolloutSampler(ScriptedBackend(), {"coder": "coder", "tester": "tester"}, SamplingParams(seed=0),
                             k=4, chat=False, step_workers=step_workers)
    samples = sampler.collect_tree(envs, seeds=[0, 1, 2])
    return samples, sampler.last_episodes, [(e.state(), e.snapshot().rewards, e.agent_selection) for e in envs]


def test_concurrent_candidates_equal_sequential_on_code_env(box, monkeypatch):
    seq = run(box, 1)
    threads = set()
    real_run = CodeEnv._run

    def spy(self, code, tests):
        threads.add(threading.current_thread().name)
        return real_run(self, code, tests)

    monkeypatch.setattr(CodeEnv, "_run", spy)
    samples, episodes, finals = seq
    for workers in (4, None):  # None: auto, concurrent because a Code-v0 step runs the sandbox
        threads.clear()
        conc = run(box, workers)
        assert any(t.startswith("llm-marl-step") for t in threads)  # stepped in the pool
        assert [dataclasses.asdict(s) for s in conc[0]] == [dataclasses.asdict(s) for s in samples]
        assert conc[1] == episodes and conc[2] == finals
    # the comparison covers real sandbox results, several turns and ties
    assert len(samples) > 3 * 2 * 4
    assert {s.turn for s in samples} >= {0, 1}
    assert any(s.reward_parts.get("team", 0) > 0 for s in samples)          # golden tests passed in the sandbox
    assert any(0 < s.reward_parts.get("team", 0) < 1 for s in samples)      # HALF: one of two golden tests
    chosen = [s for s in samples if s.chosen]
    assert any(s.candidate == 1 and s.completion == HALF for s in chosen)  # tie with candidate 3: lowest wins


def test_step_workers_validation_and_default():
    be = ScriptedBackend()
    assert RolloutSampler(be, "coder", SamplingParams()).step_workers == DEFAULT_STEP_WORKERS
    for bad in (0, -1, 1.5, True, "4"):
        with pytest.raises(ValueError, match="step_workers"):
            RolloutSampler(be, "coder", SamplingParams(), step_workers=bad)
