"""rllib_integration/core/seeding.py: every seed of a run, derived in one place.

The expected numbers are written out (not recomputed with the module's constants), so a change of any formula,
which would change every run's samples, fails here."""

from __future__ import annotations

import io
import sys
import tokenize
from pathlib import Path

import numpy as np
import pytest

from rllib_integration.core import seeding

REPO = Path(__file__).resolve().parents[3]


def test_train_env_seeds_fresh_problems_or_a_task_pool():
    assert [seeding.train_env_seed(3, n) for n in (0, 1, 7)] == [3_000_000, 3_000_001, 3_000_007]
    assert [seeding.train_env_seed(0, n) for n in (0, 5)] == [0, 5]
    assert [seeding.train_env_seed(3, n, pool=4) for n in range(6)] == [0, 1, 2, 3, 0, 1]
    assert seeding.train_env_seed(3, 9, pool=None) == seeding.train_env_seed(3, 9, pool=0) == 3_000_009


def test_train_seeds_of_the_rollout_worker_are_the_seeding_function():
    from rllib_integration.rollout_worker import TrainSeeds

    assert [TrainSeeds(5)(n) for n in range(3)] == [seeding.train_env_seed(5, n) for n in range(3)]
    assert [TrainSeeds(5, 2)(n) for n in range(3)] == [0, 1, 0]


def test_sampling_seeds_per_iteration_and_evaluation():
    assert seeding.sampling_seed(0, 0) == 0
    assert seeding.sampling_seed(3, 2) == 3 * 1_000_003 + 2 * 10_007
    assert seeding.sampling_seed(3, 2, salt=5) == 3 * 1_000_003 + 2 * 10_007 + 5
    big = seeding.sampling_seed(10**6, 10**6)
    assert big == (10**6 * 1_000_003 + 10**6 * 10_007) % (2**31 - 1) and 0 <= big < 2**31 - 1
    assert seeding.eval_sampling_seed(3) == 3 * 1_000_003 + 999_983
    # one iteration's seed differs from the next's and from evaluation's
    assert len({seeding.sampling_seed(3, i) for i in range(100)} | {seeding.eval_sampling_seed(3)}) == 101


def test_part_call_group_and_batch_seeds():
    assert [seeding.part_seed(100, j) for j in range(3)] == [100, 8_019, 15_938]
    assert [seeding.generate_call_seed(100, c) for c in range(3)] == [100, 8_019, 15_938]
    assert [seeding.params_group_seed(7, j) for j in range(3)] == [7, 104_736, 209_465]
    assert [seeding.batch_seed(7, i) for i in (0, 64)] == [7, 71]
    # unseeded stays unseeded
    for f in (seeding.generate_call_seed, seeding.params_group_seed, seeding.batch_seed):
        assert f(None, 3) is None


def test_warm_start_demo_seeds():
    assert seeding.demo_seed(0) == 0
    assert [seeding.demo_seed(2, i) for i in (0, 1, 16)] == [200_006, 200_007, 200_022]


def test_module_init_seed_per_policy():
    import zlib

    assert seeding.module_init_seed(0, "tool") == zlib.crc32(b"tool") % 2**31
    assert seeding.module_init_seed(4, "tool") == (4 * 1_000_003 + zlib.crc32(b"tool")) % 2**31
    seeds = {seeding.module_init_seed(1, p) for p in ("tool", "executor", "shared")}
    assert len(seeds) == 3 and all(0 <= s < 2**31 for s in seeds)


def test_minibatch_rng_is_seeded_by_seed_iteration_and_epoch():
    a = seeding.minibatch_rng(1, 2, 3).permutation(20)
    assert np.array_equal(a, np.random.default_rng([1, 2, 3]).permutation(20))
    assert np.array_equal(a, seeding.minibatch_rng(1, 2, 3).permutation(20))
    assert not np.array_equal(a, seeding.minibatch_rng(1, 2, 4).permutation(20))


def test_seeding_imports_neither_torch_nor_ray():
    import subprocess

    code = ("import sys; import rllib_integration.core.seeding; "
            "print(sorted(m for m in ('torch', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


#: the seeding module's constants: any of them as a number elsewhere is a seed derived outside it
SEED_CONSTANTS = {7_919, 10_007, 100_003, 104_729, 999_983, 1_000_003}
#: the sources that must derive every seed through rllib_integration/core/seeding.py
SCANNED = ("rllib_integration", "llm_marl_envs", "examples")


def _seed_constants(source: str) -> list[tuple[int, str]]:
    """``(line, literal)`` of each seeding constant (or ``crc32``, a name hashed into a seed) in ``source``."""
    hits = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NUMBER:
            try:
                value = int(tok.string.replace("_", ""), 0)
            except ValueError:  # a float or complex literal
                continue
            if value in SEED_CONSTANTS:
                hits.append((tok.start[0], tok.string))
        elif tok.type == tokenize.NAME and tok.string == "crc32":
            hits.append((tok.start[0], tok.string))
    return hits


def test_seeds_are_derived_only_in_the_seeding_module():
    """No source outside core/seeding.py writes one of its constants (or hashes a name into a seed): every
    place that derives a seed calls a function there (failed before: six places had their own formula)."""
    own = REPO / "rllib_integration" / "core" / "seeding.py"
    files = [p for d in SCANNED for p in sorted((REPO / d).rglob("*.py")) if p != own]
    assert len(files) > 50
    hits = [f"{p.relative_to(REPO)}:{line}: {lit}" for p in files for line, lit in _seed_constants(p.read_text())]
    assert not hits, "seeds derived outside rllib_integration/core/seeding.py:\n" + "\n".join(hits)
    assert len(_seed_constants(own.read_text())) >= len(SEED_CONSTANTS), "the scan finds them where they are"


@pytest.mark.parametrize("source", ["x = s * 1_000_003 + i", "x = s + 7919 * c", "x = 0x1EEF + c",
                                    "y = zlib.crc32(b'p')"])
def test_the_scan_finds_a_formula_written_elsewhere(source):
    assert _seed_constants(source + "\n")
    assert not _seed_constants("x = 1_000_000 + 7.919 + 10_008  # 7919\n")
