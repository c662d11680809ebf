"""Programs that park kernel objects in flight (issue 32), shared by tests/sandboxes/test_give_back.py,
tests/llm_marl_envs/code/test_code_parked.py and benchmarks/warm_ab_bench.py.

A program sends descriptors with ``SCM_RIGHTS`` into a unix socket whose own descriptor (and its
peer's) travels in the same queue: a cycle no process holds, which only the kernel's unix garbage
collector frees, whenever it next runs.
"""

from __future__ import annotations

# park(fds): every descriptor in fds, then both ends of the pair, into the pair's own receive queue.
PARK = """
import os, socket

def park(fds):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    for i in range(0, len(fds), 200):
        socket.send_fds(a, [b"x"], fds[i:i + 200])
    socket.send_fds(a, [b"x"], [a.fileno(), b.fileno()])
    for fd in fds:
        os.close(fd)
"""

_BODY = """
SCRATCH = (os.getcwd(), "/tmp", "/dev/shm")
fds = []
if {keep!r}:  # a file of the run's own (the harness's solution.py): the wipe then frees none of its blocks
    fds.append(os.open({keep!r}, os.O_RDONLY))
    os.unlink({keep!r})
for d in SCRATCH if {fill!r} else ():  # fill every scratch file system to its last byte, unlink, keep open
    for i in range(64):
        try:
            fd = os.open(os.path.join(d, "fill%d" % i), os.O_CREAT | os.O_WRONLY, 0o600)
        except OSError:
            break
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    os.write(fd, b"x" * size)
            except OSError:
                pass
        os.unlink(os.path.join(d, "fill%d" % i))
        fds.append(fd)
        if os.statvfs(d).f_bfree == 0:
            break
held = 0
while held < {memfd_mb!r}:  # memfds of 8 MB (RLIMIT_FSIZE, max_file_mb, caps each one)
    fd = os.memfd_create("parked")
    for _ in range(8):
        os.write(fd, b"m" * (1 << 20))
    fds.append(fd)
    held += 8
if {park!r}:
    park(fds)
print({{"free": {{d: os.statvfs(d).f_bfree for d in SCRATCH}}, "memfd_mb": held}})
"""


def parking_program(*, fill: bool = True, memfd_mb: int = 0, keep: str = "", park: bool = True) -> str:
    """A program that fills every scratch file system (``fill``), writes ``memfd_mb`` MB into memfds,
    optionally holds a file of its own (``keep``, unlinked) and parks all of it in flight (``park``;
    False: the same run, its descriptors closed as usual when it exits). It prints
    ``{"free": {dir: free blocks}, "memfd_mb": n}``."""
    return PARK + _BODY.format(fill=fill, memfd_mb=memfd_mb, keep=keep, park=park)


# The most a program allocates, 1 MB at a time, before MemoryError (RLIMIT_AS).
MEASURE = """
x, n = [], 0
try:
    while True:
        x.append(bytearray(1 << 20))
        n += 1
except MemoryError:
    pass
del x
print(n)
"""
