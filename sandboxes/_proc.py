"""Process helpers shared by the ``local``, ``bwrap`` and warm backends.

One concept, one place:

- the payload (code, files, rlimits) the in-sandbox bootstrap (``programs/boot.py``) reads
  from a file descriptor; the cold paths run it with ``python3 -I -S -c``, the warm fork
  server runs the same function in a freshly forked child;
- :func:`collect` reads stdout/stderr with a byte cap and a wall-clock deadline;
- :func:`run_cold`: one fresh interpreter per run under a fresh cgroup.

The cgroups live in :mod:`sandboxes._cgroup` (re-exported here).
"""

from __future__ import annotations

import dataclasses
import marshal
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import time
from typing import Callable, Mapping

from . import programs
from ._cgroup import TAG, PidsCgroup, cgroup_root, launcher, make_cgroup, next_name, run_tag
from .records import ExecutionResult, Limits, SandboxError, classify

__all__ = ["TAG", "PidsCgroup", "cgroup_root", "launcher", "make_cgroup", "next_name", "run_tag"]  # re-exported

# Environment a program sees (host variables are never passed through).
def sandbox_env(home: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": home,
        "TMPDIR": home,
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "NUMEXPR_NUM_THREADS": "1",
    }


def python_executable() -> str:
    """The real interpreter binary (not a pyenv shim script): resolved from ``sys.executable``."""
    exe = os.path.realpath(sys.executable)
    if not os.access(exe, os.X_OK):
        raise SandboxError(f"the Python interpreter {sys.executable!r} is not executable")
    return exe


def site_packages() -> list[str]:
    """The host interpreter's site-packages directories (numpy, sympy live there).

    Sandboxed interpreters start with ``-I -S``: no ``site`` import, so none of the host's
    ``.pth`` hooks run (they cost ~30 ms per start here and are the host's business, not the
    program's); the bootstrap puts these directories on ``sys.path`` instead.
    """
    import site

    return [p for p in site.getsitepackages() if os.path.isdir(p)]


# What a run's memory cgroup allows beyond memory_mb: bwrap and its init, the interpreter's
# own start-up. Everything the program holds (heap, tmpfs and /dev/shm files, memfd) counts.
MEMORY_SLACK_MB = 24


# How long a warm worker waits, after a run, for the kernel to collect what the run parked
# (descriptors in flight: programs/wipe.py ``given_back``) before it is replaced instead.
RECLAIM_WAIT_S = 0.5
# What a warm worker may hold after a run beyond its idle charge, file cache not counted
# (its own heap and the kernel's caches grow a little); more and the worker is replaced.
HELD_SLACK_MB = 8


def kick_unix_gc() -> None:
    """Schedule the kernel's unix-socket garbage collector (releasing any unix socket does), so
    what a finished run parked in flight is freed now rather than whenever some other unix
    socket on the machine closes. Cheap (~30 us); the collector itself runs asynchronously."""
    a, b = socket.socketpair()
    a.close()
    b.close()


def memory_cap(limits: Limits, base_bytes: int = 0) -> int:
    """The memory cgroup limit of a run: ``memory_mb`` + slack (+ what a warm worker already holds)."""
    return base_bytes + ((limits.memory_mb + MEMORY_SLACK_MB) << 20)


def rlimits(limits: Limits, *, nproc: int | None = None) -> list[tuple[int, int, int]]:
    """(resource, soft, hard) triples the bootstrap applies before the program starts."""
    cpu = limits.cpu_seconds
    out = [
        (resource.RLIMIT_CPU, cpu, cpu + 1),  # soft -> SIGXCPU ("timeout"), hard -> SIGKILL
        (resource.RLIMIT_AS, limits.memory_mb << 20, limits.memory_mb << 20),
        (resource.RLIMIT_FSIZE, limits.max_file_mb << 20, limits.max_file_mb << 20),
        (resource.RLIMIT_NOFILE, limits.max_open_files, limits.max_open_files),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if nproc is not None:
        out.append((resource.RLIMIT_NPROC, nproc, nproc))
    return out


def encode_payload(code: str, files: Mapping[str, str | bytes] | None, rl: list[tuple[int, int, int]],
                   extra_path: list[str], cwd: str) -> bytes:
    enc = {k: (v.encode("utf-8") if isinstance(v, str) else bytes(v)) for k, v in (files or {}).items()}
    return marshal.dumps({"code": code, "files": enc, "rl": rl, "path": extra_path, "cwd": cwd})


def memfd_with(data: bytes, name: str = "sbx") -> int:
    """An anonymous file holding ``data``, positioned at 0 (used for stdin and the payload)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


# --------------------------------------------------------------------------------------
# output collection

@dataclasses.dataclass
class Collected:
    stdout: bytes
    stderr: bytes
    output_exceeded: bool = False
    timed_out: bool = False
    cap_hit: bool = False


def collect(out_fd: int, err_fd: int, *, cap: int, deadline: float,
            event_fd: int | None = None, on_event: Callable[[], bool] | None = None,
            on_kill: Callable[[str], None], drain_s: float = 1.0,
            tick: Callable[[], bool] | None = None, tick_s: float = 0.05) -> Collected:
    """Read both pipes until EOF; stop early on deadline or cap (calling ``on_kill``).

    ``event_fd`` (a pidfd or a control socket) becomes readable when the program is over
    on the other side; ``on_event()`` handles it and returns True when the run is done,
    after which the pipes are drained for at most ``drain_s`` (a process that escaped all
    kills could otherwise hold them open forever). ``tick()`` runs every ``tick_s`` while
    the program runs; True means the process cap was hit: kill, status ``killed``.
    """
    bufs = {out_fd: bytearray(), err_fd: bytearray()}
    open_fds = {out_fd, err_fd}
    for fd in open_fds:
        os.set_blocking(fd, False)
    poller = select.poll()
    for fd in open_fds:
        poller.register(fd, select.POLLIN)
    if event_fd is not None:
        poller.register(event_fd, select.POLLIN)
    total = 0
    res = Collected(b"", b"")
    finished = event_fd is None
    killed = False
    end = deadline
    while open_fds or not finished:
        now = time.monotonic()
        if now >= end:
            if not killed and not finished:
                res.timed_out = True
                on_kill("timeout")
                killed = True
                end = now + drain_s
                continue
            break
        wait = end - now
        if tick is not None and not killed and not finished:
            if tick():
                res.cap_hit = True
                on_kill("process_cap")
                killed = True
                end = min(end, now + drain_s)
                continue
            wait = min(wait, tick_s)
        for fd, _ev in poller.poll(max(0.0, wait) * 1000):
            if fd == event_fd:
                poller.unregister(event_fd)
                if on_event is None or on_event():
                    finished = True
                    end = min(end, time.monotonic() + drain_s) if not killed else end
                else:
                    poller.register(event_fd, select.POLLIN)
                continue
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                poller.unregister(fd)
                open_fds.discard(fd)
                continue
            room = cap - total
            if room > 0:
                bufs[fd] += chunk[:room]
            total += len(chunk)
            if total > cap and not res.output_exceeded:
                res.output_exceeded = True
                if not killed:
                    on_kill("output_limit")
                    killed = True
                    end = min(end, time.monotonic() + drain_s)
    res.stdout = bytes(bufs[out_fd])
    res.stderr = bytes(bufs[err_fd])
    return res


def peer_gone(sock: socket.socket) -> bool:
    """Whether the other end of an idle control connection is gone (closed or reset: readable
    with nothing to read); a check without waiting. Pending data does not count as gone."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    events = poller.poll(0)
    if not events:
        return False
    if events[0][1] & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
        return True
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def decode(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


def split_status(returncode: int | None, *, bwrap: bool) -> tuple[int | None, int | None]:
    """(exit_code, signal) from a Popen return code. bwrap (and the launcher shell) report
    a child killed by signal N as exit code 128+N, so a program calling ``sys.exit(137)``
    reads as killed by signal 9 (documented)."""
    if returncode is None:
        return None, None
    if returncode < 0:
        return None, -returncode
    if bwrap and 128 < returncode <= 128 + 64:
        return None, returncode - 128
    return returncode, None


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# --------------------------------------------------------------------------------------
# the cold path: one fresh interpreter per run (the reference every other path matches)

COLD_BOOT_ARGV = programs.with_boot("cold_main.py")  # python3 -I -S -c COLD_BOOT_ARGV <payload fd>
COLD_PID1_ARGV = programs.with_boot("cold_pid1.py")  # the same as PID 1 of a bwrap sandbox (forks the program)


def run_cold(argv: list[str], *, code: str, files: Mapping[str, str | bytes] | None, stdin: str,
             limits: Limits, env: dict[str, str] | None, popen_cwd: str | None, inner_cwd: str,
             extra_path: list[str], max_pids: int, nproc: int | None, keep_parent: bool,
             pass_fds: tuple[int, ...] = (), boot: str = COLD_BOOT_ARGV) -> ExecutionResult:
    """Run ``argv + [boot, <payload fd>]`` under a fresh cgroup (pids + memory) and collect it.

    ``argv`` ends with the interpreter and its flags (``python3 -I -c``); the bootstrap
    and the number of the payload descriptor are appended here. ``pass_fds`` are more
    descriptors the command inherits (bwrap's seccomp filter).
    """
    payload = encode_payload(code, files, rlimits(limits, nproc=nproc), extra_path, inner_cwd)
    start = time.monotonic()
    cg = make_cgroup(max_pids, memory_cap(limits))
    stdin_fd = memfd_with(stdin.encode("utf-8"), "stdin")
    payload_fd = memfd_with(payload, "payload")
    full = launcher(cg, keep_parent=keep_parent) + argv + [boot, str(payload_fd)]
    proc = None
    try:
        try:
            proc = subprocess.Popen(full, stdin=stdin_fd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env=env, cwd=popen_cwd, start_new_session=True, pass_fds=(payload_fd, *pass_fds),
                                    close_fds=True)
        finally:
            os.close(stdin_fd)
            os.close(payload_fd)
        pidfd = os.pidfd_open(proc.pid)

        def kill_all(_reason: str = "") -> None:
            kill_group(proc.pid)
            if cg is not None:
                cg.kill()

        def on_exit() -> bool:
            # The program's main process is over: nothing it started may outlive it.
            kill_all()
            return True

        assert proc.stdout is not None and proc.stderr is not None  # both are PIPEs
        try:
            got = collect(proc.stdout.fileno(), proc.stderr.fileno(), cap=limits.max_output_bytes,
                          deadline=start + limits.timeout_s, event_fd=pidfd, on_event=on_exit, on_kill=kill_all,
                          tick=(lambda: cg.cap_events() > 0) if cg is not None else None)
        finally:
            os.close(pidfd)
        kill_all()
        returncode = proc.wait(timeout=10)
        oom = cg is not None and cg.oom_kills() > 0
    finally:
        if proc is not None:
            if proc.poll() is None:
                kill_group(proc.pid)
                proc.kill()
                proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        if cg is not None:
            cg.remove()
        kick_unix_gc()  # what the run parked in flight (its namespaces are gone) is freed now
    wall = time.monotonic() - start
    stderr = decode(got.stderr)
    # A set-up failure (cgroup join, rlimits) exits 125 with "sandbox: cannot ..." on stderr; it is
    # a result like any other: a program can print the same text and exit 125, and a program's
    # output must never make run() raise.
    exit_code, sig = split_status(returncode, bwrap=True)
    status = classify(exit_code, sig, stderr, timed_out=got.timed_out, output_exceeded=got.output_exceeded, oom=oom)
    if got.cap_hit and status != "output_limit":
        status = "killed"  # the process cap stopped a fork bomb
    return ExecutionResult(status=status, stdout=decode(got.stdout), stderr=stderr, exit_code=exit_code,
                           wall_s=wall, signal=sig)
