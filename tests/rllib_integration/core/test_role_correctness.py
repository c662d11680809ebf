"""Each role's own correctness in evaluation (issue 24): the tool's program correct, the executor correct
given a correct proposal, and alone, from real PlanPath episodes (the tool's program runs in the sandbox)."""

import math

import pytest

from llm_marl_envs.grid.planpath import PlanPathEnv
from rllib_integration.core.backends.base import Completion, GenerationBackend, SamplingParams
from rllib_integration.core.metrics import role_correctness
from rllib_integration.core.rollout import RolloutSampler

CONFIG = {"size": 3, "obstacle_density": 0.0, "max_turns": 2, "prompt_style": "compact"}


@pytest.fixture(scope="module")
def box(make_sandbox):
    sb = make_sandbox(warm=True, pool_size=1)
    yield sb
    sb.close()


class Scripted(GenerationBackend):
    """Tool: on env 0's first board a program printing its shortest path, else a program printing nothing.
    Executor: copies a proposal when the prompt shows one, else answers one move."""

    def __init__(self, solved_board: str, solution: str):
        self.solved_board, self.solution = solved_board, solution

    def generate(self, requests, params):
        out = []
        for r in requests:
            if r.policy_id == "tool":
                text = (f"```python\nprint('{self.solution}')\n```" if self.solved_board in r.prompt
                        else "```python\nprint('')\n```")
            else:
                line = next((ln for ln in r.prompt.splitlines() if ln.startswith("Tool proposed: ")), "")
                moves = line.removeprefix("Tool proposed: ").split(" ")[0]
                text = moves if moves and set(moves) <= set("UDLR") else "D"
            out.append([Completion(text, [1], [0.0], [1], "stop", r.policy_id) for _ in range(params.n)])
        return out

    def update_weights(self, policy_id, state_dict):
        pass

    def policies(self):
        return ["tool", "executor"]


def test_role_correctness_separates_the_tool_from_the_executor(box):
    probe = PlanPathEnv(**CONFIG, sandbox=box, split="eval")
    probe.reset(seed=0)
    board, solution = probe.board_text(probe.game_state.board), "".join(probe.expert_solution())
    assert len(solution) >= 2  # one wrong move "D" from the start cannot solve it
    envs = [PlanPathEnv(**CONFIG, sandbox=box, split="eval") for _ in range(3)]
    sampler = RolloutSampler(Scripted(board, solution), {"tool": "tool", "executor": "executor"},
                             SamplingParams(seed=0), k=1, chat=False)
    samples = sampler.collect_parallel(envs, seeds=[0, 1, 2])
    roles = role_correctness(samples)
    # env 0: the tool is right at turn 1 and the executor follows it (solved, 1 turn); envs 1-2: the tool proposes
    # nothing in both turns, and the executor's lone "D" never reaches the goal
    tool_steps = [s for s in samples if s.agent == "tool"]
    assert len(tool_steps) == 5 and roles["n_tool"] == 5
    assert roles["tool_correct"] == pytest.approx(1 / 5)
    assert (roles["n_executor_given"], roles["executor_correct_given_tool_correct"]) == (1, 1.0)
    assert (roles["n_executor_without"], roles["executor_correct_without"]) == (4, 0.0)
    assert [e.success for e in sampler.last_episodes] == [True, False, False]


def test_role_correctness_is_empty_without_both_roles_and_nan_for_an_empty_condition():
    from rllib_integration.core.records import GroupKey, Sample

    def sample(agent, team, turn=0):
        return Sample(prompt="", prompt_token_ids=[], completion="", completion_token_ids=[], logprobs=[],
                      reward=team, group_key=GroupKey("t", 0, turn, agent), policy_id=agent, valid=True,
                      reward_parts={"team": team, "local": 0.0})

    assert role_correctness([sample("tool", 1.0)]) == {}
    roles = role_correctness([sample("tool", 0.0), sample("executor", 1.0)])
    assert roles["executor_correct_without"] == 1.0 and math.isnan(roles["executor_correct_given_tool_correct"])
