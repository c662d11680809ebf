"""Backend lookup by name: ``make("bwrap" | "local" | "docker" | "auto", **limits)``."""

from __future__ import annotations

import importlib
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


def auto_refusal(exc: BaseException) -> str:
    """The one-line reason ``make("auto")`` refuses when the bwrap backend is unavailable (``exc`` says why):
    what is missing and how to get isolation. ``auto`` never degrades to ``local`` (no isolation)."""
    missing = getattr(exc, "missing", None) or "the bwrap backend cannot run here"
    reason = " ".join(str(getattr(exc, "reason", None) or exc).split())  # one line, whatever bwrap printed
    return (f"sandbox 'auto' refuses to run programs without isolation: {missing} ({reason}). "
            "To isolate them: install bubblewrap (bash scripts/setup.sh), allow unprivileged user namespaces "
            "(sysctl -w kernel.unprivileged_userns_clone=1 and user.max_user_namespaces>0; in a container, a "
            "seccomp profile that allows them), or use the Docker backend (sandbox: docker). "
            "sandbox: local runs programs with NO isolation, and only when named explicitly")


def make(name: str = "auto", **limits: Any) -> Sandbox:
    """Create a sandbox backend by name.

    ``limits`` are :class:`~sandboxes.base.Limits` fields (``timeout_s``, ``memory_mb``,
    ``max_processes``...) plus backend options (``warm=True`` for the bwrap fork server).
    Raises ``SandboxError`` for an unknown name and ``SandboxUnavailable`` naming what to
    install when the backend's runtime is missing. ``"auto"`` is ``"bwrap"``, and where bwrap
    cannot run it raises :class:`SandboxUnavailable` (:func:`auto_refusal`): it never falls back
    to ``local`` (no isolation), which runs only when named.
    """
    if not isinstance(name, str) or (name not in _NAMES and name != "auto"):
        raise SandboxError(f"unknown sandbox backend {name!r}; choose one of {sorted(_NAMES) + ['auto']}")
    if name == "auto":
        try:
            return _load("bwrap", limits)(**limits)
        except (SandboxUnavailable, ImportError) as exc:
            if getattr(exc, "no_fallback", False):  # bwrap works, its set-up for root does not: that message says why
                raise
            raise SandboxUnavailable(auto_refusal(exc)) from None  # the reason is in the one line
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
