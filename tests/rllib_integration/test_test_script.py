"""scripts/test.sh stops the Docker engine it started, and only that one (issue 20).

Runs the real scripts/test.sh and scripts/start_dockerd.sh in a copy of scripts/ with stand-ins: a
``dockerd`` that runs until SIGTERM, a ``docker`` whose ``info`` answers while it runs, a no-op
setup.sh and ``$PYTHON`` (no install, no image build, no tests).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

DOCKERD = """#!/bin/bash
echo $$ > "$STUB_STATE.pid"
touch "$STUB_STATE"
trap 'rm -f "$STUB_STATE"; exit 0' TERM
while :; do sleep 0.1; done
"""
DOCKER = """#!/bin/bash
[ "$1" = info ] && [ -e "$STUB_STATE" ] && exit 0
exit 1
"""
PYTHON = """#!/bin/bash
echo "python $*" >> "$STUB_STATE.log"
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie nobody reaps (PID 1 of a container) is gone too


@pytest.fixture
def stubs(tmp_path):
    if shutil.which("bash") is None or not Path("/proc/self/environ").exists():
        pytest.skip("needs bash and /proc")
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in ("test.sh", "start_dockerd.sh"):
        shutil.copy(REPO / "scripts" / name, repo / "scripts" / name)
    (repo / "scripts" / "setup.sh").write_text("echo '[setup] stub'\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("dockerd", DOCKERD), ("docker", DOCKER), ("python", PYTHON)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    state = tmp_path / "engine"
    env = {**{k: v for k, v in os.environ.items() if k != "LLM_MARL_TEST_WORKERS"},
           "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": str(bin_dir / "python"),
           "STUB_STATE": str(state), "DOCKERD_LOG": str(tmp_path / "dockerd.log")}
    started: list[int] = []
    yield repo, env, state, started
    for pid in started:  # what a failing test left running: the stand-in dockerd, by its pid
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _pid(state: Path) -> int:
    return int(Path(f"{state}.pid").read_text())


def _gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _alive(pid)


def test_test_sh_stops_the_dockerd_it_started(stubs):
    repo, env, state, started = stubs
    proc = subprocess.run(["bash", str(repo / "scripts" / "test.sh"), "-k", "x"], env=env, capture_output=True,
                          text=True, timeout=120)
    pid = _pid(state)
    started.append(pid)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the tests ran, in 2 workers, with its args
    assert "python -m pytest -q --durations=25 -n 2 --dist loadfile -k x" in Path(f"{state}.log").read_text()
    assert _gone(pid), "scripts/test.sh left the dockerd it started running"


def test_test_sh_leaves_a_running_engine_alone(stubs):
    repo, env, state, started = stubs
    engine = subprocess.Popen([env["PATH"].split(":")[0] + "/dockerd"], env=env, start_new_session=True)
    started.append(engine.pid)
    deadline = time.monotonic() + 10
    while not state.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc = subprocess.run(["bash", str(repo / "scripts" / "test.sh")], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert engine.poll() is None and _alive(engine.pid), "scripts/test.sh stopped an engine it did not start"
    engine.terminate()
    engine.wait(timeout=10)


def test_test_sh_passes_on_the_tests_exit_status(stubs):
    repo, env, state, started = stubs
    (Path(env["PYTHON"])).write_text(PYTHON + '[ "$2" = pytest ] && exit 3\nexit 0\n')
    proc = subprocess.run(["bash", str(repo / "scripts" / "test.sh")], env=env, capture_output=True, text=True,
                          timeout=120)
    started.append(_pid(state))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert _gone(_pid(state))


@pytest.mark.parametrize("workers, args, expected", [
    (None, ["--fast"], "-n 2 --dist loadfile -m not slow"),
    ("0", ["-k", "x"], "-k x"),
    ("0", ["--fast", "-x"], "-m not slow -x"),
    ("1", [], "-n 1 --dist loadfile"),
])
def test_test_sh_lanes_and_workers(stubs, workers, args, expected):
    """``--fast`` runs the tests not marked slow; LLM_MARL_TEST_WORKERS sets the pytest workers (0: none)."""
    repo, env, state, started = stubs
    if workers is not None:
        env["LLM_MARL_TEST_WORKERS"] = workers
    proc = subprocess.run(["bash", str(repo / "scripts" / "test.sh"), *args], env=env, capture_output=True, text=True,
                          timeout=120)
    started.append(_pid(state))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = [line for line in Path(f"{state}.log").read_text().splitlines() if " -m pytest " in line]
    assert runs == [f"python -m pytest -q --durations=25 {expected}".rstrip()]


def test_test_sh_refuses_a_bad_worker_count_before_anything_runs(stubs):
    repo, env, state, started = stubs
    env["LLM_MARL_TEST_WORKERS"] = "two"
    proc = subprocess.run(["bash", str(repo / "scripts" / "test.sh")], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "LLM_MARL_TEST_WORKERS=two" in proc.stderr
    assert not state.exists() and not Path(f"{state}.log").exists()  # no engine started, no tests run
