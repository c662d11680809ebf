"""PID 1 of a cold docker sandbox container (see :mod:`sandboxes.docker_backend`). Runs after ``docker_io.py``.

Reads from the attached stdin: 4-byte big-endian header length, a JSON header
``{"code": n, "files": [[path, n], ...], "stdin": n, "backstop_s": s, "rlimits": {...}}``,
then the bytes. Writes the files and ``main.py`` into the cwd, forks the program with
stdin from an unlinked file and exits with its status (``128+N`` for signal ``N``). It is
non-dumpable (the program's uid is the same: it could otherwise open ``/proc/1/mem``,
``environ``, ``fd``); the program's ``execv`` makes the program itself dumpable again.
"""
import ctypes
import os
import resource
import signal


if __name__ == "__main__":
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
    rd = reader(125)  # type: ignore[name-defined]  # noqa: F821 - defined by docker_io.py, prepended at load time
    h, code, files, data = read_payload(rd)  # type: ignore[name-defined]  # noqa: F821 - docker_io.py
    fd = write_inputs(code, files, data)  # type: ignore[name-defined]  # noqa: F821
    del data, code, files
    def finish(status):
        os._exit(status)
    signal.signal(signal.SIGALRM, lambda *a: finish(124))
    signal.setitimer(signal.ITIMER_REAL, h["backstop_s"])
    pid = os.fork()
    if pid == 0:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        for name, value in h["rlimits"].items():
            resource.setrlimit(getattr(resource, name), tuple(value))
        os.dup2(fd, 0)
        os.close(fd)
        os.execv("/usr/bin/python3", ["python3", "main.py"])
    os.close(fd)
    while True:
        p, st = os.wait()
        if p == pid:
            finish(128 + os.WTERMSIG(st) if os.WIFSIGNALED(st) else os.WEXITSTATUS(st))
