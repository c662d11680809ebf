"""Shared pytest set-up. Area fixtures live in tests/<area>/conftest.py.

* ``make_sandbox(**limits)``: the sandbox of every test that runs programs through an env (Code-v0,
  Math-v0, rollouts on them). It is bwrap, which isolates; where bwrap cannot run, the test errors
  with what is missing and the fix, instead of running the programs unisolated. Set
  ``LLM_MARL_TEST_SANDBOX=local`` to run them on the rlimits-only ``local`` backend on purpose
  (or ``=docker`` for the Docker backend). The sandbox tests themselves (tests/sandboxes) test
  every backend and skip one that is unavailable.
* ``python_lines(fn, *args)``: ``fn``'s result and the lines of Python it ran, the deterministic
  stand-in for a time in a unit test (speed goals live in benchmarks/).
* ``worker_faults``: fault injection into a warm bwrap pool with real signals: ``kill_idle(pool)`` SIGKILLs
  its idle workers, ``kill_busy(pool, times)`` a context in which a thread SIGKILLs the zygote of each
  worker that is running a program (``times`` kills at most); see :class:`WorkerFaults`.
* Ray's temp dir (``RAY_TMPDIR``) is this test process's own, removed at its end: a cluster that another process
  records in the machine's ``/tmp/ray`` (``ray start``, a test's ``ray.cluster_utils.Cluster`` in a parallel
  pytest worker or another suite) is never joined by a plain ``ray.init()`` here, and the session folders of the
  suite's Ray instances do not pile up in ``/tmp/ray``.
* ``LLM_MARL_CHECK_SLOW=1`` (optionally ``LLM_MARL_SLOW_S=<seconds>``, default 5): a test not marked
  ``slow`` whose call takes longer fails, naming its duration and the marker to add. Off by default,
  so a loaded machine never fails the suite on time.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import warnings

import pytest

# Keep numeric libraries single-threaded: the test machine has 2 cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

if "RAY_TMPDIR" not in os.environ:  # short: Ray's unix socket paths under it must stay below 108 bytes
    os.environ["RAY_TMPDIR"] = _RAY_TMP = tempfile.mkdtemp(prefix="ray-t", dir="/tmp")
    atexit.register(shutil.rmtree, _RAY_TMP, ignore_errors=True)

SANDBOX_VAR = "LLM_MARL_TEST_SANDBOX"
_POOL_OPTIONS = ("warm", "pool_size", "preload")  # options of a warm (fork-server) pool


def make_test_sandbox(**limits):
    """An isolating sandbox for env tests: ``sandboxes.make("bwrap", **limits)``, checked with one run.
    Fails the test loudly when bwrap is unavailable or broken here, unless ``LLM_MARL_TEST_SANDBOX``
    names another backend (``local``: no isolation, opted into; the pool options are dropped)."""
    import sandboxes

    name = os.environ.get(SANDBOX_VAR, "bwrap")
    if name not in ("bwrap", "local", "docker"):
        pytest.fail(f"{SANDBOX_VAR}={name!r}: expected bwrap (the default), local or docker", pytrace=False)
    if name == "local":  # no fork-server pool there
        limits = {k: v for k, v in limits.items() if k not in _POOL_OPTIONS}
    how = (f"Fix: bash scripts/setup.sh (installs bubblewrap and the sandbox user), or run these tests "
           f"unisolated on purpose with {SANDBOX_VAR}=local.")
    try:
        with warnings.catch_warnings():
            if name == "local":  # opted into: its NOT-isolation warning is the point of the variable
                warnings.simplefilter("ignore", RuntimeWarning)
            box = sandboxes.make(name, **limits)
    except sandboxes.SandboxUnavailable as exc:
        missing = str(exc)
    else:
        missing = ""
    if missing:
        pytest.fail(f"the {name!r} sandbox is unavailable here: {missing}. {how}", pytrace=False)
    result = box.run("print(1)")
    if result.stdout != "1\n":
        box.close()
        pytest.fail(f"the {name!r} sandbox does not run a program here: status={result.status!r}, "
                    f"stderr={result.stderr[-500:]!r}. {how}", pytrace=False)
    return box


@pytest.fixture(scope="session")
def make_sandbox():
    """``make_sandbox(**limits)`` -> an isolating sandbox (see :func:`make_test_sandbox`); the caller closes it."""
    return make_test_sandbox


def count_python_lines(fn, *args, **kwargs):
    """``(fn(*args, **kwargs), n)``: the result and how many lines of Python ``fn`` ran, in every Python
    function it called in this thread (``sys.settrace`` line events; C code such as numpy kernels or
    ``re`` counts nothing). Deterministic where a time is not: a test bounds the work of a call, or
    compares it across input sizes (a loop over the samples shows as a count that grows with them)."""
    n = 0

    def local(frame, event, arg):  # noqa: ARG001
        nonlocal n
        if event == "line":
            n += 1
        return local

    # the garbage of earlier tests (Ray, torch objects) must not run its __del__ inside the count
    gc.collect()
    gc_was_on = gc.isenabled()
    gc.disable()
    previous = sys.gettrace()
    sys.settrace(lambda frame, event, arg: local)
    try:
        result = fn(*args, **kwargs)
    finally:
        sys.settrace(previous)
        if gc_was_on:
            gc.enable()
    return result, n


@pytest.fixture
def python_lines():
    """:func:`count_python_lines`: ``python_lines(fn, *args) -> (result, lines of Python run)``."""
    return count_python_lines


class WorkerFaults:
    """Kill warm bwrap workers (``sandboxes.warm``) with SIGKILL, as the host's OOM killer or an operator would."""

    @staticmethod
    def zygote_pid(worker) -> int | None:
        """Host pid of the worker's zygote: the one of its processes that is PID 1 of a nested namespace."""
        for pid in worker.host_pids():
            try:
                with open(f"/proc/{pid}/status") as f:
                    nspid = next((line.split()[1:] for line in f if line.startswith("NSpid:")), [])
            except OSError:
                continue
            if len(nspid) >= 2 and nspid[-1] == "1":
                return pid
        return None

    def kill_idle(self, pool, which: str = "zygote", wait: bool = True) -> list[int]:
        """SIGKILL each idle worker of ``pool`` (its zygote, or its top host process with ``which="bwrap"``);
        with ``wait``, return only once each worker's bwrap has exited."""
        killed = []
        for w in list(pool._idle.queue):  # noqa: SLF001 - the pool's idle queue (fault injection)
            pid = self.zygote_pid(w) if which == "zygote" else w.proc.pid
            assert pid is not None, f"no zygote among the worker's processes {w.host_pids()}"
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            deadline = time.monotonic() + 10
            while wait and w.proc.poll() is None:
                assert time.monotonic() < deadline, "the killed worker's bwrap did not exit"
                time.sleep(0.01)
        return killed

    @contextlib.contextmanager
    def kill_busy(self, pool, times: int = 1):
        """Within the block, SIGKILL the zygote of every worker of ``pool`` that runs a program (it has more
        processes than an idle worker), ``times`` times at most; yields the list of killed pids."""
        killed: list[int] = []
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set() and len(killed) < times:
                for w in list(pool._all):  # noqa: SLF001 - every worker of the pool (fault injection)
                    if w.alive and len(killed) < times and len(w.host_pids()) > pool.own_processes:
                        pid = self.zygote_pid(w)
                        if pid is not None and pid not in killed:
                            os.kill(pid, signal.SIGKILL)
                            killed.append(pid)
                time.sleep(0.005)

        t = threading.Thread(target=loop, name="worker-killer", daemon=True)
        t.start()
        try:
            yield killed
        finally:
            stop.set()
            t.join()


@pytest.fixture
def worker_faults() -> WorkerFaults:
    """:class:`WorkerFaults`: SIGKILL a warm pool's workers while idle (``kill_idle``) or running (``kill_busy``)."""
    return WorkerFaults()


def _slow_limit_s() -> float | None:
    if os.environ.get("LLM_MARL_CHECK_SLOW", "") in ("", "0"):
        return None
    return float(os.environ.get("LLM_MARL_SLOW_S", "5"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    limit = _slow_limit_s()
    if limit is None or call.when != "call" or item.get_closest_marker("slow") is not None:
        return
    report = outcome.get_result()
    if report.passed and call.duration > limit:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} took {call.duration:.1f} s (> {limit:g} s, LLM_MARL_SLOW_S) and is not "
                           "marked slow: add @pytest.mark.slow, or make it faster")
