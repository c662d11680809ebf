"""benchmarks/iteration_files.py on the embedded default, and docs/one_iteration.md kept complete: every file of
``rllib_integration/`` in which one training iteration runs a function is named in the doc's walk-through."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "one_iteration.md"


@pytest.mark.slow
def test_every_file_of_an_iteration_is_in_the_doc(tmp_path):
    out = tmp_path / "files.json"
    res = subprocess.run([sys.executable, "benchmarks/iteration_files.py", "--set", "rollout.num_rollout_actors=0",
                          "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=900,
                         env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    assert res.returncode == 0, res.stderr[-3000:]
    files = json.loads(out.read_text())["files"]
    assert re.search(rf"^{len(files)} project files \(", res.stdout, re.MULTILINE), res.stdout[-2000:]
    # the iteration's steps ran: sampling, grouping, the loss and the optimizer step
    for f in ("rllib_integration/algorithm.py", "rllib_integration/core/tree.py", "rllib_integration/core/groups.py",
              "rllib_integration/learner.py", "rllib_integration/core/loss.py", "llm_marl_envs/base.py"):
        assert f in files, (f, files)
    named = set(re.findall(r"`([\w/]+\.py)`", DOC.read_text()))
    ours = [f.removeprefix("rllib_integration/") for f in files if f.startswith("rllib_integration/")]
    missing = [f for f in ours if f not in named]
    assert not missing, f"docs/one_iteration.md does not name {missing}"
