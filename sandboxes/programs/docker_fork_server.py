"""PID 1 of a warm docker sandbox container: a fork server (see :mod:`sandboxes.docker_backend`).

Runs after ``docker_io.py`` and ``wipe.py``.

Per run it reads the same payload as ``docker_supervisor.py`` (plus timeout/output limits)
from the attached stdin, forks and execs a fresh ``python3 main.py`` with its own
stdout/stderr pipes, enforces the wall timeout and the output cap itself, then kills every
process left (``kill(-1)`` until ``/proc`` shows only itself), empties every writable place
(``/scratch``, ``/tmp``, ``/dev/shm``, ``/dev/mqueue``: without recursion, see ``wipe.py``)
and System V IPC, checks that the run gave back what it took (no unix socket left in the
container's network namespace: nothing parked in flight; the scratch file systems' free
blocks and inodes and the container's memory charge, file cache not counted, as at start:
``given_back`` in ``wipe.py``, waiting up to ``reclaim_wait_s`` for the kernel's collector)
and reports; a container it cannot prove clean is replaced. Its
frames on stdout: kind (1 stdout, 2 stderr, 3 result JSON) + 4-byte length + data.
It is non-dumpable (no ptrace, no ``/proc/1/mem``) and PID 1, which ignores signals from
inside its namespace that it has no handler for.
"""
import ctypes
import json
import os
import resource
import select
import signal
import stat
import time
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
def send(kind, data):
    data = bytes([kind]) + len(data).to_bytes(4, "big") + data
    while data:
        data = data[os.write(1, data):]
def others():
    return [p for p in os.listdir("/proc") if p.isdigit() and p != "1"]
def kill_all():
    for _ in range(500):
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        if not others():
            return True
        time.sleep(0.002)
    return False
WRITABLE = ("/scratch", "/tmp", "/dev/shm", "/dev/mqueue")
ROOTS = {}  # recorded when the server starts (below): mode, times, xattrs as the engine made them
STATE = {}  # the server's rlimits, nice, scheduler, ... that later runs inherit
def wipe():
    """Empty every writable place and System V IPC; returns what is left ([] when clean)."""
    left = []
    for d, want in ROOTS.items():
        try:
            if stat.S_IMODE(os.stat(d).st_mode) != want[0]:
                os.chmod(d, want[0])  # a run made it read-only
            if empty_tree(d) < 0:  # noqa: F821 - defined by wipe.py, prepended at load time
                left.append(d + ": more entries than the wipe budget")
            left += leftovers(d)  # noqa: F821
            if not restore_root(d, want):  # noqa: F821 - wipe.py: mode, times, xattrs/ACLs
                left.append(d + ": mode, times or xattrs changed")
        except OSError as exc:
            left.append("%s: %r" % (d, exc))
    try:
        if not restore_state(libc, STATE):  # noqa: F821 - wipe.py
            left.append("the fork server's rlimits / priority / scheduling changed")
    except OSError as exc:
        left.append("fork server state: %r" % (exc,))
    for kind, fn in (("shm", lambda i: libc.shmctl(i, 0, None)), ("sem", lambda i: libc.semctl(i, 0, 0)),
                     ("msg", lambda i: libc.msgctl(i, 0, None))):
        try:
            for line in open("/proc/sysvipc/" + kind).read().splitlines()[1:]:
                fn(int(line.split()[1]))
            left += open("/proc/sysvipc/" + kind).read().splitlines()[1:]
        except (OSError, ValueError, IndexError) as exc:
            left.append("sysvipc %s: %r" % (kind, exc))
    return left
MEMORY_FILES = (("/sys/fs/cgroup/memory/memory.usage_in_bytes", "/sys/fs/cgroup/memory/memory.stat"),  # v1
                ("/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.stat"))  # v2 (own cgroup namespace)
def held_memory():
    """The container's memory charge less its file cache (None when unreadable)."""
    for usage_path, stat_path in MEMORY_FILES:
        try:
            with open(usage_path) as f:
                held = int(f.read())
            with open(stat_path) as f:
                for line in f:
                    name, _, value = line.partition(" ")
                    if name in ("active_file", "inactive_file"):
                        held -= int(value)
            return held
        except (OSError, ValueError):
            continue
    return None
def memory_back(base, slack):
    if base is None or held_memory() <= base + slack:
        return True
    libc.malloc_trim(0)  # a large payload (stdin, files) may have left the server's heap grown
    return held_memory() <= base + slack
def finish(h):
    """Wipe, then check that the run gave everything back: what is left ([] when clean)."""
    try:
        left = wipe()
    except OSError as exc:
        left = [repr(exc)]
    if not left and not given_back(FREE, h["reclaim_wait_s"],  # noqa: F821 - wipe.py
                                   lambda: memory_back(HELD, h["held_slack"])):
        left.append("the run kept scratch space, memory or descriptors in flight")
    return left
def oom_kills():
    for path in ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"):
        try:
            for line in open(path):
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        except OSError:
            pass
    return -1


if __name__ == "__main__":
    ROOTS.update({d: root_state(d) for d in WRITABLE if os.path.isdir(d)})  # type: ignore[name-defined]  # noqa: F821
    STATE.update(process_state(libc))  # type: ignore[name-defined]  # noqa: F821 - wipe.py
    FREE = space(ROOTS)  # type: ignore[name-defined]  # noqa: F821 - wipe.py: what every run must give back
    HELD = held_memory()
    rd = reader(0)  # type: ignore[name-defined]  # noqa: F821 - defined by docker_io.py, prepended at load time
    send(3, b'{"ready": true}')
    while True:
        h, code, files, data = read_payload(rd)  # type: ignore[name-defined]  # noqa: F821 - docker_io.py
        t0 = time.monotonic()
        try:
            sin = write_inputs(code, files, data)  # type: ignore[name-defined]  # noqa: F821
        except OSError as exc:  # e.g. files + stdin larger than the scratch tmpfs
            send(2, ("sandbox: could not write the program's files or stdin: %r\n" % (exc,)).encode())
            left = finish(h)
            send(3, json.dumps({"wall": 0.0, "timed_out": False, "flooded": False, "oom": False, "exit": 1,
                                "signal": None, "clean": not left, "left": left[:5]}).encode())
            continue
        finally:
            del code, files, data
        oom0 = oom_kills()
        o_r, o_w = os.pipe()
        e_r, e_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.dup2(sin, 0)
                os.dup2(o_w, 1)
                os.dup2(e_w, 2)
                os.closerange(3, 1 << 16)
                for name, value in h["rlimits"].items():
                    resource.setrlimit(getattr(resource, name), tuple(value))
                libc.prctl(4, 1, 0, 0, 0)  # this child only: its /proc entries become its own again
                os.setsid()  # its own session, process group and autogroup: none of them is PID 1's
                with open("/proc/self/oom_score_adj", "w") as f:
                    f.write("1000")
                os.execve("/usr/bin/python3", ["python3", "main.py"], ENV)
            except BaseException as exc:
                os.write(2, ("sandbox: could not start the program: %r\n" % (exc,)).encode())
            finally:
                os._exit(127)
        for fd in (sin, o_w, e_w):
            os.close(fd)
        deadline = t0 + h["timeout_s"]
        cap = h["max_output_bytes"]
        total = 0
        timed_out = flooded = False
        open_fds = {o_r: 1, e_r: 2}
        status = None
        while open_fds:
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                timed_out = True
                break
            if status is None:
                p, st = os.waitpid(pid, os.WNOHANG)
                if p == pid:
                    status = st
            # Once the program has exited, drain what is there and stop: a child it left
            # behind may hold the pipes open (it is killed below).
            ready, _, _ = select.select(list(open_fds), [], [], 0 if status is not None else min(left_s, 0.02))
            if status is not None and not ready:
                break
            for fd in ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    del open_fds[fd]
                    continue
                room = cap - total
                total += len(chunk)
                if room > 0:
                    send(open_fds[fd], chunk[:room])
                if total > cap:
                    flooded = True
            if flooded:
                break
        while status is None and not (timed_out or flooded):
            p, st = os.waitpid(pid, os.WNOHANG)
            if p == pid:
                status = st
            elif time.monotonic() >= deadline:
                timed_out = True
            else:
                time.sleep(0.001)
        wall = time.monotonic() - t0
        clean = kill_all()
        for fd in (o_r, e_r):
            os.close(fd)
        oom1 = oom_kills()
        left = finish(h)
        res = {"wall": wall, "timed_out": timed_out, "flooded": flooded, "oom": oom1 > oom0, "exit": None,
               "signal": None, "clean": clean and not left and not others(), "left": left[:5]}
        if status is not None:
            if os.WIFSIGNALED(status):
                res["signal"] = os.WTERMSIG(status)
            else:
                res["exit"] = os.WEXITSTATUS(status)
        send(3, json.dumps(res).encode())
