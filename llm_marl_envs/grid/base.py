"""Shared logic of the grid tasks (Sokoban, Sudoku, Plan-path): :class:`GridToolEnv`.

Two roles act in turn: ``tool`` writes a Python program (run in the sandbox with the
current state on stdin) whose printed output proposes an answer; ``executor`` sees the
state, the tool's program and its output, and answers what is actually applied.
A fault of the sandbox itself (its worker died under the program, also on the fresh workers
it was retried on) is never scored: ``step`` raises :class:`sandboxes.SandboxInfrastructureError`
and the step is not taken.

Rewards (``reward = alpha * team + local``, assigned when the role steps). The formulas
are :data:`REWARD_FORMULAS`, computed by :func:`executor_reward` and :func:`tool_reward`;
every grid task's docstring and docs/environments.md quote them verbatim (tested):

```text
executor  team  = 1[solved]
          local = max(0, p(new) - best) + optimal_bonus * 1[solved and optimal]
tool      team  = 1[would_solve]
          local = max(0, p(simulated) - max(best, best_proposal))
invalid   team  = 0
          local = -invalid_penalty
```

- ``p(board)``: the task's *progress* in ``[0, 1]``, ``1`` exactly when solved;
  ``p(new)``: after the executor's answer is applied; ``solved``: ``p(new) = 1``;
  ``optimal``: the task's rule on the total moves used (e.g. equal to the optimal length).
- ``p(simulated)``: the tool's output is parsed like an executor answer and simulated on
  the current board (nothing is applied); ``would_solve``: ``p(simulated) = 1``. A proposal
  that cannot be parsed or breaks the rules earns ``team = local = 0``.
- ``best``: the highest progress the team has *reached* this episode (the initial board's
  at reset), raised by each applied answer; ``best_proposal``: the highest progress of the
  tool's legal proposals so far (the initial board's at reset). Improvement over the best
  so far, not the level, so no-ops, undo/redo and repeated proposals earn nothing: each
  role's progress terms sum to at most ``1 - p(initial)`` per episode.
- invalid: the tool's action without a fenced code block (a program that fails or prints
  nothing parseable is valid and proposes nothing); the executor's answer that cannot be
  parsed or breaks the task's rules (see each task). Nothing is applied.

The episode terminates when the executor solves the puzzle (``success=True``) and is
truncated after ``max_turns`` turns otherwise (``success=False``).

Prompt styles (argument ``prompt_style``, shared by every grid task):

- ``"full"`` (default): role description, rules paragraph, the current state with the
  legend and the task's status lines, the history of every turn, the answer format, and
  for the executor the tool's program, its output and the parsed proposal.
- ``"compact"``: for small models, which attend best to the last tokens. A few lines::

      <task>, turn t of T, <ROLE>.
      Applied: turn 1 R; turn 2 U          (earlier executor answers; only when there are)
      Tool proposed: RR (program ok)       (executor only: this turn's tool result)
      Legend: <the task's one-line legend>
      <the current state rows, exactly as the tool's program gets them on stdin>
      <answer cue>

  The cue ends the prompt: ``Answer with <short format>.`` for the executor (e.g.
  ``Answer with moves U/D/L/R.``; the reply is parsed like any executor answer; a cue
  ending in ``:`` made the random-init tiny model never sample a move token), and for
  the tool one line asking for a ```` ```python ```` program reading the rows on stdin.
  The current state is the same as in the full prompt (the rows determine the status
  lines' positions/counts); nothing is precomputed for the model (no direction to the
  goal, no optimal length, no rules paragraph). Rewards, parsing and dynamics do not
  depend on the style.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
from typing import Any, ClassVar

from llm_marl_envs.base import LLMTeamEnv, StepOutcome, extract_code_block

__all__ = ["Applied", "GridState", "GridToolEnv", "PROMPT_STYLES", "REWARD_FORMULAS", "ToolRun", "executor_reward",
           "expert_program_text", "tool_reward"]

#: Values of the ``prompt_style`` argument of the grid tasks.
PROMPT_STYLES = ("full", "compact")

#: The reward formulas of every grid task, exactly as :func:`executor_reward` and :func:`tool_reward`
#: compute them (tests/llm_marl_envs/test_docs.py evaluates this text against them, and checks that the grid
#: docstrings and docs/environments.md quote it verbatim). ``1[x]`` is 1 if ``x`` holds, else 0.
REWARD_FORMULAS = """\
executor  team  = 1[solved]
          local = max(0, p(new) - best) + optimal_bonus * 1[solved and optimal]
tool      team  = 1[would_solve]
          local = max(0, p(simulated) - max(best, best_proposal))
invalid   team  = 0
          local = -invalid_penalty"""


def executor_reward(p_new: float, best: float, optimal: bool, optimal_bonus: float) -> tuple[float, float]:
    """``(team, local)`` of an applied executor answer (see :data:`REWARD_FORMULAS`);
    ``solved`` is ``p_new >= 1``. ``optimal`` is only consulted when solved."""
    solved = p_new >= 1.0
    local = max(0.0, p_new - best)
    if solved and optimal:
        local += optimal_bonus
    return (1.0 if solved else 0.0), local


def tool_reward(p_simulated: float, best: float, best_proposal: float) -> tuple[float, float]:
    """``(team, local)`` of a legal tool proposal (see :data:`REWARD_FORMULAS`); ``would_solve``
    is ``p_simulated >= 1``."""
    return (1.0 if p_simulated >= 1.0 else 0.0), max(0.0, p_simulated - max(best, best_proposal))


@functools.cache
def expert_program_text(package: str, name: str = "expert.py") -> str:
    """The text of the expert program file ``name`` of a task package (``"llm_marl_envs.grid.sokoban"``).

    Read as package data with :mod:`importlib.resources` (it ships in the wheel beside the task's
    modules) and never imported: it is a program the tool role writes, run in the sandbox with the
    board on stdin, not a module of the package. The text is used as it is (warm-start
    demonstrations are tokenized from it).
    """
    return importlib.resources.files(package).joinpath(name).read_text(encoding="utf-8")


#: Characters of the tool's stdout/stderr shown in prompts (tail kept).
SHOW_STDOUT_CHARS = 2000
SHOW_STDERR_CHARS = 600


@dataclasses.dataclass(frozen=True)
class ToolRun:
    """The tool's program of the current turn and how it ran (deterministic fields only)."""

    code: str
    status: str
    stdout: str
    stderr: str
    proposal: str | None  # canonical text of the parsed proposal, None if nothing parseable


@dataclasses.dataclass(frozen=True)
class Applied:
    """Result of applying an answer to a board: the new board, moves used, and notes."""

    board: Any
    moves_used: int = 0
    note: str = ""


@dataclasses.dataclass(frozen=True)
class GridState:
    """Episode state of a grid task (immutable; replaced on every change)."""

    board: Any
    best: float
    best_proposal: float
    moves_used: int = 0
    tool_run: ToolRun | None = None
    history: tuple[str, ...] = ()
    applied: tuple[str, ...] = ()  # short "turn t <answer>" of each executor answer (compact prompts)


class GridToolEnv(LLMTeamEnv):
    """Base of the tool/executor grid tasks. Subclasses implement the board hooks below
    (plus :meth:`load_task`; tasks carry ``task_id`` and ``board``)."""

    roles = ("tool", "executor")
    default_max_turns = 4
    metadata = {"name": "grid_tool_env", "render_modes": ["ansi", "human", "rgb_array"],
                "is_parallelizable": False}
    #: Display name, rules paragraph, legend and answer format used in prompts.
    task_name: ClassVar[str] = "grid"
    rules: ClassVar[str] = ""
    legend: ClassVar[str] = ""
    answer_format: ClassVar[str] = ""
    tool_output_format: ClassVar[str] = ""
    #: Short answer format in the executor's cue of compact prompts: ``Answer with <this>.``
    compact_answer_format: ClassVar[str] = ""

    def __init__(self, *, optimal_bonus: float = 0.5, tool_timeout_s: float = 5.0, tool_memory_mb: int = 256,
                 prompt_style: str = "full", **kwargs: Any) -> None:
        if prompt_style not in PROMPT_STYLES:
            raise ValueError(f"prompt_style={prompt_style!r} is unknown; use one of {list(PROMPT_STYLES)}")
        super().__init__(**kwargs)
        self.prompt_style = prompt_style
        self.optimal_bonus = float(optimal_bonus)
        self.tool_timeout_s = float(tool_timeout_s)
        self.tool_memory_mb = int(tool_memory_mb)

    # ------------------------------------------------------------------ board hooks
    def board_text(self, board: Any) -> str:
        """Text of a board, as shown in prompts and given to the tool's program on stdin."""
        raise NotImplementedError

    def progress(self, board: Any) -> float:
        """Progress in [0, 1]; exactly 1 when solved."""
        raise NotImplementedError

    def parse_answer(self, text: str) -> Any | None:
        """Parse model (or program) text into an answer; ``None`` if unparseable."""
        raise NotImplementedError

    def answer_text(self, answer: Any) -> str:
        """Canonical short text of a parsed answer (for history and prompts)."""
        return str(answer)

    def apply_answer(self, board: Any, answer: Any) -> Applied | str:
        """Apply a parsed answer; return :class:`Applied`, or a reason string if it breaks the rules."""
        raise NotImplementedError

    def is_optimal(self, moves_used: int) -> bool:
        """Whether a solve with ``moves_used`` moves in total (and ``self.turn``) is optimal."""
        return False

    def status_lines(self, state: GridState) -> list[str]:
        """Extra lines about the current state shown to both roles (moves used, ...)."""
        return [f"Moves used so far: {state.moves_used}"]

    def render_board_rgb(self, board: Any) -> Any:
        raise NotImplementedError

    # ------------------------------------------------------------------ LLMTeamEnv hooks
    def initial_state(self, task: Any) -> GridState:
        p0 = self.progress(task.board)
        return GridState(board=task.board, best=p0, best_proposal=p0)

    def apply_action(self, agent: str, text: str) -> StepOutcome:
        return self._tool_step(text) if agent == "tool" else self._executor_step(text)

    def _tool_step(self, text: str) -> StepOutcome:
        st: GridState = self.game_state
        code = extract_code_block(text)
        if code is None:
            self.game_state = dataclasses.replace(
                st, tool_run=None, history=st.history + (f"turn {self.turn + 1}: tool wrote no ```python block",))
            return StepOutcome(valid=False, info={"reason": "no fenced ```python code block"})
        result = self.run_program(code, stdin=self.board_text(st.board) + "\n", timeout_s=self.tool_timeout_s,
                                  memory_mb=self.tool_memory_mb)
        proposal = self.parse_answer(result.stdout) if result.status == "ok" else None
        team = local = 0.0
        simulated_ok = False
        if proposal is not None:
            applied = self.apply_answer(st.board, proposal)
            if isinstance(applied, Applied):
                simulated_ok = True
                p_sim = self.progress(applied.board)
                team, local = tool_reward(p_sim, st.best, st.best_proposal)
                st = dataclasses.replace(st, best_proposal=max(st.best_proposal, p_sim))
        shown = self.answer_text(proposal) if proposal is not None else None
        run = ToolRun(code=code, status=result.status, stdout=result.stdout[-SHOW_STDOUT_CHARS:],
                      stderr=result.stderr[-SHOW_STDERR_CHARS:], proposal=shown)
        summary = (f"turn {self.turn + 1}: tool program {result.status}, proposed "
                   f"{shown if shown is not None else 'nothing parseable'}")
        self.game_state = dataclasses.replace(st, tool_run=run, history=st.history + (summary,))
        return StepOutcome(valid=True, team=team, local=local,
                           info={"tool_status": result.status, "proposal": shown,
                                 "proposal_legal": simulated_ok, "would_solve": team == 1.0})

    def _executor_step(self, text: str) -> StepOutcome:
        st: GridState = self.game_state
        answer = self.parse_answer(text)
        if answer is None:
            self.game_state = dataclasses.replace(
                st, history=st.history + (f"turn {self.turn + 1}: executor answer unreadable (nothing applied)",),
                applied=st.applied + (f"turn {self.turn + 1} unreadable",))
            return StepOutcome(valid=False, info={"reason": "answer could not be parsed"})
        applied = self.apply_answer(st.board, answer)
        if not isinstance(applied, Applied):
            self.game_state = dataclasses.replace(
                st, history=st.history + (f"turn {self.turn + 1}: executor answer rejected: {applied}",),
                applied=st.applied + (f"turn {self.turn + 1} rejected",))
            return StepOutcome(valid=False, info={"reason": applied})
        p_new = self.progress(applied.board)
        solved = p_new >= 1.0
        moves_used = st.moves_used + applied.moves_used
        optimal = solved and self.is_optimal(moves_used)
        team, local = executor_reward(p_new, st.best, optimal, self.optimal_bonus)
        note = f" ({applied.note})" if applied.note else ""
        summary = (f"turn {self.turn + 1}: executor applied {self.answer_text(answer)}{note}"
                   f"{' -> SOLVED' if solved else ''}")
        self.game_state = dataclasses.replace(st, board=applied.board, best=max(st.best, p_new),
                                              moves_used=moves_used, tool_run=None,
                                              history=st.history + (summary,),
                                              applied=st.applied + (f"turn {self.turn + 1} "
                                                                    f"{self.answer_text(answer)}{note}",))
        return StepOutcome(valid=True, team=team, local=local, done=solved, success=solved,
                           info={"progress": p_new, "moves_used": moves_used, "optimal": optimal,
                                 "answer": self.answer_text(answer)})

    # ------------------------------------------------------------------ prompts
    def _common_prompt(self, role_line: str) -> list[str]:
        st: GridState = self.game_state
        lines = [role_line, "", self.rules, "",
                 f"Current state (turn {min(self.turn, self.max_turns - 1) + 1} of {self.max_turns}):",
                 self.board_text(st.board), "", f"Legend: {self.legend}"]
        lines += self.status_lines(st)
        if st.history:
            lines += ["", "History:"] + [f"- {h}" for h in st.history]
        return lines

    def _compact_prompt(self, agent: str) -> str:
        st: GridState = self.game_state
        lines = [f"{self.task_name}, turn {min(self.turn, self.max_turns - 1) + 1} of {self.max_turns}, "
                 f"{agent.upper()}."]
        if st.applied:
            lines.append("Applied: " + "; ".join(st.applied))
        if agent != "tool":
            run = st.tool_run
            lines.append("Tool proposed: none (no program)" if run is None else
                         f"Tool proposed: {run.proposal if run.proposal is not None else 'nothing'} "
                         f"(program {run.status})")
        lines += [f"Legend: {self.legend}", self.board_text(st.board)]
        if agent == "tool":
            lines.append(f"Reply with a ```python program: stdin = the rows above; print {self.tool_output_format}.")
        else:
            lines.append(f"Answer with {self.compact_answer_format or 'your answer'}.")
        return "\n".join(lines)

    def prompt(self, agent: str) -> str:
        if self.prompt_style == "compact":
            return self._compact_prompt(agent)
        st: GridState = self.game_state
        if agent == "tool":
            lines = self._common_prompt(
                f"You are the TOOL agent of a two-agent team solving a {self.task_name} puzzle. You write a "
                "program; the EXECUTOR agent sees its output and decides what to apply.")
            lines += ["", "Write one Python 3 program in a single ```python fenced block. It receives the current "
                      "state (exactly the grid above, one row per line) on standard input and must print "
                      f"{self.tool_output_format}. It may use search (BFS, A*, backtracking). Limits: "
                      f"{self.tool_timeout_s:g} s, {self.tool_memory_mb} MB, no network, no files."]
            return "\n".join(lines)
        lines = self._common_prompt(
            f"You are the EXECUTOR agent of a two-agent team solving a {self.task_name} puzzle. The TOOL agent "
            "wrote a program to help; your answer is what is actually applied to the puzzle.")
        run = st.tool_run
        if run is None:
            lines += ["", "The tool agent gave no program this turn."]
        else:
            lines += ["", "Tool program:", "```python", run.code.rstrip("\n"), "```",
                      f"It ran with status '{run.status}'. Its output:", "```", run.stdout.rstrip("\n") or "(empty)",
                      "```"]
            if run.stderr.strip():
                lines += ["Its error output (end):", "```", run.stderr.rstrip("\n"), "```"]
            lines.append(f"Parsed proposal: {run.proposal if run.proposal is not None else '(nothing parseable)'}")
        lines += ["", f"Answer format: {self.answer_format}"]
        return "\n".join(lines)

    # ------------------------------------------------------------------ rendering
    def render_text(self) -> str:
        st: GridState = self.game_state
        return f"{self.board_text(st.board)}\n[{self.task_id}] turn {self.turn} progress {self.progress(st.board):.3f}"

    def render_rgb(self) -> Any:
        return self.render_board_rgb(self.game_state.board)

    # ------------------------------------------------------------------ the expert
    def expert_program(self) -> str:
        """The expert tool's Python program (reads the rows on stdin, prints the answer); the tasks
        keep it in a file of their package, read with :func:`expert_program_text`."""
        raise NotImplementedError(f"{type(self).__name__} has no expert tool program")

    def expert_solution(self) -> Any:
        """The solver's answer (a parsed answer, as :meth:`parse_answer` returns) from the current board."""
        raise NotImplementedError(f"{type(self).__name__} has no expert solver")

    def answer_action(self, answer: Any) -> str:
        """The executor's text applying a parsed ``answer`` (move tasks: :meth:`moves_answer`)."""
        return self.moves_answer(answer)

    def expert_text(self, agent: str) -> str:
        """Tool: the task's search program in a ```` ```python ```` block. Executor: the tool's
        proposal when it would solve the puzzle (the expert uses the tool's output), else the
        solver's answer from the current state. ``prompt_style="compact"`` drops the one-line
        preamble."""
        compact = self.prompt_style == "compact"
        if agent == "tool":
            block = f"```python\n{self.expert_program()}```"
            return block if compact else f"I will search the state space.\n{block}"
        st: GridState = self.game_state
        answer, note = self.expert_solution(), "The solver's answer."
        proposal = self.parse_answer(st.tool_run.stdout) if st.tool_run is not None else None
        if proposal is not None:
            applied = self.apply_answer(st.board, proposal)
            if isinstance(applied, Applied) and self.progress(applied.board) >= 1.0:
                answer, note = proposal, "The tool's plan checks out."
        text = self.answer_action(answer)
        return text if compact else f"{note}\n{text}"

    def moves_answer(self, moves: "str | list[str] | None") -> str:
        """An executor answer playing ``moves`` (``Answer: R R D``; ``Answer: RRD`` in compact
        style, the form the tool's programs print). No moves (nothing to play) answers ``U``."""
        moves = list(moves or "U")
        return "Answer: " + ("".join(moves) if self.prompt_style == "compact" else " ".join(moves))
