"""The seccomp filter every bwrap run (cold and warm) gets, built with libseccomp.

Modelled on Docker's default profile (moby ``profiles/seccomp/default.json``): everything a
Python program needs is allowed; the calls below fail with ``EPERM`` (``clone3`` with
``ENOSYS``, so glibc falls back to ``clone``, whose namespace flags the filter can see).
Calls of a foreign architecture (``int 0x80`` on x86-64) kill the process: libseccomp's
default for an architecture the filter does not list.

The filter is compiled once per process with libseccomp (through ``pyseccomp``, a ctypes
binding with the API of libseccomp's own Python module, which Debian ships only for its
system interpreter) and handed to bwrap as ``--seccomp FD``; bwrap installs it right before
it execs the sandboxed command, after its own mount setup.
"""

from __future__ import annotations

import errno
import functools
import tempfile

from ._proc import memfd_with

# syscall -> why it is denied (docs/sandboxes.md renders this table).
DENIED: dict[str, str] = {
    # another process's memory, descriptors or state
    "ptrace": "attach to / read / write another process (PID 1 of a warm worker, a later run)",
    "process_vm_readv": "read another process's memory",
    "process_vm_writev": "write another process's memory",
    "pidfd_getfd": "steal a descriptor from another process",
    "kcmp": "compare kernel objects of other processes (fd / address-space probing)",
    # kernel keyrings are not namespaced: the sandbox uid maps to host root
    "add_key": "plant keys in the host's per-uid keyring (not namespaced)",
    "keyctl": "read/link/clear host keyrings",
    "request_key": "ask the host's key management for keys",
    # mounts and namespaces
    "mount": "change the mount table",
    "umount2": "change the mount table",
    "pivot_root": "change the root",
    "chroot": "change the root",
    "fsopen": "new mount API",
    "fsconfig": "new mount API",
    "fsmount": "new mount API",
    "fspick": "new mount API",
    "move_mount": "new mount API",
    "open_tree": "new mount API",
    "mount_setattr": "new mount API",
    "unshare": "new namespaces (and with them capabilities inside them)",
    "setns": "enter other namespaces",
    # kernel attack surface a program never needs
    "bpf": "load eBPF programs",
    "perf_event_open": "performance counters: kernel info leaks, side channels",
    "userfaultfd": "stall the kernel at chosen points (exploit primitive)",
    "io_uring_setup": "io_uring: large attack surface, bypasses seccomp for its operations",
    "io_uring_enter": "io_uring",
    "io_uring_register": "io_uring",
    "open_by_handle_at": "open files by handle, bypassing path checks",
    "name_to_handle_at": "file handles (pairs with open_by_handle_at)",
    "kexec_load": "load a new kernel",
    "kexec_file_load": "load a new kernel",
    "init_module": "load a kernel module",
    "finit_module": "load a kernel module",
    "delete_module": "unload a kernel module",
    "reboot": "reboot / power off",
    "swapon": "host swap",
    "swapoff": "host swap",
    "acct": "process accounting",
    "settimeofday": "host clock",
    "clock_settime": "host clock",
    "clock_adjtime": "host clock",
    "iopl": "raw I/O port access",
    "ioperm": "raw I/O port access",
    "quotactl": "file-system quotas",
    "quotactl_fd": "file-system quotas",
    "lookup_dcookie": "kernel profiling",
    "syslog": "kernel log (addresses)",
    "uselib": "obsolete",
    "ustat": "obsolete",
    "sysfs": "obsolete",
    "_sysctl": "obsolete",
    "vhangup": "terminal hang-up",
    "fanotify_init": "watch file-system events of others",
    "inotify_init": "inotify instances count against a per-user quota shared by every run (and, for a run "
                    "mapped to root, the host's): one run could make everyone's inotify_init fail",
    "inotify_init1": "inotify (see inotify_init)",
}

# Calls allowed on the caller itself only (argument ``arg`` must be 0, meaning "this process"):
# on another pid (the warm zygote is PID 1 of the same uid) they would outlive the run and
# starve or break every later run in that worker.
SELF_ONLY: dict[str, tuple[int, str]] = {
    "prlimit64": (0, "lower PID 1's resource limits: every later run in the worker fails to start"),
    "sched_setaffinity": (0, "pin PID 1 to one CPU"),
    "sched_setscheduler": (0, "put PID 1 in SCHED_IDLE: later runs time out under load"),
    "sched_setparam": (0, "change PID 1's scheduling parameters"),
    "sched_setattr": (0, "change PID 1's scheduling policy / nice"),
    "setpriority": (1, "renice PID 1, its process group or every process of the uid"),
    "ioprio_set": (1, "lower PID 1's (or the uid's) I/O priority"),
}
# ... and with ``which`` (argument 0) naming a single process: PRIO_PROCESS / IOPRIO_WHO_PROCESS
SELF_WHICH = {"setpriority": 0, "ioprio_set": 1}

# socket() families a program may use (Docker denies AF_VSOCK, which no network namespace
# isolates; the rest reach kernel code a Python program never needs): anything else fails
# with EAFNOSUPPORT, as on a kernel built without that family.
SOCKET_FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10}

# clone() flags that create namespaces (Docker denies them without CAP_SYS_ADMIN).
CLONE_NAMESPACE_FLAGS = {
    "CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000, "CLONE_NEWTIME": 0x00000080,
}

INSTALL_HINT = ("the sandbox's seccomp filter needs libseccomp and its Python binding: "
                "apt-get install libseccomp2 && pip install pyseccomp")


def _lib():
    try:
        import pyseccomp
    except (ImportError, OSError) as exc:  # OSError: libseccomp.so.2 missing
        from .records import SandboxUnavailable

        raise SandboxUnavailable(f"{INSTALL_HINT} ({exc})") from exc
    return pyseccomp


@functools.lru_cache(maxsize=1)
def filter_bpf() -> tuple[bytes, tuple[str, ...]]:
    """(compiled BPF program, names of the calls denied on this kernel's libseccomp)."""
    sc = _lib()
    flt = sc.SyscallFilter(sc.ALLOW)
    denied = []
    for name in DENIED:
        try:
            flt.add_rule(sc.ERRNO(errno.EPERM), name)
        except (ValueError, RuntimeError, OSError):  # a call this libseccomp does not know
            continue
        denied.append(name)
    for flag in CLONE_NAMESPACE_FLAGS.values():
        flt.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    for name, (arg, _why) in SELF_ONLY.items():
        flt.add_rule(sc.ERRNO(errno.EPERM), name, sc.Arg(arg, sc.NE, 0))
        if name in SELF_WHICH:
            flt.add_rule(sc.ERRNO(errno.EPERM), name, sc.Arg(0, sc.NE, SELF_WHICH[name]))
    allowed = sorted(SOCKET_FAMILIES.values())
    # deny every family outside the allowed ones: below, between and above them
    lo = 0
    for fam in allowed:
        for bad in range(lo, fam):
            flt.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.EQ, bad))
        lo = fam + 1
    flt.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.GE, lo))
    with tempfile.TemporaryFile() as f:
        flt.export_bpf(f)
        f.seek(0)
        return f.read(), tuple(denied)


def filter_fd() -> int:
    """A fresh memfd at offset 0 holding the filter, for ``bwrap --seccomp FD`` (pass it with ``pass_fds``)."""
    return memfd_with(filter_bpf()[0], "seccomp")
