"""The ``bwrap`` backend (the default): bubblewrap namespaces + rlimits + a pids cgroup.

Each run is a fresh ``bwrap`` sandbox around ``python3 -I -S`` (site-packages put on ``sys.path``
by the bootstrap, so none of the host's ``.pth`` hooks run):

- namespaces: user (uid/gid 65534 inside), PID, network (only a down loopback), IPC, UTS,
  cgroup (when the kernel allows), mount; ``--disable-userns`` (no nested user namespaces),
  ``--cap-drop ALL``, ``--new-session`` (no TIOCSTI into the caller's terminal),
  ``--die-with-parent``;
- filesystem: read-only binds of ``/usr`` (plus the ``/lib*``, ``/bin`` links), ``/etc/ld.so.cache``
  and the Python prefix (``sys.base_prefix``: stdlib and site-packages with numpy/sympy;
  a prefix under ``/tmp`` is bound on top of the fresh scratch tmpfs); a
  fresh ``/proc`` and minimal ``/dev``; ``/tmp`` is a size-limited tmpfs (``scratch_mb``) and
  the program's cwd; ``/dev/shm`` a small tmpfs; everything else, including ``/`` itself, is
  read-only. No ``/root`` (beyond the path to the Python prefix), no project dir, no ``/home``;
- environment: cleared (``PATH``, ``LANG``, ``HOME=/tmp``, single-threaded BLAS only);
- syscalls: the seccomp filter of :mod:`sandboxes._seccomp` (``--seccomp FD``);
- limits: the bootstrap sets RLIMIT_CPU/AS/FSIZE/NOFILE/CORE before the program runs;
  the process and memory caps are a per-run pids + memory cgroup the sandbox joins before
  bwrap starts (the memory cgroup counts tmpfs, ``/dev/shm`` and memfd pages too);
- end of run: killing bwrap ends the PID namespace (the kernel SIGKILLs all of it), and
  the cgroup is swept too.

``make("bwrap", warm=True, pool_size=N)`` returns the fork-server pool (:mod:`sandboxes.warm`,
which builds on this module; this module does not import it).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import pwd
import shutil
import subprocess
import sys
import warnings
from typing import Any, Mapping, Sequence

from . import _proc, _seccomp
from .base import ExecutionResult, Limits, Sandbox, SandboxError, SandboxUnavailable

DEFAULT_BWRAP = "/usr/bin/bwrap"
SCRATCH = "/tmp"  # the program's working directory: a fresh size-limited tmpfs
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"


def _find_bwrap(path: str | None) -> str:
    if path is not None:
        return path
    return shutil.which("bwrap") or DEFAULT_BWRAP


@functools.lru_cache(maxsize=8)
def _probe(bwrap: str) -> tuple[bool, str, frozenset[str]]:
    """Run bwrap once with the namespaces we need. (ok, reason, supported optional flags)."""
    if not os.path.exists(bwrap):
        return False, f"bubblewrap binary {bwrap!r} not found", frozenset()
    if not os.access(bwrap, os.X_OK):
        return False, f"bubblewrap binary {bwrap!r} is not executable", frozenset()
    try:
        helptext = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10, env={}).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"running {bwrap} --help failed: {exc}", frozenset()
    flags = frozenset(f for f in ("--disable-userns", "--size", "--unshare-cgroup-try", "--remount-ro")
                      if f in helptext)
    argv = [bwrap, "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--die-with-parent", "--new-session", "--clearenv", "--cap-drop", "ALL", "--uid", "65534",
            "--gid", "65534", *_system_binds(), "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
            "--", "/bin/sh", "-c", "exit 0"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, env={})
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"running bwrap failed: {exc}", flags
    if done.returncode != 0:
        return False, (f"bwrap could not create a sandbox (exit {done.returncode}): {done.stderr.strip()[:500]}; "
                       "user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone=1 or "
                       "user.max_user_namespaces>0) or blocked by the container runtime"), flags
    return True, "", flags


def check_available(bwrap_path: str | None = None) -> None:
    """Raise :class:`SandboxUnavailable` (saying what to install) unless bwrap really works here."""
    bwrap = _find_bwrap(bwrap_path)
    ok, reason, _ = _probe(bwrap)
    if not ok:
        exc = SandboxUnavailable(f"the bwrap sandbox backend is unavailable: {reason}. To fix: {INSTALL_HINT}, "
                                 "or pass bwrap_path=..., or use make('local') (not isolation) / make('docker')")
        exc.reason = reason  # type: ignore[attr-defined]  # what make("auto") names
        exc.missing = ("bubblewrap is not installed" if not os.access(bwrap, os.X_OK)  # type: ignore[attr-defined]
                       else "bubblewrap cannot create its namespaces (user namespaces unavailable)")
        raise exc


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    for f in ("/etc/ld.so.cache", "/etc/localtime"):
        if os.path.exists(f):
            args += ["--ro-bind", f, f]
    return args


def _covered(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


# -- who the program is on the host ----------------------------------------------------------
SANDBOX_USER = "llm-marl-sandbox"  # scripts/setup.sh creates it (a system user with no home, no shell)
NOBODY = 65534


def host_ids(uid: int | None = None, gid: int | None = None) -> tuple[int, int] | None:
    """The unprivileged host (uid, gid) a sandboxed program runs as when the caller is root.

    ``None`` when the caller is not root: bwrap then maps the sandbox user onto the caller,
    who is unprivileged already. As root: ``uid``/``gid`` if given, else the system user
    ``llm-marl-sandbox`` if it exists, else 65534 (``nobody``/``nogroup``). Never 0.
    """
    if os.geteuid() != 0:
        return None
    if uid is None:
        try:
            pw = pwd.getpwnam(SANDBOX_USER)
            uid, default_gid = pw.pw_uid, pw.pw_gid
        except KeyError:
            uid, default_gid = NOBODY, NOBODY
        gid = default_gid if gid is None else gid
    elif gid is None:
        gid = uid
    if not isinstance(uid, int) or not isinstance(gid, int) or uid <= 0 or gid <= 0:
        raise SandboxError(f"host_uid={uid!r}, host_gid={gid!r}: the sandbox must run as an unprivileged host "
                           "uid/gid (a positive int, never root's 0)")
    return uid, gid


def _reachable(path: str, ids: tuple[int, int]) -> bool:
    """Can ``ids`` (uid, gid; no supplementary groups) search every directory down to ``path``?"""
    uid, gid = ids
    cur = "/"
    for part in [p for p in path.split("/") if p]:
        try:
            st = os.stat(cur)
        except OSError:
            return False
        bit = 0o100 if st.st_uid == uid else 0o010 if st.st_gid == gid else 0o001
        if not st.st_mode & bit:
            return False
        cur = os.path.join(cur, part)
    return True


def reach_argv(bwrap: str, sources: Sequence[str], ids: tuple[int, int]) -> list[str]:
    """An outer bwrap (run as root, no user namespace: only a private mount namespace) that
    makes ``sources`` reachable by the unprivileged sandbox uid, or ``[]`` when they already are.

    The inner bwrap runs as that uid and must resolve every bind source itself; a Python
    prefix under ``/root`` (mode 0700, pyenv's default) is out of its reach. Here the topmost
    directory it cannot search is covered with a fresh tmpfs (mode 0755) holding only
    read-only binds of the sources: the host's permissions are left as they are.
    """
    blocked: dict[str, list[str]] = {}
    for src in sources:
        if _reachable(src if os.path.isfile(src) else os.path.join(src, "x"), ids):  # a directory: itself too
            continue
        cur = "/"
        for part in [p for p in src.split("/") if p]:
            nxt = os.path.join(cur, part)
            if not _reachable(os.path.join(nxt, "x"), ids):
                blocked.setdefault(nxt, []).append(src)
                break
            cur = nxt
    if not blocked:
        return []
    args = [bwrap, "--dev-bind", "/", "/", "--die-with-parent"]
    for top, srcs in sorted(blocked.items()):
        args += ["--perms", "0755", "--tmpfs", top]
        made = {top}
        for src in sorted(s for s in srcs if not _covered(s, [o for o in srcs if o != s])):
            parts = src[len(top):].strip("/").split("/")[:-1]
            d = top
            for part in parts:
                d = os.path.join(d, part)
                if d not in made:
                    args += ["--perms", "0755", "--dir", d]
                    made.add(d)
            args += ["--ro-bind", src, src]
    return args + ["--"]


def drop_argv(ids: tuple[int, int]) -> list[str]:
    """``setpriv``: become the unprivileged host uid/gid (no supplementary groups) before bwrap."""
    setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
    return [setpriv, f"--reuid={ids[0]}", f"--regid={ids[1]}", "--clear-groups", "--"]


# -- /proc as Docker shows it -----------------------------------------------------------------
# read-only (a bind of the same tree: sysctls resolve against the reader's own namespaces)
PROC_READ_ONLY: dict[str, str] = {
    "sys": "host kernel settings (kernel.core_pattern runs a command as host root)",
    "sysrq-trigger": "reboot / crash the host",
    "irq": "host interrupt affinity",
    "bus": "PCI configuration space",
}
# masked: files by /dev/null (opening fails), directories by an empty read-only tmpfs
PROC_MASKED: dict[str, str] = {
    "kcore": "host physical memory",
    "keys": "the host's keys (keyrings are not namespaced)",
    "timer_list": "host timers and the tasks that own them",
    "timer_stats": "host timer statistics",
    "sched_debug": "every host task's scheduler state",
    "latency_stats": "host latency records",
    "slabinfo": "kernel heap layout (exploit aid)",
    "kpagecount": "physical page use (rowhammer / side channels)",
    "kpageflags": "physical page flags (rowhammer / side channels)",
    "kpagecgroup": "physical page owners",
    "vmallocinfo": "kernel virtual addresses (defeats KASLR)",
    "pagetypeinfo": "physical memory layout",
    "acpi": "firmware tables and controls",
    "scsi": "host SCSI devices",
}


def proc_argv() -> list[str]:
    """bwrap arguments after ``--proc /proc``: the read-only and masked entries present here."""
    args: list[str] = []
    for name in PROC_READ_ONLY:
        if os.path.exists(f"/proc/{name}"):
            args += ["--ro-bind", f"/proc/{name}", f"/proc/{name}"]
    for name in PROC_MASKED:
        path = f"/proc/{name}"
        if os.path.isdir(path):
            args += ["--perms", "0555", "--tmpfs", path, "--remount-ro", path]
        elif os.path.exists(path):
            args += ["--ro-bind", "/dev/null", path]
    return args


# -- what the program can import ---------------------------------------------------------------
IMPORTABLE = ("numpy", "sympy", "mpmath")  # mpmath: sympy imports it


@dataclasses.dataclass(frozen=True)
class PythonLayout:
    """What of the interpreter a sandbox sees.

    ``prefixes`` (stdlib, the interpreter) are bound read-only; every site-packages directory
    inside what is bound (``masks``) is covered by an empty read-only tmpfs, and only the
    ``packages`` the program may import are bound back into it (or bound alone, wherever
    they live). So the sandbox never sees the project's own package, its golden tests or
    generators, editable or installed. ``path``: the sys.path entries the bootstrap adds.
    """

    prefixes: tuple[str, ...]
    masks: tuple[str, ...]
    packages: tuple[str, ...]
    path: tuple[str, ...]

    def binds(self) -> tuple[str, ...]:
        """Every directory or file bound from the host (the prefixes and the packages)."""
        return self.prefixes + self.packages


def _site_dirs(executable: str = "") -> list[str]:
    import glob
    import site

    found = list(site.getsitepackages())
    # the system interpreter's packages under the bound /usr (Debian's dist-packages: yaml, pip,
    # cryptography, apt_pkg, ...), whichever interpreter runs the sandbox, and every interpreter
    # prefix's own (a venv's base interpreter has site-packages that the venv's
    # site.getsitepackages() does not name, but the bound base prefix shows)
    patterns = ["/usr/lib/python3*/dist-packages", "/usr/lib/python3*/site-packages",
                "/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages"]
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    if executable:  # make(python=...): that interpreter's prefix
        prefixes.add(os.path.dirname(os.path.dirname(os.path.realpath(executable))))
    for prefix in sorted(prefixes):
        patterns += [os.path.join(prefix, lib, "python3*", sub) for lib in ("lib", "lib64")
                     for sub in ("site-packages", "dist-packages")]
    for pattern in patterns:
        found += sorted(glob.glob(pattern))
    user = site.getusersitepackages()
    found.append(user if isinstance(user, str) else "")
    found += [p for p in sys.path if os.path.basename(p.rstrip("/")) in ("site-packages", "dist-packages")]
    out: list[str] = []
    for d in found:
        if d and os.path.isdir(d):
            real = os.path.realpath(d)
            if real not in out:
                out.append(real)
    return out


def _package_locations(name: str) -> list[str]:
    """The directory (or module file) of the top-level module ``name`` and its ``name.libs``."""
    spec = importlib.util.find_spec(name)
    if spec is None:
        return []
    if spec.submodule_search_locations:
        loc = os.path.realpath(list(spec.submodule_search_locations)[0])
    elif spec.origin and os.path.isfile(spec.origin):
        loc = os.path.realpath(spec.origin)
    else:
        return []  # a built-in module: nothing to bind
    libs = os.path.join(os.path.dirname(loc), name + ".libs")  # vendored shared libraries of a wheel
    return [loc] + ([os.path.realpath(libs)] if os.path.isdir(libs) else [])


@functools.lru_cache(maxsize=16)
def python_layout(executable: str, importable: tuple[str, ...] = IMPORTABLE) -> PythonLayout:
    """The :class:`PythonLayout` for ``executable`` (this process's interpreter) and ``importable``."""
    system = ["/usr", "/bin", "/lib", "/lib64"]
    prefixes: list[str] = []
    for d in (sys.base_prefix, sys.prefix, os.path.dirname(os.path.dirname(executable))):
        d = os.path.realpath(d)
        if os.path.isdir(d) and not _covered(d, system + prefixes):
            prefixes = [p for p in prefixes if not _covered(p, [d])] + [d]
    bound = system + prefixes
    masks = [d for d in _site_dirs(executable) if _covered(d, bound)]
    masks = [d for d in masks if not _covered(d, [m for m in masks if m != d])]
    packages: list[str] = []
    path: list[str] = []
    for name in importable:
        locs = _package_locations(name)
        packages += [loc for loc in locs if loc not in packages]
        if locs and os.path.dirname(locs[0]) not in path:
            path.append(os.path.dirname(locs[0]))
    return PythonLayout(tuple(prefixes), tuple(masks), tuple(packages), tuple(path))


def layout_argv(layout: PythonLayout, *, scratch: bool) -> list[str]:
    """bwrap arguments binding ``layout``: the part outside the scratch dir (``scratch=False``,
    before ``/tmp`` is mounted) or inside it (``True``: after the scratch tmpfs)."""
    def mine(p: str) -> bool:
        return _covered(p, [SCRATCH]) == scratch

    args: list[str] = []
    for d in layout.prefixes:
        if mine(d):
            args += ["--ro-bind", d, d]
    for m in layout.masks:
        if mine(m):
            args += ["--perms", "0555", "--tmpfs", m]
    for p in layout.packages:
        if mine(p):
            args += ["--ro-bind", p, p]
    for m in layout.masks:
        if mine(m):
            args += ["--remount-ro", m]
    return args


_CHECKED: set[tuple] = set()  # layouts whose interpreter check passed in this process


@functools.lru_cache(maxsize=8)
def _probe_unprivileged(prefix: tuple[str, ...], bwrap: str) -> str:
    """'' when bwrap starts a user namespace behind ``prefix`` (the reach layer and setpriv), else why not."""
    argv = [*prefix, bwrap, "--unshare-user", "--unshare-pid", "--die-with-parent", "--uid", "65534", "--gid",
            "65534", *_system_binds(), "--proc", "/proc", "--", "/bin/sh", "-c", "exit 0"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, env={})
    except (OSError, subprocess.SubprocessError) as exc:
        return f"running {argv[0]} failed: {exc}"
    if done.returncode != 0:
        return (f"bwrap could not start as the unprivileged sandbox uid (exit {done.returncode}): "
                f"{done.stderr.strip()[:500]}; unprivileged user namespaces must be allowed "
                "(sysctl user.max_user_namespaces>0, kernel.unprivileged_userns_clone=1, and on Ubuntu 24.04+ "
                "kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap)")
    return ""


class BwrapSandbox(Sandbox):
    """One bubblewrap sandbox per run (``warm=True``: a pool of sandboxed fork servers).

    ``importable``: the top-level modules the program may import besides the standard
    library (default numpy, sympy, mpmath); nothing else of site-packages is visible.
    ``host_uid``/``host_gid``: the unprivileged host ids the program runs as when the caller
    is root (default: the ``llm-marl-sandbox`` system user, else 65534); see :func:`host_ids`.
    """

    name = "bwrap"

    def __init__(self, limits: Limits | None = None, *, bwrap_path: str | None = None, warm: bool = False,
                 python: str | None = None, importable: Sequence[str] = IMPORTABLE,
                 host_uid: int | None = None, host_gid: int | None = None, **limit_kwargs: Any) -> None:
        if warm and type(self) is BwrapSandbox:
            raise SandboxError("BwrapSandbox runs one sandbox per program; for the warm fork-server pool use "
                               "sandboxes.make('bwrap', warm=True) or sandboxes.warm.WarmBwrapSandbox")
        super().__init__(limits, **limit_kwargs)
        if isinstance(importable, str) or not all(isinstance(m, str) and m.replace("_", "").isalnum()
                                                  for m in importable):
            raise SandboxError(f"importable={importable!r} must be a list of top-level module names")
        self.bwrap = _find_bwrap(bwrap_path)
        check_available(self.bwrap)
        _seccomp.filter_bpf()  # raises SandboxUnavailable (saying what to install) without libseccomp
        self.python = python or _proc.python_executable()
        self.importable = tuple(importable)
        self.layout = python_layout(self.python, self.importable)
        self._extra_path = self.layout.path
        self._flags = _probe(self.bwrap)[2]
        self._requested_ids = (host_uid, host_gid)  # pickled as asked: resolved again where unpickled
        self.host_ids = host_ids(host_uid, host_gid)
        self._prefix: tuple[str, ...] = ()
        if self.host_ids is not None:
            self._prefix = tuple(reach_argv(self.bwrap, self.layout.binds(), self.host_ids)
                                 + drop_argv(self.host_ids))
            why = _probe_unprivileged(self._prefix, self.bwrap)
            if why:
                exc = SandboxUnavailable(f"the bwrap sandbox backend is unavailable: {why}")
                exc.no_fallback = True  # type: ignore[attr-defined]  # make("auto"): never `local` for root here
                raise exc
        #: processes of ours besides the program: the reach layer's bwrap (if any), bwrap, PID 1
        self.own_processes = 2 + (1 if self._prefix and self._prefix[0] == self.bwrap else 0)
        if self.host_ids is not None:
            self._check_interpreter()
        if _proc.cgroup_root() is None:
            warnings.warn("no writable pids cgroup: the bwrap backend cannot cap the number of processes during a "
                          "run (RLIMIT_NPROC does not apply to root); the PID namespace still kills every process "
                          "at the end. Run as root with /sys/fs/cgroup/pids writable to get the cap.",
                          RuntimeWarning, stacklevel=3)

    def _check_interpreter(self) -> None:
        """One real cold run that imports the importable packages as the sandbox uid (once per process
        and layout): a prefix or package files that uid cannot read (a 0700 venv, files installed under
        umask 077) would otherwise make every run an `error`, which in training reads as reward 0."""
        key = (self.python, self.importable, self.host_ids, self._prefix)
        if key in _CHECKED:
            return
        mods = [m for m in self.importable if importlib.util.find_spec(m) is not None]
        limits = self.limits.replace(memory_mb=max(self.limits.memory_mb, 1024),
                                     timeout_s=max(self.limits.timeout_s, 60), cpu_s=None)
        r = BwrapSandbox._run(self, "".join(f"import {m}\n" for m in mods) + "print('ok')", "", limits, None)
        if r.status != "ok" or r.stdout.strip() != "ok":
            what = "import " + ", ".join(mods) if mods else "a program"
            uid = self.host_ids[0] if self.host_ids else "?"
            exc = SandboxUnavailable(
                f"the bwrap sandbox backend is unavailable: the interpreter {self.python} cannot run {what} as the "
                f"sandbox uid {uid} (status {r.status}): {r.stderr.strip()[-500:]}. The Python prefix and the "
                "importable packages must be readable by that uid (mode o+rX), or pass host_uid=/host_gid= of a "
                "user that can read them")
            exc.no_fallback = True  # type: ignore[attr-defined]
            raise exc
        _CHECKED.add(key)

    # The sandbox command line; the warm pool reuses it for its fork servers.
    def bwrap_argv(self, limits: Limits, *, seccomp_fd: int, scratch_mb: int | None = None) -> list[str]:
        """The command up to the sandboxed one: the reach layer and ``setpriv`` (when root), then
        bwrap's arguments up to ``--``. ``seccomp_fd`` holds the compiled filter
        (:func:`sandboxes._seccomp.filter_fd`; the caller passes and closes it). The command
        runs as PID 1 of the sandbox (``--as-pid-1``: no bwrap init a program could attach to);
        it makes itself non-dumpable and forks the program."""
        scratch = (scratch_mb or limits.scratch_mb) << 20
        args = [*self._prefix, self.bwrap, "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
                "--unshare-uts"]
        if "--unshare-cgroup-try" in self._flags:
            args.append("--unshare-cgroup-try")
        if "--disable-userns" in self._flags:
            args.append("--disable-userns")
        args += ["--die-with-parent", "--new-session", "--clearenv", "--cap-drop", "ALL",
                 "--uid", "65534", "--gid", "65534", "--hostname", "sandbox"]
        for key, value in _proc.sandbox_env("/tmp").items():
            args += ["--setenv", key, value]
        args += _system_binds()
        args += layout_argv(self.layout, scratch=False)
        args += ["--proc", "/proc", *proc_argv(), "--dev", "/dev"]
        sized = "--size" in self._flags
        args += (["--size", str(4 << 20)] if sized else []) + ["--tmpfs", "/dev/shm"]
        args += ["--mqueue", "/dev/mqueue"]
        args += (["--size", str(scratch)] if sized else []) + ["--tmpfs", SCRATCH]
        args += layout_argv(self.layout, scratch=True)  # an interpreter prefix under /tmp: on top of the tmpfs
        if "--remount-ro" in self._flags:
            args += ["--remount-ro", "/dev", "--remount-ro", "/"]
        args += ["--seccomp", str(seccomp_fd), "--as-pid-1", "--chdir", SCRATCH, "--"]
        return args

    @property
    def scratch_binds(self) -> tuple[str, ...]:
        """Mount points inside the scratch dir (a venv under /tmp): the wipe keeps them."""
        inside = [d for d in self.layout.binds() + self.layout.masks if _covered(d, [SCRATCH])]
        return tuple(d for d in inside if not _covered(d, [o for o in inside if o != d]))

    def _run(self, code: str, stdin: str, limits: Limits,
             files: Mapping[str, str | bytes] | None) -> ExecutionResult:
        seccomp_fd = _seccomp.filter_fd()
        try:
            argv = self.bwrap_argv(limits, seccomp_fd=seccomp_fd) + [self.python, "-I", "-S", "-c"]
            return _proc.run_cold(argv, code=code, files=files, stdin=stdin, limits=limits, env={}, popen_cwd="/",
                                  inner_cwd="", extra_path=list(self._extra_path),
                                  max_pids=limits.max_processes + self.own_processes, nproc=None,
                                  keep_parent=False, pass_fds=(seccomp_fd,), boot=_proc.COLD_PID1_ARGV)
        finally:
            os.close(seccomp_fd)

    def __reduce__(self):  # picklable for Ray actors: configuration only
        return (_rebuild, (type(self), self.limits, self.bwrap, self.python, self.importable, *self._requested_ids))


def _rebuild(cls: type, limits: Limits, bwrap: str, python: str, importable: tuple[str, ...] = IMPORTABLE,
             host_uid: int | None = None, host_gid: int | None = None) -> "BwrapSandbox":
    return cls(limits, bwrap_path=bwrap, python=python, importable=importable, host_uid=host_uid, host_gid=host_gid)
