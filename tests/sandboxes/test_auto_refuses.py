"""``make("auto")`` never degrades to the ``local`` backend (no isolation): where bubblewrap is not
installed or cannot create its namespaces, it raises one line saying what is missing and how to get
isolation, for root and non-root alike; ``make("local")``, named, still runs (issue 42, class 4).

The hosts are real: a child process in its own user namespace whose ``user.max_user_namespaces`` is
0 (bwrap's ``clone(CLONE_NEWUSER)`` fails with ENOSPC, as on a host with user namespaces disabled),
and a child in its own mount namespace where an overlay hides ``/usr/bin/bwrap`` and ``PATH`` has no
bwrap (bubblewrap not installed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import warnings

import pytest

import sandboxes
from sandboxes import SandboxUnavailable

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOBODY = 65534

# What the child runs: make("auto") must raise; make("local") must run a program.
CHILD = """
import os, sys, warnings
import sandboxes
try:
    sandboxes.make("auto")
except sandboxes.SandboxUnavailable as exc:
    print("REFUSED", exc)
else:
    print("AUTO-RAN")
if sys.argv[1] == "local":
    warnings.simplefilter("ignore", RuntimeWarning)
    r = sandboxes.make("local").run("print(6 * 7)")
    print("LOCAL", r.status, r.stdout.strip(), r.backend)
print("EUID", os.geteuid())
"""

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="building the simulated hosts needs root (mount and "
                                "user-namespace maps of a child); the project's test machines are root")


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=ROOT, PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    env.pop("PYTHONWARNINGS", None)
    return env


def _as_nobody() -> list[str]:
    """``setpriv`` to uid/gid 65534 (non-root), keeping only CAP_DAC_READ_SEARCH so it can read the
    interpreter under a 0700 /root (a reading capability; the process is not root: geteuid() is 65534)."""
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
            "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]


def _interpreter_runs_as_nobody() -> bool:
    """Whether uid 65534 passes ``make('local')``'s own check of this interpreter (access(2) with X_OK, which
    ignores capabilities for non-root: under a 0700 /root it fails)."""
    return subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable,
                           "-c", "import os, sys; sys.exit(not os.access(sys.executable, os.X_OK))"],
                          capture_output=True).returncode == 0


def _check(out: str, missing: str, *, local: bool, euid: int) -> None:
    lines = out.strip().splitlines()
    refused = [ln for ln in lines if ln.startswith(("REFUSED", "AUTO-RAN"))]
    assert refused and refused[0].startswith("REFUSED "), out
    msg = refused[0][len("REFUSED "):]
    assert msg.startswith("sandbox 'auto' refuses to run programs without isolation: " + missing), msg
    for hint in ("bash scripts/setup.sh", "kernel.unprivileged_userns_clone=1", "user.max_user_namespaces",
                 "sandbox: docker", "sandbox: local runs programs with NO isolation, and only when named explicitly"):
        assert hint in msg, (hint, msg)
    if local:
        assert "LOCAL ok 42 local" in lines, out
    assert f"EUID {euid}" in lines, out


def _in_userns_without_namespaces(argv: list[str]) -> subprocess.CompletedProcess:
    """Run ``argv`` in a new user namespace (ids 0-65535 mapped onto themselves, entered as its root with
    ``nsenter``) whose ``user.max_user_namespaces`` is 0: no user namespace can be created below it, as on
    a host with user namespaces disabled. The host's own setting is not touched."""
    holder = subprocess.Popen(["unshare", "--user", "sleep", "300"])
    try:
        ours = os.readlink("/proc/self/ns/user")
        for _ in range(500):  # until unshare has made its namespace
            if os.readlink(f"/proc/{holder.pid}/ns/user") != ours:
                break
            time.sleep(0.01)
        for which in ("uid_map", "gid_map"):
            with open(f"/proc/{holder.pid}/{which}", "w") as f:
                f.write("0 0 65536\n")
        script = 'echo 0 > /proc/sys/user/max_user_namespaces || { echo "NO-SYSCTL"; exit 3; }; exec "$@"'
        done = subprocess.run(["nsenter", "--user", f"--target={holder.pid}", "sh", "-c", script, "sh", *argv],
                              capture_output=True, text=True, timeout=120, env=_env())
    finally:
        holder.kill()
        holder.wait()
    if "NO-SYSCTL" in done.stdout:
        pytest.skip(f"this kernel does not let a user namespace lower its own user.max_user_namespaces: "
                    f"{done.stderr.strip()[-300:]}")
    return subprocess.CompletedProcess(argv, done.returncode, done.stdout + done.stderr, "")


def _without_bwrap(argv: list[str]) -> subprocess.CompletedProcess:
    """Run ``argv`` in a new mount namespace where an overlay of /usr/bin hides bwrap (so /usr/bin/bwrap
    and /bin/bwrap do not exist) and PATH has no bwrap."""
    script = ('set -e; d=$(mktemp -d); mkdir "$d/u" "$d/w" "$d/m"; '
              'mount -t overlay overlay -o "lowerdir=/usr/bin,upperdir=$d/u,workdir=$d/w" "$d/m" '
              '|| { echo NO-OVERLAY; exit 3; }; rm -f "$d/m/bwrap"; mount --bind "$d/m" /usr/bin; '
              'if command -v bwrap >/dev/null || [ -e /usr/bin/bwrap ]; then echo STILL-THERE; exit 4; fi; '
              'exec "$@"')
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *argv],
                          capture_output=True, text=True, timeout=120, env=_env())
    if "NO-OVERLAY" in done.stdout:
        pytest.skip(f"no overlay mount here to hide bwrap: {done.stderr.strip()[-300:]}")
    assert "STILL-THERE" not in done.stdout
    return subprocess.CompletedProcess(argv, done.returncode, done.stdout + done.stderr, "")


@pytest.fixture(autouse=True)
def _tools():
    for tool in ("unshare", "nsenter", "setpriv"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} (util-linux) is not installed")


def test_auto_names_what_is_missing_in_process():
    """In process, a bwrap that is not there: make("auto") raises (no warning, no local sandbox)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the old fallback warned and returned `local`
        with pytest.raises(SandboxUnavailable, match=r"^sandbox 'auto' refuses to run programs without isolation: "
                           r"bubblewrap is not installed \(bubblewrap binary '/nonexistent/bwrap' not found\)\. "
                           r"To isolate them: install bubblewrap \(bash scripts/setup\.sh\)") as info:
            sandboxes.make("auto", bwrap_path="/nonexistent/bwrap")
    assert "\n" not in str(info.value) and info.value.__cause__ is None


@needs_root
def test_root_auto_refuses_where_user_namespaces_are_disabled():
    done = _in_userns_without_namespaces([sys.executable, "-c", CHILD, "local"])
    _check(done.stdout, "bubblewrap cannot create its namespaces (user namespaces unavailable) (bwrap could not "
           "create a sandbox (exit 1): bwrap: Creating new namespace failed", local=True, euid=0)
    assert "ENOSPC" in done.stdout or "No space left" in done.stdout


@needs_root
def test_root_auto_exits_with_the_one_line_error_where_user_namespaces_are_disabled():
    """The plain command a user runs: one line (the last) names what is missing; exit 1, no fallback."""
    done = _in_userns_without_namespaces([sys.executable, "-c", "import sandboxes; sandboxes.make('auto')"])
    assert done.returncode == 1, done.stdout
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("sandboxes.records.SandboxUnavailable: sandbox 'auto' refuses to run programs without "
                           "isolation: bubblewrap cannot create its namespaces"), done.stdout
    assert "NOT isolation" not in done.stdout and "falling back" not in done.stdout
    assert "During handling" not in done.stdout and "direct cause" not in done.stdout  # one error, not a chain


@needs_root
def test_nonroot_auto_refuses_where_user_namespaces_are_disabled():
    local = _interpreter_runs_as_nobody()
    done = _in_userns_without_namespaces([*_as_nobody(), sys.executable, "-c", CHILD,
                                          "local" if local else "-"])
    _check(done.stdout, "bubblewrap cannot create its namespaces", local=local, euid=NOBODY)


@needs_root
def test_root_auto_refuses_without_bwrap_installed():
    done = _without_bwrap([sys.executable, "-c", CHILD, "local"])
    _check(done.stdout, "bubblewrap is not installed (bubblewrap binary '/usr/bin/bwrap' not found)",
           local=True, euid=0)


@needs_root
def test_nonroot_auto_refuses_without_bwrap_installed():
    local = _interpreter_runs_as_nobody()
    done = _without_bwrap([*_as_nobody(), sys.executable, "-c", CHILD, "local" if local else "-"])
    _check(done.stdout, "bubblewrap is not installed", local=local, euid=NOBODY)


@needs_root
def test_the_envs_default_sandbox_refuses_to_run_programs_where_user_namespaces_are_disabled():
    """An env made with its default ``sandbox="auto"`` raises the one line when it first runs a program
    (its sandbox is made on first use) instead of running it unisolated."""
    code = ("import llm_marl_envs\n"
            "env = llm_marl_envs.make('Code-v0').unwrapped\n"
            "assert env._sandbox_spec == 'auto'\n"
            "try:\n"
            "    env.run_program('print(1)')\n"
            "except Exception as exc:\n"
            "    print('RAISED', type(exc).__name__, exc)\n"
            "else:\n"
            "    print('RAN')\n")
    done = _in_userns_without_namespaces([sys.executable, "-c", code])
    assert "RAISED SandboxUnavailable sandbox 'auto' refuses to run programs without isolation: bubblewrap cannot " \
           "create its namespaces" in done.stdout, done.stdout
    assert "NOT isolation" not in done.stdout
