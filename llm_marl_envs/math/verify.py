"""MathVerify-v0: a solver answers a math problem, a verifier approves it or sends it back.

| Import | `from llm_marl_envs.math import verify as math_verify` |
|---|---|
| Registered id | `llm_marl/MathVerify-v0` |
| Actions | Text |
| Parallel API | Yes (turn-based) |
| Agents | `agents = ['solver', 'verifier']` |
| Number of agents | 2 |
| Action space | `AnyText(0, 16384)` |
| Observation space | `Dict('prompt': AnyText(0, 1048576))` |
| State space | `AnyText(0, 1048576)` |
| Default max turns | 3 |
| Render modes | `ansi`, `human` |

An *orchestrated* team (DrMAS's solver-verifier loop): the env chooses the next role from the
state (:meth:`~llm_marl_envs.base.LLMTeamEnv.next_role`) and the episode ends when the
verifier approves, not after a fixed number of cycles. The problems are Math-v0's (the
generator, ``problems=[...]`` or ``dataset={...}``, same splits; see docs/math.md).

## Roles

``solver`` writes a solution and boxes an answer; ``verifier`` checks it and approves it
or rejects it with feedback. The order follows the verifier:

```text
solver   answer boxed     -> verifier
         no answer        -> solver   (nothing to check: the next attempt starts)
verifier APPROVE          -> episode ends (terminated)
         REJECT: feedback -> solver   (next attempt; it sees the feedback)
         no valid verdict -> solver   (next attempt, without feedback)
```

An *attempt* is one turn: it starts when the solver acts, so ``infos[a]["turn"]`` is the
0-based attempt and ``max_turns`` (``max_attempts``) bounds the attempts.

## Observation

``{"prompt": str}`` per role: the problem, the answer format, the attempt number, and every
earlier attempt (the solver's answer and the verifier's verdict and feedback); the verifier
also sees the solver's latest reply (its last ``reply_chars`` characters) and parsed answer.
``state()`` is the problem, the reference answer and the attempts.

## Action

Free text.

- ``solver``: the answer is the content of the last ``\\boxed{...}`` (``answer_extraction``
  as in Math-v0). Without one the action is invalid.
- ``verifier``: the verdict is the last non-empty line of the reply, exactly ``APPROVE``
  or ``REJECT: <feedback>`` (case-insensitive keyword, an optional final ``.`` after
  APPROVE, non-empty feedback, of which the first ``feedback_chars`` characters are kept).
  Anything else is invalid.

Correctness: ``correct(x) = is_equivalent(x, reference)``
(:func:`llm_marl_envs.math.is_equivalent`); ``x`` is the answer of the current attempt.

## Rewards

``reward = alpha * team + local`` to the acting role at its step (``alpha`` default 1);
weights configurable through ``rewards={...}``:

```text
solver    team  = team_correct * correct(x)
          local = solver_format * 1[boxed answer] + solver_correct * correct(x)
verifier  team  = team_correct * correct(x)
          local = verifier_right  if verdict == (APPROVE if correct(x) else REJECT)
                  verifier_wrong  otherwise
invalid   local = -invalid_penalty             (team as above; x = None for the solver)
```

Defaults: ``team_correct=1``, ``solver_format=0.2``, ``solver_correct=0.8``,
``verifier_right=1``, ``verifier_wrong=-1``. The verifier's team term does not depend on its
own verdict; its local term rewards a correct judgement (approve a correct answer, reject a
wrong one). Info (besides the base's): ``attempt`` (1-based), ``answer``, ``correct``, and
``well_formed`` (solver) or ``verdict`` (``"approve"``, ``"reject"`` or ``None``),
``judgement``, ``feedback`` (verifier).

## Episode end

Terminated when the verifier approves; ``success = correct(x)`` (approving a wrong answer
ends the episode as a failure). Truncated, with ``success=False``, when an attempt ends
without approval and ``max_turns`` attempts (default 3) have been made.

## Arguments

``max_attempts`` (the same setting as ``max_turns``, under this task's name; give one, or equal
values; no ``max_cycles``: the order follows the verifier, so there is no fixed cycle for
PettingZoo's ``max_cycles`` to count), ``rewards``, ``reply_chars`` (default 1500),
``feedback_chars`` (default 300), and Math-v0's problem arguments ``problems``,
``dataset``, ``difficulty``, ``families``, ``answer_extraction``; plus those of
:class:`~llm_marl_envs.base.LLMTeamEnv`.

## Example

>>> from llm_marl_envs.math import verify as math_verify
>>> env = math_verify.env(problems=[{"problem": "What is 6 * 7?", "answer": "42"}], split="all")
>>> env.reset(seed=0)
>>> env.step(r"6 * 7 = 48, so \\boxed{48}.")                       # solver: wrong
>>> env.step("6 * 7 is not 48.\\nREJECT: recompute 6 * 7")           # verifier: right to reject
>>> env.rewards["verifier"], env.agent_selection, env.unwrapped.turn
(1.0, 'solver', 1)
>>> env.step(r"\\boxed{42}")                                         # solver, attempt 2
>>> env.rewards["solver"]                   # 1.0 * team + (0.2 * 1 + 0.8 * 1)
2.0
>>> env.step("APPROVE")                                            # verifier: ends the episode
>>> env.terminations["verifier"], env.infos["verifier"]["success"]
(True, True)

## Version history

- v0: initial version.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

from ..base import StepOutcome
from ..registry import pettingzoo_functions
from .env import MathProblemEnv, MathTask, RewardWeights, _show, parse_reasoner_answer

__all__ = ["Attempt", "MathVerifyEnv", "MathVerifyRewards", "MathVerifyState", "env", "parallel_env",
           "parse_verdict", "raw_env"]


@dataclasses.dataclass(frozen=True)
class MathVerifyRewards(RewardWeights):
    """Reward weights; see the module docstring for the formulas."""

    team_correct: float = 1.0
    solver_format: float = 0.2
    solver_correct: float = 0.8
    verifier_right: float = 1.0
    verifier_wrong: float = -1.0


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One attempt: the solver's reply and answer, then the verifier's verdict (if any)."""

    reply: str
    answer: str | None
    verdict: str | None = None      # "approve", "reject", or None (not checked / no valid verdict)
    feedback: str = ""


@dataclasses.dataclass(frozen=True)
class MathVerifyState:
    attempts: tuple[Attempt, ...] = ()


_APPROVE = re.compile(r"approve\.?", re.IGNORECASE)
_REJECT = re.compile(r"reject\s*:\s*(\S.*)", re.IGNORECASE)


def parse_verdict(text: str, feedback_chars: int = 300) -> tuple[str, str] | None:
    """``("approve", "")`` or ``("reject", feedback)`` from the last non-empty line of ``text``,
    or ``None`` when that line is neither ``APPROVE`` nor ``REJECT: <feedback>``. Never raises."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    last = lines[-1]
    if _APPROVE.fullmatch(last):
        return "approve", ""
    m = _REJECT.fullmatch(last)
    if m:
        return "reject", m.group(1).strip()[:feedback_chars]
    return None


class MathVerifyEnv(MathProblemEnv):
    """``llm_marl/MathVerify-v0``; see the module docstring."""

    roles = ("solver", "verifier")
    default_max_turns = 3
    metadata = {"name": "math_verify_v0", "render_modes": ["ansi", "human"], "is_parallelizable": False}
    #: what a random agent writes half of the time: boxed answers and verdicts, so PettingZoo's random tests
    #: (api_test, seed_test...) reach the verifier and both of its verdicts
    sample_actions = {"solver": (r"So the answer is \boxed{42}.", r"\boxed{7}", r"\boxed{x+1}"),
                      "verifier": ("APPROVE", "Looks wrong.\nREJECT: recompute the last step")}

    def __init__(self, *, max_attempts: int | None = None,
                 rewards: MathVerifyRewards | Mapping[str, float] | None = None, reply_chars: int = 1500,
                 feedback_chars: int = 300, **kwargs: Any) -> None:
        if max_attempts is not None:
            if kwargs.get("max_turns") is not None and kwargs["max_turns"] != max_attempts:
                raise ValueError(f"max_attempts={max_attempts!r} and max_turns={kwargs['max_turns']!r} disagree; "
                                 "they are one setting (an attempt is a turn): give only one")
            kwargs["max_turns"] = max_attempts
        super().__init__(**kwargs)
        for name, value in (("reply_chars", reply_chars), ("feedback_chars", feedback_chars)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive integer (characters)")
        self.rewards_cfg: MathVerifyRewards = MathVerifyRewards.from_config(rewards)
        self.reply_chars = reply_chars
        self.feedback_chars = feedback_chars

    # ------------------------------------------------------------------ hooks
    def initial_state(self, task: MathTask) -> MathVerifyState:
        return MathVerifyState()

    @property
    def current(self) -> Attempt | None:
        """The latest attempt (``None`` before the solver's first reply)."""
        attempts = self.game_state.attempts
        return attempts[-1] if attempts else None

    def prompt(self, agent: str) -> str:
        s: MathVerifyState = self.game_state
        lines = [f"Problem:\n{self.task.problem}", ""]
        if agent == "solver":
            lines += ["You are the solver of a two-agent team (solver and verifier). Think step by step, then give "
                      "your final answer as \\boxed{...} (the last \\boxed{} in your reply counts). The verifier "
                      "approves it (the episode ends) or rejects it with feedback.",
                      f"Attempt {len(s.attempts) + 1} of {self.max_turns}."]
            history = s.attempts
        else:
            current = self.current
            lines += ["You are the verifier of a two-agent team (solver and verifier). Check the solver's answer. "
                      "End your reply with one line: APPROVE if the answer is correct, or REJECT: <feedback for "
                      "the solver> if it is not.",
                      f"Attempt {max(1, len(s.attempts))} of {self.max_turns}."]
            if current is not None and current.verdict is None:  # the attempt to check
                lines += [f"The solver's reply:\n{_tail(current.reply, self.reply_chars)}",
                          f"The solver's answer: {_show(current.answer)}"]
                history = s.attempts[:-1]
            else:
                lines.append("The solver's answer: (none yet)")
                history = s.attempts
        if history:
            lines.append("Earlier attempts:")
            lines += [f"{i}. {_describe(a)}" for i, a in enumerate(history, 1)]
        return "\n".join(lines)

    def apply_action(self, agent: str, text: str) -> StepOutcome:
        w = self.rewards_cfg
        s: MathVerifyState = self.game_state
        if agent == "solver":
            answer = parse_reasoner_answer(text, self.answer_extraction)
            correct = self.correct(answer)
            self.game_state = dataclasses.replace(s, attempts=s.attempts + (Attempt(text, answer),))
            info: dict[str, Any] = {"attempt": len(s.attempts) + 1, "answer": answer, "correct": correct,
                                    "well_formed": answer is not None}
            if answer is None:
                info["reason"] = "no \\boxed{...} answer"
            return StepOutcome(valid=answer is not None, team=w.team_correct * correct,
                               local=w.solver_format * (answer is not None) + w.solver_correct * correct, info=info)
        current = s.attempts[-1]
        correct = self.correct(current.answer)
        judgement = "approve" if correct else "reject"
        parsed = parse_verdict(text, self.feedback_chars)
        verdict, feedback = parsed if parsed is not None else (None, "")
        self.game_state = dataclasses.replace(
            s, attempts=s.attempts[:-1] + (dataclasses.replace(current, verdict=verdict, feedback=feedback),))
        info = {"attempt": len(s.attempts), "answer": current.answer, "correct": correct, "verdict": verdict,
                "judgement": judgement, "feedback": feedback}
        if parsed is None:
            info["reason"] = "the last line is neither 'APPROVE' nor 'REJECT: <feedback>'"
            return StepOutcome(valid=False, team=w.team_correct * correct, info=info)
        local = w.verifier_right if verdict == judgement else w.verifier_wrong
        approved = verdict == "approve"
        return StepOutcome(valid=True, team=w.team_correct * correct, local=local, done=approved,
                           success=approved and correct, info=info)

    def next_role(self, agent: str, outcome: StepOutcome) -> str:
        """Solver -> verifier when it boxed an answer, else the solver again; verifier -> solver
        (after a rejection or an invalid verdict; an approval ends the episode)."""
        if agent == "solver" and self.current is not None and self.current.answer is not None:
            return "verifier"
        return "solver"

    # ------------------------------------------------------------------ the expert
    def expert_text(self, agent: str) -> str:
        """Solver: the reference answer boxed; verifier: the correct verdict on the current answer."""
        if agent == "solver":
            return f"The answer is \\boxed{{{self.task.answer}}}."
        current = self.current
        if current is not None and self.correct(current.answer):
            return "The answer is correct.\nAPPROVE"
        return "REJECT: the answer is not correct; check each step of the computation again."

    def render_text(self) -> str:
        s: MathVerifyState = self.game_state
        lines = [f"[{self.task_id}] attempt {len(s.attempts)}/{self.max_turns}", self.task.problem,
                 f"reference: {self.task.answer}"]
        lines += [f"{i}. {_describe(a)}" for i, a in enumerate(s.attempts, 1)]
        return "\n".join(lines)


def _describe(a: Attempt) -> str:
    if a.answer is None:
        return "solver: no \\boxed{} answer (not checked)"
    verdict = {"approve": "APPROVE", "reject": f"REJECT: {a.feedback}", None: "(no valid verdict)"}[a.verdict]
    return f"solver: {_show(a.answer)}; verifier: {verdict}"


def _tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


#: PettingZoo's module functions: ``env()`` (wrapped), ``raw_env``, ``parallel_env()``.
raw_env, env, parallel_env = pettingzoo_functions(MathVerifyEnv)
