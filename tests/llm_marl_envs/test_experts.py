"""Every task's expert (``LLMTeamEnv.expert_action``) solves it from reset with valid actions."""

from __future__ import annotations

import pytest

import llm_marl_envs

#: (env id, constructor kwargs): every registered task, both grid prompt styles.
CASES = [
    ("PlanPath-v0", {"size": 4}),
    ("PlanPath-v0", {"size": 6, "prompt_style": "compact"}),
    ("Sokoban-v0", {}),
    ("Sokoban-v0", {"prompt_style": "compact"}),
    ("Sudoku-v0", {"size": 4}),
    ("Sudoku-v0", {"size": 4, "prompt_style": "compact"}),
    ("Math-v0", {"difficulty": 2}),
    ("MathVerify-v0", {"difficulty": 2}),
    ("Code-v0", {}),
]
SEEDS = (0, 1, 2)


def play_expert(env, seed: int) -> tuple[bool, list[bool], list[str]]:
    env.reset(seed=seed)
    valid, texts = [], []
    for agent in env.agent_iter(max_iter=100):
        _, _, term, trunc, _ = env.last()
        if term or trunc:
            env.step(None)
            continue
        text = env.expert_action(agent)
        texts.append(text)
        env.step(text)
        valid.append(env.infos[agent]["action_valid"])
    return env.success, valid, texts


@pytest.mark.parametrize("split", ["train", "eval"])
@pytest.mark.parametrize("env_id,kwargs", CASES, ids=[f"{e}-{'-'.join(map(str, k.values()))}" for e, k in CASES])
def test_expert_solves_every_task(env_id, kwargs, split):
    env = llm_marl_envs.make(env_id, split=split, **kwargs)
    for seed in SEEDS:
        success, valid, texts = play_expert(env, seed)
        assert success, f"{env_id} {kwargs} seed {seed}: the expert did not solve {env.task_id}: {texts}"
        assert valid and all(valid), f"{env_id} seed {seed}: invalid expert action among {texts}"


def test_compact_style_drops_the_preamble_and_keeps_the_format():
    full = llm_marl_envs.make("PlanPath-v0", size=5)
    compact = llm_marl_envs.make("PlanPath-v0", size=5, prompt_style="compact")
    for env in (full, compact):
        env.reset(seed=3)
    assert compact.expert_action("tool").startswith("```python\n")
    assert full.expert_action("tool").startswith("I will search")
    moves = compact.expert_action("executor")
    assert moves.startswith("Answer: ") and " " not in moves[len("Answer: "):]  # the form the tool prints
    assert full.expert_action("executor").endswith(" ".join(moves[len("Answer: "):]))


def test_sudoku_compact_executor_answers_the_proposal_as_the_prompt_shows_it(sandbox):
    full = llm_marl_envs.make("Sudoku-v0", size=4, sandbox=sandbox)
    compact = llm_marl_envs.make("Sudoku-v0", size=4, prompt_style="compact", sandbox=sandbox)
    for env in (full, compact):
        env.reset(seed=5)
        env.step(env.expert_action("tool"))
    assert len(compact.expert_program()) < len(full.expert_program())  # the short search
    proposal = compact.answer_text(compact.expert_solution())  # e.g. 1432/3214/2341/4123
    assert f"Tool proposed: {proposal} (program ok)" in compact.observe("executor")["prompt"]
    assert compact.expert_action("executor") == f"Answer: {proposal}"  # a copy of that line
    assert full.expert_action("executor").startswith("The tool's plan checks out.\nAnswer:\n")
    assert compact.parse_answer(compact.expert_action("executor")) == full.parse_answer(full.expert_action("executor"))
    compact.step(compact.expert_action("executor"))
    assert compact.success


def test_expert_action_defaults_to_the_agent_to_act_and_checks_its_input():
    env = llm_marl_envs.make("Math-v0")
    with pytest.raises(RuntimeError, match="reset"):
        env.expert_action("reasoner")
    env.reset(seed=0)
    assert env.expert_action() == env.expert_action("reasoner")
    with pytest.raises(ValueError, match="unknown agent 'coder'"):
        env.expert_action("coder")


def test_a_task_without_an_expert_says_so():
    from llm_marl_envs import LLMTeamEnv
    from llm_marl_envs.examples.arithmetic import ArithmeticEnv

    class NoExpert(ArithmeticEnv):  # a task that does not implement the hook
        expert_text = LLMTeamEnv.expert_text

    env = NoExpert()
    env.reset(seed=0)
    with pytest.raises(NotImplementedError, match="no expert"):
        env.expert_action(env.possible_agents[0])


@pytest.mark.parametrize("style", ["full", "compact"])
def test_the_expert_executor_uses_the_tools_output_when_it_solves(style):
    env = llm_marl_envs.make("PlanPath-v0", size=5, prompt_style=style)
    env.reset(seed=4)
    solver = "".join(env.expert_solution())
    # a tool program proposing a longer path that still solves (moves after the goal are ignored)
    env.step(f"```python\nprint('Answer: {solver}UD')\n```")
    assert env.infos["tool"]["would_solve"]
    text = env.expert_action("executor")
    assert env.parse_answer(text) == list(solver + "UD")
    env.reset(seed=4)
    env.step("```python\nprint('Answer: U')\n```")  # a proposal that does not solve: the solver's answer
    assert env.parse_answer(env.expert_action("executor")) == list(solver)
    env.step(env.expert_action("executor"))
    assert env.success
