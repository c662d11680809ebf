"""scripts/setup.sh installs what its caller needs (issue 33): the main job (``--train``) no Docker engine, no
debootstrap.

The script runs for real with a PATH of its own: the tools it reads (grep, ldconfig, id, dirname) linked from the
machine, ``apt-get`` and the Python interpreter replaced by recorders, ``bwrap``/``dockerd``/``debootstrap`` present
or absent as each case needs. What is checked is which apt packages and pip extras it asks for.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(tmp_path: Path, *args: str) -> tuple[int, list[str], list[str]]:
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    for tool in ("grep", "ldconfig", "id", "dirname", "cat"):
        real = shutil.which(tool) or shutil.which(tool, path="/sbin:/usr/sbin")
        assert real, tool
        (bin_ / tool).unlink(missing_ok=True)
        (bin_ / tool).symlink_to(real)
    log = tmp_path / "calls.log"
    # recorders: apt-get logs its arguments; the "python" fails the import probe (nothing installed) and logs pip
    (bin_ / "apt-get").write_text(f'#!/bin/bash\necho "apt-get $*" >> {log}\n')
    (bin_ / "python").write_text(f'#!/bin/bash\ncase "$1" in -c) exit 1;; -m) echo "pip $*" >> {log};; esac\n')
    (bin_ / "useradd").write_text(f'#!/bin/bash\necho "useradd $*" >> {log}\n')
    (bin_ / "ps").write_text("#!/bin/bash\n")
    for f in ("apt-get", "python", "useradd", "ps"):
        (bin_ / f).chmod(0o755)
    env = {"PATH": str(bin_), "PYTHON": str(bin_ / "python"), "HOME": str(tmp_path)}
    proc = subprocess.run(["/bin/bash", str(ROOT / "scripts" / "setup.sh"), *args], env=env, capture_output=True,
                          text=True, timeout=60)
    calls = log.read_text().splitlines() if log.exists() else []
    apt = [w for c in calls if c.startswith("apt-get install") for w in c.split()[2:] if not w.startswith("-")]
    pip = [c for c in calls if c.startswith("pip")]
    return proc.returncode, apt, pip


@pytest.mark.skipif(os.geteuid() != 0, reason="setup.sh installs apt packages as root")
def test_train_profile_installs_no_docker_engine_and_no_test_tools(tmp_path):
    rc, apt, pip = _run(tmp_path, "--train")
    assert rc == 0
    assert "bubblewrap" in apt and "docker.io" not in apt and "debootstrap" not in apt, apt
    assert any(".[train]" in c for c in pip) and not any("test" in c for c in pip if "-e" in c), pip


@pytest.mark.skipif(os.geteuid() != 0, reason="setup.sh installs apt packages as root")
def test_full_profile_installs_the_docker_sandbox_and_test_tools(tmp_path):
    rc, apt, pip = _run(tmp_path)
    assert rc == 0
    assert {"bubblewrap", "docker.io", "debootstrap"} <= set(apt), apt
    assert any(".[train,test,mlflow]" in c for c in pip), pip  # mlflow: the tracker tests use a real file store


def test_unknown_option_is_refused(tmp_path):
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), "--bogus"], capture_output=True, text=True,
                          env={**os.environ, "LLM_MARL_SKIP_APT": "1"})
    assert proc.returncode == 2 and "usage: bash scripts/setup.sh [--train]" in proc.stderr
