"""Backend lookup by name: ``make("bwrap" | "local" | "docker" | "auto", **limits)``."""

from __future__ import annotations

import importlib
import warnings
from typing import Any, Callable

from .base import Sandbox, SandboxError, SandboxUnavailable

# name -> (module, class). Modules are imported lazily so a missing optional
# dependency (the docker package) only matters when that backend is asked for.
_BACKENDS: dict[str, tuple[str, str]] = {
    "bwrap": ("sandboxes.bwrap", "BwrapSandbox"),
    "bwrap-warm": ("sandboxes.warm", "WarmBwrapSandbox"),  # make("bwrap", warm=True)
    "local": ("sandboxes.local", "LocalSandbox"),
    "docker": ("sandboxes.docker_backend", "DockerSandbox"),
}


_NAMES = ["bwrap", "local", "docker"]  # what make() accepts besides "auto"


def _load(name: str, limits: dict[str, Any] | None = None) -> Callable[..., Sandbox]:
    if name == "bwrap" and limits and limits.get("warm"):
        name = "bwrap-warm"
    module, cls = _BACKENDS[name]
    return getattr(importlib.import_module(module), cls)


def make(name: str = "auto", **limits: Any) -> Sandbox:
    """Create a sandbox backend by name.

    ``limits`` are :class:`~sandboxes.base.Limits` fields (``timeout_s``, ``memory_mb``,
    ``max_processes``...) plus backend options (``warm=True`` for the bwrap fork server).
    Raises ``SandboxError`` for an unknown name and ``SandboxUnavailable`` naming what to
    install when the backend's runtime is missing.
    """
    if not isinstance(name, str) or (name not in _NAMES and name != "auto"):
        raise SandboxError(f"unknown sandbox backend {name!r}; choose one of {sorted(_NAMES) + ['auto']}")
    if name == "auto":
        try:
            return _load("bwrap", limits)(**limits)
        except (SandboxUnavailable, ImportError) as exc:
            if getattr(exc, "no_fallback", False):  # bwrap is there, the caller is root: `local` would run as root
                raise
            warnings.warn(f"bwrap sandbox unavailable ({exc}); falling back to the 'local' backend, "
                          "which is NOT isolation", RuntimeWarning, stacklevel=2)
            return _load("local")(**limits)
    return _load(name, limits)(**limits)


def available_backends() -> list[str]:
    """Names of the backends whose runtime works on this machine (checked, not guessed)."""
    found = []
    for name in _NAMES:
        try:
            check = importlib.import_module(_BACKENDS[name][0]).check_available
            check()
        except (SandboxUnavailable, ImportError, AttributeError):
            continue
        found.append(name)
    return found
