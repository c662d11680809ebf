"""The package layering of the design card, in one place: imports between packages go one way
(``rllib_integration -> llm_marl_envs -> sandboxes``, and the training core ``rllib_integration.core``
imports nothing of the RLlib layer beside it), the training core imports no Ray, and no module of
llm_marl_envs, sandboxes or rllib_integration takes part in an import cycle.

The import graph is read from the source (``ast``): every ``import`` statement counts, at the top level,
inside a function or under ``if TYPE_CHECKING:`` (a type-only import is a dependency a reader follows too;
a module that needs a type from a module above it names what it needs in a ``Protocol``, as
``sandboxes.testing.ProgramRunner`` does). Imports by computed name (``importlib.import_module(...)``) are not
seen."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("llm_marl_envs", "sandboxes", "rllib_integration")


def _module_files(package: str) -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of ``known`` that ``name`` imports anywhere in its source (top level, inside a function or
    under ``if TYPE_CHECKING:``)."""
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    found: set[str] = set()

    def add(target: str) -> None:
        while target and target not in known:  # `import a.b.attr` -> the nearest module a.b
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here[:len(here) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                add(sub if sub in known else base)
    return found


def import_graph(*packages: str) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports (edges between the packages included)."""
    files = {name: path for package in packages for name, path in _module_files(package).items()}
    return {name: _imports(name, path, set(files)) for name, path in files.items()}


# Which layer a module belongs to (the longest matching prefix) and which layers each may import.
# The package ``rllib_integration`` itself is the RLlib layer's facade (it loads ``.algorithm``).
LAYERS = {
    "sandboxes": "sandboxes",
    "llm_marl_envs": "llm_marl_envs",
    "rllib_integration.core": "training core",
    "rllib_integration": "RLlib layer",
}
MAY_IMPORT = {
    "sandboxes": {"sandboxes"},
    "llm_marl_envs": {"llm_marl_envs", "sandboxes"},
    "training core": {"training core", "llm_marl_envs", "sandboxes"},
    "RLlib layer": {"RLlib layer", "training core", "llm_marl_envs", "sandboxes"},
}


def layer_of(module: str, layers: dict[str, str] = LAYERS) -> str | None:
    best = max((p for p in layers if module == p or module.startswith(p + ".")), key=len, default=None)
    return None if best is None else layers[best]


def layer_violations(graph: dict[str, set[str]], layers: dict[str, str] = LAYERS,
                     may_import: dict[str, set[str]] = MAY_IMPORT) -> list[str]:
    """Every edge ``a -> b`` of ``graph`` where a's layer may not import b's layer, as text."""
    out = []
    for a in sorted(graph):
        for b in sorted(graph[a]):
            la, lb = layer_of(a, layers), layer_of(b, layers)
            if la is not None and lb is not None and lb not in may_import[la]:
                out.append(f"{a} ({la}) imports {b} ({lb})")
    return out


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_layer_checker_finds_a_wrong_way_import():
    layers = {"low": "low", "high": "high", "high.core": "core"}
    may = {"low": {"low"}, "core": {"core", "low"}, "high": {"high", "core", "low"}}
    graph = {"high.a": {"high.core.b", "low.c"}, "high.core.b": {"low.c"}, "low.c": set()}
    assert layer_violations(graph, layers, may) == []
    graph["low.c"] = {"high.core.b"}  # the lower package reaches up
    graph["high.core.b"] = {"low.c", "high.a"}  # the core reaches the layer beside it
    assert layer_violations(graph, layers, may) == ["high.core.b (core) imports high.a (high)",
                                                    "low.c (low) imports high.core.b (core)"]
    assert layer_of("high.core", layers) == layer_of("high.core.x.y", layers) == "core"
    assert layer_of("high.corex", layers) == "high"
    assert layer_of("rllib_integration.core.backends.hf") == "training core"
    assert layer_of("rllib_integration") == layer_of("rllib_integration.cli") == "RLlib layer"
    assert layer_of("rllib_integration_extra") is None


def test_import_graph_resolves_relative_and_submodule_imports():
    graph = import_graph("rllib_integration")
    assert "rllib_integration.core.loss" in graph["rllib_integration.learner"]
    assert "rllib_integration.core.backends.base" in graph["rllib_integration.core.rollout"]


def test_import_graph_counts_type_only_imports(tmp_path):
    """An import under ``if TYPE_CHECKING:`` is an edge: the circle it closes is found."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .high import H\n")
    (pkg / "high.py").write_text("from . import low\n")
    names = {"pkg", "pkg.low", "pkg.high"}
    graph = {n: _imports(n, pkg / (n.split(".")[-1] + ".py" if "." in n else "__init__.py"), names) for n in names}
    assert graph["pkg.low"] == {"pkg.high"} and find_cycles(graph) == [["pkg.high", "pkg.low"]]


@pytest.fixture(scope="module")
def whole_graph() -> dict[str, set[str]]:
    return import_graph(*PACKAGES)


def test_import_graph_sees_the_edges_between_packages(whole_graph):
    """Not vacuous: every package is in the graph, and imports across packages are found."""
    for package in PACKAGES:
        assert package in whole_graph and sum(m.startswith(package + ".") for m in whole_graph) > 3
    assert "sandboxes" in whole_graph["llm_marl_envs.base"]  # a function-level import
    assert "llm_marl_envs" in whole_graph["rllib_integration.core.warm_start"]


@pytest.mark.parametrize("layer", ["sandboxes", "llm_marl_envs", "training core"])  # the RLlib layer may import all
def test_imports_go_one_way_between_layers(whole_graph, layer):
    """sandboxes imports nothing of llm_marl_envs or rllib_integration; llm_marl_envs nothing of
    rllib_integration; the training core nothing of the RLlib layer (any ``rllib_integration.<x>``
    not under ``core``)."""
    bad = layer_violations({m: deps for m, deps in whole_graph.items() if layer_of(m) == layer})
    assert not bad, "imports against the layering of DESIGN.md:\n" + "\n".join(bad)


def test_no_import_cycles(whole_graph):
    cycles = find_cycles(whole_graph)
    assert not cycles, f"import cycles: {cycles}"


def test_training_core_imports_no_ray():
    """Importing rllib_integration.core and every module under it leaves Ray out of sys.modules."""
    modules = sorted(m for m in _module_files("rllib_integration") if m.startswith("rllib_integration.core"))
    assert "rllib_integration.core.rollout" in modules and "rllib_integration.core.backends.hf" in modules
    code = ("import importlib, json, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(k for k in sys.modules if k == 'ray' or k.startswith('ray.'))))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
