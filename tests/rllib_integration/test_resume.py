"""Runs survive (issue 31): ``llm-marl train`` stopped by a real SIGTERM/SIGINT resumes with ``--resume`` to the same
results as an uninterrupted run, metrics and TensorBoard without duplicates; a second run on the same folder is
refused at once; a run starts a Ray of its own; a bad task module is one line (that its own task modules
travel with it, issue 33: test_user_tasks.py)."""

import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
#: result keys that are timings or hosts (differ between any two runs)
_TIMING = ("time", "timers", "timestamp", "date", "hostname", "node_ip", "pid", "_s", "per_s", "throughput", "perf/")
N = 30  # iterations of the tiny run (0.2 s each here): the signal lands long before the end


@pytest.fixture(autouse=True)
def _no_cluster(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def _cli(args, *, cwd=REPO, env=None, **kw):
    return subprocess.Popen([sys.executable, "-m", "rllib_integration.cli", *args], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, **kw)


def _rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _comparable(row):
    return {k: v for k, v in row.items() if not any(t in k for t in _TIMING)}


def _weights(run):
    from rllib_integration.checkpoints import read_checkpoint

    return read_checkpoint(run / "checkpoint").state["learner_group"]["learner"]["rl_module"]


def _tb_steps(run):
    """(tag, step) of every scalar in the run's TensorBoard event files (TFRecord framing, Event protos)."""
    from tensorboardX.proto import event_pb2

    seen = []
    for f in sorted(run.glob("events.out.tfevents.*")):
        data = f.read_bytes()
        i = 0
        while i + 12 <= len(data):
            (n,) = struct.unpack("<Q", data[i:i + 8])
            ev = event_pb2.Event.FromString(data[i + 12:i + 12 + n])
            i += 12 + n + 4
            seen += [(v.tag, ev.step) for v in ev.summary.value]
    return seen


def _stop_after_first_row(proc, run, sig, timeout=240):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if (run / "metrics.jsonl").is_file() and (run / "metrics.jsonl").read_text().count("\n") >= 1:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


@pytest.mark.slow
def test_sigterm_then_resume_equals_an_uninterrupted_run(tmp_path, tiny_train_args):
    from rllib_integration.checkpoints import checkpoints_of
    from rllib_integration.cli import main

    args = [*tiny_train_args, "--iterations", str(N), "--set", "run.checkpoint_every=2", "--set", "run.keep=2",
            "--set", "sampling.k=4"]  # K=4: groups with reward variance, so some iterations update the weights
    stopped = tmp_path / "stopped"
    rc, _, err = _stop_after_first_row(_cli(["train", "--output-dir", str(stopped), *args]), stopped, signal.SIGTERM)
    last = err.strip().splitlines()[-1]
    assert rc == 128 + signal.SIGTERM and "Traceback" not in err, err
    assert last.startswith("llm-marl: stopped by SIGTERM; resume from the checkpoint of iteration "), last
    assert last.endswith(f"with: llm-marl train --resume {stopped}"), last
    at = int(last.split("iteration ")[1].split()[0])
    assert 1 <= at < N and [it for it, _ in checkpoints_of(stopped)][-1] == at
    assert max(r["training_iteration"] for r in _rows(stopped)) == at  # no row ahead of the newest checkpoint

    assert main(["train", "--resume", str(stopped)]) == 0
    straight = tmp_path / "straight"
    assert main(["train", "--output-dir", str(straight), *args]) == 0

    a, b = _rows(straight), _rows(stopped)
    assert [r["training_iteration"] for r in b] == list(range(1, N + 1))  # appended, none twice
    assert sum(r["num_updates"] for r in a[at:]) > 0  # the weights compared below were trained after the resume
    for ra, rb in zip(a, b, strict=True):
        ca, cb = _comparable(ra), _comparable(rb)
        assert ca == cb, {k: (ca.get(k), cb.get(k)) for k in set(ca) | set(cb) if ca.get(k) != cb.get(k)}
    wa, wb = _weights(straight), _weights(stopped)
    for pid in wa:
        for name in wa[pid]:
            np.testing.assert_array_equal(wa[pid][name], wb[pid][name], err_msg=f"{pid}/{name}")
    steps = [(t, s) for t, s in _tb_steps(stopped) if t == "ray/tune/success_rate"]
    assert sorted(s for _, s in steps) == list(range(1, N + 1)), steps  # TensorBoard: every step once
    assert sorted(p.name for p in stopped.iterdir() if p.name.startswith(("checkpoint", "."))) == [
        "checkpoint", f"checkpoint_{N - 4:04d}", f"checkpoint_{N - 2:04d}"]  # keep=2 periodic + the final one


@pytest.mark.slow
def test_sigint_stops_with_one_line_and_exit_130(tmp_path, tiny_train_args):
    run = tmp_path / "run"
    proc = _cli(["train", "--output-dir", str(run), *tiny_train_args, "--iterations", str(N), "--set",
                 "run.checkpoint_every=0"])
    rc, _, err = _stop_after_first_row(proc, run, signal.SIGINT)
    assert rc == 130 and "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "llm-marl: stopped by SIGINT; resume from the checkpoint of iteration" in err.strip().splitlines()[-1]
    from rllib_integration.checkpoints import newest_checkpoint

    assert newest_checkpoint(run) is not None  # the stop wrote one though checkpoint_every is 0


def _hooked(args=(), **env):
    """tests/rllib_integration/hooked_cli.py: ``llm-marl ARGS`` with a test's hook, chosen by ``env``."""
    return subprocess.Popen([sys.executable, str(HERE / "hooked_cli.py"), *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(REPO), **env})


@pytest.mark.slow
def test_sigterm_at_each_moment_of_a_run_on_its_own_ray_where_a_dead_cluster_is_recorded_is_one_line_and_exit_143_and_resume_goes_on(  # noqa: E501
        tmp_path, tiny_train_args):
    """Issue 40: Ray's start puts SIGTERM handlers of its own in the driver (ray.init's Python one exits 15; the core
    worker's fatal-signal handler prints a stack dump and aborts 3 s later); the run's must win at every moment. One
    run directory is stopped by a real SIGTERM, sent by hooked_cli.py at a precise moment: while sampling, as Ray's
    start returns (a resume), as the learner update begins, half-way through the final checkpoint's write. Each time:
    exit 143 and only the one line; each resume goes on from the checkpoint named; the last stop lets the write end
    (the run is then complete, every iteration once, its final checkpoint marked complete). The runs are
    ``llm-marl`` one after the other in one process (each starts and stops its own Ray). Before the fix the first stop
    ended in Ray's handler: "SIGTERM received", a stack dump, exit 134 (SIGABRT).

    Issue 31, meanwhile: Ray's temp dir holds a ``ray_current_cluster`` naming a cluster that is gone (a stale file,
    there through every run): a plain ``ray.init()`` would try to join it; each run starts a local Ray of its own and
    trains (the fresh run and each resume)."""
    import shutil
    import tempfile

    from rllib_integration.checkpoints import verify

    raytmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's socket paths live under it
    recorded = raytmp / "ray" / "ray_current_cluster"
    recorded.parent.mkdir()
    recorded.write_text("127.0.0.1:9\n")  # nothing answers there
    run = tmp_path / "run"
    resume = ["train", "--resume", str(run), "--quiet"]
    fresh = ["train", "--output-dir", str(run), *tiny_train_args, "--iterations", "4",
             "--set", "rollout.num_rollout_actors=1", "--set", "run.checkpoint_every=1"]
    at = "llm-marl: stopped by SIGTERM; resume from the checkpoint of iteration"
    runs = [("sample:2", fresh, f"{at} 2 with:"),
            ("ray-start", resume, "llm-marl: stopped by SIGTERM during set-up; resume with:"),
            ("update:3", resume, f"{at} 3 with:"),
            ("checkpoint:final", resume, f"{at} 4 with:")]
    proc = _hooked(RUNS=json.dumps([[stop_at, args] for stop_at, args, _ in runs]), RAY_TMPDIR=str(raytmp))
    try:
        _, err = proc.communicate(timeout=1200)
        still_recorded = recorded.read_text() if recorded.is_file() else None
    finally:
        shutil.rmtree(raytmp, ignore_errors=True)
    expected = "".join(f"hooked_cli: run {i}\n{line} llm-marl train --resume {run}\nhooked_cli: run {i} exit 143\n"
                       for i, (_, _, line) in enumerate(runs))
    assert (proc.returncode, err) == (0, expected), err[-3000:]
    assert still_recorded == "127.0.0.1:9\n"  # every run started with the dead cluster recorded
    assert [r["training_iteration"] for r in _rows(run)] == [1, 2, 3, 4]
    assert verify(run / "checkpoint")["iteration"] == 4
    assert (run / "checkpoint" / "COMPLETE.json").is_file()


def test_of_two_runs_on_one_folder_the_first_started_wins(tmp_path, tiny_train_args):
    """Issue 40: the run lock is taken once the config is read, before anything slow: a run started while another
    sets up in the same folder is refused at once, in one line naming the first, having imported none of torch,
    transformers and Ray. hooked_cli.py holds the first run at its first import of one of them, as a loaded machine
    slows it there; before the fix it held no lock yet (it took it after importing transformers and building a probe
    env), so the second run took the folder and trained, and the first was refused after its set-up."""
    run = tmp_path / "run"
    held, noted = tmp_path / "first-run-held", tmp_path / "second-run-imported"
    args = ["train", "--output-dir", str(run), *tiny_train_args, "--iterations", "1"]
    first = _hooked(args, HEAVY_HOLD=str(held))
    try:
        deadline = time.monotonic() + 300
        while not held.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert held.exists(), first.communicate()
        second = _hooked(args, HEAVY_NOTE=str(noted))
        _, err = second.communicate(timeout=300)
        assert (second.returncode, err.strip().splitlines()) == (2, [
            f"llm-marl: error: output directory {str(run)!r} is in use by another llm-marl train (pid {first.pid}); "
            "wait for it, stop it, or give --output-dir NEW_DIR"]), (second.returncode, err[-3000:])
        assert not noted.exists(), noted.read_text()
    finally:
        first.kill()
        first.communicate()


def test_a_second_run_on_the_same_folder_is_refused_before_ray(tmp_path, capsys, tiny_train_args, heavy_steps):
    from rllib_integration.cli import _RunLock, main

    out = tmp_path / "run"
    held = _RunLock(out)  # as a run in progress holds it
    try:
        rc = main(["train", "--output-dir", str(out), *tiny_train_args])
    finally:
        held.release()
    err = capsys.readouterr().err.strip()
    assert rc == 2 and f"output directory {str(out)!r} is in use by another llm-marl train (pid {os.getpid()})" in err
    assert heavy_steps == [] and "ray" not in sys.modules or not sys.modules["ray"].is_initialized()


def test_resume_refuses_other_settings_and_a_folder_that_is_no_run(tmp_path, capsys):
    from rllib_integration.cli import main

    rc = main(["train", "--resume", str(tmp_path)])
    assert rc == 2 and "not a run directory of llm-marl train (no config.yaml" in capsys.readouterr().err
    (tmp_path / "config.yaml").write_text("run: {iterations: 2}\n")
    rc = main(["train", "--resume", str(tmp_path), "--set", "training.lr=1"])
    assert rc == 2 and "only run.* may be changed (--set training.lr=1)" in capsys.readouterr().err


# ------------------------------------------------------------------ own tasks travel (issue 33)
# a relative --import travelling to eval and export from another directory: test_user_tasks.py's
# test_cli_trains_user_task_from_relative_imports_then_eval_and_export_from_another_directory
def test_a_bad_import_is_one_line(tmp_path, capsys, heavy_steps):
    from rllib_integration.cli import main

    rc = main(["train", "--output-dir", str(tmp_path / "o"), "--import", "no_such_task.py"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "'no_such_task.py' is not a file" in err, err
    (tmp_path / "broken.py").write_text("raise RuntimeError('broken on purpose')\n")
    rc = main(["train", "--output-dir", str(tmp_path / "o"), "--import", str(tmp_path / "broken.py")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "RuntimeError: broken on purpose" in err, err
    assert heavy_steps == []


# ------------------------------------------------------------------ Ray: a run's own
# where a dead cluster is recorded: the runs of test_sigterm_at_each_moment_of_a_run_on_its_own_ray_... above
# (the CLI), tests/rllib_integration/test_own_ray.py (build_algo)


# ------------------------------------------------------------------ SIGKILL: no handler runs
@pytest.mark.slow
def test_sigkill_at_any_moment_then_resume_continues_without_duplicates(tmp_path, tiny_train_args):
    """SIGKILL gives the run no chance to finish a step or write anything: whatever it was writing (a checkpoint
    under its temporary name, a metrics row) is left half done. ``--resume`` continues from the newest complete
    checkpoint, rolls back rows past it, and ends with every iteration once. Three kills at different moments."""
    from rllib_integration.checkpoints import checkpoints_of
    from rllib_integration.cli import main

    args = [*tiny_train_args, "--iterations", str(N), "--set", "run.checkpoint_every=1", "--set", "run.keep=3"]
    run = tmp_path / "run"
    for rows_before_kill in (2, 5, 9):
        first = rows_before_kill == 2
        proc = _cli(["train", "--output-dir", str(run), *args] if first else ["train", "--resume", str(run)])
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            metrics = run / "metrics.jsonl"
            if metrics.is_file() and metrics.read_text().count("\n") >= rows_before_kill:
                break
            time.sleep(0.01)
        assert proc.poll() is None, proc.communicate()
        proc.kill()  # SIGKILL
        proc.communicate(timeout=60)
        done = [it for it, _ in checkpoints_of(run)]
        assert done, "a SIGKILL left no complete checkpoint"
    assert main(["train", "--resume", str(run)]) == 0
    iters = [r["training_iteration"] for r in _rows(run)]
    assert iters == list(range(1, N + 1)), iters  # none lost, none twice
    assert (run / "checkpoint" / "COMPLETE.json").is_file()
    assert not [p.name for p in run.iterdir() if ".partial" in p.name]  # half-written checkpoints swept


# ------------------------------------------------------------------ a full disk (a real one: a small tmpfs)
@pytest.mark.slow
def test_a_full_disk_stops_with_one_line_and_resume_continues(tmp_path, tiny_train_args):
    """The run's disk fills while a checkpoint is written (a 2.5 MB tmpfs; one checkpoint of this run is 1.6 MB):
    one line says what happened and how to resume, no traceback; once there is room, ``--resume`` continues from
    the last complete checkpoint to the end with every iteration once."""
    from rllib_integration.cli import main

    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2500k", "tmpfs", str(disk)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root and mount (a real full file system)")
    try:
        run = disk / "run"
        proc = _cli(["train", "--output-dir", str(run), *tiny_train_args, "--iterations", "6", "--set",
                     "run.checkpoint_every=1", "--set", "run.keep=1"])
        out, err = proc.communicate(timeout=300)
        last = err.strip().splitlines()[-1] if err.strip() else ""
        assert proc.returncode == 2 and "Traceback" not in err, err
        assert "No space left on device" in last and last.endswith(f"llm-marl train --resume {run}"), last
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)  # room again
        assert main(["train", "--resume", str(run)]) == 0
        assert [r["training_iteration"] for r in _rows(run)] == list(range(1, 7))
        assert (run / "checkpoint" / "COMPLETE.json").is_file()
        assert not [p.name for p in run.iterdir() if ".partial" in p.name]
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
