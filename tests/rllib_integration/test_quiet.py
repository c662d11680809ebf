"""Quiet by default (issue 20): the third-party messages rllib_integration/quiet.py lists are dropped at
their logger; LLM_MARL_VERBOSE=1 (``llm-marl ... --verbose``) shows them; other messages pass."""

import subprocess
import sys
from pathlib import Path

import pytest

from rllib_integration.quiet import NOISE

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import logging, sys
logging.basicConfig(stream=sys.stderr, level=logging.INFO)
from rllib_integration import quiet
quiet.install()
for name, fragment, _ in quiet.NOISE:
    logging.getLogger(name).warning("xx %s yy", fragment)
logging.getLogger("ray.tune.utils.util").warning("a real problem")
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_listed_noise_is_dropped_unless_verbose(verbose):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "LLM_MARL_VERBOSE": "1" if verbose else ""}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "a real problem" in done.stderr
    for _name, fragment, _why in NOISE:
        assert (fragment in done.stderr) == verbose, (fragment, done.stderr)


def test_verbose_flag_of_every_command():
    from rllib_integration.cli import _parser

    for cmd in (["train"], ["eval", "x"], ["export", "x", "y"]):
        assert _parser().parse_args([*cmd, "--verbose"]).verbose is True
