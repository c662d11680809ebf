"""Router-v0: an orchestrated team (DrMAS-style router): answer directly or call the lookup agent.

| Import | `from llm_marl_envs.examples import router` |
|---|---|
| Registered id | `llm_marl/Router-v0` |
| Actions | Text |
| Parallel API | Yes (turn-based) |
| Agents | `agents = ['router', 'lookup']` |
| Number of agents | 2 |
| Action space | `AnyText(0, 16384)` |
| Observation space | `Dict('prompt': AnyText(0, 1048576))` |
| State space | `AnyText(0, 1048576)` |
| Default max turns | 1 |
| Render modes | `ansi`, `human` |

## Roles

``router`` is asked the value of a key in a key-value table it cannot see: it answers with a
guess or calls ``lookup``; ``lookup`` sees the table and gives the team's final answer. The order
is chosen from the state (``next_role``): ``lookup`` acts only when the router called it.

## Observation

``{"prompt": str}``: the router's prompt names the key and the reply format; the lookup agent's
prompt also holds the table. ``state()`` is the key, the table and the router's decision.

## Action

Free text, read by its first character among the values ``a``, ``e``, ``i``, ``o`` and the digits.
For the router a digit calls the lookup agent (agent number ``0``), a value answers (``e``); for the
lookup agent a value is the answer. A reply without such a character (or a digit from the lookup
agent) is invalid. One short token is a whole reply, so even a tiny model can play it.

## Rewards

``reward = alpha * team + local``, given to the acting role; delegating pays only later, through
the lookup agent's answer:

```text
router, calls lookup   team = 0, local = 0
answer (either role)   team = 1[correct], local = 0
invalid                team = 0, local = -invalid_penalty
```

## Episode end

Terminated by the final answer (the router's own or the lookup agent's), with ``success=True``
when it is correct; truncated after an invalid action (the turn ends with ``max_turns`` default 1).

## Arguments

``table_size=1`` (rows of the lookup agent's table, distinct keys, the asked key among them),
plus those of :class:`~llm_marl_envs.base.LLMTeamEnv`.

## Example

>>> from llm_marl_envs.examples import router
>>> env = router.env()
>>> env.reset(seed=0)
>>> env.step("0")                            # router: calls the lookup agent, nothing now
>>> env.agent_selection, env.rewards["router"]
('lookup', 0.0)
>>> env.step(env.unwrapped.expert_action())  # lookup: reads the table
>>> env.rewards["lookup"], env.infos["lookup"]["success"]
(1.0, True)

## Version history

- v0: initial version.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from llm_marl_envs import LLMTeamEnv, StepOutcome, pettingzoo_functions, register_task

#: The table's keys and values; values are the vowels a reply is read by.
KEYS = ("cat", "dog", "sun", "moon", "apple", "pear", "red", "green", "blue", "box", "wall", "goal", "row", "cell",
        "tool", "step")
VALUES = "aeio"
#: A digit calls the lookup agent (agent number 0; any digit is read as the call).
CALL = "0123456789"


@dataclasses.dataclass(frozen=True)
class Table:
    key: str
    rows: tuple[tuple[str, str], ...]  # (key, value), the asked key among them
    task_id: str

    @property
    def value(self) -> str:
        return dict(self.rows)[self.key]


@dataclasses.dataclass(frozen=True)
class State:
    called: bool = False


def read_letter(text: str) -> str | None:
    """The first character of ``text`` among the values and the digits (a call), else ``None``."""
    return next((ch for ch in text if ch in VALUES or ch in CALL), None)


class RouterEnv(LLMTeamEnv):
    roles = ("router", "lookup")
    default_max_turns = 1
    metadata = {"name": "router_v0", "render_modes": ["ansi", "human"], "is_parallelizable": False}
    sample_actions = {"router": ("0", "a", "e"), "lookup": ("a", "e", "i", "o")}

    def __init__(self, table_size: int = 1, **kwargs):
        if isinstance(table_size, bool) or not isinstance(table_size, (int, np.integer)) \
                or not 1 <= table_size <= len(KEYS):
            raise ValueError(f"table_size={table_size!r} must be an integer in 1..{len(KEYS)}")
        super().__init__(**kwargs)
        self.table_size = int(table_size)

    def load_task(self, seed: int, split: str) -> Table:
        def generate(rng: np.random.Generator) -> Table:
            keys = [KEYS[int(i)] for i in rng.permutation(len(KEYS))[:self.table_size]]
            rows = tuple((k, VALUES[int(rng.integers(len(VALUES)))]) for k in keys)
            key = keys[int(rng.integers(len(keys)))]
            text = f"{key}? " + " ".join(f"{k}={v}" for k, v in rows)
            return Table(key, rows, task_id=f"router/{text}")

        # the split is by the asked key (every value is drawn for it in both splits), so the router cannot
        # learn a key's value from its training problems: only the lookup agent's table tells it
        return self.generate_in_split(seed, split, generate, key=lambda t: t.key)

    def initial_state(self, task: Table) -> State:
        return State()

    def prompt(self, agent: str) -> str:
        if agent == "router":
            return f"router : key {self.task.key} ? say 0 to call lookup or the value"
        table = " ".join(f"{k} {v}" for k, v in self.task.rows)
        return f"lookup : table {table} . key {self.task.key} ? say the value"

    def apply_action(self, agent: str, text: str) -> StepOutcome:
        letter = read_letter(text)
        if letter is None or (agent == "lookup" and letter in CALL):
            return StepOutcome(valid=False, info={"reason": f"no letter among {VALUES!r}"
                                                  + (" or a digit" if agent == "router" else "")})
        if letter in CALL:
            self.game_state = State(called=True)
            return StepOutcome(valid=True, info={"delegated": True})
        correct = letter == self.task.value
        return StepOutcome(valid=True, team=float(correct), done=True, success=correct,
                           info={"delegated": self.game_state.called})

    def next_role(self, agent: str, outcome: StepOutcome) -> str:
        return "lookup" if agent == "router" and outcome.valid and outcome.info.get("delegated") else "router"

    def expert_text(self, agent: str) -> str:
        return "0" if agent == "router" else self.task.value

    @staticmethod
    def role_metrics(samples) -> dict:
        """Each role's own correctness (the hook an evaluation reports as ``roles/*``; any task may define one):
        ``router_calls`` the share of the router's steps that call the lookup agent, ``router_correct_direct``
        the share of its direct answers that are right, ``lookup_correct`` the share of the lookup agent's
        answers that are right, each with its count ``n_*``. ``samples``: the evaluation's samples (``agent``,
        ``completion``, ``valid``, ``reward_parts``)."""
        def share(xs: list) -> float:
            return float(np.mean(xs)) if xs else float("nan")

        def right(s) -> bool:
            return float(s.reward_parts.get("team", 0.0)) >= 1.0

        router = [s for s in samples if s.agent == "router" and s.valid]
        calls = [(read_letter(s.completion) or "") in CALL for s in router]
        direct = [right(s) for s, c in zip(router, calls, strict=True) if not c]
        lookup = [right(s) for s in samples if s.agent == "lookup" and s.valid]
        return {"router_calls": share(calls), "n_router": len(router), "router_correct_direct": share(direct),
                "n_router_direct": len(direct), "lookup_correct": share(lookup), "n_lookup": len(lookup)}

    def render_text(self) -> str:
        table = ", ".join(f"{k}={v}" for k, v in self.task.rows)
        return f"key {self.task.key}  table [{table}]  router called lookup: {self.game_state.called}"


# PettingZoo's module functions: env() (wrapped), raw_env (the class), parallel_env().
raw_env, env, parallel_env = pettingzoo_functions(RouterEnv)
register_task("llm_marl/Router-v0", RouterEnv)
