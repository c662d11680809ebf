"""Sokoban-v0, Sudoku-v0, PlanPath-v0: PettingZoo API, rewards, invalid answers, splits, snapshots."""

import copy
import pathlib

import numpy as np
import pettingzoo
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test

import llm_marl_envs
from llm_marl_envs import split_of
from llm_marl_envs.demo import play_episode, scripted_action
from llm_marl_envs.grid.moves import parse_moves
from llm_marl_envs.grid.planpath import puzzle as pp
from llm_marl_envs.grid.sokoban import puzzle as sk
from llm_marl_envs.grid.sudoku import puzzle as sd

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:pettingzoo.test.api_test")

GRID_IDS = ["llm_marl/Sokoban-v0", "llm_marl/Sudoku-v0", "llm_marl/PlanPath-v0"]
ALL_IDS = GRID_IDS + ["llm_marl/Arithmetic-v0"]
NO_CODE = "I have no program this time."          # an invalid tool action (no fenced block)

# A corridor: player, box two cells from the goal. Optimal solution "RRR" (3 moves), D0 = 2.
CORRIDOR = "#######\n#@ $ .#\n#######"
PUZZLE_4 = "1.3." "..1." ".1.." "3..."


def _kwargs(task_id, sandbox):
    return {} if task_id.endswith("Arithmetic-v0") else {"sandbox": sandbox}


# ------------------------------------------------------------------ PettingZoo's own tests
@pytest.mark.parametrize("task_id", ALL_IDS)
def test_pettingzoo_api_and_seed_tests(task_id, sandbox):
    import llm_marl_envs.examples.arithmetic  # noqa: F401  (registers Arithmetic-v0)

    kw = _kwargs(task_id, sandbox)
    api_test(pettingzoo.make("aec", task_id, **kw), num_cycles=20)
    seed_test(lambda: pettingzoo.make("aec", task_id, **kw), num_cycles=20)
    parallel_api_test(pettingzoo.make("parallel", task_id, **kw), num_cycles=20)
    parallel_seed_test(lambda: pettingzoo.make("parallel", task_id, **kw), num_cycles=20)


def test_registry_lists_the_grid_tasks_and_shortcuts_work(sandbox):
    assert set(GRID_IDS) <= set(llm_marl_envs.registered_tasks())
    env = llm_marl_envs.make("Sudoku-v0", size=9, sandbox=sandbox)
    assert isinstance(env, llm_marl_envs.LLMTeamEnv) and env.possible_agents == ["tool", "executor"]
    env.reset(seed=0)
    assert len(env.task.board) == 9
    par = llm_marl_envs.make_parallel("PlanPath-v0", size=6, sandbox=sandbox)
    obs, infos = par.reset(seed=1)
    assert set(obs) == {"tool", "executor"} and "A" in obs["tool"]["prompt"]


# ------------------------------------------------------------------ arbitrary text
_FRAGMENTS = ["Answer:", "Answer: ", "moves:", "U", "D", "L", "R", "up", "left", " ", "\n", ",", "1", "2", "3", "4",
              "0", ".", "|", "<answer>", "</answer>", "```", "```python\n", "print('Answer: R')\n", "x", "é", "\x00"]
TEXTS = st.one_of(st.text(max_size=300), st.lists(st.sampled_from(_FRAGMENTS), max_size=40).map("".join))


@pytest.mark.parametrize("task_id", GRID_IDS)
def test_arbitrary_text_never_raises_and_unparseable_is_invalid(task_id, sandbox):
    env = llm_marl_envs.make(task_id, sandbox=sandbox, max_turns=50)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(tool_text=TEXTS, exec_text=TEXTS, seed=st.integers(0, 3))
    def check(tool_text, exec_text, seed):
        env.reset(seed=seed)
        board = env.game_state.board
        env.step(tool_text)
        info = env.infos["tool"]
        assert "env_error" not in info
        assert info["action_valid"] == (llm_marl_envs.extract_code_block(tool_text) is not None)
        env.step(exec_text)
        info = env.infos["executor"]
        assert "env_error" not in info
        parsed = env.parse_answer(exec_text)
        if parsed is None:
            assert info["action_valid"] is False
            assert info["reward_parts"] == {"team": 0.0, "local": -env.invalid_penalty}
        if info["action_valid"] is False:
            assert env.game_state.board == board       # nothing applied
        if task_id != "llm_marl/Sudoku-v0":
            assert info["action_valid"] == (parse_moves(exec_text) is not None)

    check()


# ------------------------------------------------------------------ snapshots
def _fingerprint(env):
    return (tuple(env.agents), env.agent_selection, {a: env.observe(a) for a in env.possible_agents},
            dict(env.rewards), dict(env._cumulative_rewards), dict(env.terminations), dict(env.truncations),
            copy.deepcopy(env.infos), env.game_state, env.turn, env.transcript, env.task)


def _action_pool(env):
    pool = [NO_CODE, "Answer: U", "Answer: R R", "Answer: L D", "garbage", "", None]
    pool.append(scripted_action(env, "executor"))          # the solver's answer from the current state
    if type(env).__name__ == "SudokuEnv":
        pool += ["Answer:\n" + env.solution_text().replace("1", "."), "Answer: " + sd.grid_to_string(env.task.board)]
    return pool


@pytest.mark.parametrize("task_id", GRID_IDS)
def test_restore_of_snapshot_gives_back_an_identical_env(task_id, sandbox):
    env = llm_marl_envs.make(task_id, sandbox=sandbox, max_turns=3)
    program = "```python\nprint('Answer: U D')\n```"

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(seed=st.integers(0, 5), prefix=st.lists(st.integers(0, 20), max_size=6),
           suffix=st.lists(st.integers(0, 20), min_size=1, max_size=6))
    def check(seed, prefix, suffix):
        env.reset(seed=seed)

        def play(choices):
            out = []
            for c in choices:
                if not env.agents:
                    break
                pool = _action_pool(env) + [program]
                action = pool[c % len(pool)]
                if env.terminations[env.agent_selection] or env.truncations[env.agent_selection]:
                    action = None
                env.step(action)
                out.append(_fingerprint(env))
            return out

        play(prefix)
        snap = env.snapshot()
        before = _fingerprint(env)
        first = play(suffix)
        env.restore(snap)
        assert _fingerprint(env) == before
        assert play(suffix) == first                       # and it goes on exactly as before

    check()


def test_snapshot_does_not_copy_the_sandbox_and_deepcopy_shares_it(sandbox):
    env = llm_marl_envs.make("Sokoban-v0", sandbox=sandbox)
    env.reset(seed=0)
    snap = env.snapshot()
    assert sandbox not in vars(snap).values()
    clone = copy.deepcopy(env)
    assert clone.sandbox is env.sandbox and clone.game_state == env.game_state


# ------------------------------------------------------------------ splits
@pytest.mark.parametrize("task_id,key", [
    ("llm_marl/Sokoban-v0", lambda t: sk.to_xsb(t.board)),
    ("llm_marl/Sudoku-v0", lambda t: sd.grid_to_string(t.board)),
    ("llm_marl/PlanPath-v0", lambda t: pp.render_text(t.board.grid)),
])
def test_train_and_eval_splits_are_disjoint(task_id, key, sandbox):
    seen = {}
    for split in ("train", "eval"):
        env = llm_marl_envs.make(task_id, split=split, sandbox=sandbox)
        tasks = set()
        for seed in range(40):
            env.reset(seed=seed)
            assert split_of(key(env.task)) == split
            tasks.add(env.task.task_id)
        seen[split] = tasks
    assert not seen["train"] & seen["eval"]
    assert len(seen["train"]) > 20 and len(seen["eval"]) > 20


def test_given_levels_play_in_order_and_splits_partition_them(tmp_path, sandbox):
    levels = [sk.to_xsb(sk.generate(__import__("random").Random(i))[0]) for i in range(8)]
    path = tmp_path / "levels.xsb"
    path.write_text("\n\n".join(levels) + "\n")
    env = llm_marl_envs.make("Sokoban-v0", levels=str(path), sandbox=sandbox)
    for seed in range(10):
        env.reset(seed=seed)
        assert sk.to_xsb(env.task.board) == levels[seed % 8]
    parts = {}
    for split in ("train", "eval"):
        env = llm_marl_envs.make("Sokoban-v0", levels=levels, split=split, sandbox=sandbox)
        parts[split] = set()
        for seed in range(8):
            env.reset(seed=seed)
            parts[split].add(sk.to_xsb(env.task.board))
    assert not parts["train"] & parts["eval"] and parts["train"] | parts["eval"] == set(levels)


# ------------------------------------------------------------------ rewards with known moves
def test_sokoban_rewards_follow_the_formulas():
    env = llm_marl_envs.make("Sokoban-v0", levels=[CORRIDOR], max_turns=10, alpha=0.5, invalid_penalty=0.2)
    env.reset(seed=0)
    assert env.task.optimal == "RRR"
    steps = [("R", 0.0, False), ("R", 0.5, False), ("L", 0.0, False), ("R", 0.0, False)]
    for moves, local, solved in steps:
        env.step(NO_CODE)
        assert env.rewards["tool"] == -0.2 and env.infos["tool"]["action_valid"] is False
        env.step(f"Answer: {moves}")
        assert env.infos["executor"]["reward_parts"] == {"team": 0.0, "local": local}
        assert all(env.terminations.values()) is solved
    env.step(NO_CODE)
    env.step("Answer: R")                                    # solves with 5 moves: no optimal bonus
    assert env.infos["executor"]["reward_parts"] == {"team": 1.0, "local": 0.5}
    assert env.rewards["executor"] == 0.5 * 1.0 + 0.5
    assert all(env.terminations.values()) and env.infos["tool"]["success"] is True


def test_sokoban_optimal_solution_gets_the_bonus_and_repeats_earn_nothing():
    env = llm_marl_envs.make("Sokoban-v0", levels=[CORRIDOR], optimal_bonus=0.25)
    env.reset(seed=0)
    env.step(NO_CODE)
    env.step("Answer: R R")
    assert env.infos["executor"]["reward_parts"]["local"] == 0.5
    env.step(NO_CODE)
    env.step("Answer: L R")                                  # back and forth: no new progress
    assert env.infos["executor"]["reward_parts"]["local"] == 0.0
    env.reset(seed=0)
    env.step(NO_CODE)
    env.step("Let me push it.\nAnswer: right, right, right")
    assert env.infos["executor"]["reward_parts"] == {"team": 1.0, "local": 1.25}
    assert env.infos["executor"]["optimal"] is True


def test_tool_reward_is_its_simulated_progress_and_cannot_be_farmed(sandbox):
    env = llm_marl_envs.make("Sokoban-v0", levels=[CORRIDOR], sandbox=sandbox, max_turns=5, tool_timeout_s=1)
    env.reset(seed=0)
    half = "```python\nprint('Answer: RR')\n```"
    env.step(half)
    assert env.infos["tool"]["reward_parts"] == {"team": 0.0, "local": 0.5}
    prompt = env.observe("executor")["prompt"]
    assert "Answer: RR" in prompt and "Parsed proposal: RR" in prompt
    assert env.game_state.board == env.task.board              # the tool applies nothing
    env.step("nothing")                                        # executor invalid
    env.step(half)                                             # same proposal again: nothing new
    assert env.infos["tool"]["reward_parts"] == {"team": 0.0, "local": 0.0}
    env.step("nothing")
    env.step("```python\nimport sys\nsys.stdin.read()\nprint('Answer: RRR')\n```")
    assert env.infos["tool"]["reward_parts"] == {"team": 1.0, "local": 0.5} and env.infos["tool"]["would_solve"]
    env.step(NO_CODE)
    env.step("```python\nwhile True: pass\n```")             # a program that times out is valid, proposes nothing
    assert env.infos["tool"]["action_valid"] is True and env.infos["tool"]["tool_status"] == "timeout"
    assert env.infos["tool"]["reward_parts"] == {"team": 0.0, "local": 0.0}


def test_planpath_progress_is_shortest_path_distance(sandbox):
    env = llm_marl_envs.make("PlanPath-v0", sandbox=sandbox, max_turns=10)
    env.reset(seed=4)
    path = pp.shortest_path(env.task.board.grid)
    d0 = len(path)
    assert env.task.optimal == d0 and d0 >= 2
    k = d0 // 2
    env.step(NO_CODE)
    env.step("Answer: " + "".join(path[:k]))
    assert env.infos["executor"]["reward_parts"]["local"] == pytest.approx(k / d0)
    pos = env.game_state.board.pos
    assert f"Agent at (row, col) = {pos}" in env.observe("tool")["prompt"]        # the current position
    assert env.observe("tool")["prompt"].count("A") >= 1
    assert pp.render_text(env.task.board.grid, pos) in env.observe("tool")["prompt"]
    back = {"U": "D", "D": "U", "L": "R", "R": "L"}[path[k - 1]]
    env.step(NO_CODE)
    env.step(f"Answer: {back}")
    assert env.infos["executor"]["reward_parts"]["local"] == 0.0
    env.step(NO_CODE)
    env.step("Answer: " + "".join(path[k - 1:]))
    assert env.infos["executor"]["reward_parts"] == {"team": 1.0, "local": pytest.approx(1 - k / d0)}
    assert env.infos["executor"]["optimal"] is False and env.success


def test_sudoku_answers_must_keep_clues_and_rules():
    env = llm_marl_envs.make("Sudoku-v0", puzzles=[PUZZLE_4], max_turns=10)
    env.reset(seed=0)
    sol = env.task.solution
    assert sd.check_answer(env.task.board, sol) == (True, "solved")
    rows = [list(r) for r in sol]
    changed = [r[:] for r in rows]
    changed[0][0] = rows[0][1]                      # change the clue at row 1, column 1 ...
    changed[0][1] = rows[0][0]                      # ... keeping the row a permutation
    answer = "Answer:\n" + "\n".join(" ".join(map(str, r)) for r in changed)
    env.step(NO_CODE)
    env.step(answer)
    info = env.infos["executor"]
    assert info["action_valid"] is False and "given clue at row 1, column 1" in info["reason"]
    assert env.game_state.board == env.task.board
    dup = [list(r) for r in env.task.board]
    blanks = [(r, c) for r in range(4) for c in range(4) if not dup[r][c]]
    r0, c0 = blanks[0]
    dup[r0][c0] = next(v for v in dup[r0] if v)     # repeat a digit of the same row
    env.step(NO_CODE)
    env.step("Answer:\n" + "\n".join(" ".join(str(v) if v else "." for v in r) for r in dup))
    assert env.infos["executor"]["action_valid"] is False and "repeats" in env.infos["executor"]["reason"]
    partial = [list(r) for r in env.task.board]
    for r, c in blanks[:3]:
        partial[r][c] = sol[r][c]
    env.step(NO_CODE)
    env.step("Answer:\n" + "\n".join(" ".join(str(v) if v else "." for v in r) for r in partial))
    assert env.infos["executor"]["reward_parts"] == {"team": 0.0, "local": pytest.approx(3 / len(blanks))}
    env.step(NO_CODE)
    env.step("Answer:\n" + env.solution_text())
    assert env.infos["executor"]["reward_parts"] == {"team": 1.0, "local": pytest.approx(1 - 3 / len(blanks))}
    assert env.success and env.infos["executor"]["optimal"] is False      # not solved in the first turn


def test_timeout_is_not_a_success():
    env = llm_marl_envs.make("Sokoban-v0", levels=[CORRIDOR], max_turns=2)
    env.reset(seed=0)
    for _ in range(2):
        env.step(NO_CODE)
        env.step("Answer: L")
    assert all(env.truncations.values()) and not any(env.terminations.values())
    assert env.infos["executor"]["success"] is False and env.success is False


# ------------------------------------------------------------------ solver-backed episodes and rendering
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), split=st.sampled_from(["train", "eval"]))
def test_optimal_answers_solve_generated_levels_with_the_bonus(seed, split):
    for task_id in GRID_IDS:
        env = llm_marl_envs.make(task_id, split=split)
        env.reset(seed=seed)
        env.step(NO_CODE)
        env.step(scripted_action(env, "executor"))
        assert env.success and env.infos["executor"]["optimal"] is True
        assert env.infos["executor"]["reward_parts"] == {"team": 1.0, "local": 1.0 + env.optimal_bonus}


@pytest.mark.parametrize("task_id", GRID_IDS)
def test_scripted_team_with_real_bfs_program_solves(task_id, sandbox):
    env = llm_marl_envs.make(task_id, sandbox=sandbox)
    summary = play_episode(env, seed=2)
    assert summary["success"] and summary["turns"] == 1
    assert env.transcript[0].info["tool_status"] == "ok" and env.transcript[0].info["would_solve"] is True
    assert env.expert_program() in env.transcript[0].text


@pytest.mark.parametrize("task_id", GRID_IDS)
def test_render_modes(task_id):
    env = llm_marl_envs.make(task_id, render_mode="ansi")
    env.reset(seed=0)
    text = env.render()
    assert isinstance(text, str) and env.board_text(env.game_state.board) in text
    env = llm_marl_envs.make(task_id, render_mode="rgb_array")
    env.reset(seed=0)
    img = env.render()
    assert isinstance(img, np.ndarray) and img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3


def test_bad_task_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="size"):
        llm_marl_envs.make("Sudoku-v0", size=5)
    with pytest.raises(ValueError, match="puzzles\\[0\\]"):
        llm_marl_envs.make("Sudoku-v0", puzzles=["12"])
    with pytest.raises(ValueError, match="not an existing file"):
        llm_marl_envs.make("Sokoban-v0", levels="/nonexistent/levels.xsb")
    with pytest.raises(ValueError, match="levels.xsb.*not an existing file"):  # a Path too, not a TypeError
        llm_marl_envs.make("Sokoban-v0", levels=pathlib.Path("/nonexistent/levels.xsb"))
    with pytest.raises(ValueError, match="already solved"):
        llm_marl_envs.make("Sokoban-v0", levels=["#####\n#@*.#\n#####".replace(".", " ")])


# ------------------------------------------------------------------ compact prompts
@pytest.mark.parametrize("task_id", GRID_IDS)
def test_compact_prompt_shows_state_legend_and_ends_with_the_cue(task_id, sandbox):
    env = llm_marl_envs.make(task_id, sandbox=sandbox, prompt_style="compact", max_turns=3)
    env.reset(seed=0)
    inner = env.unwrapped
    board = inner.board_text(inner.game_state.board)
    tool = env.observe("tool")["prompt"]
    assert board in tool and f"Legend: {inner.legend}" in tool
    assert tool.endswith(".") and "```python" in tool.splitlines()[-1]
    assert "turn 1 of 3, TOOL" in tool and "Applied:" not in tool and "History" not in tool
    env.step(NO_CODE)
    ex = env.observe("executor")["prompt"]
    lines = ex.splitlines()
    assert lines[-1] == f"Answer with {inner.compact_answer_format}."
    assert "\n".join(lines[-1 - len(board.splitlines()):-1]) == board  # the state rows right before the cue
    assert "Tool proposed: none (no program)" in ex and "EXECUTOR" in lines[0]
    assert len(ex) < len(llm_marl_envs.make(task_id, sandbox=sandbox).unwrapped.rules) + 600
    env.step("Answer: R" if not task_id.endswith("Sudoku-v0") else "gibberish")
    env.step(NO_CODE)
    ex2 = env.observe("executor")["prompt"]
    assert "turn 2 of 3" in ex2 and "Applied: turn 1 " in ex2
    assert inner.board_text(inner.game_state.board) in ex2  # the *current* state


def test_compact_planpath_prompt_has_no_precomputed_hints(sandbox):
    env = llm_marl_envs.make("PlanPath-v0", sandbox=sandbox, prompt_style="compact", size=[2, 3],
                             obstacle_density=0.0, max_turns=3)
    env.reset(seed=3)
    inner = env.unwrapped
    env.step(NO_CODE)
    ex = env.observe("executor")["prompt"]
    assert "shortest" not in ex and "(row, col)" not in ex and str(inner.task.board.grid.goal) not in ex
    assert ex.splitlines()[-1] == "Answer with moves U/D/L/R."
    full = llm_marl_envs.make("PlanPath-v0", sandbox=sandbox, size=[2, 3], obstacle_density=0.0, max_turns=3)
    full.reset(seed=3)
    assert inner.board_text(inner.task.board) in full.observe("tool")["prompt"]  # same state as the full prompt


@pytest.mark.parametrize("task_id", GRID_IDS)
def test_compact_prompts_pass_the_pettingzoo_api_test(task_id, sandbox):
    api_test(pettingzoo.make("aec", task_id, sandbox=sandbox, prompt_style="compact"), num_cycles=10)


def test_unknown_prompt_style_is_a_clear_error():
    with pytest.raises(ValueError, match="prompt_style"):
        llm_marl_envs.make("PlanPath-v0", prompt_style="short")
