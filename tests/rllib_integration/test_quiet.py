"""Quiet by default (issue 20): the third-party messages rllib_integration/quiet.py lists are dropped at
their logger; LLM_MARL_VERBOSE=1 (``llm-marl ... --verbose``) shows them; other messages pass."""

import subprocess
import sys
from pathlib import Path

import pytest

from rllib_integration.quiet import NOISE, WARNINGS

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import logging, sys
logging.basicConfig(stream=sys.stderr, level=logging.INFO)
from rllib_integration import quiet
quiet.install()
for name, fragment, _ in quiet.NOISE:
    logging.getLogger(name).warning("xx %s yy", fragment)
logging.getLogger("ray.tune.utils.util").warning("a real problem")
import warnings
for category, pattern, _ in quiet.WARNINGS:
    warnings.warn(pattern.replace(".*", "").replace(chr(92), "") + " (a library's own call)", category)
warnings.warn("a real FutureWarning", FutureWarning)
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_listed_noise_is_dropped_unless_verbose(verbose):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "LLM_MARL_VERBOSE": "1" if verbose else ""}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "a real problem" in done.stderr
    for _name, fragment, _why in NOISE:
        assert (fragment in done.stderr) == verbose, (fragment, done.stderr)
    assert "a real FutureWarning" in done.stderr
    assert done.stderr.count("(a library's own call)") == (len(WARNINGS) if verbose else 0), done.stderr


def test_verbose_flag_of_every_command():
    from rllib_integration.cli import _parser

    for cmd in (["train"], ["eval", "x"], ["export", "x", "y"]):
        assert _parser().parse_args([*cmd, "--verbose"]).verbose is True


IMPORT_THEN_BUILD = """
import logging, sys, warnings
from rllib_integration import quiet

def installed():  # the loggers with quiet's filters, and whether quiet's warnings filter is there
    return ([n for n, _, _ in quiet.NOISE if logging.getLogger(n).filters],
            any(f[1] is not None and "RLModule" in f[1].pattern for f in warnings.filters))

before = installed()
import rllib_integration.rollout_worker, rllib_integration.rl_module  # the modules a Ray worker imports
print("after import", installed() == before == ([], False))
import gymnasium as gym
from rllib_integration.rl_module import LLMRLModule
space = gym.spaces.Text(8)
LLMRLModule(observation_space=space, action_space=space, model_config={"policy_id": "p", "model_path": sys.argv[1]})
print("after build", installed() == ([n for n, _, _ in quiet.NOISE], True))
"""


@pytest.mark.slow
@pytest.mark.parametrize("asked", [False, True])
def test_importing_the_worker_modules_installs_no_filter(asked, tmp_path):
    """Importing rollout_worker or rl_module leaves the process's logging and warnings alone, even where the
    driver asked its workers to be quiet (LLM_MARL_QUIET=1, what ``llm-marl`` sets); building an RLModule there
    (what a Ray worker does) installs the filters, and only there."""
    from rllib_integration.core.models import build_tiny_model

    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path),
           "LLM_MARL_CACHE": str(build_tiny_model().parents[1]), "LLM_MARL_QUIET": "1" if asked else ""}
    done = subprocess.run([sys.executable, "-c", IMPORT_THEN_BUILD, str(build_tiny_model())], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "after import True" in done.stdout, done.stdout
    assert f"after build {asked}" in done.stdout, done.stdout


#: what vLLM's own ``vllm/logger.py`` does when imported (VLLM_CONFIGURE_LOGGING=1, its default): the ``vllm`` logger
#: gets a stdout handler, both at the level ``VLLM_LOGGING_LEVEL`` names (default INFO), and does not propagate
FAKE_VLLM = """
import logging, os, sys
level = os.environ.get("VLLM_LOGGING_LEVEL", "INFO").upper()
handler = logging.StreamHandler(sys.stdout)
handler.setLevel(level)
handler.setFormatter(logging.Formatter("%(levelname)s vllm] %(message)s"))
logger = logging.getLogger("vllm")
logger.handlers[:] = [handler]
logger.setLevel(level)
logger.propagate = False
"""

VLLM_SCRIPT = """
import logging, os, subprocess, sys
if sys.argv[1] == "before":
    import vllm  # imported before llm-marl's quiet.install() (configured at INFO)
from rllib_integration import quiet
quiet.install(for_workers=True)
import vllm
log = logging.getLogger("vllm.engine.llm_engine")
log.info("engine noise")
log.warning("a vllm warning")
sys.stdout.flush()
# what an engine process started from here sees
subprocess.run([sys.executable, "-c", "import os; print('child', os.environ.get('VLLM_LOGGING_LEVEL'))"])
"""


@pytest.mark.parametrize("case", ["quiet", "before", "verbose", "user_level"])
def test_vllm_info_lines_are_dropped_unless_verbose(case, tmp_path):
    """vLLM's INFO lines go (``VLLM_LOGGING_LEVEL=WARNING``, vLLM's own knob: read when vLLM is imported, and
    inherited by the engine processes it starts; the ``vllm`` logger's level where vLLM was imported first); its
    warnings stay; ``--verbose`` and a level the user set are left alone. vLLM itself is faked (its logger set-up
    as vllm/logger.py does it): the main venv has none; tests/rllib_integration/test_vllm.py checks the real one."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text(FAKE_VLLM)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO}:{tmp_path}", "LLM_MARL_VERBOSE": "",
           **({"LLM_MARL_VERBOSE": "1"} if case == "verbose" else {}),
           **({"VLLM_LOGGING_LEVEL": "DEBUG"} if case == "user_level" else {})}
    done = subprocess.run([sys.executable, "-c", VLLM_SCRIPT, case], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "WARNING vllm] a vllm warning" in done.stdout, done.stdout
    assert ("INFO vllm] engine noise" in done.stdout) == (case in ("verbose", "user_level")), done.stdout
    child = {"quiet": "WARNING", "before": "WARNING", "verbose": "None", "user_level": "DEBUG"}[case]
    assert f"child {child}" in done.stdout, done.stdout
