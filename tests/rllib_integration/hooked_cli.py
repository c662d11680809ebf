"""``llm-marl`` with a test's hook (issue 40's tests in test_resume.py), so that a signal lands at one moment of a run
without sleeping.

``RUNS='[[STOP_AT, [ARGS...]], ...]' python hooked_cli.py``: ``llm-marl ARGS`` (``cli.main``) once per entry, one
after the other in this process (they share its imports, not their Ray: each run starts and stops its own), each
framed on stderr by ``hooked_cli: run I`` and ``hooked_cli: run I exit RC``. With STOP_AT ``MOMENT:N`` the process
sends itself SIGTERM at MOMENT of iteration N: ``ray-start`` (as ``ray.init`` returns: Ray's handlers are in place,
the run's not back yet; N unused), ``sample`` (iteration N's sampling just submitted to the rollout actors),
``update`` (as its learner update begins), ``checkpoint`` (``checkpoint_000N/``, N ``final``: ``checkpoint/``, half
written: its state written, not yet its marker); ``""``: no signal.

``python hooked_cli.py ARGS``: ``llm-marl ARGS``, where ``HEAVY_NOTE=FILE`` makes the first import of torch,
transformers or Ray write FILE (the module's name), and ``HEAVY_HOLD=FILE`` then also wait there until FILE is
removed.
"""

import importlib.abc
import json
import os
import signal
import sys
import time
from pathlib import Path

HEAVY = ("torch", "transformers", "ray")
_stop = {"moment": "", "n": ""}  # the current run's moment; emptied once the signal is sent


class _HeavyImports(importlib.abc.MetaPathFinder):
    def __init__(self, note: Path, hold: bool):
        self.note, self.hold = note, hold

    def find_spec(self, name, path=None, target=None):
        if name in HEAVY and not self.note.exists():
            self.note.write_text(name)
            deadline = time.monotonic() + 600
            while self.hold and self.note.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        return None  # the import goes on as usual


def _at(moment: str, iteration: object = "") -> None:
    if _stop["moment"] == moment and str(iteration) == _stop["n"]:
        _stop["moment"] = ""
        os.kill(os.getpid(), signal.SIGTERM)


def _install_stops() -> None:
    import ray

    from rllib_integration import checkpoints
    from rllib_integration.algorithm import ATGRPO

    real_init, real_submit, real_update = ray.init, ATGRPO._submit_sampling, ATGRPO._update
    real_write = checkpoints.fsync_write

    def init(*args, **kwargs):
        ctx = real_init(*args, **kwargs)
        _at("ray-start")
        return ctx

    def submit(self, *args, **kwargs):
        parts = real_submit(self, *args, **kwargs)
        _at("sample", int(self.iteration) + 1)
        return parts

    def update(self, *args, **kwargs):
        _at("update", int(self.iteration) + 1)
        return real_update(self, *args, **kwargs)

    def write(path, data):
        real_write(path, data)
        name = path.parent.name  # .checkpoint_0004.partial-PID, .checkpoint.partial-PID
        if path.name == checkpoints.STATE and name.startswith(".checkpoint"):
            _at("checkpoint", int(name[12:16]) if name.startswith(".checkpoint_") else "final")

    ray.init, ATGRPO._submit_sampling, ATGRPO._update, checkpoints.fsync_write = init, submit, update, write


def main() -> int:
    runs = os.environ.get("RUNS")
    note = os.environ.get("HEAVY_HOLD") or os.environ.get("HEAVY_NOTE")
    if note:
        sys.meta_path.insert(0, _HeavyImports(Path(note), hold=bool(os.environ.get("HEAVY_HOLD"))))
    from rllib_integration.cli import main as cli

    if runs is None:
        return cli(sys.argv[1:])
    _install_stops()
    for i, (stop_at, args) in enumerate(json.loads(runs)):
        moment, _, n = stop_at.partition(":")
        _stop.update(moment=moment, n=n)
        print(f"hooked_cli: run {i}", file=sys.stderr, flush=True)
        rc = cli(args)
        print(f"hooked_cli: run {i} exit {rc}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
