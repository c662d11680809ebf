"""Checkpoints are whole or absent and are read as data (rllib_integration/checkpoints.py), without an algorithm."""

import json
import os

import numpy as np
import pytest
import torch

from rllib_integration import checkpoints as ck
from rllib_integration.core.tensor_codec import encode

STATE = {"learner_group": {"learner": {"rl_module": {"p": {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}},
                                       "optimizer": {"state": {0: {"step": np.array(3.0), "exp_avg": np.ones(4)}},
                                                     "param_groups": [{"betas": (0.9, 0.999), "lr": 1e-3}]},
                                       "bf16": encode(torch.tensor([1.5, -2.25], dtype=torch.bfloat16))}},
         "atgrpo": {"totals": {"samples": 8.0}}, "training_iteration": 2, "scalar": np.float32(0.5)}


def _write(path, iteration=2, **kw):
    return ck.write_checkpoint(path, STATE, config={"settings": {}, "policy_mapping": {}}, iteration=iteration, **kw)


def test_round_trip_keeps_types_and_bits(tmp_path):
    _write(tmp_path / "checkpoint")
    got = ck.read_checkpoint(tmp_path / "checkpoint")
    lrn = got.state["learner_group"]["learner"]
    np.testing.assert_array_equal(lrn["rl_module"]["p"]["w"], STATE["learner_group"]["learner"]["rl_module"]["p"]["w"])
    assert lrn["rl_module"]["p"]["w"].dtype == np.float32
    assert set(lrn["optimizer"]["state"]) == {0}  # int keys stay ints
    assert lrn["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.999)  # tuples stay tuples
    from rllib_integration.core.tensor_codec import decode

    assert torch.equal(decode(lrn["bf16"]), torch.tensor([1.5, -2.25], dtype=torch.bfloat16))
    assert got.state["scalar"] == 0.5 and got.iteration == 2
    assert sorted(p.name for p in (tmp_path / "checkpoint").iterdir()) == [
        "COMPLETE.json", "algorithm_config.json", "state.json", "tensors.safetensors"]


def test_state_that_is_not_data_is_not_written(tmp_path):
    with pytest.raises(TypeError, match=r"state /x: a builtins.builtin_function_or_method cannot be written as"):
        ck.write_checkpoint(tmp_path / "c", {"x": len}, config={}, iteration=0)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("damage", ["truncated", "empty", "removed"])
def test_a_damaged_file_is_refused_before_anything_is_hashed_or_parsed(tmp_path, monkeypatch, damage):
    path = _write(tmp_path / "checkpoint")
    f = path / "tensors.safetensors"
    if damage == "truncated":
        os.truncate(f, f.stat().st_size // 2)
    elif damage == "empty":
        f.write_bytes(b"")
    else:
        f.unlink()
    hashed = []
    monkeypatch.setattr(ck, "_sha256", lambda p: hashed.append(p) or "")
    with pytest.raises(ck.CheckpointError, match="damaged checkpoint: '" + str(f)):
        ck.read_checkpoint(path)
    assert hashed == []


def test_a_changed_file_of_the_same_size_fails_its_hash(tmp_path):
    path = _write(tmp_path / "checkpoint")
    f = path / "state.json"
    text = f.read_text()
    f.write_text(text.replace("samples", "sampleZ"))
    with pytest.raises(ck.CheckpointError, match=f"'{f}' does not match the sha256 in COMPLETE.json"):
        ck.read_checkpoint(path)


@pytest.mark.parametrize("marker", [None, "", "{not json", json.dumps({"format": "other/1"})])
def test_a_checkpoint_without_a_good_marker_is_refused(tmp_path, marker):
    path = _write(tmp_path / "checkpoint")
    if marker is None:
        (path / ck.MARKER).unlink()
    else:
        (path / ck.MARKER).write_text(marker)
    with pytest.raises(ck.CheckpointError, match=str(path)):
        ck.read_checkpoint(path)


def test_newest_complete_checkpoint_skips_one_without_marker(tmp_path):
    for it in (2, 4, 6):
        _write(tmp_path / f"checkpoint_{it:04d}", iteration=it)
    (tmp_path / "checkpoint_0006" / ck.MARKER).unlink()  # the write of iteration 6 did not finish
    (tmp_path / "checkpoint_0008").mkdir()  # nor did this one start properly
    assert ck.newest_checkpoint(tmp_path) == tmp_path / "checkpoint_0004"
    assert [it for it, _ in ck.checkpoints_of(tmp_path)] == [2, 4]
    from rllib_integration.export import find_checkpoint

    assert find_checkpoint(tmp_path) == (tmp_path / "checkpoint_0004").resolve()  # what eval/export load
    _write(tmp_path / "checkpoint", iteration=3)  # a final one older than a resumed run's later checkpoints
    assert find_checkpoint(tmp_path) == (tmp_path / "checkpoint_0004").resolve()
    _write(tmp_path / "checkpoint", iteration=4)  # the same iteration: the final one
    assert find_checkpoint(tmp_path) == (tmp_path / "checkpoint").resolve()


def test_a_write_that_stops_midway_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    path = _write(tmp_path / "checkpoint", iteration=1)
    before = (path / "state.json").read_bytes()

    def disk_full(p, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ck, "fsync_write", disk_full)
    with pytest.raises(OSError, match="No space left"):
        _write(tmp_path / "checkpoint", iteration=2)
    assert ck.read_checkpoint(path).iteration == 1 and (path / "state.json").read_bytes() == before
    partial = list(tmp_path.glob(".checkpoint.partial-*"))
    assert partial and not ck.is_checkpoint(partial[0])  # left for prune: never taken for a checkpoint


def test_prune_keeps_the_newest_periodic_ones_and_the_final_one(tmp_path):
    for it in (1, 2, 3, 4):
        _write(tmp_path / f"checkpoint_{it:04d}", iteration=it)
    _write(tmp_path / "checkpoint", iteration=5)
    (tmp_path / ".checkpoint_0009.partial-1").mkdir()  # left by a killed process
    ck.prune(tmp_path, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "checkpoint_0003", "checkpoint_0004"]


def test_module_paths_a_run_directory_names(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)
    inside = run / "evil.py"
    inside.write_text("")
    outside = tmp_path / "task.py"
    outside.write_text("")
    roots = [run / "checkpoint", run]
    assert ck.check_module_paths(["my.tasks", str(outside)], inside=roots, key="k") == ["my.tasks", str(outside)]
    with pytest.raises(ck.CheckpointError, match="lies inside the run directory"):
        ck.check_module_paths([str(inside)], inside=roots, key="k")
    with pytest.raises(ck.CheckpointError, match="is a relative path"):
        ck.check_module_paths(["task.py"], inside=roots, key="k")
    with pytest.raises(ck.CheckpointError, match="neither a dotted module name"):
        ck.check_module_paths(["os; rm"], inside=roots, key="k")


def test_a_real_full_disk_leaves_the_previous_checkpoint_whole(tmp_path):
    """A real ENOSPC (a 1 MiB tmpfs, root only): the second, larger checkpoint does not fit; the first stays the
    newest complete one and nothing half-written is taken for a checkpoint."""
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root and mount (a real full file system)")
    try:
        run = disk / "run"
        run.mkdir()
        ck.write_checkpoint(run / "checkpoint_0001", STATE, config={"settings": {}, "policy_mapping": {}},
                            iteration=1)
        big = {**STATE, "extra": np.ones(400_000, dtype=np.float32)}  # 1.6 MB: more than the disk holds
        with pytest.raises(OSError) as err:
            ck.write_checkpoint(run / "checkpoint_0002", big, config={"settings": {}, "policy_mapping": {}},
                                iteration=2)
        assert err.value.errno == 28, err.value  # ENOSPC, from the kernel
        assert [it for it, _ in ck.checkpoints_of(run)] == [1]
        assert ck.newest_checkpoint(run) == run / "checkpoint_0001"
        assert ck.read_checkpoint(run / "checkpoint_0001").iteration == 1
    finally:
        subprocess.run(["umount", str(disk)], check=False)
