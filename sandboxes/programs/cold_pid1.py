"""Cold entry as PID 1 of the sandbox (``bwrap --as-pid-1``): ``python3 -I -S -c <boot.py + this> <payload fd>``.

PID 1 makes itself non-dumpable (so no run can open ``/proc/1/mem``, ``environ`` or ``fd``;
bwrap's own init, which this replaces, was dumpable), ignores SIGINT (as PID 1 without a handler,
no signal from inside reaches it), forks the program, reaps every orphan until the program is
over (zombies count against the pids cgroup) and exits with the program's status (128+N when a
signal N killed it, as bwrap's init reported it).
Leaving PID 1 ends the PID namespace: the kernel kills whatever the program left behind.
The forked program makes itself dumpable again, so its own ``/proc/self`` behaves as usual.
"""

if __name__ == "__main__":
    import ctypes as _c
    import os as _o
    import sys as _s

    import signal as _sig

    _libc = _c.CDLL(None)
    _libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
    _sig.signal(_sig.SIGINT, _sig.SIG_DFL)  # as PID 1 without a handler: a run's SIGINT never reaches us
    _pid = _o.fork()
    if _pid == 0:
        try:
            _libc.prctl(4, 1, 0, 0, 0)
            _sig.signal(_sig.SIGINT, _sig.default_int_handler)  # the program's own KeyboardInterrupt
            import marshal as _m

            with open(int(_s.argv[1]), "rb") as _f:
                _p = _m.loads(_f.read())
            del _m, _f, _c, _libc, _pid
            _sbx_main(_p, True)  # type: ignore[name-defined]  # noqa: F821 - defined by boot.py, prepended
        finally:
            _o._exit(127)
    while True:  # as bwrap's init did: reap every orphan (zombies count against the pids cgroup)
        _got, _st = _o.wait()
        if _got == _pid:
            break
    _code = _o.waitstatus_to_exitcode(_st)
    _o._exit(128 - _code if _code < 0 else _code)
