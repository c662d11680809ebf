"""Every env module's docstring is its manual, in one format, and agrees with the env and docs/:
the summary table matches the live env and is repeated verbatim in docs/, the sections come in
one order, the arguments are documented, the ``>>>`` examples run (doctest), and the grid reward
formulas are one text (:data:`llm_marl_envs.grid.base.REWARD_FORMULAS`) that the code computes."""

import doctest
import importlib
import inspect
import re
from pathlib import Path

import gymnasium
import pettingzoo
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llm_marl_envs.grid import base as grid
from llm_marl_envs.base import LLMTeamEnv

ROOT = Path(__file__).resolve().parents[2]

#: Each env module, its registered id and the docs/ page that repeats its summary table.
MODULES = {
    "llm_marl_envs.grid.sokoban": ("llm_marl/Sokoban-v0", "docs/environments.md"),
    "llm_marl_envs.grid.sudoku": ("llm_marl/Sudoku-v0", "docs/environments.md"),
    "llm_marl_envs.grid.planpath": ("llm_marl/PlanPath-v0", "docs/environments.md"),
    "llm_marl_envs.code.env": ("llm_marl/Code-v0", "docs/code.md"),
    "llm_marl_envs.math.env": ("llm_marl/Math-v0", "docs/math.md"),
    "llm_marl_envs.math.verify": ("llm_marl/MathVerify-v0", "docs/math.md"),
    "llm_marl_envs.examples.arithmetic": ("llm_marl/Arithmetic-v0", "docs/adding_a_task.md"),
    "llm_marl_envs.examples.router": ("llm_marl/Router-v0", "docs/environments.md"),
}
GRID_MODULES = ["llm_marl_envs.grid.sokoban", "llm_marl_envs.grid.sudoku", "llm_marl_envs.grid.planpath"]
SECTIONS = ["## Roles", "## Observation", "## Action", "## Rewards", "## Episode end", "## Arguments", "## Example",
            "## Version history"]
TABLE_KEYS = ["Import", "Registered id", "Actions", "Parallel API", "Agents", "Number of agents", "Action space",
              "Observation space", "State space", "Default max turns", "Render modes"]

params = pytest.mark.parametrize("name", sorted(MODULES), ids=lambda n: n.removeprefix("llm_marl_envs."))


def summary_table(doc: str) -> tuple[str, dict[str, str]]:
    """The docstring's summary table: its text and its rows (key -> value, backticks kept)."""
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| Import |"))
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    rows = {}
    for line in lines[start:end]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] != "---":
            rows[cells[0]] = cells[1]
    return "\n".join(lines[start:end]), rows


def section(doc: str, title: str) -> str:
    return doc.split(title + "\n", 1)[1].split("\n## ", 1)[0]


@params
def test_docstring_has_the_one_format(name):
    doc = importlib.import_module(name).__doc__
    _, rows = summary_table(doc)
    assert list(rows) == TABLE_KEYS
    positions = [doc.find("\n" + s + "\n") for s in SECTIONS]
    assert -1 not in positions, f"{name}: missing one of {SECTIONS}"
    assert positions == sorted(positions), f"{name}: sections out of order"
    assert "\n>>> " in section(doc, "## Example")
    assert re.search(r"^- v0: ", section(doc, "## Version history"), re.M)


@params
def test_summary_table_matches_the_live_env(name, sandbox):
    mod = importlib.import_module(name)
    fid, _ = MODULES[name]
    _, rows = summary_table(mod.__doc__)
    imported = {}
    exec(rows["Import"].strip("`"), imported)                       # the Import row imports this module
    assert [v for k, v in imported.items() if not k.startswith("__")] == [mod]
    env = mod.raw_env(sandbox=sandbox)
    agent = env.possible_agents[0]
    assert rows["Registered id"] == f"`{fid}`" and type(pettingzoo.make("aec", fid, sandbox=sandbox)) is mod.raw_env
    assert rows["Actions"] == "Text" and isinstance(env.action_space(agent), gymnasium.spaces.Text)
    assert rows["Parallel API"] == "Yes (turn-based)" and callable(mod.parallel_env)
    assert rows["Agents"] == f"`agents = {env.possible_agents!r}`"
    assert rows["Number of agents"] == str(len(env.possible_agents))
    assert all(rows["Action space"] == f"`{env.action_space(a)!r}`" for a in env.possible_agents)
    assert all(rows["Observation space"] == f"`{env.observation_space(a)!r}`" for a in env.possible_agents)
    assert rows["State space"] == f"`{env.state_space!r}`"
    assert rows["Default max turns"] == str(env.default_max_turns) == str(env.max_turns)
    assert rows["Render modes"] == ", ".join(f"`{m}`" for m in env.metadata["render_modes"])


@params
def test_docs_repeat_the_summary_table(name):
    text, _ = summary_table(importlib.import_module(name).__doc__)
    page = MODULES[name][1]
    assert text in (ROOT / page).read_text(), f"{page} does not show {name}'s summary table (copy the docstring's)"


@params
def test_every_task_argument_is_documented(name):
    mod = importlib.import_module(name)
    args = section(mod.__doc__, "## Arguments")
    own = [p for cls in mod.raw_env.__mro__ if issubclass(cls, LLMTeamEnv) and cls is not LLMTeamEnv
           and "__init__" in vars(cls)
           for p in inspect.signature(vars(cls)["__init__"]).parameters.values()
           if p.name != "self" and p.kind is not p.VAR_KEYWORD]
    missing = [p.name for p in own if f"``{p.name}" not in args]
    assert not missing, f"{name}: arguments not in its docstring's Arguments section: {missing}"


@params
def test_docstring_examples_run(name):
    mod = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests = [t for t in finder.find(mod) if t.name == mod.__name__]   # the module docstring, once
    assert tests and tests[0].examples
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for t in tests:
        runner.run(t)
    assert runner.summarize(verbose=False).failed == 0


# ------------------------------------------------------------------ the grid reward formulas
def test_grid_reward_formulas_are_quoted_verbatim():
    block = f"```text\n{grid.REWARD_FORMULAS}\n```"
    for name in ["llm_marl_envs.grid.base"] + GRID_MODULES:
        assert block in importlib.import_module(name).__doc__, f"{name} does not quote grid.REWARD_FORMULAS"
    assert block in (ROOT / "docs" / "environments.md").read_text()


def _formulas() -> dict[tuple[str, str], str]:
    """``REWARD_FORMULAS`` as Python: ``{(role, term): expression}``."""
    out, role = {}, None
    for line in grid.REWARD_FORMULAS.splitlines():
        m = re.match(r"^(\w+)?\s+(team|local)\s+= (.+)$", line)
        assert m, line
        role = m.group(1) or role
        expr = re.sub(r"1\[([^\]]+)\]", r"float(\1)", m.group(3))
        out[(role, m.group(2))] = expr.replace("p(new)", "p_new").replace("p(simulated)", "p_simulated")
    return out


FORMULAS = _formulas()
unit = st.floats(0.0, 1.0)


@given(p_new=unit, best=unit, optimal=st.booleans(), bonus=st.floats(0.0, 2.0))
def test_executor_reward_is_the_formula(p_new, best, optimal, bonus):
    env = {"p_new": p_new, "best": best, "optimal": optimal, "optimal_bonus": bonus, "solved": p_new >= 1.0}
    expected = tuple(eval(FORMULAS[("executor", t)], {}, env) for t in ("team", "local"))
    assert grid.executor_reward(p_new, best, optimal, bonus) == pytest.approx(expected)


@given(p_sim=unit, best=unit, best_proposal=unit)
def test_tool_reward_is_the_formula(p_sim, best, best_proposal):
    env = {"p_simulated": p_sim, "best": best, "best_proposal": best_proposal, "would_solve": p_sim >= 1.0}
    expected = tuple(eval(FORMULAS[("tool", t)], {}, env) for t in ("team", "local"))
    assert grid.tool_reward(p_sim, best, best_proposal) == pytest.approx(expected)


def test_invalid_formula_is_what_the_base_env_gives():
    assert eval(FORMULAS[("invalid", "team")], {}, {}) == 0
    from llm_marl_envs.grid import sokoban

    env = sokoban.raw_env(levels=["#######\n#@ $ .#\n#######"], invalid_penalty=0.3)
    env.reset(seed=0)
    env.step("no program")
    assert env.infos["tool"]["reward_parts"] == {"team": 0.0,
                                                 "local": eval(FORMULAS[("invalid", "local")], {},
                                                               {"invalid_penalty": 0.3})}
