"""Cold entry as PID 1 of the sandbox (``bwrap --as-pid-1``): ``python3 -I -S -c <boot.py + this> <payload fd>``.

PID 1 makes itself non-dumpable (so no run can open ``/proc/1/mem``, ``environ`` or ``fd``;
bwrap's own init, which this replaces, was dumpable), forks the program, waits for it and
exits with its status (128+N when a signal N killed it, as bwrap's init reported it).
Leaving PID 1 ends the PID namespace: the kernel kills whatever the program left behind.
The forked program makes itself dumpable again, so its own ``/proc/self`` behaves as usual.
"""

if __name__ == "__main__":
    import ctypes as _c
    import os as _o
    import sys as _s

    _libc = _c.CDLL(None)
    _libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
    _pid = _o.fork()
    if _pid == 0:
        try:
            _libc.prctl(4, 1, 0, 0, 0)
            import marshal as _m

            with open(int(_s.argv[1]), "rb") as _f:
                _p = _m.loads(_f.read())
            del _m, _f, _c, _libc, _pid
            _sbx_main(_p, True)  # type: ignore[name-defined]  # noqa: F821 - defined by boot.py, prepended
        finally:
            _o._exit(127)
    _code = _o.waitstatus_to_exitcode(_o.waitpid(_pid, 0)[1])
    _o._exit(128 - _code if _code < 0 else _code)
