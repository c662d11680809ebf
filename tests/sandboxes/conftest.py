"""Fixtures for the sandbox tests: one sandbox per backend per session, and a host
process-table check that nothing a run started is still alive."""

from __future__ import annotations

import os
import time
import warnings

import pytest

import sandboxes
from sandboxes import _proc

# Small limits so bombs hit them quickly on a shared 2-core machine.
TEST_LIMITS = dict(timeout_s=3.0, memory_mb=320, max_processes=16, max_file_mb=8,
                   max_output_bytes=64 * 1024, scratch_mb=32)

BACKENDS = ["local", "bwrap", "bwrap-warm", pytest.param("docker", marks=pytest.mark.docker)]

_cache: dict[str, object] = {}


def make_backend(name: str) -> sandboxes.Sandbox:
    if name in _cache:
        return _cache[name]  # type: ignore[return-value]
    try:
        if name == "local":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                sb = sandboxes.make("local", **TEST_LIMITS)
        elif name == "bwrap":
            sb = sandboxes.make("bwrap", **TEST_LIMITS)
        elif name == "bwrap-warm":
            sb = sandboxes.make("bwrap", warm=True, pool_size=1, preload=("numpy",), **TEST_LIMITS)
        elif name == "docker-warm":
            sb = sandboxes.make("docker", warm=True, **TEST_LIMITS)
        else:
            sb = sandboxes.make(name, **TEST_LIMITS)
    except sandboxes.SandboxUnavailable as exc:
        print(f"backend {name} unavailable: {exc}")
        pytest.skip(f"backend {name} unavailable: {exc}")
    _cache[name] = sb
    return sb


@pytest.fixture(params=BACKENDS)
def backend(request) -> tuple[str, sandboxes.Sandbox]:
    return request.param, make_backend(request.param)


def pytest_sessionfinish(session, exitstatus):  # noqa: ARG001
    for sb in _cache.values():
        sb.close()  # type: ignore[attr-defined]


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def run_processes(exclude: set[int] = frozenset()) -> list[tuple[int, str]]:
    """Host processes created by this test process's sandbox runs: their pids cgroup or
    their cwd carries this process's run tag (see ``sandboxes._proc.run_tag``)."""
    tag = _proc.run_tag()
    found = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid == me or pid in exclude:
            continue
        cg = _read(f"/proc/{pid}/cgroup")
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        if tag in cg or tag in cwd:
            found.append((pid, _read(f"/proc/{pid}/cmdline").replace("\0", " ")[:120]))
    return found


def worker_pids() -> set[int]:
    """Host pids of the idle warm workers of every sandbox these tests made, and of any other warm
    pool of this process (e.g. one an env test started earlier in the session)."""
    from sandboxes.warm import WarmBwrapSandbox

    pids: set[int] = set(WarmBwrapSandbox.all_worker_host_pids())
    for other in list(_cache.values()):
        if hasattr(other, "worker_host_pids"):
            pids |= other.worker_host_pids()
    return pids


def assert_no_leftovers(sb: sandboxes.Sandbox, wait_s: float = 2.0) -> None:
    """Nothing of the run may be alive on the host (the warm pool's own idle workers aside)."""
    deadline = time.monotonic() + wait_s
    while True:
        exclude = worker_pids()  # idle warm workers of any pool are not leftovers
        if hasattr(sb, "worker_host_pids"):
            exclude |= sb.worker_host_pids()
        left = run_processes(exclude)
        if not left:
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"processes of the run survived it: {left}")
        time.sleep(0.05)
    if hasattr(sb, "worker_host_pids"):
        # each idle worker is exactly its own processes: (the reach layer's bwrap,) bwrap, the zygote
        for w in list(sb._all):  # noqa: SLF001
            if w.alive:
                assert len(w.host_pids()) == sb.own_processes, f"worker has extra processes: {w.host_pids()}"
