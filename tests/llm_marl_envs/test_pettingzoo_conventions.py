"""PettingZoo's conventions for every task module: the module functions ``env()`` / ``raw_env`` /
``parallel_env()``, a Text ``state_space`` with ``state()`` (PettingZoo's ``state_test``),
``max_cycles`` (PettingZoo's ``max_cycles_test``, as its users run it) and the one ``max_turns``/``max_cycles``
rule, ``api_test`` reaching an orchestrated task's every role, ``infos`` after the loop and at reset."""

import functools
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
    "llm_marl_envs.examples.router": "llm_marl/Router-v0",
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
    """``make(**kw)`` with its random streams seeded, so ``state_test`` plays the same episodes every run."""
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


def test_pettingzoo_max_cycles_test(task_module, sandbox):
    """PettingZoo's ``max_cycles_test`` as its users run it: the module's own ``env``/``parallel_env`` (only
    the test's sandbox added), unseeded random agents. In the turn-based parallel form one parallel step is
    one role's action, and ``max_cycles`` counts parallel steps there; an orchestrated task takes no
    ``max_cycles`` at all and says why."""
    mod = types.SimpleNamespace(env=functools.partial(task_module.env, sandbox=sandbox),
                                parallel_env=functools.partial(task_module.parallel_env, sandbox=sandbox))
    if task_module.raw_env.orchestrated():
        with pytest.raises(TypeError, match="orchestrated task"):
            max_cycles_test(mod)
        return
    for _ in range(3):  # three unseeded runs: random text must not end an episode early
        max_cycles_test(mod)


def test_parallel_max_cycles_counts_parallel_steps_and_aec_max_cycles_counts_turns(sandbox):
    from llm_marl_envs.grid import sokoban

    par = sokoban.parallel_env(sandbox=sandbox, max_cycles=3)
    assert par.unwrapped.max_steps == 3 and par.unwrapped.max_turns == 3
    par.reset(seed=0)
    steps = 0
    while par.agents:
        _, _, _, truncations, infos = par.step({a: "no answer" for a in par.agents})
        steps += 1
    assert steps == 3 and all(truncations.values()) and all(i["success"] is False for i in infos.values())
    assert sokoban.env(sandbox=sandbox, max_cycles=3).unwrapped.max_steps is None   # AEC: 3 turns
    assert sokoban.parallel_env(sandbox=sandbox, max_cycles=3, max_turns=1).unwrapped.max_turns == 1
    with pytest.raises(ValueError, match="disagree"):
        sokoban.parallel_env(sandbox=sandbox, max_cycles=3, max_steps=4)
    with pytest.raises(ValueError, match="max_steps=0"):
        sokoban.raw_env(sandbox=sandbox, max_steps=0)


def test_api_test_reaches_the_orchestrated_verifier(monkeypatch):
    """Random agents in ``api_test`` reach MathVerify's verifier and both of its verdicts: the action space
    samples the task's format-valid texts half of the time (random text never boxes an answer)."""
    from llm_marl_envs.math import verify

    seen = []
    apply = verify.MathVerifyEnv.apply_action

    def spy(self, agent, text):
        out = apply(self, agent, text)
        seen.append((agent, out.info.get("verdict")))
        return out

    monkeypatch.setattr(verify.MathVerifyEnv, "apply_action", spy)
    api_test(_seeded(verify.env, 3)(), num_cycles=100)            # seeded: the same episodes every run
    parallel_api_test(_seeded(verify.parallel_env, 3)(), num_cycles=100)
    assert {"approve", "reject"} <= {v for a, v in seen if a == "verifier"}, seen
    space = verify.raw_env().action_space("solver")
    assert all(space.contains(space.sample()) for _ in range(20))


def test_infos_after_the_loop_and_at_parallel_reset(sandbox):
    """After ``agent_iter()`` PettingZoo has removed the finished roles from ``infos`` (``api_test`` checks it);
    ``final_infos`` keeps every role's last info, with ``success``. The parallel form's infos name the
    active role from ``reset`` on."""
    from llm_marl_envs.math import verify

    env = verify.env(problems=[{"problem": "What is 6 * 7?", "answer": "42"}], split="all")
    env.reset(seed=0)
    for agent in env.agent_iter():
        _, _, term, trunc, _ = env.last()
        env.step(None if term or trunc else env.unwrapped.expert_action(agent))
    assert env.infos == {} and env.agents == []
    assert set(env.final_infos) == {"solver", "verifier"}
    assert all(i["success"] is True and i["episode_end"] for i in env.final_infos.values())
    snap = env.unwrapped.snapshot()
    env.reset(seed=0)
    assert env.final_infos == {}
    env.unwrapped.restore(snap)
    assert env.final_infos["verifier"]["success"] is True

    par = llm_marl_envs.make_parallel("Sokoban-v0", sandbox=sandbox)
    _, infos = par.reset(seed=0)
    assert set(infos) == set(par.agents) and {i["active_agent"] for i in infos.values()} == {"tool"}
    _, _, _, _, infos = par.step({a: "no answer" for a in par.agents})
    assert {i["active_agent"] for i in infos.values()} == {"executor"}
    assert all("active_agent" not in i for i in par.unwrapped.infos.values())   # copies: the AEC env's untouched


def test_turn_based_parallel_form_takes_one_step_per_role_and_turn(sandbox):
    par = llm_marl_envs.make_parallel("Sokoban-v0", sandbox=sandbox, max_turns=3)
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
