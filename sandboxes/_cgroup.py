"""Per-run (or per-worker) cgroups: the process cap that works for root and the kill switch.

``RLIMIT_NPROC`` is ignored for root (and the sandbox uid maps back to root), so every run
or warm worker gets its own pids cgroup; killing every member catches ``setsid()`` and
double-fork children.
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
import os
import signal
import threading
import time

from .records import SandboxError

# Prefix of every host-side name a run creates (temp dirs, cgroups). It contains the pid
# of the process that owns the sandbox, so tests can find what one process left behind.
TAG = "llm-marl-sbx"


def run_tag() -> str:
    return f"{TAG}-{os.getpid()}-"


_counter = itertools.count()


def next_name() -> str:
    return f"{run_tag()}{next(_counter)}"



@dataclasses.dataclass(frozen=True)
class _CgroupRoot:
    base: str  # our parent cgroup directory (pids; on v2 every controller)
    version: int
    memory_base: str | None = None  # v1: the parent in the memory hierarchy; v2: == base; None: no memory cgroup


_root_lock = threading.Lock()
_root_cache: dict[int, _CgroupRoot | None] = {}
PARENT = "llm-marl-sandbox"


def cgroup_root() -> _CgroupRoot | None:
    """Where per-run cgroups go, or None when no writable pids controller exists.

    cgroup v1: ``/sys/fs/cgroup/pids/llm-marl-sandbox`` and, for memory,
    ``llm-marl-sandbox`` under this process's own memory cgroup (so the limits of the
    container we run in still apply); v2: ``/sys/fs/cgroup/llm-marl-sandbox`` with
    ``+pids +memory`` in its subtree_control. Checked once per process (keyed by pid, so a
    forked Ray worker checks again).
    """
    pid = os.getpid()
    with _root_lock:
        if pid in _root_cache:
            return _root_cache[pid]
        found = _find_cgroup_root()
        _root_cache.clear()
        _root_cache[pid] = found
        return found


def _probe(base: str, needed: str) -> bool:
    probe = os.path.join(base, f"probe-{os.getpid()}-{threading.get_ident()}")
    os.mkdir(probe)
    try:
        return os.path.exists(os.path.join(probe, needed))
    finally:
        os.rmdir(probe)


def _v1_memory_base() -> str | None:
    """The memory-hierarchy parent for v1, or None when there is no writable memory controller."""
    mount = "/sys/fs/cgroup/memory"
    if not os.path.exists(os.path.join(mount, "memory.limit_in_bytes")):
        return None
    own = ""
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if "memory" in controllers.split(","):
                    own = path.lstrip("/")
    except (OSError, ValueError):
        pass
    for parent in dict.fromkeys([os.path.join(mount, own), mount]):
        try:
            base = os.path.join(parent, PARENT)
            os.makedirs(base, exist_ok=True)
            _collect_stale(base)
            if _probe(base, "memory.limit_in_bytes"):
                return base
        except OSError:
            continue
    return None


def _find_cgroup_root() -> _CgroupRoot | None:
    override = os.environ.get("LLM_MARL_SANDBOX_CGROUP")
    if override == "none":
        return None
    candidates: list[tuple[str, int]] = []
    if override:
        candidates.append((override, 1 if os.path.exists(os.path.join(override, "tasks")) else 2))
    candidates += [("/sys/fs/cgroup/pids", 1), ("/sys/fs/cgroup", 2)]
    for mount, version in candidates:
        try:
            memory_base = None
            if version == 1:
                if not os.path.exists(os.path.join(mount, "pids.max")) and not os.path.exists(
                        os.path.join(mount, "tasks")):
                    continue
                base = os.path.join(mount, PARENT)
                os.makedirs(base, exist_ok=True)
            else:
                with open(os.path.join(mount, "cgroup.controllers")) as f:
                    if "pids" not in f.read().split():
                        continue
                base = os.path.join(mount, PARENT)
                os.makedirs(base, exist_ok=True)
                for d in (mount, base):
                    for controller in ("pids", "memory"):  # pids is required, memory where it can be had
                        try:
                            with open(os.path.join(d, "cgroup.subtree_control"), "w") as f:
                                f.write("+" + controller)
                        except OSError:
                            if controller == "pids":
                                raise
            _collect_stale(base)
            if not _probe(base, "pids.max"):
                continue
            if version == 1:
                memory_base = _v1_memory_base()
            elif _probe(base, "memory.max"):
                memory_base = base
            return _CgroupRoot(base, version, memory_base)
        except OSError:
            continue
    return None


def _collect_stale(base: str) -> None:
    """Remove empty cgroups left by processes that died without closing their sandboxes."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        if not name.startswith(TAG + "-"):
            continue
        try:
            owner = int(name[len(TAG) + 1:].split("-", 1)[0])
        except ValueError:
            continue
        if owner == os.getpid() or os.path.exists(f"/proc/{owner}"):
            continue
        try:
            os.rmdir(os.path.join(base, name))  # fails (EBUSY) while anything is still in it
        except OSError:
            pass


class RunCgroup:
    """The cgroup(s) of one run or warm worker: a process cap, a memory cap, a kill switch.

    ``memory.max`` (v2) / ``memory.limit_in_bytes`` (v1) counts what ``RLIMIT_AS`` does not:
    tmpfs and ``/dev/shm`` files, ``memfd`` pages, page cache. When the kernel's OOM killer
    acts inside it, :meth:`oom_kills` goes up and the run is reported as ``memory``.
    """

    def __init__(self, root: _CgroupRoot, name: str, max_pids: int, memory_bytes: int | None = None) -> None:
        self.path = os.path.join(root.base, name)
        self.version = root.version
        self.memory_path: str | None = None
        os.mkdir(self.path)
        try:
            with open(os.path.join(self.path, "pids.max"), "w") as f:
                f.write(str(int(max_pids)))
            if root.memory_base is not None:
                if root.version == 2:
                    self.memory_path = self.path
                else:
                    self.memory_path = os.path.join(root.memory_base, name)
                    os.mkdir(self.memory_path)
                if memory_bytes is not None:
                    self.set_memory(memory_bytes)
        except OSError:
            self._rmdirs()
            raise
        self.procs_file = os.path.join(self.path, "cgroup.procs")
        self.procs_files = [self.procs_file] + (
            [os.path.join(self.memory_path, "cgroup.procs")] if self.memory_path not in (None, self.path) else [])
        self._memory: int | None = memory_bytes

    # -- memory ------------------------------------------------------------------
    def set_memory(self, limit: int) -> None:
        """Cap the memory (and swap: none) of every member at ``limit`` bytes."""
        if self.memory_path is None or getattr(self, "_memory", None) == limit:
            return
        if self.version == 2:
            _write(self.memory_path, "memory.max", str(limit))
            _write(self.memory_path, "memory.swap.max", "0", missing_ok=True)
        else:
            # memory.memsw.limit_in_bytes (memory + swap) must stay >= memory.limit_in_bytes
            raising = limit > self.memory_usage_limit()
            order = ["memory.memsw.limit_in_bytes", "memory.limit_in_bytes"]
            for key in (order if raising else order[::-1]):
                _write(self.memory_path, key, str(limit), missing_ok=key != "memory.limit_in_bytes")
        self._memory = limit

    def _memory_file(self, v2_key: str, v1_key: str) -> str:
        """Text of one of the memory controller's files ("" without a memory cgroup or on error)."""
        if self.memory_path is None:
            return ""
        try:
            with open(os.path.join(self.memory_path, v2_key if self.version == 2 else v1_key)) as f:
                return f.read()
        except OSError:
            return ""

    def memory_usage_limit(self) -> int:
        text = self._memory_file("memory.max", "memory.limit_in_bytes").strip()
        return 1 << 62 if text == "max" else int(text or 0)

    def memory_usage(self) -> int:
        """Bytes charged to the cgroup now (0 without a memory cgroup)."""
        return int(self._memory_file("memory.current", "memory.usage_in_bytes").strip() or 0)

    def held_memory(self) -> int:
        """Bytes charged that reclaim cannot take back: the charge less the file cache on the LRU
        lists (``active_file``/``inactive_file``: what a run read from ``/usr`` or numpy's files is
        cache). tmpfs, memfd and SysV shm pages, anonymous memory and kernel memory (pipe
        buffers, sockets) all count. 0 without a memory cgroup."""
        usage = self.memory_usage()
        for line in self._memory_file("memory.stat", "memory.stat").splitlines():
            name, _, value = line.partition(" ")
            if name in ("active_file", "inactive_file"):
                usage -= int(value)
        return usage

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer killed in this cgroup so far."""
        for line in self._memory_file("memory.events", "memory.oom_control").splitlines():
            name, _, value = line.partition(" ")
            if name == "oom_kill":
                return int(value)
        return 0

    # -- processes ---------------------------------------------------------------
    def cap_events(self) -> int:
        """How many forks the cap refused so far (``max`` in ``pids.events``)."""
        try:
            with open(os.path.join(self.path, "pids.events")) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "max":
                        return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def pids(self) -> list[int]:
        try:
            with open(self.procs_file) as f:
                return [int(x) for x in f.read().split()]
        except FileNotFoundError:
            return []

    def kill(self, timeout_s: float = 5.0) -> None:
        """SIGKILL every member until none is left (the pids cap bounds how many can respawn)."""
        kill_file = os.path.join(self.path, "cgroup.kill")
        if self.version == 2 and os.path.exists(kill_file):
            try:
                with open(kill_file, "w") as f:
                    f.write("1")
            except OSError:
                pass
        deadline = time.monotonic() + timeout_s
        delay = 0.0005
        while True:
            members = self.pids()
            if not members:
                return
            for pid in members:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if time.monotonic() > deadline:
                raise SandboxError(f"could not kill the processes of cgroup {self.path}: {members}")
            time.sleep(delay)
            delay = min(delay * 2, 0.02)

    def remove(self) -> None:
        self.kill()
        for path in dict.fromkeys([self.path, self.memory_path or self.path]):
            for _ in range(200):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        raise
                    self.kill()
                    time.sleep(0.005)

    def _rmdirs(self) -> None:
        for path in (self.memory_path, self.path):
            if path is not None:
                try:
                    os.rmdir(path)
                except OSError:
                    pass


PidsCgroup = RunCgroup  # the name before the cgroup also capped memory


def _write(directory: str, key: str, value: str, *, missing_ok: bool = False) -> None:
    try:
        with open(os.path.join(directory, key), "w") as f:
            f.write(value)
    except FileNotFoundError:
        if not missing_ok:
            raise


def launcher(cg: RunCgroup | None, *, keep_parent: bool) -> list[str]:
    """argv prefix: a shell that joins the run's cgroups (before anything forks, so not even
    the first fork escapes the caps) and then runs the command.

    ``keep_parent=False`` execs the command (bwrap is then its own parent shield: inside,
    the program's parent is the namespace's init). ``keep_parent=True`` keeps the shell
    alive as the program's parent, so ``os.kill(os.getppid(), 9)`` kills that shell, not
    the caller; the shell reports the program's death by signal N as exit 128+N.
    """
    if cg is None and not keep_parent:
        return []
    join = ('while [ "$1" != -- ]; do echo 0 >"$1" || { echo "sandbox: cannot join cgroup $1" >&2; exit 125; }; '
            'shift; done; shift; ')
    run = '"$@"; exit $?' if keep_parent else 'exec "$@"'
    return ["/bin/sh", "-c", join + run, "sandbox", *(cg.procs_files if cg is not None else []), "--"]


def make_cgroup(max_pids: int, memory_bytes: int | None = None) -> RunCgroup | None:
    """A fresh cgroup for one run / worker (None without a writable pids controller)."""
    root = cgroup_root()
    if root is None:
        return None
    return RunCgroup(root, next_name(), max_pids, memory_bytes)


