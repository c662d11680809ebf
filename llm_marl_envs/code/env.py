r"""Code-v0: a coder and a tester solve a programming problem; programs run in the sandbox.

| Import | `from llm_marl_envs.code import env as code_env` |
|---|---|
| Registered id | `llm_marl/Code-v0` |
| Actions | Text |
| Parallel API | Yes (turn-based) |
| Agents | `agents = ['coder', 'tester']` |
| Number of agents | 2 |
| Action space | `AnyText(0, 16384)` |
| Observation space | `Dict('prompt': AnyText(0, 1048576))` |
| State space | `AnyText(0, 1048576)` |
| Default max turns | 4 |
| Render modes | `ansi`, `human` |

Built on :class:`~llm_marl_envs.base.LLMTeamEnv`; the module functions are
``code_env.env()``, ``code_env.raw_env`` (:class:`CodeEnv`) and ``code_env.parallel_env()``.

## Roles

``coder`` then ``tester``; one turn is the coder's action then the tester's.

Each turn, in the sandbox (``sandbox.run_tests``, ``test_timeout_s`` per run; a call
problem runs all its cases in one run): at the coder's step its program against the
golden tests and against the tester's latest tests (or the public tests when there are
none yet); at the tester's step the reference solution against the new tests and the
coder's program against them. Results of identical runs are cached, but only when every run
ended ``ok``: a failure (``error``, ``memory``, ``timeout``, ``killed``, ``output_limit``) may
be the sandbox's doing rather than the program's (a loaded machine, a full scratch dir), so it
is run again the next time rather than replayed for the env's life.
A fault of the sandbox itself (its worker died under the program, also on the fresh workers
it was retried on) is never scored: ``step`` raises :class:`sandboxes.SandboxInfrastructureError`
and the step is not taken.

## Observation

``{"prompt": str}``: the problem (statement, starter code, public examples), the answer
format and, from the second action on, feedback. The coder sees its program's results on
the tester's latest tests (which test failed, input, expected versus actual or the error,
each truncated to ``feedback_chars``). The tester sees the coder's current program, how it
does on the tester's tests, and which of its tests the reference solution disagrees with
(the reference's own output is shown only with ``reveal_reference_output=True``). Golden
tests are never shown. ``state()`` is a summary: program status, golden and test counts.

## Action

Free text. Coder: a Python 3 program, read by
:func:`llm_marl_envs.code.parsing.extract_program` (the last ```` ```python ```` block,
else any fenced block, else raw code). For a ``stdio`` problem it reads stdin and writes
stdout; for a ``call`` problem it defines the function ``fn_name`` (a method of a
``Solution`` class is found too). Tester: test cases, read by
:func:`llm_marl_envs.code.parsing.parse_tests`: a JSON list in a ```` ```json ```` block,
``[{"input": "...", "output": "..."}]`` (stdio) or ``[{"args": [...], "expected": v}]``
(call), or ``Input:``/``Output:`` text pairs (a call's output is one value read whole; digits
grouped by thousands, ``3,000``, are refused, not read as the tuple ``(3, 0)``); at most
``max_tests`` tests. Text with no
program (coder) or no readable test (tester) is an invalid action: its ``local`` is
``0 - invalid_penalty`` and ``infos[agent]["action_valid"] = False``.

## Rewards

``reward = alpha * team + local``, given when that role acts; weights are
``reward_weights`` keys, defaults from the AT-GRPO paper:

```text
golden  = share of golden tests the coder's current program passes          (0..1)
team    = golden                                                             (both roles)
coder   local = w_build * builds + w_runs * runs_first + w_golden * golden
          (0.1, 0.1, 0.8)
          builds     = 1 if ast.parse accepts the program (a syntax check on the host
                       that executes nothing), else 0 and nothing is run
          runs_first = 1 if the program ran without crashing (exit 0 / no exception,
                       within limits; the output need not be right) on the first of
                       the tester's latest tests, else on the first public test, else
                       on the first golden test
tester  local = w_valid * tests_run + w_correct * correct                    (0.2, 0.8)
          tests_run  = 1 if at least one test parsed and the reference ran on every
                       parsed test without crashing (with no reference: 1 if parsed)
          correct    = share of the tester's tests whose expected output the reference
                       solution produces; the reference is the problem's
                       reference_solution, else the coder's current program when it
                       passes every golden test, else there is none and correct = 0
invalid local = -invalid_penalty                                             (team as above)
```

## Episode end

Terminated at the tester's step when the coder's current program passes every one of the
tester's (>= 1) tests; ``success`` is then ``True`` iff it passes every golden test.
Truncated after ``max_turns`` turns (``success=False``, as for every task).
``infos[a]["solved"]`` always says whether the current program passes every golden test.

## Arguments

- ``problems``: a list of problem dicts in the schema of :mod:`llm_marl_envs.code.problems`
  (or :class:`CodeProblem` records) to play instead of the built-in set;
- ``dataset``: ``{"format": "apps"|"codecontests"|"livecodebench"|"jsonl", "path": ...,
  "split": ...}`` to load local files (see :mod:`llm_marl_envs.code.datasets`);
- ``split``: ``"train"``/``"eval"`` (disjoint: the id-hash rule of :func:`split_of`) or
  ``"all"``; default ``"all"`` with ``problems=`` and ``"train"`` otherwise;
- ``reward_weights``: any of ``coder_build``, ``coder_runs``, ``coder_golden``,
  ``tester_valid``, ``tester_correct``;
- ``test_timeout_s`` (2.0), ``memory_mb`` (256), ``max_tests`` (10), ``max_test_chars``
  (4000), ``feedback_chars`` (300), ``max_workers`` (4, concurrent sandbox runs per
  ``run_tests``), ``reveal_reference_output`` (False);
- those of :class:`~llm_marl_envs.base.LLMTeamEnv`: ``max_turns`` (default 4; or
  ``max_cycles``), ``alpha`` (1.0), ``invalid_penalty`` (0.1), ``sandbox`` ("auto"),
  ``sandbox_limits``, ``render_mode``.

``reset(seed=s)`` plays problem ``s % n`` of the ``n`` problems in the split (in file
order), so seeds ``0..n-1`` visit each once.

## Example

>>> from llm_marl_envs.code import env as code_env
>>> double = {"id": "double", "statement": "Return twice x.", "kind": "call", "fn_name": "double",
...           "golden_tests": [{"args": [2], "expected": 4}, {"args": [-3], "expected": -6}],
...           "reference_solution": "def double(x):\n    return 2 * x\n"}
>>> env = code_env.env(problems=[double])
>>> env.reset(seed=0)
>>> env.step("```python\ndef double(x):\n    return x + x\n```")        # coder
>>> env.rewards["coder"]                   # 1.0 * golden + (0.1 + 0.1 + 0.8 * golden), golden = 1
2.0
>>> env.step('```json\n[{"args": [5], "expected": 10}]\n```')          # tester
>>> env.rewards["tester"]                  # 1.0 * golden + (0.2 * 1 + 0.8 * 1)
2.0
>>> env.terminations["tester"], env.infos["tester"]["success"]
(True, True)

## Version history

- v0: initial version. Later additions that change no episode (the module functions
  ``env``/``raw_env``/``parallel_env``, ``state_space``, the ``max_cycles`` check) keep v0.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any, ClassVar, Mapping, Sequence

from llm_marl_envs.base import LLMTeamEnv, StepOutcome
from llm_marl_envs.registry import pettingzoo_functions

from .datasets import load_dataset
from .parsing import extract_program, parse_tests, syntax_ok
from .problems import CodeProblem, CodeTest, builtin_problems, problem_from_dict, problems_in_split

__all__ = ["CodeEnv", "CodeState", "Mismatch", "RewardWeights", "RunSummary", "env", "parallel_env", "raw_env"]


@dataclasses.dataclass(frozen=True)
class RewardWeights:
    """Weights of the local reward terms (defaults from the AT-GRPO paper)."""

    coder_build: float = 0.1
    coder_runs: float = 0.1
    coder_golden: float = 0.8
    tester_valid: float = 0.2
    tester_correct: float = 0.8


@dataclasses.dataclass(frozen=True)
class Mismatch:
    """One failed case, texts already truncated for prompts."""

    index: int
    input: str
    expected: str
    actual: str
    status: str


@dataclasses.dataclass(frozen=True)
class RunSummary:
    """One program against one list of tests (what the env keeps of a TestReport)."""

    passed: int
    total: int
    statuses: tuple[str, ...]
    mismatches: tuple[Mismatch, ...] = ()
    actuals: tuple[str, ...] = ()

    @property
    def rate(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total

    @property
    def all_ran(self) -> bool:
        return self.total > 0 and all(s == "ok" for s in self.statuses)


@dataclasses.dataclass(frozen=True)
class CodeState:
    """The episode state (immutable; replaced on every step)."""

    program: str | None = None
    builds: bool = False
    golden: RunSummary | None = None
    tests: tuple[CodeTest, ...] = ()
    test_errors: tuple[str, ...] = ()
    coder_on_tests: RunSummary | None = None     # current program vs the tester's latest tests
    reference_on_tests: RunSummary | None = None  # reference vs the tester's latest tests
    reference_kind: str = "none"                  # "problem" | "coder" | "none"
    last_coder_valid: bool = True
    last_tester_valid: bool = True


def _clip(text: Any, n: int) -> str:
    text = text if isinstance(text, str) else json.dumps(text) if _is_json(text) else repr(text)
    return text if len(text) <= n else text[:n] + f"... [{len(text) - n} more characters]"


def _call_text(test: CodeTest) -> str:
    """The arguments of a call test as Python-like text: ``[1, 2], 3, k=4``."""
    parts = [json.dumps(a) for a in test.args] + [f"{k}={json.dumps(v)}" for k, v in test.kwargs.items()]
    return ", ".join(parts)


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


class CodeEnv(LLMTeamEnv):
    """``llm_marl/Code-v0``; see the module docstring."""

    roles = ("coder", "tester")
    default_max_turns = 4
    metadata = {"name": "code_v0", "render_modes": ["ansi", "human"], "is_parallelizable": False}
    _shared_attrs: ClassVar[frozenset[str]] = LLMTeamEnv._shared_attrs | {"_run_cache", "_run_lock", "_pool"}
    run_cache_size: ClassVar[int] = 2048

    def __init__(self, problems: Sequence[Mapping[str, Any] | CodeProblem] | None = None,
                 dataset: Mapping[str, Any] | None = None, split: str | None = None,
                 reward_weights: Mapping[str, float] | None = None, test_timeout_s: float = 2.0,
                 memory_mb: int = 256, max_tests: int = 10, max_test_chars: int = 4000, feedback_chars: int = 300,
                 max_workers: int | None = 4, reveal_reference_output: bool = False, **kwargs: Any) -> None:
        if problems is not None and dataset is not None:
            raise ValueError("give either problems=[...] or dataset={...}, not both")
        if split is None:
            split = "all" if problems is not None else "train"
        super().__init__(split=split, **kwargs)
        known = {f.name for f in dataclasses.fields(RewardWeights)}
        unknown = sorted(set(reward_weights or {}) - known)
        if unknown:
            raise ValueError(f"unknown reward_weights key(s) {unknown}; known: {sorted(known)}")
        self.weights = RewardWeights(**{k: float(v) for k, v in (reward_weights or {}).items()})
        if test_timeout_s <= 0 or memory_mb < 32 or max_tests < 1 or max_test_chars < 1 or feedback_chars < 20:
            raise ValueError("test_timeout_s must be > 0, memory_mb >= 32, max_tests and max_test_chars >= 1, "
                             "feedback_chars >= 20")
        self.test_timeout_s = float(test_timeout_s)
        self.memory_mb = int(memory_mb)
        self.max_tests = int(max_tests)
        self.max_test_chars = int(max_test_chars)
        self.feedback_chars = int(feedback_chars)
        self.max_workers = max_workers
        self.reveal_reference_output = bool(reveal_reference_output)
        self._pool = self._problem_pool(problems, dataset)
        self._run_cache: OrderedDict[str, RunSummary] = OrderedDict()
        self._run_lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_run_cache"] = OrderedDict()  # a cache, not part of the env's value
        del state["_run_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._run_lock = threading.Lock()

    # ------------------------------------------------------------------ problems
    def _problem_pool(self, problems: Any, dataset: Any) -> tuple[CodeProblem, ...]:
        if dataset is not None:
            pool = load_dataset(dataset, default_split=self.split)
        elif problems is not None:
            if isinstance(problems, (str, bytes)) or not isinstance(problems, Sequence) or not problems:
                raise ValueError("problems must be a non-empty list of problem dicts (see "
                                 "llm_marl_envs.code.problems for the schema)")
            loaded = [p if isinstance(p, CodeProblem) else problem_from_dict(p, "problems", None)
                      for p in problems]
            for i, p in enumerate(loaded):
                if any(q.id == p.id for q in loaded[:i]):
                    raise ValueError(f"problems[{i}]: id {p.id!r} repeats an earlier problem")
            pool = problems_in_split(loaded, self.split)
            if not pool:
                raise ValueError(f"none of the {len(loaded)} given problems falls in split {self.split!r} "
                                 "(the id-hash rule); use split='all' to play them all")
        else:
            pool = builtin_problems(self.split)
        return tuple(pool)

    @property
    def problems(self) -> tuple[CodeProblem, ...]:
        """The problems this env plays (those of its split), in order."""
        return self._pool

    def load_task(self, seed: int, split: str) -> CodeProblem:
        return self._pool[int(seed) % len(self._pool)]

    def initial_state(self, task: CodeProblem) -> CodeState:
        return CodeState()

    # ------------------------------------------------------------------ sandbox runs
    def _run(self, code: str, tests: Sequence[CodeTest]) -> RunSummary:
        task: CodeProblem = self.task
        cases = task.cases(tests)
        key = hashlib.sha256(json.dumps([code, cases, self.test_timeout_s, self.memory_mb],
                                        sort_keys=True).encode("utf-8", "surrogatepass")).hexdigest()
        with self._run_lock:
            hit = self._run_cache.get(key)
            if hit is not None:
                self._run_cache.move_to_end(key)
                return hit
        report = self.run_tests(code, cases, timeout_s=self.test_timeout_s, memory_mb=self.memory_mb,
                                max_workers=self.max_workers)
        n = self.feedback_chars
        mismatches, actuals = [], []
        for i, (test, case) in enumerate(zip(tests, report.cases, strict=True)):
            actual = case.actual if case.actual is not None else ""
            if case.status != "ok":
                err = case.error or (case.stderr.strip().splitlines() or [""])[-1]
                actual = f"<{case.status}{': ' + err if err else ''}>"
            actuals.append(_clip(actual, n))
            if not case.passed:
                shown_in = test.input if task.kind == "stdio" else _call_text(test)
                mismatches.append(Mismatch(i, _clip(shown_in, n), _clip(case.expected, n), _clip(actual, n),
                                           case.status))
        summary = RunSummary(report.passed, report.total, tuple(c.status for c in report.cases), tuple(mismatches),
                             tuple(actuals))
        # Only results the program alone decided: any failure may have been the sandbox's (a loaded machine,
        # a worker short of space or memory), and a cached one would be replayed for the env's life.
        if all(s == "ok" for s in summary.statuses):
            with self._run_lock:
                self._run_cache[key] = summary
                if len(self._run_cache) > self.run_cache_size:
                    self._run_cache.popitem(last=False)
        return summary

    # ------------------------------------------------------------------ actions
    def apply_action(self, agent: str, text: str) -> StepOutcome:
        if agent == "coder":
            return self._coder_step(text)
        return self._tester_step(text)

    def _team_info(self, state: CodeState) -> dict[str, Any]:
        g = state.golden
        return {"golden_passed": g.passed if g else 0, "golden_total": len(self.task.golden_tests),
                "golden_pass_rate": g.rate if g else 0.0, "solved": bool(g and g.all_passed)}

    def _coder_step(self, text: str) -> StepOutcome:
        task: CodeProblem = self.task
        state: CodeState = self.game_state
        program = extract_program(text)
        if program is None:
            self.game_state = dataclasses.replace(state, program=None, builds=False, golden=None,
                                                  coder_on_tests=None, last_coder_valid=False)
            info = {"builds": False, "runs_first": False, **self._team_info(self.game_state),
                    "reason": "no Python program found: answer with a ```python block"}
            return StepOutcome(valid=False, team=0.0, local=0.0, info=info)
        builds = syntax_ok(program)
        golden = on_tests = None
        runs_first = False
        if builds:
            golden = self._run(program, task.golden_tests)
            if state.tests:
                on_tests = self._run(program, state.tests)
                runs_first = on_tests.statuses[:1] == ("ok",)
            elif task.public_tests:
                first = task.public_tests[0]
                if first in task.golden_tests:
                    runs_first = golden.statuses[task.golden_tests.index(first)] == "ok"
                else:
                    runs_first = self._run(program, (first,)).statuses[:1] == ("ok",)
            else:
                runs_first = golden.statuses[:1] == ("ok",)
        rate = golden.rate if golden else 0.0
        w = self.weights
        local = w.coder_build * builds + w.coder_runs * runs_first + w.coder_golden * rate
        self.game_state = dataclasses.replace(state, program=program, builds=builds, golden=golden,
                                              coder_on_tests=on_tests, last_coder_valid=True)
        info = {"builds": builds, "runs_first": runs_first, **self._team_info(self.game_state)}
        if on_tests is not None:
            info.update(tester_tests_passed=on_tests.passed, tester_tests_total=on_tests.total)
        return StepOutcome(valid=True, team=rate, local=local, info=info)

    def _reference(self, state: CodeState) -> tuple[str | None, str]:
        if self.task.reference_solution:
            return self.task.reference_solution, "problem"
        if state.program is not None and state.golden is not None and state.golden.all_passed:
            return state.program, "coder"
        return None, "none"

    def _tester_step(self, text: str) -> StepOutcome:
        state: CodeState = self.game_state
        team = state.golden.rate if state.golden else 0.0
        parsed = parse_tests(text, self.task.kind, self.max_tests, self.max_test_chars)
        if not parsed.ok:
            self.game_state = dataclasses.replace(state, tests=(), test_errors=parsed.errors, coder_on_tests=None,
                                                  reference_on_tests=None, last_tester_valid=False)
            info = {"tests_parsed": 0, "tests_run": False, "tests_correct": 0.0, "parse_errors": list(parsed.errors),
                    **self._team_info(state)}
            return StepOutcome(valid=False, team=team, local=0.0, info=info)
        tests = parsed.tests
        reference, ref_kind = self._reference(state)
        ref_summary = self._run(reference, tests) if reference is not None else None
        tests_run = ref_summary.all_ran if ref_summary is not None else True
        correct = ref_summary.rate if ref_summary is not None else 0.0
        on_tests = self._run(state.program, tests) if state.program is not None and state.builds else None
        w = self.weights
        local = w.tester_valid * tests_run + w.tester_correct * correct
        self.game_state = dataclasses.replace(state, tests=tests, test_errors=parsed.errors, coder_on_tests=on_tests,
                                              reference_on_tests=ref_summary, reference_kind=ref_kind,
                                              last_tester_valid=True)
        done = bool(on_tests is not None and on_tests.all_passed)
        solved = bool(state.golden and state.golden.all_passed)
        info = {"tests_parsed": len(tests), "tests_dropped": parsed.dropped, "tests_run": tests_run,
                "tests_correct": correct, "reference": ref_kind,
                "coder_passes_tests": on_tests.passed if on_tests else 0, **self._team_info(state)}
        return StepOutcome(valid=True, team=team, local=local, done=done, success=done and solved, info=info)

    # ------------------------------------------------------------------ prompts
    def _problem_text(self) -> list[str]:
        task: CodeProblem = self.task
        lines = [f"## Problem: {task.title or task.id}", task.statement.strip(), ""]
        if task.kind == "stdio":
            lines.append("The program reads standard input and writes the answer to standard output.")
        else:
            lines.append(f"The program defines the function `{task.fn_name}`; each test calls it with the "
                         "test's arguments and compares the return value. It reads no input.")
        if task.starter.strip():
            lines += ["", "Starter code:", "```python", task.starter.rstrip(), "```"]
        if task.public_tests:
            lines += ["", "Examples:"]
            for t in task.public_tests[:3]:
                lines += self._show_test(t)
        return lines

    def _show_test(self, t: CodeTest, prefix: str = "") -> list[str]:
        n = self.feedback_chars
        if self.task.kind == "stdio":
            return [f"{prefix}Input:", "```", _clip(t.input, n).rstrip("\n"), "```",
                    "Output:", "```", _clip(t.output, n).rstrip("\n"), "```"]
        return [f"{prefix}{self.task.fn_name}({_clip(_call_text(t), n)}) == {_clip(t.expected_json, n)}"]

    def _show_run(self, title: str, run: RunSummary) -> list[str]:
        lines = [f"{title}: passed {run.passed} of {run.total}."]
        for m in run.mismatches[:5]:
            what = "input" if self.task.kind == "stdio" else "arguments"
            why = "wrong answer" if m.status == "ok" else m.status
            lines += [f"- test {m.index + 1} failed ({why}); {what}: {m.input!r}; expected: {m.expected!r}; "
                      f"got: {m.actual!r}"]
        if len(run.mismatches) > 5:
            lines.append(f"- ... and {len(run.mismatches) - 5} more failed")
        return lines

    def prompt(self, agent: str) -> str:
        state: CodeState = self.game_state
        turn = f"Turn {self.turn + 1} of {self.max_turns}."
        if agent == "coder":
            lines = ["You are the coder in a team of two (coder and tester). Write a correct, efficient Python 3 "
                     "program for the problem below. Hidden tests decide the score.", turn, ""]
            lines += self._problem_text()
            if self.turn > 0:
                lines.append("")
                if state.program is None:
                    lines.append("Your last answer had no Python program.")
                else:
                    lines += ["Your current program:", "```python", _clip(state.program, 4000).rstrip(), "```"]
                    if not state.builds:
                        lines.append("It does not parse as Python (syntax error).")
                if state.tests:
                    lines += ["", "The tester's tests:"]
                    for i, t in enumerate(state.tests):
                        lines += self._show_test(t, f"Test {i + 1}. ")
                    if state.coder_on_tests is not None:
                        lines += self._show_run("Your program on these tests", state.coder_on_tests)
                    lines.append("(The tester can be wrong: check each expectation against the problem.)")
            lines += ["", "Answer with the complete program in one ```python code block."]
            return "\n".join(lines)
        lines = ["You are the tester in a team of two (coder and tester). Write test cases that check a solution "
                 "of the problem below; every expected output must be exactly what a correct program gives.",
                 turn, ""]
        lines += self._problem_text()
        lines.append("")
        if state.program is None:
            lines.append("The coder has no program yet.")
        else:
            lines += ["The coder's current program:", "```python", _clip(state.program, 4000).rstrip(), "```"]
        if state.tests:
            lines += ["", "Your previous tests:"]
            for i, t in enumerate(state.tests):
                lines += self._show_test(t, f"Test {i + 1}. ")
            ref = state.reference_on_tests
            if ref is not None and ref.mismatches:
                for m in ref.mismatches:
                    note = (f"the reference solution gives {m.actual!r}" if self.reveal_reference_output
                            else "the reference solution disagrees with your expected output"
                            if m.status == "ok" else f"the reference solution fails on this input ({m.status})")
                    lines.append(f"- test {m.index + 1}: {note}")
            elif ref is not None:
                lines.append("- the reference solution agrees with every expected output")
            if state.coder_on_tests is not None:
                lines += self._show_run("The coder's program on your tests", state.coder_on_tests)
        elif not state.last_tester_valid and self.turn > 0:
            lines += ["", "Your last answer had no readable tests: " + "; ".join(state.test_errors[:3])]
        if self.task.kind == "stdio":
            fmt = '[{"input": "3\\n1 2 3\\n", "output": "6\\n"}, ...]'
        else:
            fmt = '[{"args": [[1, 2, 3], 2], "expected": [2, 3, 1]}, ...]'
        lines += ["", f"Answer with up to {self.max_tests} tests as a JSON list in one ```json code block, e.g.",
                  "```json", fmt, "```", "(or as Input:/Output: pairs)."]
        return "\n".join(lines)

    # ------------------------------------------------------------------ the expert
    def expert_text(self, agent: str) -> str:
        """Coder: the problem's reference solution; tester: its public tests (else the first
        golden tests), at most three, as a ```json list."""
        task: CodeProblem = self.task
        if agent == "coder":
            if not task.reference_solution:
                raise ValueError(f"Code-v0 problem {task.id!r} has no reference_solution, so it has no expert "
                                 "coder; add one to the problem to use it for demonstrations")
            return f"```python\n{task.reference_solution.rstrip()}\n```"
        tests = (task.public_tests or task.golden_tests)[:min(3, self.max_tests)]
        return "```json\n" + json.dumps([t.to_dict(task.kind) for t in tests]) + "\n```"

    def render_text(self) -> str:
        state: CodeState = self.game_state
        g = state.golden
        lines = [f"Code-v0 {self.task_id} ({self.task.kind}) turn {self.turn}/{self.max_turns}",
                 f"program: {'none' if state.program is None else ('builds' if state.builds else 'syntax error')}"
                 f", golden {g.passed if g else 0}/{len(self.task.golden_tests)}",
                 f"tester tests: {len(state.tests)}"
                 + (f", coder passes {state.coder_on_tests.passed}" if state.coder_on_tests else "")
                 + (f", reference agrees with {state.reference_on_tests.passed}" if state.reference_on_tests else "")]
        return "\n".join(lines)


#: PettingZoo's module functions: ``env()`` (wrapped), ``raw_env``, ``parallel_env()``.
raw_env, env, parallel_env = pettingzoo_functions(CodeEnv)
