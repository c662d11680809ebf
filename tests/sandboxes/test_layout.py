"""The package layout: sandboxed programs are real files, public names stay. (Import cycles and the
direction of imports between packages: tests/test_layering.py.)"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import sandboxes
from sandboxes import programs

PKG = Path(sandboxes.__file__).parent


@pytest.mark.parametrize("name", ["boot.py", "cold_main.py", "zygote.py", "call_harness.py",
                                  "docker_supervisor.py", "docker_fork_server.py", "wipe.py", "docker_io.py"])
def test_sandboxed_programs_are_real_files_that_compile(name):
    text = programs.source(name)
    compile(text, name, "exec")
    assert (PKG / "programs" / name).read_text() == text


def test_programs_do_nothing_when_imported():
    for info in pkgutil.iter_modules(programs.__path__):
        importlib.import_module(f"sandboxes.programs.{info.name}")  # must not start a server or read stdin


def test_public_names_stay_importable():
    from sandboxes import ExecutionResult, Limits, Program, Sandbox, make  # noqa: F401
    from sandboxes.base import Sandbox as S2, classify  # noqa: F401
    from sandboxes.bwrap import BwrapSandbox  # noqa: F401
    from sandboxes.testing import TestReport, run_tests  # noqa: F401
    from sandboxes.warm import WarmBwrapSandbox  # noqa: F401

    for meth in ("run", "run_many", "run_tests", "close"):
        assert callable(getattr(Sandbox, meth))
