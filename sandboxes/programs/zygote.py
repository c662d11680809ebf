"""The warm bwrap fork server ("zygote"); see :mod:`sandboxes.warm`. Runs after ``boot.py`` and ``wipe.py``.

argv: control socket fd, comma-separated modules to preload, colon-separated extra
sys.path, colon-separated read-only bind mounts inside the scratch dir (kept by the wipe),
seconds to wait for the kernel to collect what a run parked (``given_back`` in ``wipe.py``).

It is PID 1 of its sandbox (``bwrap --as-pid-1``): non-dumpable, so no run can ptrace it or
open its ``/proc/1/mem``/``environ``/``fd``, and signals from inside its namespace that it
has no handler for never reach it. Between runs it kills every other process, then empties
``/tmp``, ``/dev/shm`` and ``/dev/mqueue`` without recursion (descriptor-relative, giving
itself back the permissions a run took away) and answers ``clean=False`` unless they are
verifiably empty and its own state (rlimits, nice, scheduler, affinity, ioprio, oom score,
autogroup) and the scratch roots' mode, times and xattrs are as it recorded them at start
(``wipe.py``), and the run has given back what it took: no unix socket is left in the
worker's network namespace (descriptors parked in flight) and every scratch file system has
its free blocks and inodes of the start back (``given_back``). Otherwise the host replaces
the worker.

Memory: a forked child starts with everything the zygote maps (the interpreter, the
preloaded numpy and sympy: ~140 MB of address space), which a cold run never has. Its
``RLIMIT_AS`` is raised by what the zygote maps beyond a bare interpreter (measured at
start, before the preloads), so a program gets the address space a cold run gets.
"""

import os
import stat

WRITABLE = ("/tmp", "/dev/shm", "/dev/mqueue")
HARNESS_MODULES = ("json", "contextlib", "io")  # what sandboxes.testing's harness imports


def _vm_bytes():
    """This process's address space (VmSize), in bytes."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _zygote(ctl_fd, preload, paths, keep, reclaim_wait_s):
    import ctypes
    import marshal
    import resource
    import select
    import signal
    import socket
    import sys
    sys.path.extend(paths)  # site-packages: the interpreter runs with -S
    libc = ctypes.CDLL(None, use_errno=True)
    bare_vm = _vm_bytes()  # about what a cold run's interpreter maps when its rlimits are set
    libc.prctl(4, 0, 0, 0, 0)   # PR_SET_DUMPABLE = 0: no ptrace / no /proc/<pid>/mem from children
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER (PID 1 already is; kept for a non-PID-1 start)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as PID 1: no handler, so a run cannot interrupt us
    roots = {d: root_state(d) for d in WRITABLE if os.path.isdir(d)}  # noqa: F821 - wipe.py
    # not emptied, but a run owns them too: chmod 0 on ptmx broke openpty() in every later run
    nodes = {d: root_state(d) for d in ("/dev/pts", "/dev/pts/ptmx") if os.path.exists(d)}  # noqa: F821
    state = process_state(libc)  # noqa: F821 - wipe.py
    for name in HARNESS_MODULES:  # imported here, before any run could plant a module of that name
        __import__(name)
    for name in preload:
        try:
            __import__(name)
        except Exception:
            pass
    # Preloaded for the children (boot.py imports them in every run); only `random` is used here.
    import builtins  # noqa: F401
    import linecache  # noqa: F401
    import random
    import traceback  # noqa: F401
    import types  # noqa: F401
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed()  # the first call imports lazily (~50 ms); do it once here, not per run
    sock = socket.socket(fileno=ctl_fd)
    # SIGCHLD wakes the run's poll loop, which reaps orphans at once (as an init does): a burst of
    # short-lived background processes would otherwise fill the pids cgroup with zombies
    chld_r, chld_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(chld_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    me = os.getpid()

    def reap():
        """Collect every child that has exited (no waiting): {pid: wait status}."""
        done = {}
        while True:
            try:
                got, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return done
            if got == 0:
                return done
            done[got] = st

    def sweep():
        for _ in range(10000):
            others = [int(x) for x in os.listdir("/proc") if x.isdigit() and int(x) not in (1, me)]
            if not others:
                return
            for pid in others:
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
            reap()

    def wipe():
        """Empty every writable place; True only when they are verifiably empty."""
        clean = True
        for d, want in roots.items():
            try:
                if stat.S_IMODE(os.stat(d).st_mode) != want[0]:
                    os.chmod(d, want[0])  # a run made it read-only
                clean &= empty_tree(d, keep) >= 0  # noqa: F821 - defined by wipe.py, prepended
                clean &= not leftovers(d, keep)  # noqa: F821
                clean &= restore_root(d, want)  # noqa: F821 - wipe.py
            except OSError:
                clean = False
        for d, want in nodes.items():
            try:
                clean &= restore_root(d, want)  # noqa: F821 - wipe.py
            except OSError:
                clean = False
        try:
            clean &= restore_state(libc, state)  # noqa: F821 - wipe.py
        except OSError:
            clean = False
        # SysV IPC objects live in the worker's IPC namespace: remove them.
        for kind, fn in (("shm", lambda i: libc.shmctl(i, 0, None)), ("msg", lambda i: libc.msgctl(i, 0, None)),
                         ("sem", lambda i: libc.semctl(i, 0, 0))):  # IPC_RMID
            try:
                with open("/proc/sysvipc/" + kind) as f:
                    rows = f.read().splitlines()[1:]
                for row in rows:
                    fn(int(row.split()[1]))
                with open("/proc/sysvipc/" + kind) as f:
                    clean &= len(f.read().splitlines()) <= 1
            except (OSError, ValueError, IndexError):
                clean = False
        return clean

    if not wipe():
        os._exit(3)
    free = space(roots)  # noqa: F821 - wipe.py: what every run must give back
    sock.send(b"R")
    while True:
        try:
            msg, fds, _flags, _addr = socket.recv_fds(sock, 4096, 4)
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)
        if msg == b"K" or len(fds) != 4:
            for fd in fds:
                os.close(fd)
            continue
        timeout = marshal.loads(msg)
        pid = os.fork()
        if pid == 0:
            try:
                libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG = SIGKILL
                libc.prctl(4, 1, 0, 0, 0)  # dumpable again (inherited 0): the run's own /proc/self works
                os.setsid()  # its own session, process group and autogroup: none of them is PID 1's
                try:  # the kernel's OOM killer (the worker's memory cgroup) picks the run, not us
                    with open("/proc/self/oom_score_adj", "w") as f:
                        f.write("1000")
                except OSError:
                    pass
                if os.getppid() != me:
                    os._exit(137)
                for i, fd in enumerate(fds[:3]):
                    os.dup2(fd, i)
                with open(fds[3], "rb") as f:
                    p = marshal.loads(f.read())
                credit = max(0, _vm_bytes() - bare_vm)  # mapped already: not the program's to pay
                p["rl"] = [(r, s + credit, h + credit) if r == resource.RLIMIT_AS and s != resource.RLIM_INFINITY
                           else (r, s, h) for r, s, h in p["rl"]]
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.closerange(3, 1 << 20)
                signal.signal(signal.SIGINT, signal.default_int_handler)
                # typeshed declares sys.__std*__ Final; the forked child rebinds them on purpose
                sys.stdin = sys.__stdin__ = open(0, "r", encoding="utf-8", closefd=False)  # type: ignore[misc]
                sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)  # type: ignore[misc]
                err = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
                sys.stderr = sys.__stderr__ = err  # type: ignore[misc]
                random.seed()
                if np is not None:
                    np.random.seed(int.from_bytes(os.urandom(4), "little"))
                _sbx_main(p, True)  # noqa: F821 - defined by boot.py, prepended at load time
            finally:
                os._exit(127)
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        poller.register(pidfd, select.POLLIN)
        poller.register(chld_r, select.POLLIN)
        deadline = time.monotonic() + timeout
        timed_out = False
        host_gone = False
        done = False
        main_status = None
        while not done:
            main_status = reap().get(pid)  # the run's orphans as they die (zombies count against the pids cgroup)
            if main_status is not None:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                os.kill(pid, 9)
                deadline = float("inf")
                continue
            for fd, _ev in poller.poll(None if left == float("inf") else left * 1000):  # SIGCHLD wakes it
                if fd == chld_r:
                    try:
                        while os.read(chld_r, 512):
                            pass
                    except BlockingIOError:
                        pass
                elif fd == pidfd:
                    done = True
                else:
                    m = sock.recv(4096)
                    if not m:
                        host_gone = True
                    os.kill(pid, 9)
                    poller.unregister(sock)
        os.close(pidfd)
        status = main_status if main_status is not None else os.waitpid(pid, 0)[1]
        sweep()  # no process of the run is left when the host gets the answer
        if host_gone:
            os._exit(0)
        clean = wipe() and given_back(free, wait_s=reclaim_wait_s)  # noqa: F821 - wipe.py
        # before answering: the host recycles this worker unless it is clean
        sock.send(marshal.dumps((status, timed_out, clean)))
        if not clean:
            os._exit(0)

if __name__ == "__main__":
    import sys
    import time

    _zygote(int(sys.argv[1]), [m for m in sys.argv[2].split(",") if m], [p for p in sys.argv[3].split(":") if p],
            [p for p in sys.argv[4].split(":") if p], float(sys.argv[5]))
