"""Deprecated module names, kept for one release after they moved (issue 34): importing an old name gives the
module at its new place and a :class:`DeprecationWarning` naming it. The aliases go in the release after 0.1.

Installed by ``import llm_marl_envs`` as a finder at the front of ``sys.meta_path`` that answers only the names
in :data:`MOVED` (``import llm_marl_envs.sokoban``, ``from llm_marl_envs import sokoban``,
``from llm_marl_envs.sokoban import SokobanEnv``); every other import passes it by.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Sequence

__all__ = ["MOVED", "install"]

#: old module name -> where it lives now (the grid tasks moved into llm_marl_envs/grid/ in 0.1)
MOVED: dict[str, str] = {
    "llm_marl_envs.sokoban": "llm_marl_envs.grid.sokoban",
    "llm_marl_envs.sudoku": "llm_marl_envs.grid.sudoku",
    "llm_marl_envs.planpath": "llm_marl_envs.grid.planpath",
    "llm_marl_envs.puzzles.moves": "llm_marl_envs.grid.moves",
    "llm_marl_envs.puzzles.render": "llm_marl_envs.grid.render",
    "llm_marl_envs.puzzles.sokoban": "llm_marl_envs.grid.sokoban.puzzle",
    "llm_marl_envs.puzzles.sudoku": "llm_marl_envs.grid.sudoku.puzzle",
    "llm_marl_envs.puzzles.planpath": "llm_marl_envs.grid.planpath.puzzle",
}
#: the old package of the puzzle logic (its modules are in :data:`MOVED`)
PUZZLES = "llm_marl_envs.puzzles"
#: the names it re-exported -> their module
_PUZZLES_NAMES = {"MOVE_DELTAS": "moves", "MOVES": "moves", "parse_moves": "moves", "PlanPathGrid": "planpath",
                  "SokobanLevel": "sokoban"}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == PUZZLES:
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        new = MOVED.get(spec.name, "llm_marl_envs.grid")
        # stacklevel 2: the importing line (the warnings module skips importlib's own frames)
        warnings.warn(f"{spec.name} moved to {new}; import it from there (the old name goes in the next release)",
                      DeprecationWarning, stacklevel=2)
        if spec.name == PUZZLES:
            return None  # a module of its own (aliasing the package would let its submodules shadow grid's)
        return importlib.import_module(new)  # the module itself: one module, one set of classes

    def exec_module(self, module: ModuleType) -> None:
        if module.__name__ == PUZZLES:  # the old package's names, from their new modules
            subs = {sub: importlib.import_module(MOVED[f"{PUZZLES}.{sub}"])
                    for sub in ("moves", "planpath", "render", "sokoban", "sudoku")}
            vars(module).update(subs)
            vars(module).update({name: getattr(subs[sub], name) for name, sub in _PUZZLES_NAMES.items()})
            vars(module)["__all__"] = [*subs, *_PUZZLES_NAMES]


def install() -> None:
    """Put the finder of the old names first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedModules())
