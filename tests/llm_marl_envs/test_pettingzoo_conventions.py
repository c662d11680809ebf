"""PettingZoo's conventions for every task module: the module functions ``env()`` / ``raw_env`` /
``parallel_env()``, a Text ``state_space`` with ``state()`` (PettingZoo's ``state_test``),
``max_cycles`` (PettingZoo's ``max_cycles_test``) and the one ``max_turns``/``max_cycles`` rule."""

import importlib
import pickle
import types
import warnings

import pettingzoo
import pytest
from pettingzoo.test import api_test, max_cycles_test, parallel_api_test, seed_test, state_test
from pettingzoo.utils.wrappers import OrderEnforcingWrapper

import llm_marl_envs
from llm_marl_envs.base import AnyText, LLMTeamEnv, resolve_max_turns

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning:pettingzoo.test.api_test"),
              pytest.mark.filterwarnings("ignore::UserWarning:pettingzoo.test.state_test")]

#: Every task module and its registered id.
TASK_MODULES = {
    "llm_marl_envs.grid.sokoban": "llm_marl/Sokoban-v0",
    "llm_marl_envs.grid.sudoku": "llm_marl/Sudoku-v0",
    "llm_marl_envs.grid.planpath": "llm_marl/PlanPath-v0",
    "llm_marl_envs.code.env": "llm_marl/Code-v0",
    "llm_marl_envs.math.env": "llm_marl/Math-v0",
    "llm_marl_envs.math.verify": "llm_marl/MathVerify-v0",
    "llm_marl_envs.examples.arithmetic": "llm_marl/Arithmetic-v0",
}


@pytest.fixture(params=sorted(TASK_MODULES), ids=lambda name: name.removeprefix("llm_marl_envs."))
def task_module(request):
    return importlib.import_module(request.param)


def test_module_functions_build_the_registered_env(task_module, sandbox):
    fid = TASK_MODULES[task_module.__name__]
    raw_env, env, parallel_env = task_module.raw_env, task_module.env, task_module.parallel_env
    assert isinstance(raw_env, type) and issubclass(raw_env, LLMTeamEnv)
    assert type(pettingzoo.make("aec", fid, sandbox=sandbox)) is raw_env       # the registry builds raw_env

    wrapped = env(sandbox=sandbox, max_turns=2)
    assert isinstance(wrapped, OrderEnforcingWrapper) and type(wrapped.unwrapped) is raw_env
    assert wrapped.unwrapped.max_turns == 2                                     # kwargs reach the class
    with pytest.raises(AttributeError, match="before reset"):                  # what the wrapper adds
        _ = wrapped.agent_selection
    wrapped.reset(seed=0)
    assert wrapped.state() == wrapped.unwrapped.render_text()
    assert wrapped.task_id == wrapped.unwrapped.task_id                          # attributes pass through
    api_test(env(sandbox=sandbox), num_cycles=5)
    seed_test(lambda: env(sandbox=sandbox), num_cycles=5)

    par = parallel_env(sandbox=sandbox)
    assert type(par.unwrapped) is raw_env and par.state_space == raw_env(sandbox=sandbox).state_space
    parallel_api_test(parallel_env(sandbox=sandbox), num_cycles=5)
    # module functions, as PettingZoo's own: named after the module and picklable by reference
    for fn in (env, parallel_env):
        assert fn.__module__ == task_module.__name__ and pickle.loads(pickle.dumps(fn)) is fn


def _seeded(make, seed: int = 0):
    """``make(**kw)`` with its random streams seeded. PettingZoo's ``max_cycles_test`` resets
    without a seed and samples random text; random text often parses as moves, and a random
    walk reaches PlanPath's goal early in about 3% of episodes, which that test reads as a
    wrong cycle count. Seeded, the test plays the same episodes every run."""
    def build(**kwargs):
        env = make(**kwargs)
        env.reset(seed=seed)                      # later reset() calls draw from this seed
        for i, agent in enumerate(env.possible_agents):
            env.action_space(agent).seed(seed + i)
        return env
    return build


def test_pettingzoo_state_test(task_module, sandbox):
    raw = task_module.raw_env(sandbox=sandbox)
    assert isinstance(raw.state_space, AnyText)
    with pytest.raises(RuntimeError, match="reset"):
        raw.state()
    state_test(_seeded(task_module.env)(sandbox=sandbox), task_module.parallel_env(sandbox=sandbox), num_cycles=6)


class _OneCyclePerStep:
    """PettingZoo's ``max_cycles_test`` counts one parallel step as one cycle, as in its
    simultaneous-move envs. Our parallel form is turn-based (one step per role), so this
    view of the real parallel env plays one whole cycle (one step per role) per ``step``."""

    def __init__(self, par):
        self.par = par

    def __getattr__(self, name):
        return getattr(self.par, name)

    def step(self, actions):
        for _ in self.par.possible_agents:           # the active role's action is taken from `actions`
            out = self.par.step(actions)
            if not self.par.agents:
                break
        return out


#: Tasks that choose the next role from the state: a cycle is not one action of each role, which
#: PettingZoo's ``max_cycles_test`` counts; their own tests check that ``max_cycles`` bounds the turns
#: (tests/llm_marl_envs/math/test_math_verify.py::test_max_cycles_bounds_the_attempts_whatever_the_order).
ORCHESTRATED = {"llm_marl_envs.math.verify"}


def test_pettingzoo_max_cycles_test(task_module, sandbox):
    if task_module.__name__ in ORCHESTRATED:
        pytest.skip("orchestrated role order: max_cycles_test counts one action per role and cycle")
    mod = types.SimpleNamespace(
        env=_seeded(lambda **kw: task_module.env(sandbox=sandbox, **kw)),
        parallel_env=_seeded(lambda **kw: _OneCyclePerStep(task_module.parallel_env(sandbox=sandbox, **kw))))
    max_cycles_test(mod)


def test_turn_based_parallel_form_takes_one_step_per_role_and_turn(sandbox):
    par = llm_marl_envs.make_parallel("Sokoban-v0", sandbox=sandbox, max_cycles=3)
    par.reset(seed=0)
    steps = 0
    while par.agents:
        par.step({a: "no answer" for a in par.agents})
        steps += 1
    assert steps == 3 * len(par.possible_agents)


@pytest.mark.parametrize("kwargs, message", [
    ({"max_cycles": 0}, "max_cycles=0 must be a positive integer"),
    ({"max_turns": 0}, "max_turns=0 must be a positive integer"),
    ({"max_cycles": -1}, "max_cycles=-1"),
    ({"max_turns": 2.5}, "max_turns=2.5"),
    ({"max_turns": True}, "max_turns=True"),
    ({"max_turns": 3, "max_cycles": 4}, "disagree"),
])
def test_max_turns_and_max_cycles_follow_one_rule(kwargs, message):
    from llm_marl_envs.examples.arithmetic import ArithmeticEnv

    with pytest.raises(ValueError, match=message):
        ArithmeticEnv(**kwargs)


def test_max_cycles_is_max_turns_everywhere(sandbox):
    from llm_marl_envs.examples.arithmetic import ArithmeticEnv

    assert ArithmeticEnv().max_turns == ArithmeticEnv.default_max_turns == 2
    assert ArithmeticEnv(max_cycles=3).max_turns == 3
    assert ArithmeticEnv(max_turns=3, max_cycles=3).max_turns == 3
    assert pettingzoo.make("aec", "llm_marl/Sokoban-v0", max_cycles=6, sandbox=sandbox).max_turns == 6
    assert llm_marl_envs.make("Sokoban-v0", max_cycles=-1, sandbox=sandbox).max_turns == 4  # PettingZoo's "unset"
    with pytest.raises(ValueError, match="max_cycles=0"):
        pettingzoo.make("aec", "llm_marl/Code-v0", max_cycles=0)
    assert resolve_max_turns(None, None, 7) == 7


def test_no_warnings_from_the_wrapper_in_a_plain_loop(sandbox):
    from llm_marl_envs.grid import planpath

    env = planpath.env(sandbox=sandbox, size=4, max_turns=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env.reset(seed=0)
        for _agent in env.agent_iter():
            obs, reward, term, trunc, info = env.last()
            env.step(None if term or trunc else "Answer: R")
    assert env.agents == []
