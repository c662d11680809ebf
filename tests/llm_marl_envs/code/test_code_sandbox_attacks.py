"""Code-v0 end to end on the warm sandbox pool (the training default): a coder that plants a
module in one run and reads what a later run left (the reference solution, run at the
tester's step in the same worker) must not raise its own reward (issue 11, finding 1).

On the old warm pool the planted ``/tmp/json`` (mode 0500) survived the wipe, ran inside the
tester's harness, copied the reference solution, and the coder's next program executed the
copy: reward 0.80 -> 2.00, ``solved=True``. On cold bwrap it stayed at 0.80.
"""

from __future__ import annotations

import os
import textwrap

import pytest

import sandboxes
from llm_marl_envs.code import CodeEnv

F = "```"
TWICE = {"id": "t-twice-attack", "statement": "Return 2 * x.", "kind": "call", "fn_name": "twice",
         "starter": "def twice(x):\n    ...\n",
         "golden_tests": [{"args": [1], "expected": 2}, {"args": [0], "expected": 0}, {"args": [-4], "expected": -8}],
         "public_tests": [{"args": [5], "expected": 10}],
         "reference_solution": "def twice(x):\n    return 2 * x\n"}

# Runs inside the harness as `json` when it survives: copies any solution.py that is not the
# coder's own into the planted directory, then hands the harness the real json module.
HOOK = textwrap.dedent("""
    import os, sys
    try:
        src = open("solution.py").read()
        if "PLANTED-BY-CODER" not in src:
            os.chmod("/tmp/json", 0o700)
            with open("/tmp/json/loot.py", "w") as f:
                f.write(src)
            os.chmod("/tmp/json", 0o500)
    except OSError:
        pass
    del sys.modules["json"]
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != "/tmp"]
    import json as _real
    sys.modules["json"] = _real
""")

PLANT = f"""{F}python
# PLANTED-BY-CODER
import os
try:
    os.makedirs("/tmp/json", exist_ok=True)
    with open("/tmp/json/__init__.py", "w") as f:
        f.write({HOOK!r})
    os.chmod("/tmp/json", 0o500)
except OSError:
    pass

def twice(x):
    return 0
{F}"""

STEAL = f"""{F}python
# PLANTED-BY-CODER
import os
if os.path.exists("/tmp/json/loot.py"):
    exec(open("/tmp/json/loot.py").read())
else:
    def twice(x):
        return 0
{F}"""

TESTS = f'{F}json\n[{{"args": [3], "expected": 6}}, {{"args": [7], "expected": 14}}]\n{F}'


#: set to 1 where bubblewrap cannot run (a container without user namespaces) to skip these tests; without it a
#: missing bwrap fails them: a security test must not vanish from a run
ALLOW_NO_BWRAP = "LLM_MARL_ALLOW_NO_BWRAP"


@pytest.fixture(scope="module")
def warm_pool():
    try:
        sb = sandboxes.make("bwrap", warm=True, pool_size=1, preload=())
    except sandboxes.SandboxUnavailable as exc:
        if os.environ.get(ALLOW_NO_BWRAP) == "1":
            pytest.skip(f"bwrap unavailable ({ALLOW_NO_BWRAP}=1): {exc}")
        pytest.fail(f"bwrap unavailable, so the sandbox attack tests cannot run: {exc} (set {ALLOW_NO_BWRAP}=1 to "
                    "skip them on a machine without bubblewrap)")
    yield sb
    sb.close()


def test_plant_then_steal_across_turns_does_not_raise_the_coders_reward(warm_pool):
    env = CodeEnv(problems=[TWICE], sandbox=warm_pool, test_timeout_s=5.0)
    env.reset(seed=0)
    assert env.agent_selection == "coder"
    env.step(PLANT)
    first = env.rewards["coder"]
    assert env.infos["coder"]["action_valid"] and not env.infos["coder"]["solved"]
    env.step(TESTS)  # tester: the reference solution runs on these tests in the same worker
    assert env.infos["tester"]["action_valid"]
    env.step(STEAL)
    info = env.infos["coder"]
    assert env.rewards["coder"] == pytest.approx(first), (first, env.rewards["coder"], info)
    assert not info["solved"], info


# Issue 19: one episode's program poisons the warm worker (a default ACL on /tmp makes every
# later file mode 000, so the harness cannot read solution.py; a reniced / SCHED_IDLE PID 1
# makes later runs time out under load); a correct program in a later episode scored
# golden 0.0 / reward 0.1 instead of 1.0 / 2.0 on the old pool. (Lowering PID 1's NOFILE
# limit is left out here: on the old pool it killed the zygote, and the fresh worker that
# replaced it hid the ACL.)
ACL_NONE = "0200000001000000ffffffff04000000ffffffff10000000ffffffff20000000ffffffff"
POISON = f"""{F}python
import os
for attempt in (
    lambda: os.setxattr("/tmp", "system.posix_acl_default", bytes.fromhex({ACL_NONE!r})),
    lambda: os.setpriority(os.PRIO_PROCESS, 1, 19),
    lambda: os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0)),
):
    try:
        attempt()
    except OSError:
        pass

def twice(x):
    return 0
{F}"""
CORRECT = f"{F}python\ndef twice(x):\n    return 2 * x\n{F}"


def test_a_poisoning_episode_does_not_zero_the_rewards_of_later_episodes(warm_pool):
    env = CodeEnv(problems=[TWICE], sandbox=warm_pool, test_timeout_s=5.0)
    env.reset(seed=0)
    env.step(POISON)
    assert env.infos["coder"]["golden_pass_rate"] < 1.0
    for seed in (1, 2):
        env.reset(seed=seed)
        env.step(CORRECT)
        info = env.infos["coder"]
        assert info["golden_pass_rate"] == 1.0 and info["solved"], info
        assert env.rewards["coder"] == pytest.approx(2.0), (env.rewards, info)
