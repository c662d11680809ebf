"""Isolated execution of untrusted Python programs.

``sandboxes.make(name, **limits)`` returns a :class:`Sandbox`; ``sandbox.run(code, ...)``
returns an :class:`ExecutionResult`. Backends: ``bwrap`` (default), ``local`` (rlimits
only, not isolation), ``docker``. ``make("auto")`` is bwrap; where bwrap cannot run, it
raises :class:`SandboxUnavailable` (never ``local``, which runs only when named). A fault of
the sandbox itself (a warm worker that died by no doing of the program) is retried on a
fresh worker; if it persists, ``run`` raises :class:`SandboxInfrastructureError`, never a status.
"""

from .base import (STATUSES, ExecutionResult, Limits, LimitError, Program, Sandbox, SandboxError,
                   SandboxInfrastructureError, SandboxUnavailable)
from .registry import available_backends, make
from .version import distribution_version

#: the installed llm-marl distribution's version (``importlib.metadata``)
__version__ = distribution_version()

__all__ = ["STATUSES", "ExecutionResult", "Limits", "LimitError", "Program", "Sandbox", "SandboxError",
           "SandboxInfrastructureError", "SandboxUnavailable", "available_backends", "make", "__version__"]
