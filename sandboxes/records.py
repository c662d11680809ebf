"""The records every backend shares: limits, results, errors and the one status classifier.

One call runs one program::

    result = sandbox.run(code, stdin="", timeout_s=5, memory_mb=256)
    result.status   # "ok" | "error" | "timeout" | "memory" | "output_limit" | "killed"

Status meaning (every backend classifies the same way):

- ``ok``: the program exited with code 0 within its limits.
- ``error``: it exited with a non-zero code (an exception, ``sys.exit(3)``, a file
  larger than the file-size limit: Python ignores SIGXFSZ and raises ``OSError``).
- ``timeout``: it ran past ``timeout_s`` wall-clock seconds or its CPU-time limit.
- ``memory``: it ran out of its memory limit (``MemoryError``, a failed allocation that
  killed it, or the container engine's OOM killer).
- ``output_limit``: stdout + stderr went past ``max_output_bytes``; it was killed.
- ``killed``: it died from a signal that none of the above explains (for example the
  program killed itself or its parent), or the process cap stopped a fork bomb.

No status stands for a fault of the sandbox itself: when a warm worker dies under a run (or
is found dead) by no doing of the program, :meth:`Sandbox.run` runs the program again on a
fresh worker (``infra_retries`` times at most) and, if that fails too, raises
:class:`SandboxInfrastructureError`; the program's outcome is then unknown, and a caller
must not score it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

STATUSES = ("ok", "error", "timeout", "memory", "output_limit", "killed")


class SandboxError(RuntimeError):
    """A sandbox could not be created or used (not a failure of the program it runs)."""


class SandboxUnavailable(SandboxError):
    """The backend's runtime (bwrap, a Docker engine, ...) is missing; the message says what to install."""


class SandboxInfrastructureError(SandboxError):
    """The sandbox failed under a run by no doing of the program: its worker died or the
    connection to it was lost (an outside SIGKILL, the host's OOM killer, a crashed engine),
    and the retries on fresh workers failed too. The program's outcome is unknown: this is
    never a result of the program, so a caller must not score it (the envs let it propagate).
    ``attempts`` is how many times the run was tried."""

    def __init__(self, message: str, *, attempts: int = 1) -> None:
        super().__init__(message)
        self.attempts = attempts


class WorkerLost(SandboxInfrastructureError):
    """Raised by a backend's ``_run`` when the worker under the run was gone (found dead when
    the run was sent, or died during it, not by the program's limits). :meth:`Sandbox.run`
    catches it and retries the run on a fresh worker; callers of ``run`` never see it."""


class LimitError(SandboxError, ValueError):
    """A limit is impossible (negative, zero, or beyond what the backend can enforce)."""


@dataclasses.dataclass(frozen=True)
class Limits:
    """Resource limits of one run. Every backend enforces all of them.

    ``memory_mb`` bounds the program's memory (address space for rlimit backends,
    the cgroup for Docker); ``cpu_s`` defaults to ``ceil(timeout_s) + 1``.
    """

    timeout_s: float = 10.0
    memory_mb: int = 512
    cpu_s: float | None = None
    max_processes: int = 32
    max_file_mb: int = 16
    max_open_files: int = 64
    max_output_bytes: int = 1 << 20
    scratch_mb: int = 64

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "max_processes", "max_file_mb", "max_open_files",
                     "max_output_bytes", "scratch_mb"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise LimitError(f"sandbox limit {name}={value!r} is impossible: it must be a positive number")
        if self.cpu_s is not None and (not isinstance(self.cpu_s, (int, float)) or self.cpu_s <= 0):
            raise LimitError(f"sandbox limit cpu_s={self.cpu_s!r} is impossible: it must be a positive number or None")
        if self.memory_mb < 32:
            raise LimitError(f"sandbox limit memory_mb={self.memory_mb} is too small: a Python interpreter needs "
                             "at least 32 MB; raise memory_mb")
        if self.max_open_files < 16:
            raise LimitError(f"sandbox limit max_open_files={self.max_open_files} is too small: the interpreter "
                             "needs at least 16 descriptors")

    @property
    def cpu_seconds(self) -> int:
        if self.cpu_s is not None:
            return max(1, int(-(-self.cpu_s // 1)))
        return int(-(-self.timeout_s // 1)) + 1

    def replace(self, **changes: Any) -> "Limits":
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise LimitError(f"unknown sandbox limit(s) {sorted(unknown)}; known: "
                             f"{[f.name for f in dataclasses.fields(self)]}")
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


@dataclasses.dataclass
class ExecutionResult:
    """What one run produced. ``stdout``/``stderr`` are decoded UTF-8 (errors replaced)."""

    status: str
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    wall_s: float = 0.0
    signal: int | None = None
    backend: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}; expected one of {STATUSES}")

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclasses.dataclass
class Program:
    """One entry for :meth:`Sandbox.run_many`."""

    code: str
    stdin: str = ""
    timeout_s: float | None = None
    memory_mb: int | None = None
    files: Mapping[str, str | bytes] | None = None


def cap_output(stdout: bytes, stderr: bytes, cap: int) -> tuple[bytes, bytes]:
    """Cut captured output so stdout + stderr together hold at most ``cap`` bytes (stdout first)."""
    stdout = stdout[:cap]
    return stdout, stderr[:max(0, cap - len(stdout))]


def classify(exit_code: int | None, signal_num: int | None, stderr: str, *, timed_out: bool = False,
             output_exceeded: bool = False, oom: bool = False, cpu_exceeded: bool = False) -> str:
    """Map how a run ended to one of :data:`STATUSES`; every backend uses this one function.

    Precedence: our own kills first (output flood, wall timeout), then the kernel's
    verdicts (CPU limit -> SIGXCPU/SIGKILL, OOM), then what the program said.
    """
    import signal as _signal

    if output_exceeded:
        return "output_limit"
    if timed_out or cpu_exceeded or signal_num == _signal.SIGXCPU:
        return "timeout"
    if oom:
        return "memory"
    tail = stderr[-2000:]
    if "MemoryError" in tail or "Cannot allocate memory" in tail or "std::bad_alloc" in tail:
        return "memory"
    if signal_num is not None:
        return "killed"
    if exit_code == 0:
        return "ok"
    return "error"
