"""Red-team findings of issue 19, one test (or one parametrized case) each: the program runs as
an unprivileged host uid, sees /proc as Docker shows it, cannot touch host device nodes,
open exotic socket families or inotify; a warm worker cannot be poisoned for later runs;
the project's own data (golden tests, generators) is out of reach in any install; and no
returned value makes ``run_tests`` raise.

Every test here failed on the code before the fix (bwrap then mapped the sandbox user back
onto the caller, root: /proc/sys was writable, ``chmod /dev/null`` changed the host's node,
``AF_VSOCK`` opened, a run could renice or lower the limits of the warm zygote, a default
ACL on /tmp outlived the wipe, and a wheel install left the golden tests readable).
Nothing here writes a host setting: writability is probed by opening for writing only, and
``chmod`` asks for the mode the node already has.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import sandboxes
from sandboxes import _proc, bwrap

from .conftest import TEST_LIMITS, make_backend, run_processes

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["bwrap", "bwrap-warm"])
def box(request) -> sandboxes.Sandbox:
    return make_backend(request.param)


DOCKER = [pytest.param("docker", marks=pytest.mark.docker), pytest.param("docker-warm", marks=pytest.mark.docker)]


@pytest.fixture(params=["bwrap", "bwrap-warm", *DOCKER])
def any_box(request) -> sandboxes.Sandbox:
    """The classes Docker covers as well (its own /proc masks, /dev, user 65534, seccomp profile)."""
    return make_backend(request.param)


def run(sb, code: str, **kw):
    return sb.run(textwrap.dedent(code), **kw)


def result(sb, code: str, **kw):
    r = run(sb, code, **kw)
    assert r.status == "ok", r
    return ast.literal_eval(r.stdout.strip().splitlines()[-1])


# -- the host ------------------------------------------------------------------------------
def _uids_while_running(sb) -> set[int]:
    """Host real uids of the run's Python processes (read from the host's /proc while it sleeps)."""
    seen: set[int] = set()
    done = threading.Event()

    def watch():
        while not done.is_set():
            for pid, _ in run_processes():
                try:
                    exe = os.readlink(f"/proc/{pid}/exe")
                    with open(f"/proc/{pid}/status") as f:
                        uid = next(int(line.split()[1]) for line in f if line.startswith("Uid:"))
                except (OSError, StopIteration):
                    continue
                if "python" in os.path.basename(exe):
                    seen.add(uid)
            time.sleep(0.02)

    t = threading.Thread(target=watch)
    t.start()
    try:
        assert run(sb, "import time; time.sleep(1.0)").status == "ok"
    finally:
        done.set()
        t.join()
    return seen


@pytest.mark.skipif(os.geteuid() != 0, reason="as non-root the sandbox runs as the (unprivileged) caller")
def test_program_runs_as_an_unprivileged_host_uid(box):
    uids = _uids_while_running(box)
    assert uids, "no process of the run was seen"
    assert 0 not in uids, uids
    assert uids == {box.host_ids[0]}, (uids, box.host_ids)


def test_proc_sys_and_friends_are_read_only(any_box):
    got = result(any_box, """
        import os
        out = {}
        for p in ("/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches", "/proc/sysrq-trigger"):
            try:
                os.close(os.open(p, os.O_WRONLY))  # opening only: nothing is written
                out[p] = "writable"
            except OSError as e:
                out[p] = e.errno
        for d in ("/proc/sys", "/proc/irq", "/proc/bus"):
            if os.path.exists(d):
                out[d] = bool(os.statvfs(d).f_flag & os.ST_RDONLY)
        print(out)
    """)
    assert "writable" not in got.values(), got
    for d in ("/proc/sys", "/proc/irq", "/proc/bus"):
        if os.path.exists(d):
            assert got[d] is True, (d, got)


def test_kernel_internals_in_proc_are_masked(any_box):
    present = [n for n in bwrap.PROC_MASKED if os.path.exists(f"/proc/{n}")]
    assert "slabinfo" in present or "timer_list" in present  # the kernel here has some of them
    got = result(any_box, f"""
        import os
        out = {{}}
        for n in {present!r}:
            p = "/proc/" + n
            try:
                out[n] = os.listdir(p) if os.path.isdir(p) else len(open(p, "rb").read(4096))
            except OSError as e:
                out[n] = "denied"
        print(out)
    """)
    assert all(v in ("denied", [], 0) for v in got.values()), got


def test_host_device_nodes_cannot_be_changed(any_box):
    before = {n: os.stat(f"/dev/{n}") for n in ("null", "zero", "urandom")}
    got = result(any_box, """
        import os
        out = {}
        for n in ("null", "zero", "urandom"):
            p = "/dev/" + n
            try:
                os.chmod(p, os.stat(p).st_mode & 0o7777)  # the mode it has: harmless if it were allowed
                out[n] = "chmod allowed"
            except OSError as e:
                out[n] = e.errno
        with open("/dev/null", "w") as f:  # still usable
            f.write("x")
        out["urandom"] = (out["urandom"], len(open("/dev/urandom", "rb").read(8)))
        print(out)
    """)
    assert "chmod allowed" not in str(got), got
    assert got["urandom"][1] == 8
    after = {n: os.stat(f"/dev/{n}") for n in before}
    assert {n: (s.st_mode, s.st_uid) for n, s in after.items()} == {n: (s.st_mode, s.st_uid) for n, s in before.items()}


def test_only_unix_and_inet_socket_families(box):
    got = result(box, """
        import errno, socket
        out = {}
        for fam in (1, 2, 10, 16, 17, 38, 40, 0, 255):
            try:
                socket.socket(fam, socket.SOCK_DGRAM if fam != 40 else socket.SOCK_STREAM).close()
                out[fam] = "ok"
            except OSError as e:
                out[fam] = e.errno
        print(out)
    """)
    assert {k: v for k, v in got.items() if k in (1, 2, 10)} == {1: "ok", 2: "ok", 10: "ok"}, got
    import errno
    assert all(got[f] == errno.EAFNOSUPPORT for f in (16, 17, 38, 40, 0, 255)), got  # 40: AF_VSOCK


def test_inotify_is_denied(box):
    got = result(box, """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        print([(libc.inotify_init(), ctypes.get_errno()), (libc.inotify_init1(0), ctypes.get_errno())])
    """)
    assert got == [(-1, 1), (-1, 1)], got  # EPERM from the filter


def test_pid1_memory_is_closed_cold_and_warm(any_box):
    got = result(any_box, """
        out = {}
        for what in ("mem", "environ", "fd/0"):
            try:
                open("/proc/1/" + what, "rb").close()
                out[what] = "open"
            except OSError as e:
                out[what] = e.errno
        print(out)
    """)
    assert "open" not in got.values(), got


def test_own_process_controls_still_work(box):
    """The filter refuses other pids only: a program may renice, pin and limit itself."""
    got = result(box, """
        import os, resource
        start = os.getpriority(os.PRIO_PROCESS, 0)  # the host's niceness (a test run under `nice` starts above 0)
        os.nice(3)
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))
        print([os.getpriority(os.PRIO_PROCESS, 0) - start, len(os.sched_getaffinity(0)),
               resource.getrlimit(resource.RLIMIT_NOFILE)])
    """)
    assert got == [3, 1, (32, 32)], got


# -- a warm worker that a run cannot poison -------------------------------------------------
OBSERVE = """
    import os
    def xattrs(d):
        try:
            return sorted(os.listxattr(d))
        except OSError:
            return []
    roots = {d: (oct(os.stat(d).st_mode), os.stat(d).st_mtime_ns, xattrs(d)) for d in ("/tmp", "/dev/shm")}
    with open("probe", "w") as f:
        f.write("x")
    print({
        "limits": open("/proc/1/limits").read(),
        "nice": os.getpriority(os.PRIO_PROCESS, 1),
        "sched": os.sched_getscheduler(1),
        "affinity": sorted(os.sched_getaffinity(1)),
        "oom": open("/proc/1/oom_score_adj").read(),
        "autogroup": open("/proc/1/autogroup").read() if os.path.exists("/proc/1/autogroup") else None,
        "roots": roots,
        "file_mode": oct(os.stat("probe").st_mode),
        "own_nice": os.getpriority(os.PRIO_PROCESS, 0),
        "pts": (oct(os.stat("/dev/pts/ptmx").st_mode), os.stat("/dev/pts").st_mtime_ns),
    })
"""

# a default ACL on /tmp granting nobody anything: files of later runs would be created mode 000
ACL_NONE = "0200000001000000ffffffff04000000ffffffff10000000ffffffff20000000ffffffff"

POISON = {
    "prlimit_pid1": "import resource; resource.prlimit(1, resource.RLIMIT_NOFILE, (8, 8))",
    "prlimit_pid1_as": "import resource; resource.prlimit(1, resource.RLIMIT_AS, (1 << 20, 1 << 20))",
    "renice_pid1": "import os; os.setpriority(os.PRIO_PROCESS, 1, 19)",
    "renice_group": "import os; os.setpriority(os.PRIO_PGRP, 0, 19)",
    "renice_user": "import os; os.setpriority(os.PRIO_USER, 0, 19)",
    "sched_idle_pid1": "import os; os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0))",
    "affinity_pid1": "import os; os.sched_setaffinity(1, {sorted(os.sched_getaffinity(1))[0]})",
    "oom_pid1": "open('/proc/1/oom_score_adj', 'w').write('1000')",
    "autogroup": "open('/proc/self/autogroup', 'w').write('19')",
    "default_acl_tmp": f"import os; os.setxattr('/tmp', 'system.posix_acl_default', bytes.fromhex({ACL_NONE!r}))",
    "xattr_and_times": ("import os\nfor d in ('/tmp', '/dev/shm'):\n    os.setxattr(d, 'user.channel', b'1')\n"
                        "    os.utime(d, (12345, 12345))"),
    "chmod_roots": "import os; os.chmod('/tmp', 0o500); os.chmod('/dev/shm', 0o000)",
    # found by a second red team: openpty() failed in every later run; /dev/pts times were a channel
    "chmod_ptmx": ("import os\nfor f in (lambda: os.chmod('/dev/pts/ptmx', 0), lambda: os.utime('/dev/pts', (7, 7))):\n"
                   "    try:\n        f()\n    except OSError:\n        pass"),
}


@pytest.fixture(scope="module", params=["bwrap-warm", pytest.param("docker-warm", marks=pytest.mark.docker)])
def warm_one(request):
    try:
        if request.param == "bwrap-warm":
            sb = sandboxes.make("bwrap", warm=True, pool_size=1, preload=(), **TEST_LIMITS)
        else:
            sb = sandboxes.make("docker", warm=True, **TEST_LIMITS)  # sequential runs reuse the idle container
    except sandboxes.SandboxUnavailable as exc:
        pytest.skip(f"{request.param} unavailable: {exc}")
    yield request.param, sb
    sb.close()


@pytest.mark.parametrize("attack", sorted(POISON))
def test_a_poisoning_run_is_followed_by_a_clean_run_in_the_same_worker(warm_one, attack):
    """bwrap: the filter refuses the attacks on PID 1 and the zygote undoes the rest, so the
    same worker serves the next run exactly as before. docker (Docker's own seccomp profile
    lets a run renice or limit PID 1): the fork server finds the change and its container is
    replaced, so only the root times and the autogroup id of the fresh one may differ."""
    name, sb = warm_one
    baseline = result(sb, OBSERVE)
    # a worker starts at its engine's niceness (0, or what a niced dockerd passes on), below the attacks' 19
    assert baseline["file_mode"] == "0o100644" and baseline["own_nice"] < 19, baseline
    run(sb, POISON[attack])  # refused or undone: either way the next run must not see it
    after = result(sb, OBSERVE)
    if name == "docker-warm":
        for obs in (baseline, after):
            obs["roots"] = {d: (mode, xattrs) for d, (mode, _mtime, xattrs) in obs["roots"].items()}
            obs["autogroup"] = (obs["autogroup"] or "").rpartition(" ")[2]
            obs["pts"] = obs["pts"][0]
    assert after == baseline, {k: (baseline[k], after[k]) for k in baseline if baseline[k] != after[k]}


def _zygote_module():
    import importlib

    return importlib.import_module("sandboxes.programs.zygote")


def test_zygote_restores_what_it_can_and_reports_what_it_cannot():
    """The check behind the worker's 'clean' answer, run in a throwaway process: a lowered soft
    limit and a chmod are put back; a lowered hard limit cannot be, and is reported."""
    script = textwrap.dedent("""
        import ctypes, os, resource, sys
        from sandboxes.programs import wipe as zygote
        libc = ctypes.CDLL(None, use_errno=True)
        want = zygote.process_state(libc)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
        ok_soft = zygote.restore_state(libc, want)
        d = sys.argv[1]
        root = zygote.root_state(d)
        os.chmod(d, 0o500)
        os.setxattr(d, "user.channel", b"1")
        os.utime(d, (5, 5))
        ok_root = zygote.restore_root(d, root)
        # a hard limit below what was recorded: only CAP_SYS_RESOURCE could raise it again
        if os.geteuid() == 0:
            os.setgid(65534); os.setuid(65534)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard - 1), hard - 1))
        print([ok_soft, ok_root, zygote.restore_state(libc, want)])
    """)
    d = Path(os.environ.get("TMPDIR", "/tmp")) / f"zyg-{os.getpid()}"
    d.mkdir(mode=0o777, exist_ok=True)
    os.chmod(d, 0o777)
    try:
        done = subprocess.run([sys.executable, "-c", script, str(d)], capture_output=True, text=True, timeout=60,
                              cwd=ROOT)
    finally:
        os.chmod(d, 0o700)
        d.rmdir()
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[True,", "True,", "False]"], done.stdout


# -- the project's data is out of reach --------------------------------------------------------
FIND_PROJECT = """
    import os
    hits = []
    for top in ("/usr", "/root", "/home", "/opt", "/srv", "/work", "/tmp", "/etc", "/var"):
        for d, dirs, files in os.walk(top):
            for n in dirs + files:
                if n in ("llm_marl_envs", "code_problems.jsonl", "rllib_integration") or n.startswith("llm_marl"):
                    hits.append(os.path.join(d, n))
    try:
        import llm_marl_envs
        hits.append("import llm_marl_envs: " + str(llm_marl_envs.__file__))
    except ImportError:
        pass
    print(hits)
"""


def test_project_package_and_data_are_not_visible(any_box):
    # a warm docker pool fixes its CPU limit at start: run within it (the docker image is small)
    assert result(any_box, FIND_PROJECT, **({} if any_box.name == "docker" else {"timeout_s": 20})) == []


def test_system_dist_packages_are_masked(box):
    """Debian's /usr/lib/python3/dist-packages (yaml, pip, cryptography, apt_pkg, ...) is under the
    bound /usr whichever interpreter runs the sandbox: it is masked like site-packages."""
    got = result(box, """
        import glob, os
        globs = ("/usr/lib/python3*/dist-packages", "/usr/local/lib/python3*/*-packages")
        print({d: sorted(os.listdir(d)) for p in globs for d in glob.glob(p)})
    """)
    assert all(v == [] for v in got.values()), got


def test_a_program_that_mimics_a_setup_failure_is_a_result(box):
    """The bootstrap reports a set-up failure as exit 125 + "sandbox: cannot ..."; a program that
    prints the same and exits 125 made the cold path raise SandboxError out of run() and run_tests."""
    code = "import sys\nsys.stderr.write('sandbox: cannot set resource limits\\n')\nsys.exit(125)\n"
    r = box.run(code)
    assert r.status == "error" and r.exit_code == 125, r
    report = box.run_tests(code, [("", "1\n")])
    assert not report.all_passed


def test_importable_packages_are_what_the_program_may_import(box):
    got = result(box, """
        import importlib
        out = {}
        for m in ("numpy", "sympy", "mpmath", "json", "sqlite3", "pettingzoo", "torch", "sandboxes", "pytest"):
            try:
                importlib.import_module(m)
                out[m] = True
            except ImportError:
                out[m] = False
        print(out)
    """, timeout_s=20, memory_mb=512)
    assert got == {"numpy": True, "sympy": True, "mpmath": True, "json": True, "sqlite3": True,
                   "pettingzoo": False, "torch": False, "sandboxes": False, "pytest": False}, got


WHEEL_CHECK = """
import json, os, sys, textwrap, warnings
import llm_marl_envs, sandboxes
from llm_marl_envs.code import CodeEnv, problems

installed = os.path.dirname(llm_marl_envs.__file__)
# a coder that looks its inputs up in the installed problem data and prints the expected output
FORGE = '''```python
import json, os, sys
def find():
    for top in sys.path + ["/usr", "/root", "/tmp", "/opt"]:
        for d, _, files in os.walk(top):
            if "code_problems.jsonl" in files:
                return os.path.join(d, "code_problems.jsonl")
path = find()
rows = [json.loads(l) for l in open(path)] if path else []
data = sys.stdin.read()
for r in rows:
    for t in r.get("golden_tests", []):
        if isinstance(t, dict) and t.get("input") == data:
            print(t["output"], end="")
            sys.exit(0)
```'''
rows = [json.loads(l) for l in open(os.path.join(installed, "data", "code_problems.jsonl"))]
io_problem = next(r for r in rows if isinstance(r["golden_tests"][0], dict) and "input" in r["golden_tests"][0])
out = {"installed": installed}
for warm in (False, True):
    sb = sandboxes.make("bwrap", warm=warm, pool_size=1, preload=()) if warm else sandboxes.make("bwrap")
    env = CodeEnv(problems=[io_problem], sandbox=sb, test_timeout_s=10.0)
    env.reset(seed=0)
    env.step(FORGE)
    out[str(warm)] = [env.infos["coder"]["golden_pass_rate"], env.infos["coder"]["solved"]]
    sb.close()
print(json.dumps(out))
"""


def _assert_build_requirements_installed() -> None:
    """Every requirement of pyproject.toml's ``[build-system] requires`` is installed in this interpreter."""
    import tomllib
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    missing = []
    for text in declared:
        req = Requirement(text)
        try:
            have = version(req.name)
        except PackageNotFoundError:
            missing.append(f"{text} (not installed)")
            continue
        if not req.specifier.contains(have, prereleases=True):
            missing.append(f"{text} (installed: {have})")
    assert not missing, f"[build-system] requires is not installed: {missing}; pip install -e .[test] brings it"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["wheel", "editable"])
def test_golden_tests_cannot_be_forged_from_a_regular_or_editable_install(tmp_path, mode):
    """Code-v0 end to end with the package installed as on a Ray cluster (a wheel in
    site-packages) and as in development (editable): a coder that finds the installed
    problem file and prints the expected output of its own input scores golden 0."""
    if mode == "wheel":
        venv = tmp_path / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        # The nested venv sees this interpreter's packages (a venv's, or the machine's own) through a .pth of
        # plain paths, after its own site-packages: the wheel installed there is what imports (an editable
        # install's finder in the outer site-packages is not run from a plain path entry).
        import site
        import sysconfig

        nested_site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                     check=True, capture_output=True, text=True).stdout.strip()
        outer = [p for p in dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"]])
                 if os.path.isdir(p)]
        Path(nested_site, "_outer_site.pth").write_text("".join(f"{p}\n" for p in outer))
        # The build uses the build requirements the project declares ([build-system] requires), installed with
        # the test extra: not whatever else happens to be on the machine (setuptools < 70.1 needs `wheel`).
        _assert_build_requirements_installed()
        src = tmp_path / "src"  # a copy: setuptools builds in the source tree (build/), not in the checkout
        import shutil

        shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "runs", "build", "*.egg-info",
                                                                 "__pycache__", ".cache", "benchmarks", "tests"))
        built = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps",
                                "--no-build-isolation", "--no-index", str(src)], capture_output=True, text=True,
                               timeout=300, cwd=tmp_path)
        assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]
        cwd = tmp_path  # not the checkout: the installed copy must be what imports
    else:
        python, cwd = sys.executable, ROOT
    done = subprocess.run([python, "-c", WHEEL_CHECK], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    out = json.loads(done.stdout.strip().splitlines()[-1])
    if mode == "wheel":
        assert "site-packages" in out["installed"] and str(ROOT) not in out["installed"], out
    assert out["False"] == [0.0, False] and out["True"] == [0.0, False], out


# -- run_tests never raises for a returned value -------------------------------------------------
HOSTILE = """
class Hostile:
    def __eq__(self, other): raise RuntimeError("eq")
    __hash__ = object.__hash__
    def __repr__(self): raise RuntimeError("repr")
    def __float__(self): raise RuntimeError("float")
    def __index__(self): raise RuntimeError("index")

VALUES = [lambda: 10 ** 400, lambda: -10 ** 400, lambda: float("nan"), lambda: float("inf"), lambda: Hostile(),
          lambda: 10 ** 5000, lambda: {Hostile(): 1}, lambda: [Hostile()], lambda: 2]

def f(k):
    return VALUES[k]()
"""


def test_run_tests_never_raises_for_any_returned_value():
    sb = make_backend("bwrap")
    expected = [1.5, -1e300, 1.0, 2.0, 0.5, 3.0, {}, [1.0], 2.0]
    report = sb.run_tests(HOSTILE, [{"fn": "f", "args": [i], "expected": e} for i, e in enumerate(expected)])
    assert [c.passed for c in report.cases] == [False] * 8 + [True], report
    assert report.cases[0].status == "ok" and report.cases[0].actual == 10 ** 400
    assert all(c.error for c in report.cases[4:8]), report  # each says why


def test_values_match_is_total_for_json_values():
    from sandboxes.testing import values_match

    for actual in (10 ** 400, -10 ** 400, float("nan"), float("inf"), [10 ** 400], {"a": 10 ** 400}, None, "x"):
        for expected in (1.5, 0.0, float("inf"), [1.0], {"a": 2.5}, 3):
            assert values_match(actual, expected) in (True, False)
    assert not values_match(10 ** 400, 1e308) and values_match(10 ** 400, 10 ** 400)


def test_proc_entries_named_in_the_docs():
    doc = (ROOT / "docs" / "sandboxes.md").read_text()
    for name in list(bwrap.PROC_READ_ONLY) + list(bwrap.PROC_MASKED):
        assert f"`/proc/{name}`" in doc, name
    assert _proc.COLD_PID1_ARGV  # the cold entry that replaces bwrap's init exists


# -- found by the review of this change ---------------------------------------------------------
def test_a_burst_of_orphans_does_not_fill_the_process_cap(box):
    """PID 1 reaps orphans as they die (bwrap's init did; the cold bootstrap and the zygote now do):
    40 short background processes under max_processes=16 left zombies that refused every fork."""
    for _ in range(2):
        r = run(box, "import os\nfor i in range(40):\n    os.system('true &')\nprint('done')")
        assert (r.status, r.stdout) == ("ok", "done\n"), r


def test_pid1_ignores_signals_from_inside(box):
    r = run(box, """
        import os, signal, time
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            os.kill(1, s)
        time.sleep(0.2)
        print("alive")
    """)
    assert (r.status, r.stdout) == ("ok", "alive\n"), r


def test_pickle_carries_the_whole_configuration():
    import pickle

    sb = sandboxes.make("bwrap", warm=True, pool_size=1, preload=(), importable=("sympy", "mpmath"),
                        start_timeout_s=30.0, **TEST_LIMITS)
    try:
        clone = pickle.loads(pickle.dumps(sb))
        assert (clone.importable, clone.start_timeout_s, clone.preload, clone.limits) == \
            (("sympy", "mpmath"), 30.0, (), sb.limits)
        assert clone.host_ids == sb.host_ids  # looked up again: the same user on the same machine
        assert clone.run("import sympy; print(sympy.Integer(2) ** 3)").stdout == "8\n"
        assert "ModuleNotFoundError" in clone.run("import numpy").stderr
        clone.close()
    finally:
        sb.close()
