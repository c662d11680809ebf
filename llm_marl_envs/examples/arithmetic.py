"""Arithmetic-v0: the small example task of docs/adding_a_task.md.

| Import | `from llm_marl_envs.examples import arithmetic` |
|---|---|
| Registered id | `llm_marl/Arithmetic-v0` |
| Actions | Text |
| Parallel API | Yes (turn-based) |
| Agents | `agents = ['solver', 'checker']` |
| Number of agents | 2 |
| Action space | `AnyText(0, 16384)` |
| Observation space | `Dict('prompt': AnyText(0, 1048576))` |
| State space | `AnyText(0, 1048576)` |
| Default max turns | 2 |
| Render modes | `ansi`, `human` |

## Roles

``solver`` answers the value of an integer expression (``a + b * c`` unless ``expression``
says otherwise); ``checker`` sees the expression
and the solver's answer and gives the team's final answer.

## Observation

``{"prompt": str}`` with the expression, the answer format and, for the checker, the
solver's latest answer. ``state()`` is the expression and the solver's answer.

## Action

Free text; the last ``Answer: <integer>`` line is read (``answer = <integer>`` too, any case):
the last such label that a number follows. The number counts only when its whole token is an
integer in ASCII digits with at most a leading ``-`` (``Answer: 21.``, ``Answer: 3, since``,
``**Answer: 3**`` and ``Answer: 3 apples`` read 3: a sentence's punctuation after it is no part of it).
A decimal, fraction, exponent, digit group or anything glued to it (``3.25``, ``3.0``, ``3/4``,
``1e5``, ``3,000``, ``12x``, ``--3``, ``+3``, Unicode digits), or an expression it starts
(``3 + 4``), makes the reply invalid: it is never read as its leading digits. Anything else is
invalid.

## Rewards

``reward = alpha * team + local``, given to the acting role:

```text
solver   team = 0, local = 1[correct]
checker  team = 1[correct], local = 0
invalid  team = 0, local = -invalid_penalty
```

## Episode end

Terminated with ``success=True`` when the checker is correct; truncated after
``max_turns`` (default 2) turns otherwise.

## Arguments

``max_operand=20`` (operands are drawn from ``min_operand..max_operand``), ``min_operand=1``,
``expression="a + b * c"`` (a template: each letter is an operand; ``+``, ``-``, ``*``, decimal
integers and parentheses, at most 100 levels deep, its values within 4,000 digits; the prompt shows it
as Python writes it, ``5 + 9 * 9``), plus those of :class:`~llm_marl_envs.base.LLMTeamEnv`. A template
and range with fewer than 16 problems (too few for a train and an eval split) is refused.

## Expert

``expert_action()``: the solver writes ``<expression> = <value>`` then the answer line; the
checker the answer line. Used for warm-start demonstrations.

## Example

>>> from llm_marl_envs.examples import arithmetic
>>> env = arithmetic.env(max_operand=9)
>>> env.reset(seed=0)
>>> env.step(f"Answer: {env.task.value}")   # solver: correct
>>> env.step("I think it is 3.")             # checker: no answer line, invalid
>>> env.rewards["checker"], env.infos["solver"]["reward_parts"]
(-0.1, {'team': 0.0, 'local': 1.0})

## Version history

- v0: initial version; ``min_operand``, ``expression`` and the expert added (defaults unchanged).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import io
import operator
import re
import tokenize

import numpy as np

from llm_marl_envs import LLMTeamEnv, StepOutcome, pettingzoo_functions, register_task


@dataclasses.dataclass(frozen=True)
class Problem:
    expression: str
    value: int
    task_id: str


@dataclasses.dataclass(frozen=True)
class State:
    solver_answer: int | None = None


# a label, then a token that starts like a number (3, -3, --3, .5, 3.25, 3abc, Unicode digits)
_ANSWER = re.compile(r"answer\s*[:=]\s*([-+.]*\d\S*)", re.IGNORECASE)
_INTEGER = re.compile(r"-?[0-9]+")
_CONTINUED = re.compile(r"[ \t]*[-+*/×÷^=0-9]")  # 3 + 4, 3 000: the number is part of something longer


def parse_answer(text: str) -> int | None:
    """The integer of the last ``Answer: <integer>`` label, or None: the whole token must be an integer."""
    found = list(_ANSWER.finditer(text))
    if not found:
        return None
    token = found[-1].group(1)
    number = token.rstrip(".,;:!?)*_")  # the sentence's punctuation (Answer: 21.) or markdown (**Answer: 3**)
    if not _INTEGER.fullmatch(number) or (number == token and _CONTINUED.match(text, found[-1].end())):
        return None
    if len(number) > 4000:
        return None  # int() raises past Python's 4,300-digit limit; no task's value is that long
    return int(number)


def evaluate(node: ast.AST, values: dict[str, int], bound: bool = False) -> int:
    """The value of a parsed template: letters are operands; ``+ - *``, unary minus, integers.
    With ``bound``, ``-`` counts as ``+``: no operands up to ``values`` give a larger absolute value."""
    ops = {ast.Add: operator.add, ast.Sub: operator.add if bound else operator.sub, ast.Mult: operator.mul}
    if isinstance(node, ast.Expression):
        return evaluate(node.body, values, bound)
    if isinstance(node, ast.BinOp) and type(node.op) in ops:
        return ops[type(node.op)](evaluate(node.left, values, bound), evaluate(node.right, values, bound))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return evaluate(node.operand, values, bound) * (1 if bound else -1)
    if isinstance(node, ast.Name) and node.id in values:
        return values[node.id]
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    raise ValueError(f"expression: only letters, integers, + - * and parentheses, not {ast.dump(node)[:60]}")


def filled(tree: ast.Expression, values: dict[str, int]) -> str:
    """The template's text with each letter replaced by its value (``5 + 9 * 9`` for ``a + b * c``)."""
    class Fill(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.Constant:
            return ast.Constant(values[node.id])

    return ast.unparse(Fill().visit(copy.deepcopy(tree)))


class ArithmeticEnv(LLMTeamEnv):
    roles = ("solver", "checker")
    default_max_turns = 2
    metadata = {"name": "arithmetic_v0", "render_modes": ["ansi", "human"], "is_parallelizable": False}

    def __init__(self, max_operand: int = 20, min_operand: int = 1, expression: str = "a + b * c", **kwargs):
        super().__init__(**kwargs)
        if not 0 <= min_operand <= max_operand <= 10**6:
            raise ValueError(f"need 0 <= min_operand <= max_operand <= 10**6, got {min_operand}, {max_operand}")
        self.min_operand, self.max_operand, self.expression = min_operand, max_operand, expression
        try:
            self._tree = ast.parse(expression, mode="eval")
            tokens = list(tokenize.generate_tokens(io.StringIO(expression).readline))
        except (SyntaxError, tokenize.TokenError, RecursionError, MemoryError) as e:
            why = e.msg if isinstance(e, SyntaxError) else "nested too deeply"
            raise ValueError(f"expression {expression[:60]!r} is not an expression: {why}") from None
        for token in tokens:
            if token.type == tokenize.NUMBER and not token.string.isdigit():  # 0x10, 1_000, 1.5
                raise ValueError(f"expression: integers in decimal digits only, not {token.string!r}")
        depth: dict[ast.AST, int] = {self._tree: 0}  # counted without recursion: evaluate() and filled() recurse
        for node in ast.walk(self._tree):
            depth.update(dict.fromkeys(ast.iter_child_nodes(node), depth[node] + 1))
        if max(depth.values()) > 100:
            raise ValueError(f"expression nests {max(depth.values())} levels deep; at most 100")
        self._letters = sorted({n.id for n in ast.walk(self._tree) if isinstance(n, ast.Name)})
        # a bad template fails here, not in reset(): its nodes, its largest value, its number of problems
        if evaluate(self._tree, dict.fromkeys(self._letters, max_operand), bound=True) >= 10**4000:
            raise ValueError(f"expression can exceed 4,000 digits with operands up to max_operand={max_operand}")
        if (max_operand - min_operand + 1) ** len(self._letters) < 16:
            raise ValueError(f"min_operand={min_operand}, max_operand={max_operand}: too few distinct problems of "
                             f"expression {expression[:60]!r} for a train and an eval split (need 16)")

    def load_task(self, seed: int, split: str) -> Problem:
        def generate(rng: np.random.Generator) -> Problem:
            drawn = rng.integers(self.min_operand, self.max_operand + 1, size=len(self._letters))
            values = {name: int(v) for name, v in zip(self._letters, drawn, strict=True)}
            text = filled(self._tree, values)
            return Problem(text, evaluate(self._tree, values), task_id=f"arithmetic/{text}")

        # content-hash partition: a given expression is in exactly one split
        return self.generate_in_split(seed, split, generate, key=lambda p: p.expression)

    def initial_state(self, task: Problem) -> State:
        return State()

    def prompt(self, agent: str) -> str:
        lines = [f"Compute {self.task.expression}.", "End your reply with a line 'Answer: <integer>'."]
        if agent == "checker":
            seen = self.game_state.solver_answer
            lines.insert(1, f"The solver answered: {seen if seen is not None else '(nothing valid)'}")
        return "\n".join(lines)

    def apply_action(self, agent: str, text: str) -> StepOutcome:
        answer = parse_answer(text)
        if answer is None:
            return StepOutcome(valid=False, info={"reason": "no 'Answer: <integer>' line"})
        correct = answer == self.task.value
        if agent == "solver":
            self.game_state = dataclasses.replace(self.game_state, solver_answer=answer)
            return StepOutcome(valid=True, team=0.0, local=float(correct))
        return StepOutcome(valid=True, team=float(correct), done=correct, success=correct)

    def expert_text(self, agent: str) -> str:
        if agent == "solver":
            return f"{self.task.expression} = {self.task.value}\nAnswer: {self.task.value}"
        return f"Answer: {self.task.value}"

    def render_text(self) -> str:
        return f"{self.task.expression} = ?  (solver said {self.game_state.solver_answer})"


# PettingZoo's module functions: env() (wrapped), raw_env (the class), parallel_env().
raw_env, env, parallel_env = pettingzoo_functions(ArithmeticEnv)
register_task("llm_marl/Arithmetic-v0", ArithmeticEnv)
