"""A run directory someone else made is data: ``llm-marl eval``, ``llm-marl export``, ``TrainedTeam.from_checkpoint``
and ``ATGRPO.from_checkpoint`` run no code of it (issue 32), and refuse a crafted one saying why.

Each attack writes a marker file if its code runs. The pickle run directory (RLlib's own checkpoint layout, which
these commands unpickled before any check) ran its payload on the code before checkpoints became data."""

import hashlib
import json
import pickle
import shutil

import pytest

from rllib_integration.settings import ConfigError, UsageError


class _Payload:
    """Unpickling this runs ``exec``: it writes the marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('code ran')",))


def _pickle_run_dir(root, marker):
    """A run directory laid out as RLlib's ``save_to_path`` writes one, every pickle a payload."""
    run = root / "received_run"
    ck = run / "checkpoint"
    module_dir = ck / "learner_group" / "learner" / "rl_module"
    for d in (ck, ck / "learner_group", ck / "learner_group" / "learner", module_dir, module_dir / "shared"):
        d.mkdir(parents=True, exist_ok=True)
        for name in ("class_and_ctor_args.pkl", "state.pkl", "module_state.pkl"):
            (d / name).write_bytes(pickle.dumps(_Payload(marker)))
        (d / "metadata.json").write_text(json.dumps({"checkpoint_version": "2.1"}))
    (ck / "algorithm_state.pkl").write_bytes(pickle.dumps(_Payload(marker)))
    (run / "config.yaml").write_text("env: {id: llm_marl/PlanPath-v0}\n")
    return run


def _entry(kind, run, tmp_path, capsys):
    """Load ``run`` the way ``kind`` does; returns what it raised or the CLI's exit code and message."""
    if kind in ("eval", "export"):
        from rllib_integration.cli import main

        capsys.readouterr()
        argv = ["eval", str(run)] if kind == "eval" else ["export", str(run), str(tmp_path / "exported")]
        rc = main(argv)
        return rc, capsys.readouterr().err
    if kind == "TrainedTeam.from_checkpoint":
        from rllib_integration.export import TrainedTeam as load
    else:
        from rllib_integration.algorithm import ATGRPO as load
    with pytest.raises((UsageError, ConfigError)) as e:
        load.from_checkpoint(run)
    return 2, f"llm-marl: error: {e.value}"


KINDS = ["eval", "export", "TrainedTeam.from_checkpoint", "ATGRPO.from_checkpoint"]


@pytest.fixture(autouse=True)
def _no_cluster(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


@pytest.mark.parametrize("kind", KINDS)
def test_a_pickle_run_directory_is_refused_and_runs_nothing(kind, tmp_path, capsys):
    marker = tmp_path / "PWNED"
    run = _pickle_run_dir(tmp_path, marker)
    try:
        rc, err = _entry(kind, run / "checkpoint" if kind == "ATGRPO.from_checkpoint" else run, tmp_path, capsys)
    except Exception as e:  # (what unpickling the payload led to)
        rc, err = None, repr(e)
    assert not marker.exists(), f"{kind} ran code of the run directory"
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "pickle checkpoint" in err or "COMPLETE.json is missing" in err, err
    assert str(run / "checkpoint") in err
    assert not (tmp_path / "exported").exists()


# ------------------------------------------------------------------ crafted checkpoints of the data format
@pytest.fixture(scope="module")
def real_run(tmp_path_factory, tiny_train_args):
    """A real tiny run of ``llm-marl train`` (no Ray), copied by each test before it is tampered with."""
    from rllib_integration.cli import main

    run = tmp_path_factory.mktemp("trust") / "run"
    assert main(["train", "--iterations", "1", "--output-dir", str(run), *tiny_train_args]) == 0
    return run


def _tamper(run, tmp_path, settings=None, **top):
    """A copy of ``run`` whose final checkpoint's algorithm_config.json has ``settings`` changed, its marker's
    size and sha256 updated to match (as an attacker would)."""
    dst = tmp_path / "received"
    shutil.copytree(run, dst)
    ck = dst / "checkpoint"
    cfg = json.loads((ck / "algorithm_config.json").read_text())
    cfg["settings"].update(settings or {})
    cfg.update(top)
    data = json.dumps(cfg).encode()
    (ck / "algorithm_config.json").write_bytes(data)
    marker = json.loads((ck / "COMPLETE.json").read_text())
    marker["files"]["algorithm_config.json"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (ck / "COMPLETE.json").write_text(json.dumps(marker))
    return dst


def _evil_module(where, marker):
    f = where / "evil_task.py"
    f.write_text(f"open({str(marker)!r}, 'w').write('code ran')\n")
    return f


@pytest.mark.parametrize("kind", KINDS)
def test_a_task_module_inside_the_run_directory_is_not_imported(kind, real_run, tmp_path, capsys):
    marker = tmp_path / "PWNED"
    run = tmp_path / "received"
    evil = str(run / "evil_task.py")
    run = _tamper(real_run, tmp_path, {"env_modules": [evil]})
    _evil_module(run, marker)
    rc, err = _entry(kind, run, tmp_path, capsys)
    assert not marker.exists(), f"{kind} imported a module the run directory brought"
    assert rc == 2 and "lies inside the run directory" in err and "evil_task.py" in err, err


@pytest.mark.parametrize("settings, message", [
    # a callable of any module would be called with the recorded env config (here: argv for subprocess.run)
    ({"env": "subprocess:run", "env_config": {"touch": 0, "{marker}": 0}}, "is an entry point in module 'subprocess'"),
    ({"callbacks_class": "os.system"}, "'callbacks_class' is not a plain setting"),
    ({"__class__": "x"}, "'__class__' is not a plain setting"),
])
def test_settings_that_would_run_code_are_refused(settings, message, real_run, tmp_path, capsys):
    marker = tmp_path / "PWNED"
    settings = json.loads(json.dumps(settings).replace("{marker}", str(marker)))
    run = _tamper(real_run, tmp_path, settings)
    for kind in KINDS:
        rc, err = _entry(kind, run, tmp_path, capsys)
        assert rc == 2 and message in err, (kind, err)
    assert not marker.exists()


@pytest.mark.parametrize("settings", [{"sandbox": "local"}, {"rollout_sandbox": "local"},  # (the old name too)
                                      {"env_config": {"size": 3, "max_turns": 2, "sandbox": "local"}}])
def test_a_run_that_asks_for_the_unisolated_sandbox_is_refused_unless_allowed(settings, real_run, tmp_path, capsys,
                                                                             monkeypatch):
    """A received run recording `local` would run the model's programs on this machine without isolation."""
    run = _tamper(real_run, tmp_path, settings)
    monkeypatch.delenv("LLM_MARL_ALLOW_LOCAL_SANDBOX", raising=False)
    for kind in ("eval", "TrainedTeam.from_checkpoint", "ATGRPO.from_checkpoint"):
        rc, err = _entry(kind, run, tmp_path, capsys)
        assert rc == 2 and "unisolated `local` sandbox" in err and "LLM_MARL_ALLOW_LOCAL_SANDBOX=1" in err, (kind, err)
    monkeypatch.setenv("LLM_MARL_ALLOW_LOCAL_SANDBOX", "1")  # one's own run that used it
    from rllib_integration.export import TrainedTeam

    assert set(TrainedTeam.from_checkpoint(run).mapping) == {"tool", "executor"}


def test_export_refuses_a_model_folder_that_is_not_a_model(real_run, tmp_path, capsys):
    """``export`` copied whatever host path the checkpoint's model_path named; a run's policies now name a model
    directory that is checked, and only their own weights and its tokenizer are written."""
    run = _tamper(real_run, tmp_path, {"model_path": "/etc"})
    rc, err = _entry("export", run, tmp_path, capsys)
    assert rc == 2 and "/etc" in err, err
    assert not (tmp_path / "exported").exists() or not any((tmp_path / "exported").rglob("passwd"))


def test_the_real_run_loads_and_exports(real_run, tmp_path, capsys):
    """The untampered run passes the same checks (the tests above fail for their attack, not for the format)."""
    from rllib_integration.export import TrainedTeam

    team = TrainedTeam.from_checkpoint(real_run)
    assert set(team.mapping) == {"tool", "executor"}
    rc, _ = _entry("export", real_run, tmp_path, capsys)
    assert rc == 0 and (tmp_path / "exported" / "tool" / "model.safetensors").is_file()


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_eval_refuses_a_damaged_checkpoint_at_once_naming_the_file(damage, real_run, tmp_path, capsys):
    import sys

    run = tmp_path / "run"
    shutil.copytree(real_run, run)
    f = run / "checkpoint" / "tensors.safetensors"
    f.write_bytes(f.read_bytes()[:100] if damage == "truncated" else b"")
    rc, err = _entry("eval", run, tmp_path, capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and f"damaged checkpoint: '{f}' has" in err, err
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()  # refused before Ray starts
