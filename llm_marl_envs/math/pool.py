"""Worker processes with a hard deadline for the slow path of the answer checker.

The slow path (math-verify and sympy, :mod:`llm_marl_envs.math._symbolic`) runs in plain
``subprocess`` workers speaking JSON lines: no ``multiprocessing``, so no ``__main__``
re-import and no fork of a threaded parent. The pool is shared by every thread of a
process (a condition variable hands out workers), each Ray actor or forked child starts
its own workers on first use, and a worker that overruns the deadline is killed (SIGKILL)
and replaced. The caller's process never imports sympy or math-verify for a check.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["configure", "shutdown_workers", "compare", "compare_verdict", "NoVerdict", "WorkerError", "settings"]

STARTUP_TIMEOUT_S = 60.0  # importing sympy and math-verify on a loaded machine can take seconds
_WORKER_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_symbolic.py")


class WorkerError(RuntimeError):
    """The worker reported an exception raised by its own code (not an unreadable answer)."""


@dataclass
class Settings:
    timeout_s: float = 3.0  # hard per-comparison deadline
    workers: int = field(default_factory=lambda: max(1, int(os.environ.get("LLM_MARL_MATH_WORKERS", "1") or 1)))


settings = Settings()


def configure(*, timeout_s: float | None = None, workers: int | None = None) -> None:
    """Change the worker deadline (seconds) or the number of worker processes."""
    if timeout_s is not None:
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        settings.timeout_s = float(timeout_s)
    if workers is not None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive int, got {workers!r}")
        settings.workers = workers
        _pool.resize()


class _Worker:
    def __init__(self) -> None:
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self.proc = subprocess.Popen([sys.executable, "-u", _WORKER_FILE], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                     close_fds=True, start_new_session=True)
        self.buf = b""
        self.next_id = 0
        try:  # wait for "ready" (imports done): start-up time does not count against a request
            if self._read_reply(STARTUP_TIMEOUT_S).get("ready") is not True:
                raise OSError("math worker did not start")
        except BaseException:
            self.kill()
            raise

    def request(self, a: str, b: str, deadline_s: float) -> bool | None:
        """Send one comparison; its result, or TimeoutError/OSError/WorkerError."""
        self.next_id += 1
        rid = self.next_id
        payload = json.dumps({"id": rid, "a": a, "b": b, "budget": max(0.2, deadline_s * 0.5)}) + "\n"
        assert self.proc.stdin is not None
        self.proc.stdin.write(payload.encode())
        self.proc.stdin.flush()
        reply = self._read_reply(deadline_s)
        if reply.get("id") != rid:
            raise OSError("math worker out of sync")
        if "error" in reply:
            raise WorkerError(str(reply["error"]))
        result = reply.get("result")
        return result if isinstance(result, bool) else None

    def _read_reply(self, deadline_s: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        end = time.monotonic() + deadline_s
        fd = self.proc.stdout.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self.buf:
                left = end - time.monotonic()
                if left <= 0:
                    raise TimeoutError("math worker overran its deadline")
                if not sel.select(left):
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise OSError("math worker exited")
                self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        reply = json.loads(line)
        if not isinstance(reply, dict):
            raise OSError("math worker sent a malformed reply")
        return reply

    def kill(self) -> None:
        try:
            self.proc.kill()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream:
                    stream.close()
            except OSError:
                pass


class _Pool:
    """A few worker processes shared by all threads of this process."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.idle: list[_Worker] = []
        self.count = 0
        self.pid = os.getpid()
        self.kills = 0  # workers killed for overrunning or breaking

    def _check_fork(self) -> None:
        if os.getpid() != self.pid:  # a forked child must not share its parent's pipes
            self.cond = threading.Condition()
            self.idle, self.count, self.pid = [], 0, os.getpid()

    def resize(self) -> None:
        with self.cond:
            while len(self.idle) > 0 and self.count > settings.workers:
                self.idle.pop().kill()
                self.count -= 1
            self.cond.notify_all()

    def acquire(self) -> _Worker:
        self._check_fork()
        with self.cond:
            while True:
                if self.idle:
                    return self.idle.pop()
                if self.count < settings.workers:
                    self.count += 1
                    break
                self.cond.wait()
        try:
            return _Worker()
        except BaseException:
            with self.cond:
                self.count -= 1
                self.cond.notify()
            raise

    def release(self, worker: _Worker, broken: bool) -> None:
        with self.cond:
            if broken or self.count > settings.workers or os.getpid() != self.pid:
                worker.kill()
                self.count -= 1
                self.kills += broken
            else:
                self.idle.append(worker)
            self.cond.notify()

    def close(self) -> None:
        if os.getpid() != self.pid:
            return
        with self.cond:
            for w in self.idle:
                w.kill()
            self.count -= len(self.idle)
            self.idle = []


_pool = _Pool()
atexit.register(_pool.close)


def shutdown_workers() -> None:
    """Stop the idle worker processes (they restart on demand)."""
    _pool.close()


def kills() -> int:
    """How many workers were killed so far for overrunning the deadline or breaking."""
    return _pool.kills


class NoVerdict(Exception):
    """A comparison that got no verdict for a reason outside the answers: the worker ran out of time (the machine's
    load may be why) or died. Raised by :func:`compare_verdict`; never a cacheable result."""


def compare_verdict(a: str, b: str) -> bool | None:
    """One comparison in a worker under the hard deadline ``settings.timeout_s``.

    True/False from the worker; None when it could not read an answer (the answers' doing: the same every time).
    :class:`NoVerdict` when it ran out of time (the worker is then killed and replaced) or died;
    :class:`WorkerError` when the worker's own code raised; start-up failures (``OSError``) propagate too.
    """
    worker = _pool.acquire()
    broken = False
    try:
        return worker.request(a, b, settings.timeout_s)
    except (TimeoutError, OSError, ValueError) as e:
        broken = True
        raise NoVerdict(f"{type(e).__name__}: {e}") from e
    finally:
        _pool.release(worker, broken)


def compare(a: str, b: str) -> bool | None:
    """:func:`compare_verdict`, with None also for no verdict (timeout, dead worker)."""
    try:
        return compare_verdict(a, b)
    except NoVerdict:
        return None
