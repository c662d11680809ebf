"""Code-v0 on the warm pool (the training default) after an attacker's episode that parks what
it takes in the kernel (issue 32), and what Code-v0 caches.

The attacker's program fills ``/tmp``, unlinks its files (its own ``solution.py`` too) and
sends their descriptors into a unix socket's own receive queue (a cycle no process holds),
then exits. On the old warm pool the worker answered clean and the next episode's correct
program found ``/tmp`` full: it scored golden 0.0 / reward 0.1 instead of 1.0 / 2.0. And
Code-v0 cached results with status ``error`` and ``memory``, so such a failure was replayed
for that program for the env's life.
"""

from __future__ import annotations

import pytest

import sandboxes
from llm_marl_envs.code import CodeEnv
from sandboxes.warm import WarmBwrapSandbox

from ...sandboxes.parking import parking_program
from .test_code_sandbox_attacks import CORRECT, TWICE, F

PARK_TMP = f"{F}python\n{parking_program(keep='solution.py')}\ndef twice(x):\n    return 0\n{F}"


class CountingPool(WarmBwrapSandbox):
    """The real warm pool, counting the test batches the env sends it."""

    batches = 0

    def run_tests(self, code, cases, **options):
        self.batches += 1
        return super().run_tests(code, cases, **options)


@pytest.fixture
def pool():
    try:
        sb = CountingPool(pool_size=1, preload=())
    except sandboxes.SandboxUnavailable as exc:
        pytest.skip(f"bwrap unavailable: {exc}")
    yield sb
    sb.close()


def test_a_correct_program_after_a_parking_episode_scores_full_marks(pool):
    env = CodeEnv(problems=[TWICE], sandbox=pool, test_timeout_s=5.0)
    env.reset(seed=0)
    env.step(PARK_TMP)
    assert env.infos["coder"]["action_valid"] and not env.infos["coder"]["solved"]
    env.reset(seed=1)
    env.step(CORRECT)
    info = env.infos["coder"]
    assert info["golden_pass_rate"] == 1.0 and info["solved"], info  # old pool: 0.0 (/tmp full)
    assert env.rewards["coder"] == pytest.approx(2.0), (env.rewards, info)  # old pool: 0.1
    assert len(pool._all) == 1


def _coder_batches(env: CodeEnv, pool: CountingPool, program: str) -> int:
    before = pool.batches
    env.reset(seed=0)
    env.step(program)
    return pool.batches - before


@pytest.mark.parametrize("body, cached", [
    ("return 2 * x", True),                      # right: every run ok
    ("return x", True),                          # wrong, but every run ended ok: the program's own answer
    ("raise ValueError(x)", False),              # error: may be the sandbox's (a full /tmp gives one too)
    ("return len(bytearray(400 << 20))", False),  # memory: may be the sandbox's (memory another run kept)
])
def test_only_results_that_every_run_ended_ok_are_cached(pool, body, cached):
    env = CodeEnv(problems=[TWICE], sandbox=pool, test_timeout_s=5.0)
    program = f"{F}python\ndef twice(x):\n    {body}\n{F}"
    first = _coder_batches(env, pool, program)
    assert first == 2  # the golden tests, then the first public test
    statuses = env.game_state.golden.statuses
    assert all(s == "ok" for s in statuses) == cached, statuses
    assert _coder_batches(env, pool, program) == (0 if cached else first)
