"""The warm path: a pool of already-sandboxed fork servers ("zygotes") for the bwrap backend.

``make("bwrap", warm=True, pool_size=N)``. Each worker is one long-lived bwrap sandbox
(same namespaces, binds, read-only root and cgroup as the cold path) whose only process of
ours is a zygote: ``python3 -I`` that has imported the standard library bits it needs and,
by default, numpy and sympy. Per run the host sends, over a ``SOCK_SEQPACKET`` socket, the
run's descriptors (stdin memfd, stdout and stderr pipes, payload memfd: code, files,
rlimits). The zygote forks a child that:

- dup2()s the descriptors to 0/1/2 and closes every other one (the control socket too),
- sets ``PR_SET_PDEATHSIG``, reseeds ``random``/``numpy.random`` (a fork would otherwise
  repeat the zygote's state), applies the run's rlimits, writes the files into the empty
  ``/tmp`` and runs the program as a fresh ``__main__`` (the same bootstrap as the cold
  path) and leaves with ``os._exit``.

When the child is over (exit, zygote-side wall timeout, or a kill request from the host
for output/process caps) the zygote SIGKILLs every other process in its PID namespace
(it is PID 1 there, ``bwrap --as-pid-1``, and reaps them all), empties ``/tmp``,
``/dev/shm`` and ``/dev/mqueue`` without recursion (``programs/wipe.py``), removes SysV IPC
objects and only then answers, saying whether it could prove them empty; if not, the host
replaces the worker. So nothing a run starts or writes is there for the next one; the next
child is forked again from the zygote, which no program code ever ran in.

A worker is also reused only when the run has given back what it took. A program can keep
kernel objects after all its processes are gone: descriptors sent with ``SCM_RIGHTS`` into a
unix socket whose own descriptor is in the same queue (a cycle no process holds) stay open
until the kernel's unix garbage collector next runs (it runs when some unix socket somewhere
is released): unlinked files still filling ``/tmp``, memfds still charged to the worker's
memory cgroup, pipes full of data, timers, inotify instances. So after every run the zygote
checks that no unix socket is left in the worker's network namespace and that every scratch
file system has its free blocks and inodes of the start back, and the host that the worker's
memory cgroup, less its file cache, is back at what the idle worker held (+ ``sandboxes._proc.HELD_SLACK_MB``).
If not, the zygote schedules the collector and both wait up to ``reclaim_wait_s``; then the
worker is replaced (``workers_recycled`` in :meth:`~sandboxes.base.Sandbox.fault_counts`). The zygote is
``PR_SET_DUMPABLE=0`` and PID 1: children (same uid) cannot ptrace it (also denied by the
seccomp filter), read its memory or environment, or signal it without a handler. Its bwrap
starts with an empty environment. Each worker has a pids and a memory cgroup; before each
run the host sets the memory limit to what the idle zygote holds + ``memory_mb`` + slack.
If the zygote stops answering (a wedged kernel call) the host reports the run as ``timeout``
and kills the whole worker sandbox through its cgroup (``timeout_s`` + grace at most).

A worker that dies by no doing of the program (an outside SIGKILL, the host's OOM killer) never
returns to the pool: it is checked when it is taken from the queue (its bwrap exited, or its
control socket is closed), and a failed send or a connection lost during a run marks it dead.
The run that hit it raises :class:`~sandboxes.records.WorkerLost`, which
:meth:`~sandboxes.base.Sandbox.run` retries on a fresh worker (``infra_retries`` times, then
:class:`~sandboxes.records.SandboxInfrastructureError`). A zygote that dies during a run while
its memory cgroup records an OOM kill was killed by the program's memory (``memory``); a run
past its deadline, its output cap or its process cap is the program's too.

Thread-safe: idle workers sit in a queue; each run takes one. Fork-safe for Ray: the pool
remembers its pid and a forked copy starts its own workers; pickling carries only the
configuration.
"""

from __future__ import annotations

import marshal
import os
import queue
import signal
import socket
import subprocess
import threading
import time
import weakref
from concurrent.futures import Future
from typing import Any, Mapping, Optional, Sequence

from . import _proc, _seccomp, programs
from .base import ExecutionResult, Limits, SandboxError, WorkerLost, classify
from .bwrap import BwrapSandbox

# python3 -I -S -c ZYGOTE_SOURCE <ctl fd> <preload> <path>
ZYGOTE_SOURCE = programs.joined("boot.py", "wipe.py", "zygote.py")

def _descendants(root: int) -> list[int]:
    """``root`` and every process below it (from the host's /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


class _Spawner:
    """One long-lived thread per process that starts every worker.

    bwrap's ``--die-with-parent`` is ``PR_SET_PDEATHSIG``, which fires when the *thread*
    that forked it exits. Workers started from a ``run_many`` pool thread would die with
    that thread; started from here, they die only with the process.
    """

    _lock = threading.Lock()
    _pid = -1
    _queue: "queue.Queue[tuple[Any, Future]]"

    @classmethod
    def call(cls, fn: Any) -> Any:
        with cls._lock:
            if cls._pid != os.getpid():
                cls._pid = os.getpid()
                cls._queue = queue.Queue()
                threading.Thread(target=cls._loop, args=(cls._queue,), name="sandbox-worker-spawner",
                                 daemon=True).start()
            q = cls._queue
        fut: Future = Future()
        q.put((fn, fut))
        return fut.result()

    @staticmethod
    def _loop(q: "queue.Queue[tuple[Any, Future]]") -> None:
        while True:
            fn, fut = q.get()
            try:
                fut.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                fut.set_exception(exc)


GRACE_S = 2.0  # the zygote enforces timeout_s; the host kills the worker only after this much more


class _Worker:
    """One bwrap sandbox running a zygote, with its control socket and pids cgroup."""

    def __init__(self, owner: "WarmBwrapSandbox") -> None:
        limits = owner.limits
        self.cgroup = _proc.make_cgroup(limits.max_processes + owner.own_processes)
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = parent_sock
        seccomp_fd = _seccomp.filter_fd()
        argv = (_proc.launcher(self.cgroup, keep_parent=False)
                + owner.bwrap_argv(limits, seccomp_fd=seccomp_fd)
                + [owner.python, "-I", "-S", "-c", ZYGOTE_SOURCE, str(child_sock.fileno()), ",".join(owner.preload),
                   ":".join(owner._extra_path), ":".join(owner.scratch_binds), repr(owner.reclaim_wait_s)])
        try:
            self.proc = _Spawner.call(lambda: subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={},
                pass_fds=(child_sock.fileno(), seccomp_fd), start_new_session=True, close_fds=True))
        except BaseException:
            parent_sock.close()
            if self.cgroup is not None:
                self.cgroup.remove()
            raise
        finally:
            child_sock.close()
            os.close(seccomp_fd)
        self.sock.settimeout(owner.start_timeout_s)
        try:
            ready = self.sock.recv(16)
        except OSError:
            ready = b""
        self.sock.settimeout(None)
        if ready != b"R":
            self.destroy()
            err = self.proc.stderr.read().decode("utf-8", "replace")[-2000:] if self.proc.stderr else ""
            raise SandboxError(f"the warm sandbox worker did not start (exit {self.proc.returncode}): {err.strip()}")
        self.proc.stderr.close()
        self.alive = True
        self.recycled = False  # set when a run did not give back what it took
        self.reclaim_wait_s = owner.reclaim_wait_s
        # What the idle worker holds (the zygote with its preloads); each run may add memory_mb.
        self.base_memory = self.cgroup.memory_usage() if self.cgroup is not None else 0
        self.base_held = self.cgroup.held_memory() if self.cgroup is not None else 0

    def host_pids(self) -> list[int]:
        """Host pids of this worker's processes (bwrap and the zygote, PID 1 inside)."""
        if self.cgroup is not None:
            return self.cgroup.pids()
        return _descendants(self.proc.pid)

    def usable(self) -> bool:
        """Alive as far as the host can tell without asking it: its bwrap runs and its control
        socket is open. False marks it dead (an idle worker killed from outside)."""
        if self.alive and (self.proc.poll() is not None or _proc.peer_gone(self.sock)):
            self.alive = False
        return self.alive

    def memory_given_back(self) -> bool:
        """Whether the worker's memory cgroup, less its file cache, is back at the idle worker's
        (+ ``sandboxes._proc.HELD_SLACK_MB``); waits up to ``reclaim_wait_s`` for pages being freed (a file the
        kernel's collector closed is released a tick later). True without a memory cgroup."""
        cg = self.cgroup
        if cg is None or cg.memory_path is None:
            return True
        most = self.base_held + (_proc.HELD_SLACK_MB << 20)
        deadline = time.monotonic() + self.reclaim_wait_s
        while cg.memory_usage() > most and cg.held_memory() > most:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)
        return True

    def destroy(self) -> None:
        self.alive = False
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.kill()
        if self.cgroup is not None:
            self.cgroup.remove()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.sock.close()

    def run(self, payload: bytes, stdin: str, limits: Limits) -> ExecutionResult:
        start = time.monotonic()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        stdin_fd = _proc.memfd_with(stdin.encode("utf-8"), "stdin")
        payload_fd = _proc.memfd_with(payload, "payload")
        cap_before = self.cgroup.cap_events() if self.cgroup is not None else 0
        oom_before = self.cgroup.oom_kills() if self.cgroup is not None else 0
        if self.cgroup is not None:
            self.cgroup.set_memory(_proc.memory_cap(limits, self.base_memory))
        try:
            try:
                socket.send_fds(self.sock, [marshal.dumps(float(limits.timeout_s))],
                                [stdin_fd, out_w, err_w, payload_fd])
            except OSError as exc:  # BrokenPipeError, ECONNRESET: the zygote was gone before the run
                self.alive = False
                raise WorkerLost(f"the warm worker was gone when the run was sent ({exc!r})") from exc
            finally:
                for fd in (stdin_fd, out_w, err_w, payload_fd):
                    os.close(fd)
            reply: list[Any] = []

            def on_event() -> bool:
                try:
                    msg = self.sock.recv(4096)
                except OSError:
                    msg = b""
                if msg:
                    reply.append(marshal.loads(msg))
                else:
                    self.alive = False  # the zygote died: the OOM killer (the program's memory) or an outside kill
                return True

            def on_kill(reason: str) -> None:
                if reason == "timeout":  # the zygote missed its own deadline: it is wedged
                    self.destroy()
                    return
                try:
                    self.sock.send(b"K")
                except OSError:
                    self.destroy()

            tick = None
            if self.cgroup is not None:
                cg = self.cgroup
                tick = lambda: cg.cap_events() > cap_before  # noqa: E731
            got = _proc.collect(out_r, err_r, cap=limits.max_output_bytes,
                                deadline=start + limits.timeout_s + GRACE_S + self.reclaim_wait_s,
                                event_fd=self.sock.fileno(),
                                on_event=on_event, on_kill=on_kill, tick=tick)
        finally:
            os.close(out_r)
            os.close(err_r)
        oom = self.cgroup is not None and self.cgroup.oom_kills() > oom_before
        if not reply and self.alive:
            self.destroy()  # no answer: do not trust this worker again
        if not reply and not (got.timed_out or got.output_exceeded or got.cap_hit or oom):
            # The zygote died (or the connection broke) while the program was within every limit: that is
            # not the program's doing (it cannot signal PID 1 of its namespace), so it is no status.
            raise WorkerLost("the warm worker died during the run, within the program's limits")
        stderr = _proc.decode(got.stderr)
        if reply:
            wait_status, zygote_timeout, clean = reply[0]
            if not (clean and self.memory_given_back()):
                # the wipe could not prove the scratch empty, or the run kept space or memory: replace the worker
                self.alive = False
                self.recycled = True
            code = os.waitstatus_to_exitcode(wait_status)
            exit_code, sig = (code, None) if code >= 0 else (None, -code)
        else:
            exit_code, sig, zygote_timeout = None, signal.SIGKILL, False
        status = classify(exit_code, sig, stderr, timed_out=got.timed_out or zygote_timeout,
                          output_exceeded=got.output_exceeded, oom=oom)
        if got.cap_hit and status != "output_limit":
            status = "killed"
        return ExecutionResult(status=status, stdout=_proc.decode(got.stdout), stderr=stderr, exit_code=exit_code,
                               wall_s=time.monotonic() - start, signal=sig)


class WarmBwrapSandbox(BwrapSandbox):
    """bwrap backend with a pool of sandboxed fork servers; see the module docstring."""

    name = "bwrap-warm"
    #: every pool of this process (leak checks must not count another pool's idle workers)
    _live: "weakref.WeakSet[WarmBwrapSandbox]" = weakref.WeakSet()

    def __init__(self, limits: Limits | None = None, *, pool_size: int | None = None,
                 preload: Sequence[str] = ("numpy", "sympy"), start_timeout_s: float = 60.0,
                 reclaim_wait_s: float = _proc.RECLAIM_WAIT_S, warm: bool = True, **kwargs: Any) -> None:
        super().__init__(limits, **kwargs)
        if pool_size is not None and (not isinstance(pool_size, int) or pool_size < 1):
            raise SandboxError(f"pool_size={pool_size!r} is impossible: use a positive int (or None for the CPU count)")
        for m in preload:
            if not m.replace(".", "").replace("_", "").isalnum():
                raise SandboxError(f"preload entry {m!r} is not a module name")
        if isinstance(reclaim_wait_s, bool) or not isinstance(reclaim_wait_s, (int, float)) or \
                not 0 <= reclaim_wait_s <= 60:
            raise SandboxError(f"reclaim_wait_s={reclaim_wait_s!r} is impossible: use seconds from 0 to 60")
        self.pool_size = pool_size or (os.cpu_count() or 1)
        self.preload = tuple(preload)
        self.start_timeout_s = start_timeout_s
        #: how long a worker waits for the kernel to collect what a run parked before it is replaced instead
        self.reclaim_wait_s = float(reclaim_wait_s)
        self._reset()
        WarmBwrapSandbox._live.add(self)

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        #: idle workers, and ``None`` tokens: a slot freed by a destroyed worker (wakes a caller waiting for one)
        self._idle: queue.LifoQueue[Optional[_Worker]] = queue.LifoQueue()
        self._created = 0
        self._all: set[_Worker] = set()
        self._closed = False

    def _check_fork(self) -> None:
        if os.getpid() != self._pid:  # a forked copy (Ray, multiprocessing): the workers are not ours
            self._reset()

    def _acquire(self) -> _Worker:
        """An idle or new worker that is alive; a dead idle one is destroyed (its slot freed) and counted."""
        while True:
            w = self._checkout()
            if w.usable():
                return w
            self.count_fault("dead_workers_replaced")
            self._release(w)

    def _checkout(self) -> _Worker:
        """An idle worker, else a new one if a slot is free, else the next one released. A caller waiting for a
        worker is woken when one comes back *or* when a destroyed worker frees its slot (a ``None`` token: the
        caller then starts a worker), so a worker killed while busy never leaves a waiter blocked forever."""
        self._check_fork()
        block = False
        while True:
            if self._closed:
                raise SandboxError("this warm sandbox pool was closed")
            try:
                w = self._idle.get() if block else self._idle.get_nowait()
            except queue.Empty:
                w = None
            if w is not None:
                return w
            with self._lock:
                spawn = self._created < self.pool_size
                if spawn:
                    self._created += 1
            if not spawn:
                block = True  # every slot holds a worker: wait for one (or for a freed slot)
                continue
            try:
                w = _Worker(self)
            except BaseException:
                self._free_slot()
                raise
            with self._lock:
                self._all.add(w)
            return w

    def _free_slot(self) -> None:
        with self._lock:
            self._created -= 1
        self._idle.put(None)  # a caller waiting in _checkout may start a worker in this slot

    def _release(self, w: _Worker) -> None:
        if w.alive and not self._closed and os.getpid() == self._pid:
            self._idle.put(w)
            return
        w.destroy()  # also when it is already dead: its bwrap, cgroup and socket go too
        with self._lock:
            self._all.discard(w)
        self._free_slot()

    def warmup(self) -> None:
        """Start all ``pool_size`` workers now (otherwise they start on first use)."""
        held = [self._acquire() for _ in range(self.pool_size)]
        for w in held:
            self._release(w)

    def worker_host_pids(self) -> set[int]:
        """Host pids of the live workers' own processes (for leak checks in tests)."""
        with self._lock:
            workers = list(self._all)
        return {pid for w in workers if w.alive for pid in w.host_pids()}

    @classmethod
    def all_worker_host_pids(cls) -> set[int]:
        """:meth:`worker_host_pids` of every warm pool of this process (an env's pool too)."""
        return {pid for pool in list(cls._live) for pid in pool.worker_host_pids()}

    def _run(self, code: str, stdin: str, limits: Limits,
             files: Mapping[str, str | bytes] | None) -> ExecutionResult:
        if limits.max_processes != self.limits.max_processes or limits.scratch_mb != self.limits.scratch_mb:
            raise SandboxError("the warm pool fixes max_processes and scratch_mb when it starts; make another pool")
        payload = _proc.encode_payload(code, files, _proc.rlimits(limits), list(self._extra_path), "/tmp")
        w = self._acquire()
        try:
            return w.run(payload, stdin, limits)
        except WorkerLost:
            self.count_fault("dead_workers_replaced")  # _release destroys it; Sandbox.run retries on a fresh one
            raise
        finally:
            if w.recycled:
                self.count_fault("workers_recycled")
            self._release(w)

    def close(self) -> None:
        self._closed = True
        if os.getpid() != self._pid:
            return
        with self._lock:
            workers = list(self._all)
            self._all.clear()
            self._created = 0
        for _ in range(self.pool_size):
            self._idle.put(None)  # wake callers waiting for a worker: they see the pool closed
        for w in workers:
            if w.alive:
                w.destroy()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __reduce__(self):  # the whole configuration; the host ids as asked (resolved again where unpickled)
        return (_rebuild_warm, (self.limits, self.bwrap, self.python, self.pool_size, self.preload, self.importable,
                                *self._requested_ids, self.start_timeout_s, self.reclaim_wait_s))


def _rebuild_warm(limits: Limits, bwrap: str, python: str, pool_size: int, preload: tuple[str, ...],
                  importable: tuple[str, ...] | None = None, host_uid: int | None = None,
                  host_gid: int | None = None, start_timeout_s: float = 60.0,
                  reclaim_wait_s: float = _proc.RECLAIM_WAIT_S):
    extra: dict[str, Any] = {} if importable is None else {"importable": importable}
    return WarmBwrapSandbox(limits, bwrap_path=bwrap, python=python, pool_size=pool_size, preload=preload,
                            host_uid=host_uid, host_gid=host_gid, start_timeout_s=start_timeout_s,
                            reclaim_wait_s=reclaim_wait_s, **extra)
