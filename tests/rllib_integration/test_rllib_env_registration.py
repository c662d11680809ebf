"""``rllib_integration.register()`` gives RLlib a ``MultiAgentEnv`` for every task name (RLlib's own
``PettingZooEnv`` around the AEC env), which RLlib's own env checker accepts and which steps to the
episode's end; ATGRPO still builds the AEC env itself from the same names."""

import pytest

import llm_marl_envs
from llm_marl_envs.base import LLMTeamEnv

pytest.importorskip("ray.rllib")

from ray.rllib.env.env_context import EnvContext  # noqa: E402
from ray.rllib.env.multi_agent_env import MultiAgentEnv  # noqa: E402
from ray.rllib.env.wrappers.pettingzoo_env import PettingZooEnv  # noqa: E402
from ray.rllib.utils.pre_checks.env import check_multiagent_environments  # noqa: E402
from ray.tune.registry import ENV_CREATOR, _global_registry, register_env  # noqa: E402

import rllib_integration  # noqa: E402
from rllib_integration.envs import EnvEntry, RLlibEnvCreator, resolve_env  # noqa: E402

#: the six task ids of the library
TASKS = ["llm_marl/Code-v0", "llm_marl/Math-v0", "llm_marl/MathVerify-v0", "llm_marl/PlanPath-v0",
         "llm_marl/Sokoban-v0", "llm_marl/Sudoku-v0"]


@pytest.fixture(scope="module")
def sandbox(make_sandbox):
    box = make_sandbox(timeout_s=10, memory_mb=256)
    yield box
    box.close()


@pytest.fixture(scope="module")
def registered():
    rllib_integration.register()
    return set(llm_marl_envs.registered_tasks())


@pytest.mark.parametrize("env_id", TASKS)
def test_registered_name_gives_rllib_a_multi_agent_env(registered, env_id, sandbox):
    assert env_id in registered
    creator = _global_registry.get(ENV_CREATOR, env_id)
    env = creator(EnvContext({"sandbox": sandbox, "split": "eval"}, worker_index=1))   # RLlib's call
    assert isinstance(env, MultiAgentEnv) and isinstance(env.env, LLMTeamEnv)
    assert env.env.split == "eval"                                                     # the config reached it
    check_multiagent_environments(env)                                                 # RLlib's own checker
    obs, _ = env.reset(seed=0)
    for agent in env.possible_agents:
        env.get_action_space(agent).seed(0)
    steps = 0
    while True:  # random actions (what RLlib's env runner sends) until the episode ends
        assert len(obs) == 1 and env.get_observation_space(next(iter(obs))).contains(next(iter(obs.values())))
        obs, _, terminated, truncated, infos = env.step({a: env.get_action_space(a).sample() for a in obs})
        steps += 1
        if terminated["__all__"] or truncated["__all__"]:
            break
        assert steps < 100
    assert steps <= env.env.max_turns * len(env.possible_agents)
    assert all(info["episode_end"] for info in infos.values())


def test_atgrpo_still_gets_the_aec_env(registered, sandbox):
    """What ATGRPO resolves a name to builds the AEC env, also for a name only RLlib's registry knows, and for
    an RLlib creator of one's own that returns RLlib's ``PettingZooEnv`` around a task."""
    entry = resolve_env("llm_marl/Sokoban-v0")
    assert isinstance(entry, EnvEntry) and isinstance(entry({"sandbox": sandbox}), LLMTeamEnv)

    register_env("test_rllib_only_sokoban", RLlibEnvCreator(entry))
    entry = resolve_env("test_rllib_only_sokoban")
    assert isinstance(entry, EnvEntry) and isinstance(entry({"sandbox": sandbox}), LLMTeamEnv)

    register_env("test_own_creator_sokoban", lambda cfg: PettingZooEnv(llm_marl_envs.make("Sokoban-v0", **cfg)))
    entry = resolve_env("test_own_creator_sokoban")
    env = entry({"sandbox": sandbox, "max_turns": 2})
    assert isinstance(env, LLMTeamEnv) and env.max_turns == 2


def test_registered_env_is_what_rllib_looks_up(registered):
    from rllib_integration.envs import registered_env

    assert registered_env("llm_marl/Sokoban-v0") == _global_registry.get(ENV_CREATOR, "llm_marl/Sokoban-v0")  # a copy
    with pytest.raises(ValueError, match=r"'llm_marl/NoSuch-v0' is registered.*rllib_integration.register\(\)"):
        registered_env("llm_marl/NoSuch-v0")
