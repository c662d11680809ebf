"""benchmarks/gpu_session.sh is run only on a lent GPU machine, one 10-minute device call per phase;
a typo in one of its commands would cost a whole call. Every command it runs is checked here on CPU
without running it: the train checks' config and ``--set`` overrides validate (the same function
``llm-marl train`` uses before Ray starts), and gpu_bench's arguments parse."""

import re
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_session.sh"


def _phases() -> dict[str, list[list[str]]]:
    """phase name -> its python commands (argv after ``python``), continuation lines joined."""
    text = SCRIPT.read_text().replace("\\\n", " ")
    body = text[text.index('case "$1" in'):text.index("esac")]
    phases: dict[str, list[list[str]]] = {}
    for m in re.finditer(r"^\s*(\w+)\)\n(.*?);;", body, re.S | re.M):
        cmds = []
        for line in m.group(2).splitlines():
            if "python" not in line:
                continue
            argv = shlex.split(line.split("2>&1")[0].split(">")[0])
            cmds.append(argv[argv.index("python") + 1:])
        phases[m.group(1)] = cmds
    return phases


def test_usage_names_every_phase():
    phases = _phases()
    assert set(phases) >= {"smollm2", "generate", "big", "learner", "warm"}
    usage = re.search(r"usage: \$0 ([\w|]+)", SCRIPT.read_text()).group(1).split("|")
    assert sorted(usage) == sorted(phases)
    assert all(phases[p] for p in usage), phases


@pytest.mark.parametrize("phase", ["smollm2", "generate", "big", "learner", "warm"])
def test_phase_commands_validate(phase):
    from rllib_integration.settings import load_config

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_bench
    finally:
        sys.path.pop(0)
    for argv in _phases()[phase]:
        argv = [a.replace("$OUT", "/tmp/out").replace("${task}", "planpath") for a in argv]
        if argv[0] == "benchmarks/gpu_train_check.py":
            config = argv[1]
            sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
            iters = argv[argv.index("--iterations") + 1]
            cfg = load_config(ROOT / config, sets + [f"run.iterations={iters}"], check_paths=False)
            assert cfg["run"]["iterations"] == int(iters)
            if phase == "big":  # the 1.7B check: compiled layers, every sample trained, resume
                assert cfg["training"]["compile_layers"] is True and "--resume" in argv
                assert cfg["model"]["path"]["tiny"]["hidden"] == 2048
        elif argv[0] == "benchmarks/gpu_bench.py":
            args = gpu_bench.parse(argv[1:])
            if "--learner-variants" in argv:
                for spec in args.learner_variants:
                    gpu_bench.parse_variant(spec)
        elif argv[:2] == ["-m", "rllib_integration.cli"]:
            assert argv[2] == "train"
            load_config(ROOT / argv[3], check_paths=False)
        else:
            raise AssertionError(f"unknown command in phase {phase}: {argv}")
