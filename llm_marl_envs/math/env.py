"""Math-v0: a reasoner and a tool agent solve a math problem together.

| Import | `from llm_marl_envs.math import env as math_env` |
|---|---|
| Registered id | `llm_marl/Math-v0` |
| Actions | Text |
| Parallel API | Yes (turn-based) |
| Agents | `agents = ['reasoner', 'tool']` |
| Number of agents | 2 |
| Action space | `AnyText(0, 16384)` |
| Observation space | `Dict('prompt': AnyText(0, 1048576))` |
| State space | `AnyText(0, 1048576)` |
| Default max turns | 4 |
| Render modes | `ansi`, `human` |

Built on :class:`~llm_marl_envs.base.LLMTeamEnv`; the module functions are
``math_env.env()``, ``math_env.raw_env`` (:class:`MathEnv`) and ``math_env.parallel_env()``.

Problems: the built-in procedural generator by default
(:mod:`llm_marl_envs.math.generator`, ``difficulty``/``families``), or
``problems=[{"id", "problem", "answer", ...}, ...]``, or
``dataset={"format": "math"|"aime"|"polaris"|"dapo"|"jsonl", "path": ..., "split": ...}``
(:mod:`llm_marl_envs.math.datasets`). Train and eval are disjoint by construction
(content-hash partition of the problem text); ``dataset["split"]="all"`` or
``split="all"`` plays every given problem.

## Roles

``reasoner`` then ``tool``; one turn is one action of each. The reasoner reasons and
boxes an answer; the tool agent writes a program that computes one.

## Observation

``{"prompt": str}`` per role: the problem, the answer format, the turn number, the role's
own previous answer, and the other role's latest answer (the tool also sees the status
and the truncated stdout/stderr of its previous program). ``state()`` is the problem, the
reference answer and both roles' answers.

## Action

Free text.

- ``reasoner``: the answer is the content of the last ``\\boxed{...}``. Without one the
  action is invalid.
- ``tool``: the last fenced Python block (```` ```python ... ``` ````, or an untagged
  block) is run in the sandbox (``sympy`` is available there) with
  ``tool_timeout_s``/``tool_memory_mb``; its answer is the last non-empty line of stdout
  of a program that ended with status ``ok``, whole (a line over 20,000 characters is no
  answer, never cut to a prefix). Without a code block the action is
  invalid. A program that crashes, hangs, floods its output or runs out of memory is
  valid but has no answer.
  A fault of the sandbox itself (its worker died under the program, also on the fresh workers
  it was retried on) is never scored: ``step`` raises :class:`sandboxes.SandboxInfrastructureError`
  and the step is not taken.

Correctness: ``correct(x) = is_equivalent(x, reference)``
(:func:`llm_marl_envs.math.is_equivalent`, rules in docs/math.md).

## Rewards

Defaults from the AT-GRPO paper, all configurable through ``rewards={...}``; the base
assigns ``reward = alpha * team + local`` to the acting role at its step (``alpha``
default 1):

```text
reasoner local = 0.2 * well_formed + 0.8 * correct(boxed answer)
tool local     = 0.1 * runs + 0.1 * prints_answer + 0.8 * correct(printed answer)
team           = 1.0 * correct(team answer)
invalid local  = -invalid_penalty                                  (team as above)
```

``well_formed``: a non-empty ``\\boxed{}`` answer; ``runs``: the program ended with status
``ok``; ``prints_answer``: it printed a non-empty last line. The *team answer* after an
action is the latest answer given in the episode by either role (the acting role's if it
just gave one; once they agree, the agreed answer). An invalid action also gets
``-invalid_penalty`` (default 0.1) in ``local``, from the base env. Keys of ``rewards``:
``reasoner_format``, ``reasoner_correct``, ``tool_runs``, ``tool_prints``,
``tool_correct``, ``team_correct``.

Info (besides the base's ``turn``, ``task_id``, ``action_valid``, ``reward_parts``,
``reward``): ``answer`` (the parsed answer or ``None``), ``correct``, ``agree``, and
``well_formed`` (reasoner) or ``status``/``runs``/``prints_answer`` (tool).

## Episode end

Terminated as soon as both roles have an answer and the two agree
(``is_equivalent(reasoner answer, tool answer)``); ``success`` is then
``correct(agreed answer)``. Otherwise truncated after ``max_turns`` (default 4) turns,
with ``success=False``.

## Arguments

- **Arguments**: those of :class:`~llm_marl_envs.base.LLMTeamEnv` (``split``,
  ``max_turns``, ``alpha``, ``invalid_penalty``, ``sandbox``, ``sandbox_limits``,
  ``render_mode``), plus ``problems``, ``dataset``, ``difficulty`` (1-3, default 1),
  ``families``, ``rewards``, ``tool_timeout_s`` (default 10), ``tool_memory_mb``
  (default 512), ``feedback_chars`` (default 600: how much program output a prompt shows),
  ``answer_extraction`` (where the reasoner's answer is read: ``"last_boxed"``, the
  default, the last ``\\boxed{}``; ``"all_boxed"``, every boxed answer as one comma list;
  ``"answer_phrase"``, the last ``\\boxed{}`` or else the answer after the last "the answer
  is" / "answer:" / ``Answer $...$``, read as ``is_equivalent`` reads it; see
  :mod:`llm_marl_envs.math.extraction`).

## Example

>>> from llm_marl_envs.math import env as math_env
>>> env = math_env.env(problems=[{"problem": "What is 6 * 7?", "answer": "42"}], split="all")
>>> env.reset(seed=0)
>>> env.step(r"6 * 7 = 42, so \\boxed{42}.")                      # reasoner
>>> env.rewards["reasoner"]                  # 1.0 * team + (0.2 * 1 + 0.8 * 1)
2.0
>>> env.step("```python\\nprint(6 * 7)\\n```")                    # tool: agrees
>>> env.rewards["tool"]                      # 1.0 * team + (0.1 + 0.1 + 0.8 * 1)
2.0
>>> env.terminations["tool"], env.infos["tool"]["success"]
(True, True)

## Version history

- v0: initial version. Later additions that change no episode (the module functions
  ``env``/``raw_env``/``parallel_env``, ``state_space``, the ``max_cycles`` check) keep v0.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping, Sequence

from ..base import LLMTeamEnv, StepOutcome, extract_code_block, split_of
from .datasets import DatasetError, load_dataset
from .equivalence import is_equivalent
from .extraction import EXTRACTION_MODES, MAX_INPUT_CHARS, extract_answer
from .generator import generate_problem
from ..registry import pettingzoo_functions

__all__ = ["MathEnv", "MathProblemEnv", "MathRewards", "MathTask", "MathState", "RewardWeights", "env",
           "parallel_env", "parse_reasoner_answer", "parse_tool_output", "raw_env"]


class RewardWeights:
    """A frozen dataclass of named reward weights built from ``rewards={...}`` (see :meth:`from_config`)."""

    @classmethod
    def from_config(cls, config: Any) -> Any:
        """``None``: the defaults; an instance: itself; a mapping: the defaults with those weights
        replaced (unknown names and non-numbers raise a ``ValueError`` naming them)."""
        if config is None:
            return cls()
        if isinstance(config, cls):
            return config
        if not isinstance(config, Mapping):
            raise TypeError(f"rewards must be a mapping of weights, got {type(config).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = set(config) - known
        if unknown:
            raise ValueError(f"unknown reward weight(s) {sorted(unknown)}; known: {sorted(known)}")
        for key, value in config.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"reward weight {key}={value!r} must be a number")
        return cls(**{k: float(v) for k, v in config.items()})


@dataclasses.dataclass(frozen=True)
class MathRewards(RewardWeights):
    """Reward weights; see the module docstring for the formulas."""

    reasoner_format: float = 0.2
    reasoner_correct: float = 0.8
    tool_runs: float = 0.1
    tool_prints: float = 0.1
    tool_correct: float = 0.8
    team_correct: float = 1.0


@dataclasses.dataclass(frozen=True)
class MathTask:
    task_id: str
    problem: str
    answer: str
    source: str


@dataclasses.dataclass(frozen=True)
class MathState:
    reasoner_answer: str | None = None
    tool_answer: str | None = None
    team_answer: str | None = None
    reasoner_history: tuple[str | None, ...] = ()
    tool_history: tuple[str | None, ...] = ()
    tool_feedback: str = ""


def parse_reasoner_answer(text: str, mode: str = "last_boxed") -> str | None:
    """The reasoner's answer in ``text`` under extraction ``mode`` (stripped), or None.

    ``mode="last_boxed"`` (default): the content of the last ``\\boxed{}``; see
    :func:`llm_marl_envs.math.extraction.extract_answer` for the others."""
    answer = extract_answer(text, mode)
    if answer is None:
        return None
    answer = answer.strip()
    return answer or None


def parse_tool_output(stdout: str) -> str | None:
    """The last non-empty line of a program's stdout (stripped, whole), or None. A line longer than
    :data:`~llm_marl_envs.math.extraction.MAX_INPUT_CHARS` (what the checker reads of an answer) is no
    answer: it is never cut to a prefix (the first 500 digits of a longer number are another number)."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line:
            return line if len(line) <= MAX_INPUT_CHARS else None
    return None


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = max(1, limit // 2)
    return f"{text[:half]}\n...[{len(text) - 2 * half} characters cut]...\n{text[-half:]}"


class MathProblemEnv(LLMTeamEnv):
    """The problems every math task plays (:class:`MathEnv`, ``MathVerifyEnv``): the built-in
    generator (``difficulty``, ``families``), ``problems=[...]`` or ``dataset={...}``, split by a
    content hash of the problem text, and the reasoner's ``answer_extraction`` mode."""

    def __init__(self, *, problems: Sequence[Mapping[str, Any]] | None = None,
                 dataset: Mapping[str, Any] | None = None, difficulty: int = 1,
                 families: Sequence[str] | None = None, answer_extraction: str = "last_boxed",
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if problems is not None and dataset is not None:
            raise ValueError("give either problems=[...] or dataset={...}, not both")
        if difficulty not in (1, 2, 3):
            raise ValueError(f"difficulty={difficulty!r} must be 1, 2 or 3")
        if answer_extraction not in EXTRACTION_MODES:
            raise ValueError(f"answer_extraction={answer_extraction!r} is not a mode; choose one of "
                             f"{list(EXTRACTION_MODES)}")
        self.answer_extraction = answer_extraction
        self.difficulty = difficulty
        self.families = tuple(families) if families else None
        self._problems: tuple[MathTask, ...] | None = None
        if problems is not None:
            tasks = tuple(self._as_task(p, f"problems[{i}]") for i, p in enumerate(problems))
            if not tasks:
                raise ValueError("problems=[] is empty; give at least one problem dict")
            pool = [t for t in tasks if self.split == "all" or split_of(t.problem) == self.split]
            if not pool:
                raise ValueError(f"none of the {len(tasks)} given problems falls in split {self.split!r}; "
                                 "use split='all' to play them all, or give more problems")
            self._problems = tuple(pool)
        elif dataset is not None:
            loaded = load_dataset(dataset, split=self.split)
            self._problems = tuple(self._as_task(p, f"dataset record {p.get('id')}") for p in loaded)
        if self.families is not None:
            generate_problem(0, "all", difficulty, self.families)  # validates the family names now

    @staticmethod
    def _as_task(p: Mapping[str, Any], where: str) -> MathTask:
        if not isinstance(p, Mapping):
            raise DatasetError(f"{where}: a problem must be a dict with 'problem' and 'answer', got "
                               f"{type(p).__name__}")
        for key in ("problem", "answer"):
            value = p.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key == "answer":
                continue
            if not isinstance(value, str) or not value.strip():
                raise DatasetError(f"{where}: field {key!r} must be a non-empty string")
        from ..base import stable_hash

        problem, answer = str(p["problem"]), str(p["answer"])
        task_id = str(p.get("id") or f"math-{stable_hash(problem)[:12]}")
        return MathTask(task_id, problem, answer, str(p.get("source", "user")))

    def load_task(self, seed: int, split: str) -> MathTask:
        if self._problems is not None:
            return self._problems[int(seed) % len(self._problems)]
        p = generate_problem(int(seed), split, self.difficulty, self.families)
        return MathTask(p["id"], p["problem"], p["answer"], p["source"])

    def correct(self, answer: str | None) -> bool:
        """``is_equivalent(answer, reference)``; ``False`` for no answer."""
        return answer is not None and is_equivalent(answer, self.task.answer)


class MathEnv(MathProblemEnv):
    """``llm_marl/Math-v0``; see the module docstring."""

    roles = ("reasoner", "tool")
    default_max_turns = 4
    metadata = {"name": "math_v0", "render_modes": ["ansi", "human"], "is_parallelizable": False}

    def __init__(self, *, problems: Sequence[Mapping[str, Any]] | None = None,
                 dataset: Mapping[str, Any] | None = None, difficulty: int = 1,
                 families: Sequence[str] | None = None, rewards: MathRewards | Mapping[str, float] | None = None,
                 tool_timeout_s: float = 10.0, tool_memory_mb: int = 512, feedback_chars: int = 600,
                 answer_extraction: str = "last_boxed", **kwargs: Any) -> None:
        super().__init__(problems=problems, dataset=dataset, difficulty=difficulty, families=families,
                         answer_extraction=answer_extraction, **kwargs)
        if not tool_timeout_s > 0:
            raise ValueError(f"tool_timeout_s={tool_timeout_s!r} must be positive")
        self.rewards_cfg: MathRewards = MathRewards.from_config(rewards)
        self.tool_timeout_s = float(tool_timeout_s)
        self.tool_memory_mb = int(tool_memory_mb)
        self.feedback_chars = int(feedback_chars)

    # ------------------------------------------------------------------ hooks
    def initial_state(self, task: MathTask) -> MathState:
        return MathState()

    def prompt(self, agent: str) -> str:
        s: MathState = self.game_state
        lines = [f"Problem:\n{self.task.problem}", ""]
        turn_line = f"Turn {self.turn + 1} of {self.max_turns}."
        if agent == "reasoner":
            lines += ["You are the reasoner of a two-agent team (reasoner and tool). Think step by step, then give "
                      "your final answer as \\boxed{...} (the last \\boxed{} in your reply counts).", turn_line]
            if s.reasoner_history:
                lines.append(f"Your previous answer: {_show(s.reasoner_answer)}")
            if s.tool_history:
                lines.append(f"The tool agent's latest answer (printed by its program): {_show(s.tool_answer)}")
            if s.reasoner_history or s.tool_history:
                lines.append("The episode ends when your answer and the tool agent's answer agree.")
        else:
            lines += ["You are the tool agent of a two-agent team (reasoner and tool). Write a Python program "
                      "(sympy is available) in a ```python code block that computes the answer and prints it "
                      "as the last line of its output.", turn_line]
            if s.reasoner_history:
                lines.append(f"The reasoner's latest answer: {_show(s.reasoner_answer)}")
            if s.tool_history:
                lines.append(f"Your previous answer: {_show(s.tool_answer)}")
                if s.tool_feedback:
                    lines.append(f"Your previous program:\n{s.tool_feedback}")
            if s.reasoner_history or s.tool_history:
                lines.append("The episode ends when your answer and the reasoner's answer agree.")
        return "\n".join(lines)

    def apply_action(self, agent: str, text: str) -> StepOutcome:
        w = self.rewards_cfg
        s: MathState = self.game_state
        info: dict[str, Any] = {}
        if agent == "reasoner":
            answer = parse_reasoner_answer(text, self.answer_extraction)
            correct = answer is not None and is_equivalent(answer, self.task.answer)
            local = w.reasoner_format * (answer is not None) + w.reasoner_correct * correct
            info.update(well_formed=answer is not None)
            s = dataclasses.replace(s, reasoner_answer=answer if answer is not None else s.reasoner_answer,
                                    reasoner_history=s.reasoner_history + (answer,))
            valid = answer is not None
            if not valid:
                info["reason"] = ("no \\boxed{...} answer" if self.answer_extraction != "answer_phrase"
                                  else "no \\boxed{...} answer and no 'the answer is ...' phrase")
        else:
            code = extract_code_block(text)
            answer, runs, status, feedback = None, False, "no_code", ""
            if code is not None:
                status, stdout, stderr = self._run_tool(code)
                runs = status == "ok"
                if runs:
                    answer = parse_tool_output(stdout)
                half = max(1, self.feedback_chars // 2)
                feedback = f"status: {status}\nstdout:\n{_truncate(stdout, half)}"
                if stderr.strip():
                    feedback += f"\nstderr:\n{_truncate(stderr, half)}"
            correct = answer is not None and is_equivalent(answer, self.task.answer)
            local = w.tool_runs * runs + w.tool_prints * (answer is not None) + w.tool_correct * correct
            info.update(status=status, runs=runs, prints_answer=answer is not None)
            s = dataclasses.replace(s, tool_answer=answer if answer is not None else s.tool_answer,
                                    tool_history=s.tool_history + (answer,),
                                    tool_feedback=feedback if code is not None else s.tool_feedback)
            valid = code is not None
            if not valid:
                info["reason"] = "no fenced ```python code block"
        if answer is not None:
            s = dataclasses.replace(s, team_answer=answer)
        agree = (s.reasoner_answer is not None and s.tool_answer is not None and answer is not None
                 and is_equivalent(s.reasoner_answer, s.tool_answer))
        team_correct = s.team_answer is not None and (
            correct if answer is not None else is_equivalent(s.team_answer, self.task.answer))
        self.game_state = s
        info.update(answer=answer, correct=bool(correct), agree=bool(agree))
        return StepOutcome(valid=valid, team=w.team_correct * bool(team_correct), local=float(local), done=agree,
                           success=bool(agree and team_correct), info=info)

    def _run_tool(self, code: str) -> tuple[str, str, str]:
        # A sandbox exception is a fault of the infrastructure, not the program's outcome: it propagates
        # (LLMTeamEnv.step raises it, unscored) instead of being scored as a failed run.
        result = self.run_program(code, timeout_s=self.tool_timeout_s, memory_mb=self.tool_memory_mb)
        return result.status, result.stdout or "", result.stderr or ""

    # ------------------------------------------------------------------ the expert
    def expert_text(self, agent: str) -> str:
        """Reasoner: the reference answer boxed; tool: a program printing it."""
        answer = self.task.answer
        if agent == "reasoner":
            return f"The answer is \\boxed{{{answer}}}."
        return f"```python\nprint({json.dumps(answer)})\n```"

    def render_text(self) -> str:
        s: MathState = self.game_state
        return (f"[{self.task_id}] turn {self.turn}/{self.max_turns}\n{self.task.problem}\n"
                f"reference: {self.task.answer}\nreasoner: {_show(s.reasoner_answer)}  tool: {_show(s.tool_answer)}")


def _show(answer: str | None, limit: int = 500) -> str:
    if answer is None:
        return "(none yet)"
    return answer if len(answer) <= limit else answer[:limit] + f"...[{len(answer) - limit} characters cut]"


#: PettingZoo's module functions: ``env()`` (wrapped), ``raw_env``, ``parallel_env()``.
raw_env, env, parallel_env = pettingzoo_functions(MathEnv)
