"""The abstract :class:`Sandbox` every backend implements (records live in :mod:`sandboxes.records`).

One call runs one program::

    result = sandbox.run(code, stdin="", timeout_s=5, memory_mb=256)
    result.status   # "ok" | "error" | "timeout" | "memory" | "output_limit" | "killed"

The status meanings are in :mod:`sandboxes.records`; every backend classifies through
:func:`sandboxes.records.classify` (also importable from here, as before). A fault of the
sandbox itself is no status: ``run`` retries the program on a fresh worker and, if that
fails too, raises :class:`~sandboxes.records.SandboxInfrastructureError`.
"""

from __future__ import annotations

import abc
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Mapping, Sequence

from . import testing
from .records import (STATUSES, ExecutionResult, LimitError, Limits, Program, SandboxError,
                      SandboxInfrastructureError, SandboxUnavailable, WorkerLost, cap_output, classify)

__all__ = ["FAULT_COUNTERS", "STATUSES", "ExecutionResult", "LimitError", "Limits", "Program", "Sandbox",
           "SandboxError", "SandboxInfrastructureError", "SandboxUnavailable", "WorkerLost", "cap_output", "classify"]

#: The infrastructure-fault counters every sandbox has (see :meth:`Sandbox.fault_counts`).
FAULT_COUNTERS = ("dead_workers_replaced", "runs_retried", "infrastructure_errors", "workers_recycled")
_COUNT_LOCK = threading.Lock()


class Sandbox(abc.ABC):
    """A backend. Create one with :func:`sandboxes.make`; safe to use from many threads."""

    name: str = "abstract"
    #: How many times :meth:`run` tries a program again on a fresh worker when the worker under it
    #: was lost by no doing of the program (:class:`~sandboxes.records.WorkerLost`); then it raises
    #: :class:`~sandboxes.records.SandboxInfrastructureError`. Set it per instance to change it.
    infra_retries: int = 2
    #: Counters of infrastructure faults (class defaults; each sandbox counts its own):
    #: warm workers found dead or lost under a run and replaced, runs tried again because of
    #: that, runs that raised :class:`~sandboxes.records.SandboxInfrastructureError`, and warm
    #: workers replaced after a run because they could not give back what it took (files the
    #: wipe could not remove, scratch space, memory or descriptors the run parked in the kernel).
    dead_workers_replaced: int = 0
    runs_retried: int = 0
    infrastructure_errors: int = 0
    workers_recycled: int = 0

    def __init__(self, limits: Limits | None = None, **limit_kwargs: Any) -> None:
        self.limits = (limits or Limits()).replace(**limit_kwargs) if limit_kwargs else (limits or Limits())

    # -- the one required method -------------------------------------------------
    @abc.abstractmethod
    def _run(self, code: str, stdin: str, limits: Limits,
             files: Mapping[str, str | bytes] | None) -> ExecutionResult:
        """Run ``code`` under ``limits``; never raise for anything the program does."""

    # -- public API ----------------------------------------------------------------
    def run(self, code: str, stdin: str = "", timeout_s: float | None = None, memory_mb: int | None = None,
            files: Mapping[str, str | bytes] | None = None) -> ExecutionResult:
        """Run one Python program and return its :class:`ExecutionResult`.

        ``files`` maps relative paths to contents written into the scratch directory
        (the program's working directory) before it starts.
        """
        if not isinstance(code, str):
            raise TypeError(f"code must be str, not {type(code).__name__}")
        if not isinstance(stdin, str):
            raise TypeError(f"stdin must be str, not {type(stdin).__name__}")
        if files:
            _check_files(files)
        limits = self.limits.replace(timeout_s=timeout_s, memory_mb=memory_mb)
        tries = 0
        while True:
            tries += 1
            try:
                result = self._run(code, stdin, limits, files)
                break
            except WorkerLost as exc:  # the sandbox's fault, not the program's: never a status
                if tries > self.infra_retries:
                    self.count_fault("infrastructure_errors")
                    raise SandboxInfrastructureError(
                        f"the {self.name} sandbox lost its worker under this run {tries} time(s) in a row ({exc}); "
                        "the program's outcome is unknown (an infrastructure fault, not the program's doing: "
                        "do not score it)", attempts=tries) from exc
                self.count_fault("runs_retried")
        result.backend = self.name
        return result

    def count_fault(self, name: str) -> None:
        """Add one to the infrastructure-fault counter ``name`` (one of :data:`FAULT_COUNTERS`); thread-safe."""
        if name not in FAULT_COUNTERS:
            raise ValueError(f"unknown fault counter {name!r}; known: {FAULT_COUNTERS}")
        with _COUNT_LOCK:
            setattr(self, name, getattr(self, name) + 1)

    def fault_counts(self) -> dict[str, int]:
        """The infrastructure-fault counters of this sandbox: ``dead_workers_replaced``, ``runs_retried``,
        ``infrastructure_errors``, ``workers_recycled`` (all 0 for a backend without warm workers)."""
        with _COUNT_LOCK:
            return {name: int(getattr(self, name)) for name in FAULT_COUNTERS}

    def run_many(self, programs: Iterable[Program | str | tuple[str, str]],
                 max_workers: int | None = None) -> list[ExecutionResult]:
        """Run many programs concurrently; results come back in input order."""
        items = [_as_program(p) for p in programs]
        if not items:
            return []
        workers = max_workers or min(len(items), os.cpu_count() or 1)
        if workers == 1:
            return [self.run(p.code, p.stdin, p.timeout_s, p.memory_mb, p.files) for p in items]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(lambda p: self.run(p.code, p.stdin, p.timeout_s, p.memory_mb, p.files), items))

    def run_tests(self, code: str, cases: Sequence[Any], **options: Any) -> testing.TestReport:
        """Run ``code`` against test cases; see :mod:`sandboxes.testing` for formats and comparison rules."""
        return testing.run_tests(self, code, cases, **options)

    def close(self) -> None:  # noqa: B027 - an optional hook: a no-op for backends that keep nothing
        """Release anything the backend keeps (warm workers, clients)."""

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _as_program(p: Program | str | tuple[str, str]) -> Program:
    if isinstance(p, Program):
        return p
    if isinstance(p, str):
        return Program(p)
    if isinstance(p, tuple) and len(p) == 2:
        return Program(p[0], p[1])
    raise TypeError(f"run_many takes Program, code str or (code, stdin) tuples, not {type(p).__name__}")


def _check_files(files: Mapping[str, str | bytes]) -> None:
    for path in files:
        norm = os.path.normpath(path)
        if os.path.isabs(path) or norm.startswith("..") or norm in (".", ""):
            raise ValueError(f"sandbox file path {path!r} must be relative and stay inside the scratch dir")
