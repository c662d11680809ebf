"""The grid tasks' expert programs are files of their task package (``expert.py``, Plan-path and Sudoku
also ``expert_compact.py``): the env's expert returns exactly their text, the text is pinned (warm-start
demonstrations are tokenized from it), the program solves the board it reads on stdin in the sandbox,
importing the package never imports it, and a wheel ships it."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import llm_marl_envs
from llm_marl_envs.grid import expert_program_text

ROOT = Path(__file__).resolve().parents[3]

#: (env id, prompt style) -> the program file the env's expert tool writes, relative to the repository root.
PROGRAMS = {
    ("Sokoban-v0", "full"): "llm_marl_envs/grid/sokoban/expert.py",
    ("Sokoban-v0", "compact"): "llm_marl_envs/grid/sokoban/expert.py",
    ("Sudoku-v0", "full"): "llm_marl_envs/grid/sudoku/expert.py",
    ("Sudoku-v0", "compact"): "llm_marl_envs/grid/sudoku/expert_compact.py",
    ("PlanPath-v0", "full"): "llm_marl_envs/grid/planpath/expert.py",
    ("PlanPath-v0", "compact"): "llm_marl_envs/grid/planpath/expert_compact.py",
}

#: sha256 of each program's bytes. Warm-start demonstrations are tokenized from this text, so an edit
#: changes every run's results: update the hash on purpose (and say so in CHANGELOG.md), never by accident.
SHA256 = {
    "llm_marl_envs/grid/sokoban/expert.py": "947fed1e2e6beb905358a01e36da3eba67e65e1058f3331b467457dba8d22dfe",
    "llm_marl_envs/grid/sudoku/expert.py": "44977a7a2181db084ff8165d8cfa095f56b52afe1c30dbe629bab08487cfc4b3",
    "llm_marl_envs/grid/sudoku/expert_compact.py":
        "004a737d787af60a02db511979d40d32470f9dfc982faf97ca3c839c4a3b9bc9",
    "llm_marl_envs/grid/planpath/expert.py": "06a459c1fae92ca128b79819d657697920a6183ba9332350e1357768b1723f64",
    "llm_marl_envs/grid/planpath/expert_compact.py":
        "5fccb970d4cec3e7a82c3d20fd6b004559475eddc585563d14dc7c7e6bf9cbcf",
}

cases = pytest.mark.parametrize("env_id,style", sorted(PROGRAMS), ids=lambda v: v.removesuffix("-v0"))


def test_every_program_file_is_pinned_and_listed():
    on_disk = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "llm_marl_envs" / "grid").glob("*/expert*.py"))
    assert on_disk == sorted(SHA256) == sorted(set(PROGRAMS.values()))
    for rel, digest in SHA256.items():
        assert hashlib.sha256((ROOT / rel).read_bytes()).hexdigest() == digest, (
            f"{rel} changed: warm-start demonstrations change with it; update SHA256 only on purpose")


@cases
def test_the_env_expert_writes_the_file(env_id, style, sandbox):
    env = llm_marl_envs.make(env_id, prompt_style=style, sandbox=sandbox)
    text = (ROOT / PROGRAMS[(env_id, style)]).read_bytes().decode("utf-8")
    assert env.expert_program() == text
    env.reset(seed=0)
    assert f"```python\n{text}```" in env.expert_action("tool")
    package, _, name = PROGRAMS[(env_id, style)].removesuffix(".py").replace("/", ".").rpartition(".")
    assert expert_program_text(package, f"{name}.py") == text


@cases
def test_the_program_solves_the_board_it_reads_on_stdin(env_id, style, sandbox):
    env = llm_marl_envs.make(env_id, prompt_style=style, sandbox=sandbox)
    for seed in (0, 1):
        env.reset(seed=seed)
        board = env.game_state.board
        result = sandbox.run(env.expert_program(), stdin=env.board_text(board), timeout_s=10)
        assert result.status == "ok", result.stderr
        answer = env.parse_answer(result.stdout)
        assert answer is not None, result.stdout
        applied = env.apply_answer(board, answer)
        assert not isinstance(applied, str), applied  # legal
        assert env.progress(applied.board) == 1.0, f"{env.task_id}: {result.stdout!r} does not solve it"


def test_programs_are_data_not_modules():
    """Importing the packages and making every expert never imports (runs) a program file."""
    code = ("import sys, llm_marl_envs, llm_marl_envs.grid\n"
            "for e in ('Sokoban-v0', 'Sudoku-v0', 'PlanPath-v0'):\n"
            "    for s in ('full', 'compact'):\n"
            "        assert llm_marl_envs.make(e, prompt_style=s).expert_program()\n"
            "print(sorted(m for m in sys.modules if m.rpartition('.')[2].startswith('expert')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"


@pytest.mark.slow
def test_a_wheel_ships_the_programs(tmp_path):
    src = tmp_path / "src"  # a copy: setuptools builds in the source tree (build/), not in the checkout
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "runs", "build", "*.egg-info", "__pycache__",
                                                             ".cache", "benchmarks", "tests"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(tmp_path / "dist"), str(src)], check=True, capture_output=True, timeout=300,
                   cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("llm_marl-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        for rel in SHA256:
            assert zf.read(rel) == (ROOT / rel).read_bytes(), rel
