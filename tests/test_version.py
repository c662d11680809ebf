"""Each package has a ``__version__``: the llm-marl distribution's (issue 34)."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_has_the_distributions_version():
    import llm_marl_envs
    import rllib_integration
    import sandboxes

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert importlib.metadata.version("llm-marl") == pyproject
    assert sandboxes.__version__ == llm_marl_envs.__version__ == rllib_integration.__version__ == pyproject
    for pkg in (sandboxes, llm_marl_envs, rllib_integration):
        assert "__version__" in pkg.__all__, pkg


def test_a_source_tree_that_is_not_installed_reads_pyproject(monkeypatch):
    from sandboxes import version

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("llm-marl")
    assert version.distribution_version() == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
