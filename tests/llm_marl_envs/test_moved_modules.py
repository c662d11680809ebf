"""Modules that moved answer at their old names for one release, with a DeprecationWarning (issue 34)."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llm_marl_envs._moved import MOVED, PUZZLES

ROOT = Path(__file__).resolve().parents[2]


def _forget(monkeypatch, name):
    """Import ``name`` afresh in this test (it may be imported already)."""
    monkeypatch.delitem(sys.modules, name, raising=False)
    parent, _, child = name.rpartition(".")
    if parent in sys.modules:
        monkeypatch.delattr(sys.modules[parent], child, raising=False)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_name_is_the_moved_module_with_a_warning(old, monkeypatch):
    _forget(monkeypatch, old)
    _forget(monkeypatch, PUZZLES)
    with pytest.warns(DeprecationWarning, match=re.escape(f"{old} moved to {MOVED[old]}")):
        mod = importlib.import_module(old)
    assert mod is importlib.import_module(MOVED[old])  # one module: its classes are the same classes


def test_the_three_tasks_at_their_old_names(monkeypatch):
    from llm_marl_envs.grid.planpath import PlanPathEnv
    from llm_marl_envs.grid.sokoban import SokobanEnv
    from llm_marl_envs.grid.sudoku import SudokuEnv

    for name in ("sokoban", "sudoku", "planpath"):
        _forget(monkeypatch, f"llm_marl_envs.{name}")
    with pytest.warns(DeprecationWarning):
        from llm_marl_envs import sokoban
        from llm_marl_envs.planpath import PlanPathEnv as OldPlanPath
        from llm_marl_envs.sudoku import SudokuEnv as OldSudoku
    assert (sokoban.SokobanEnv, OldPlanPath, OldSudoku) == (SokobanEnv, PlanPathEnv, SudokuEnv)
    assert sokoban.env().unwrapped.roles == SokobanEnv.roles


def test_the_old_puzzles_package_keeps_its_names_and_leaves_grid_alone(monkeypatch):
    import llm_marl_envs.grid as grid
    import llm_marl_envs.grid.planpath as planpath_task
    from llm_marl_envs.grid.moves import parse_moves
    from llm_marl_envs.grid.sokoban.puzzle import SokobanLevel

    _forget(monkeypatch, PUZZLES)
    _forget(monkeypatch, f"{PUZZLES}.planpath")
    with pytest.warns(DeprecationWarning, match="llm_marl_envs.puzzles moved to llm_marl_envs.grid"):
        puzzles = importlib.import_module(PUZZLES)
        old_planpath = importlib.import_module(f"{PUZZLES}.planpath")
    assert (puzzles.parse_moves, puzzles.SokobanLevel) == (parse_moves, SokobanLevel)
    assert puzzles.sokoban is importlib.import_module("llm_marl_envs.grid.sokoban.puzzle")
    assert old_planpath is importlib.import_module("llm_marl_envs.grid.planpath.puzzle") is puzzles.planpath
    # grid's attribute stays its task package (were puzzles an alias of grid, puzzles.planpath would replace it)
    assert grid.planpath is planpath_task


def test_the_warning_names_the_importing_line_and_shows_by_default():
    out = subprocess.run([sys.executable, "-c", "import llm_marl_envs.sokoban"], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    assert "<string>:1: DeprecationWarning: llm_marl_envs.sokoban moved to llm_marl_envs.grid.sokoban" in out.stderr
