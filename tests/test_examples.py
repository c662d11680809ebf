"""examples/ are run by the tests (issue 34: a single readable file that trains a team with the Ray-free core).

``examples/at_grpo_single_file.py`` runs here at a reduced size (2 iterations, 2 envs, K 4, the default warm start,
2 evaluation episodes) in a subprocess, as a reader would run it; the full-size run's numbers are in
benchmarks/RESULTS.md (Learning core).
What is checked is what the file claims to do: it warm-starts, it samples groups, it takes optimizer steps on the
informative ones (a step that moved no weight, or a run that never kept a group, fails), and it evaluates.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "at_grpo_single_file.py"


@pytest.mark.slow
def test_single_file_example_trains_the_embedded_team(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ADDRESS": ""}
    proc = subprocess.run([sys.executable, str(EXAMPLE), "--iterations", "2", "--envs-per-iteration", "2", "--k",
                           "4", "--warm-start-episodes", "16", "--warm-start-epochs", "30", "--eval-episodes", "2",
                           "--eval-every", "2"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    iters = re.findall(r"^iter (\d+): train success ([\d.]+) samples (\d+) kept (\d+)(.*?)(?: \|.*)?$", out, re.M)
    assert [int(i) for i, *_ in iters] == [1, 2], out
    assert all(int(n) > 0 for _, _, n, _, _ in iters), out
    assert sum(int(k) for _, _, _, k, _ in iters) > 0, f"no group with reward variance in 2 iterations:\n{out}"
    # an iteration that kept groups took an optimizer step for a role (its loss printed)
    for _, _, _, kept, losses in iters:
        assert (int(kept) > 0) == bool(re.search(r"(tool|executor)_loss [+-][\d.]+", losses)), out
    assert re.search(r"^iter 2: .* \| eval success [\d.]+$", out, re.M), out
    assert re.search(r"^eval success [\d.]+ -> [\d.]+ in \d+ s$", out, re.M), out
    # the warm start works: the warm-started team solves some of its training tasks (the untrained one: none)
    assert max(float(s) for _, s, *_ in iters) > 0, out
