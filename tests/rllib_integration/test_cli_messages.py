"""``llm-marl``'s first-hour errors (issue 20): one line, before Ray starts, nothing written.

Output directories (a run never mixes its files with a previous run's: ``--overwrite``), a bad
``--output-dir``/export OUT_DIR/eval path, ``RAY_ADDRESS`` with no cluster, an env argument of the
wrong type, ``--version``. Everything here but the last test runs without Ray.
"""

from __future__ import annotations

import importlib.metadata
import os
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: a tiny run (no warm start, no eval, 2 envs x k=2, 2 new tokens, no rollout actors)
TINY = ["--iterations", "1", "--quiet", "--set", "rollout.num_rollout_actors=0", "--set",
        "rollout.envs_per_iteration=2", "--set", "sampling.k=2", "--set", "sampling.max_new_tokens=2",
        "--set", "warm_start.episodes=0", "--set", "evaluation.interval=0",
        "--set", "env.config={size: 2, obstacle_density: 0.0, max_turns: 1, prompt_style: compact}"]


def _ray_is_up() -> bool:  # (without importing Ray)
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def _run_main(capsys, *argv: str) -> tuple[int, str]:
    from rllib_integration.cli import main

    capsys.readouterr()
    rc = main(list(argv))
    return rc, capsys.readouterr().err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture(autouse=True)
def _no_cluster(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


# ------------------------------------------------------------------ output directories
def _previous_run(out: Path) -> None:
    out.mkdir(parents=True)
    for name in ("config.yaml", "metrics.jsonl", "metrics.csv", "learning_curve.png",
                 "events.out.tfevents.1700000000.host"):
        (out / name).write_text("old")
    (out / "checkpoint").mkdir()
    (out / "checkpoint" / "class_and_ctor_args.pkl").write_text("old")
    (out / "checkpoint_0002").mkdir()


def test_a_previous_run_is_not_overwritten_without_overwrite(capsys, tmp_path, heavy_steps):
    out = tmp_path / "runs" / "default"
    _previous_run(out)
    before = sorted(p.name for p in out.iterdir())
    rc, err = _run_main(capsys, "train", "--output-dir", str(out), *TINY)
    line = _one_line(err)
    assert rc == 2 and f"llm-marl: error: output directory {str(out)!r} holds a previous run" in line, line
    assert "--overwrite" in line and "--output-dir" in line
    assert sorted(p.name for p in out.iterdir()) == before and (out / "config.yaml").read_text() == "old"
    assert heavy_steps == [] and not _ray_is_up()


def test_a_non_empty_output_dir_is_refused_too(capsys, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    rc, err = _run_main(capsys, "train", "--output-dir", str(out), *TINY)
    line = _one_line(err)
    assert rc == 2 and "is not empty (notes.txt)" in line and "--overwrite" in line, line
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_overwrite_removes_the_previous_run_and_nothing_else(tmp_path):
    from rllib_integration.cli import _open_output_dir, check_output_dir

    out = tmp_path / "run"
    _previous_run(out)
    (out / "notes.txt").write_text("mine")
    (out / "analysis").mkdir()
    (out / "checkpoint_best.md").write_text("mine")  # not a checkpoint_NNNN folder
    check_output_dir(out, overwrite=True)  # the check alone removes nothing
    assert (out / "config.yaml").exists()
    _open_output_dir(out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["analysis", "checkpoint_best.md", "notes.txt"]


def test_an_empty_or_new_output_dir_is_fine(tmp_path):
    from rllib_integration.cli import check_output_dir

    (tmp_path / "empty").mkdir()
    check_output_dir(tmp_path / "empty")
    check_output_dir(tmp_path / "new" / "deeper")
    assert not (tmp_path / "new").exists()


def test_a_refused_run_leaves_none_of_the_folders_it_made(capsys, tmp_path, heavy_steps):
    """The run lock makes the output folder and its missing parents before the config is checked; a run refused
    then removes every folder it made, if empty (before, only the leaf: a bad --set with the default runs/default
    left an empty runs/ behind), and none it did not make."""
    for out, left in [(tmp_path / "a" / "b" / "c", []), (tmp_path / "x" / "y", ["x"])]:
        if left:
            (tmp_path / "x").mkdir()
        rc, err = _run_main(capsys, "train", "--output-dir", str(out), "--set", "env.config.size=abc")
        assert rc == 2 and "env.config.size: bad value 'abc'" in _one_line(err), err
        assert sorted(p.name for p in tmp_path.iterdir()) == left and heavy_steps == []


@pytest.mark.parametrize("where", ["file", "under_a_file"])
def test_output_dir_that_is_a_file(capsys, tmp_path, where, heavy_steps):
    f = tmp_path / "results.txt"
    f.write_text("keep")
    out = f if where == "file" else f / "run"
    rc, err = _run_main(capsys, "train", "--output-dir", str(out), *TINY)
    line = _one_line(err)
    assert rc == 2 and str(f) in line, line
    assert ("is an existing file, not a directory" if where == "file" else "cannot be created") in line
    assert f.read_text() == "keep" and heavy_steps == [] and not _ray_is_up()


# ------------------------------------------------------------------ eval / export paths
def test_eval_of_a_path_that_does_not_exist(capsys, tmp_path):
    rc, err = _run_main(capsys, "eval", str(tmp_path / "does" / "not" / "exist"))
    line = _one_line(err)
    assert rc == 2 and "does not exist" in line and "runs/default" in line, line
    assert "class_and_ctor_args" not in line


def test_eval_of_a_run_without_checkpoint_and_of_a_folder_of_runs(capsys, tmp_path):
    from rllib_integration.export import find_checkpoint
    from rllib_integration.settings import UsageError

    run = tmp_path / "runs" / "a"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("run: {}")
    with pytest.raises(UsageError, match="without a complete checkpoint"):
        find_checkpoint(run)
    (run / "checkpoint").mkdir()
    with pytest.raises(UsageError, match="lack their completion marker"):
        find_checkpoint(run)
    (run / "checkpoint" / "COMPLETE.json").write_text("{}")  # found by its marker; read (and checked) later
    assert find_checkpoint(run) == (run / "checkpoint").resolve()
    with pytest.raises(UsageError, match=r"is a folder of runs, not a run; give one of them: .*runs/a"):
        find_checkpoint(tmp_path / "runs")


def test_export_to_a_file(capsys, tmp_path):
    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)
    (run / "checkpoint" / "COMPLETE.json").write_text("{}")  # found; never loaded
    out = tmp_path / "exported"
    out.write_text("keep")
    rc, err = _run_main(capsys, "export", str(run), str(out))
    line = _one_line(err)
    assert rc == 2 and f"OUT_DIR {str(out)!r} is an existing file, not a directory" in line, line
    assert out.read_text() == "keep"


# ------------------------------------------------------------------ RAY_ADDRESS with no cluster
def _cli_without_ray(tmp_path: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    """``llm-marl train`` in a fresh interpreter; prints whether Ray was imported."""
    code = (f"import sys; from rllib_integration.cli import main; rc = main(['train', *{list(args)!r}]);"
            "print('ray imported' if 'ray' in sys.modules else 'no ray'); sys.exit(rc)")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=90,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env})


def test_ray_address_auto_without_a_cluster(tmp_path):
    out = tmp_path / "out"
    proc = _cli_without_ray(tmp_path, {"RAY_ADDRESS": "auto", "RAY_TMPDIR": str(tmp_path)},
                            "--output-dir", str(out), *TINY)
    line = _one_line(proc.stderr)
    assert proc.returncode == 2 and "RAY_ADDRESS='auto', but no Ray cluster was started on this machine" in line, line
    assert "ray start --head" in line and "unset RAY_ADDRESS" in line
    assert proc.stdout.strip() == "no ray" and not out.exists()


def test_ray_address_where_nothing_answers(tmp_path):
    with socket.socket() as s:  # a port bound here, not listening: connections are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        out = tmp_path / "out"
        proc = _cli_without_ray(tmp_path, {"RAY_ADDRESS": f"127.0.0.1:{port}"}, "--output-dir", str(out), *TINY)
    line = _one_line(proc.stderr)
    assert proc.returncode == 2 and f"no Ray cluster answers at 127.0.0.1:{port}" in line, line
    assert proc.stdout.strip() == "no ray" and not out.exists()


def test_eval_checks_ray_address_too(tmp_path, monkeypatch):
    from rllib_integration.cli import evaluate_checkpoint
    from rllib_integration.settings import UsageError

    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)
    (run / "checkpoint" / "COMPLETE.json").write_text("{}")
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    with pytest.raises(UsageError, match="no Ray cluster was started"):
        evaluate_checkpoint(str(run))


# ------------------------------------------------------------------ env arguments of the wrong type
@pytest.mark.parametrize("value, message", [
    ("abc", "env.config.size: bad value 'abc' for llm_marl/PlanPath-v0: expected an integer or a list of integers, "
            "got a string"),
    ("[3, x]", "env.config.size: bad value [3, 'x'] for llm_marl/PlanPath-v0: expected an integer or a list of "
               "integers, got a list"),
    ("1", "env.config.size: bad value 1 for llm_marl/PlanPath-v0 (ValueError: size=1 is too small"),  # the env's own
])
def test_env_argument_of_the_wrong_type_names_key_and_value(capsys, tmp_path, value, message):
    rc, err = _run_main(capsys, "train", "--output-dir", str(tmp_path / "out"), "--set",
                           f"env.config.size={value}")
    line = _one_line(err)
    assert rc == 2 and message in line, line
    assert "'a')" not in line


def test_env_argument_types_in_words():
    from typing import Literal, Optional, Sequence

    from rllib_integration.envs import _describe, _fits

    assert _fits("abc", int | Sequence[int]) is False and _fits([3, 4], int | Sequence[int]) is True
    assert _fits(3, float) is True and _fits(True, int) is False and _fits(None, Optional[int]) is True
    assert _fits("x", Literal["a", "b"]) is False and _fits([1, 2], tuple[int, int]) is True
    assert _fits("x", Path) is None  # not decided: the env's own error stands
    assert _describe(Optional[Sequence[str]]) == "a list of strings or null"


# ------------------------------------------------------------------ --version
def test_version_is_the_installed_distributions(capsys):
    from rllib_integration.cli import main

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"llm-marl {importlib.metadata.version('llm-marl')}\n"


def test_version_falls_back_to_pyproject(monkeypatch):
    from rllib_integration.cli import version

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert version() == tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_version_from_the_command_line():
    proc = subprocess.run([sys.executable, "-m", "rllib_integration.cli", "--version"], capture_output=True,
                          text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0 and proc.stdout.startswith("llm-marl ") and not proc.stderr


# ------------------------------------------------------------------ end to end (a tiny run)
def _names(out: Path) -> list[str]:
    return sorted("events.out.tfevents.*" if p.name.startswith("events.out.tfevents.") else
                  p.name + ("/" if p.is_dir() else "") for p in out.iterdir())


@pytest.fixture
def own_ray(monkeypatch):
    """A local Ray started by the run (``RAY_ADDRESS=local``: not a cluster `ray start` left on the machine)."""
    import ray

    monkeypatch.setenv("RAY_ADDRESS", "local")
    started = not ray.is_initialized()
    yield
    if started:
        ray.shutdown()


@pytest.mark.slow
def test_rerun_into_the_same_dir_needs_overwrite_and_leaves_one_run(own_ray, capsys, tmp_path):
    out = tmp_path / "run"
    rc, err = _run_main(capsys, "train", "--output-dir", str(out), *TINY)
    assert rc == 0, err
    first = _names(out)
    assert "checkpoint/" in first and first.count("events.out.tfevents.*") == 1, first
    (out / "notes.txt").write_text("mine")
    rc, err = _run_main(capsys, "train", "--output-dir", str(out), *TINY)
    assert rc == 2 and "holds a previous run" in _one_line(err)
    time.sleep(1.1)  # a new TensorBoard event file gets a new name (its time in seconds)
    rc, err = _run_main(capsys, "train", "--output-dir", str(out), "--overwrite", *TINY)
    assert rc == 0, err
    assert _names(out) == sorted([*first, "notes.txt"])  # one event file: the new run's
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1
    # export into a file: one line, before anything is loaded
    target = tmp_path / "exported"
    target.write_text("keep")
    rc, err = _run_main(capsys, "export", str(out), str(target))
    assert rc == 2 and "is an existing file" in _one_line(err) and target.read_text() == "keep"
