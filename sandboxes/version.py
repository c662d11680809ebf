"""The version of the ``llm-marl`` distribution, which ships ``sandboxes``, ``llm_marl_envs`` and
``rllib_integration`` (each package's ``__version__``)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["DISTRIBUTION", "distribution_version"]

#: the distribution (pyproject.toml ``project.name``) the three packages are installed as
DISTRIBUTION = "llm-marl"


def distribution_version() -> str:
    """The installed distribution's version (``importlib.metadata``), else the source tree's pyproject.toml
    ``project.version`` (a checkout on ``PYTHONPATH``, not installed), else ``"unknown"``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        pass
    import tomllib

    try:
        pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
        return str(pyproject["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"
