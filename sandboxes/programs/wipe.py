"""Emptying a writable directory without recursion, and checking what else a run could leave
for the next one (the fork server's own rlimits, nice, scheduler, ...; the scratch roots'
mode, times and xattrs); prepended to the warm fork servers (``zygote.py`` for bwrap,
``docker_fork_server.py``), which run it between runs.

A run can leave a directory tree 3000 levels deep (``shutil.rmtree`` hits
``RecursionError``, path names pass ``PATH_MAX``), directories without ``w``/``x`` for
their owner (mode 0500, 0300, 0000), 200k files, or make the scratch dir itself read-only.
:func:`empty_tree` walks with descriptors relative to the current directory (no path
grows), gives each directory back its owner's rwx before it enters (the server has the
run's uid, so it owns everything the run made) and stops after a budget of entries;
:func:`leftovers` then checks the result. A server that cannot prove its scratch empty
gives up its worker; the host starts a fresh one.
"""

import os
import stat

WIPE_BUDGET = 20000  # entries; a run that leaves more costs its worker (a fresh one starts)


def _keep_sets(root, keep):
    """(mount points, their parent dirs) relative to ``root`` for binds inside it."""
    mounts, parents = set(), set()
    for k in keep:
        if k.startswith(root.rstrip("/") + "/"):
            rel = k[len(root.rstrip("/")) + 1:].strip("/")
            mounts.add(rel)
            parts = rel.split("/")
            parents.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return mounts, parents


def empty_tree(root, keep=(), budget=WIPE_BUDGET):
    """Remove everything below ``root`` but the binds in ``keep``; never recursive, never
    follows a link, restores the owner's rwx on every directory it enters. Returns the
    budget left (< 0: gave up, the caller must not trust ``root`` any more)."""
    mounts, parents = _keep_sets(root, keep)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    fd = os.open(root, flags)
    dev = os.fstat(fd).st_dev
    path = []  # names from root down to fd
    done_parents = set()
    try:
        while True:
            rel = "/".join(path)
            descend = None
            for name in os.listdir(fd):
                sub = rel + "/" + name if rel else name
                if sub in mounts or sub in done_parents:
                    continue
                budget -= 1
                if budget < 0:
                    return budget
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode) and st.st_dev == dev:
                    descend = name
                    break
                os.unlink(name, dir_fd=fd)
            if descend is not None:
                if sub not in parents:
                    os.chmod(descend, 0o700, dir_fd=fd)
                child = os.open(descend, flags, dir_fd=fd)
                os.close(fd)
                fd = child
                path.append(descend)
                continue
            if not path:
                return budget
            parent = os.open("..", flags, dir_fd=fd)
            os.close(fd)
            fd = parent
            name = path.pop()
            sub = "/".join(path + [name])
            if sub in parents:
                done_parents.add(sub)
            else:
                os.rmdir(name, dir_fd=fd)
    finally:
        os.close(fd)


def leftovers(root, keep=()):
    """What is below ``root`` besides the binds in ``keep`` (and their parents): [] when clean."""
    mounts, parents = _keep_sets(root, keep)
    found = []
    for d in [""] + sorted(parents):
        expected = {p.rpartition("/")[2] for p in mounts | parents if p.rpartition("/")[0] == d}
        try:
            names = set(os.listdir(os.path.join(root, d) if d else root))
        except OSError as e:
            return [f"{root}/{d}: {e!r}"]
        found += [f"{root}/{d}/{n}" for n in sorted(names - expected)]
        found += [f"{root}/{d}/{n} missing" for n in sorted(expected - names)]
    return found


# -- what else a run could leave behind: the fork server's own state and the scratch roots' ----
IOPRIO_GET = {"x86_64": 252, "aarch64": 31}.get(os.uname().machine)  # the ioprio_get syscall number


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def process_state(libc):
    """What a run could change about PID 1 and every later run inherits (see :func:`restore_state`)."""
    import resource
    rl = {}
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            rl[name] = resource.getrlimit(getattr(resource, name))
    return {
        "rlimits": rl,
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "scheduler": (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority),
        "affinity": sorted(os.sched_getaffinity(0)),
        "ioprio": libc.syscall(IOPRIO_GET, 1, 0) if IOPRIO_GET else None,  # (IOPRIO_WHO_PROCESS, self)
        "oom_score_adj": _read("/proc/self/oom_score_adj"),
        "autogroup": _read("/proc/self/autogroup"),
    }


def restore_state(libc, want):
    """Put back what can be put back (soft limits, nice, affinity, ...); True when the state is as
    recorded. What a process cannot undo on its own (a lowered hard limit, a raised nice) stays
    changed, and the worker is then replaced."""
    import resource
    now = process_state(libc)
    if now == want:
        return True
    for name, lim in want["rlimits"].items():
        if now["rlimits"].get(name) != lim:
            try:
                resource.setrlimit(getattr(resource, name), lim)
            except (ValueError, OSError):
                pass
    for fix in (lambda: os.setpriority(os.PRIO_PROCESS, 0, want["nice"]),
                lambda: os.sched_setscheduler(0, want["scheduler"][0], os.sched_param(want["scheduler"][1])),
                lambda: os.sched_setaffinity(0, want["affinity"])):
        try:
            fix()
        except OSError:
            pass
    for key, value in (("oom_score_adj", want["oom_score_adj"]),
                       ("autogroup", (want["autogroup"] or "").rpartition(" ")[2])):  # "/autogroup-N nice K" -> K
        if value and now[key] != want[key]:
            try:
                with open("/proc/self/" + key, "w") as f:
                    f.write(value)
            except OSError:
                pass
    return process_state(libc) == want


def root_state(d):
    """Mode, access/modification times and extended attributes (ACLs too) of a scratch root."""
    st = os.stat(d)
    try:
        xattrs = {n: os.getxattr(d, n) for n in os.listxattr(d)}
    except OSError:
        xattrs = {}
    return stat.S_IMODE(st.st_mode), (st.st_atime_ns, st.st_mtime_ns), xattrs


def restore_root(d, want):
    """Give a scratch root back its recorded mode, xattrs (a default ACL would make every file
    of a later run mode 000) and times (xattrs and times were a channel between runs). A root
    the server does not own (docker's root-owned 1777 tmpfs: no run can chmod it or set its
    xattrs either) cannot get old times back: its times are set to now instead, so they tell
    the next run when the wipe ended, not what the last run did."""
    mode, times, xattrs = want
    if stat.S_IMODE(os.stat(d).st_mode) != mode:
        os.chmod(d, mode)
    try:
        names = os.listxattr(d)
    except OSError:
        names = []
    for n in names:
        if n not in xattrs:
            os.removexattr(d, n)
    for n, v in xattrs.items():
        if n not in names or os.getxattr(d, n) != v:
            os.setxattr(d, n, v)
    if os.stat(d).st_uid != os.geteuid():
        os.utime(d)
        now = root_state(d)
        return (now[0], now[2]) == (mode, xattrs)
    if root_state(d)[1] != times:
        os.utime(d, ns=times)
    return root_state(d) == want


# -- what a run can leave with the kernel: objects parked in flight, the scratch file systems' space --
RECLAIM_KICK_S = 0.02  # closing a unix socket schedules the collector; again this often while waiting


def unix_sockets():
    """How many unix sockets this network namespace holds. The worker has its own namespace
    and the server none of its own in it (its control connection was made outside), so once
    every process of a run is gone any socket still listed is *in flight*: queued, with the
    descriptors sent along with it (files, memfds, pipes, timers, ...), in a receive queue no
    process can read, a cycle only the kernel's unix garbage collector frees."""
    with open("/proc/net/unix", "rb") as f:
        return f.read().count(b"\n") - 1


def space(roots):
    """{root: (free blocks, free inodes)} of the scratch file systems."""
    out = {}
    for d in roots:
        st = os.statvfs(d)
        out[d] = (st.f_bfree, st.f_ffree)
    return out


def given_back(want, wait_s, more=None):
    """True when no unix socket is left in this namespace, every scratch file system has the
    free blocks and inodes of ``want`` (:func:`space` at start, after the first wipe) and
    ``more()`` (if given) agrees. Otherwise: schedule the kernel's unix garbage collector (it runs
    when a unix socket is released, anyone's, so only now and then) and check again until
    ``wait_s`` has passed; False then, and the caller gives up its worker."""
    import socket
    import time
    kicked = deadline = None
    while True:
        if unix_sockets() == 0 and space(want) == want and (more is None or more()):
            return True
        now = time.monotonic()
        if deadline is None:
            deadline = now + wait_s
        if kicked is None or now - kicked >= RECLAIM_KICK_S:
            a, b = socket.socketpair()
            a.close()
            b.close()
            kicked = now
        if now >= deadline:
            return False
        time.sleep(0.001)
