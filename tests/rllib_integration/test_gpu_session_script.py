"""benchmarks/gpu_session.sh is run only on a lent GPU machine, one 10-minute device call per phase;
a typo in one of its commands would cost a whole call. Every command it runs is checked here on CPU
without running it, through the command's own argument parser: the train checks' and ``llm-marl
train``'s configs with their ``--set`` overrides validate (what ``llm-marl train`` does before Ray
starts), gpu_bench's arguments and learner variants parse. ``for x in A B`` loops are expanded."""

import re
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_session.sh"
#: shell lines of a phase that run no Python program (the test knows what each is for)
SHELL_ONLY = re.compile(r"^\s*(pids=\(\)$|pids\+=|wait |done$|mkdir |echo |cp |d=/tmp/\w+$|#)")


def _phases() -> dict[str, list[list[str]]]:
    """phase name -> its Python commands (argv after ``python``), continuation lines joined and
    ``for VAR in A B; do`` loops expanded; any other line that is not plain shell fails here."""
    text = SCRIPT.read_text().replace("\\\n", " ")
    body = text[text.index('case "$1" in'):text.index("esac")]
    phases: dict[str, list[list[str]]] = {}
    for m in re.finditer(r"^\s*(\w+)\)\n(.*?);;", body, re.S | re.M):
        cmds, loop = [], None
        for line in m.group(2).splitlines():
            if not line.strip():
                continue
            head = re.match(r"\s*for (\w+) in ([\w ]+); do", line)
            if head:
                loop = (head.group(1), head.group(2).split())
                line = line[head.end():]
                if not line.strip():
                    continue
            if "python" in line:
                argv = shlex.split(line.split("2>&1")[0].split(" > ")[0])
                argv = argv[argv.index("python") + 1:]
                for value in (loop[1] if loop else [None]):
                    sub = [a.replace("${%s}" % loop[0], value) if loop else a for a in argv]
                    cmds.append([a.replace("$OUT", "/tmp/out") for a in sub])
            else:
                assert SHELL_ONLY.match(line), f"phase {m.group(1)}: unchecked line {line!r}"
            if line.strip().startswith("done"):
                loop = None
        phases[m.group(1)] = cmds
    return phases


PHASES = _phases()


def test_usage_names_every_phase():
    assert set(PHASES) >= {"smollm2", "generate", "big", "learner", "warm", "async", "stream", "resume"}
    usage = re.search(r"usage: \$0 ([\w|]+)", SCRIPT.read_text()).group(1).split("|")
    assert sorted(usage) == sorted(PHASES)
    assert all(PHASES[p] for p in usage), PHASES
    assert len(PHASES["warm"]) == 2  # the loop over planpath and sudoku, expanded


def _bench(name):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


@pytest.mark.parametrize("phase", sorted(PHASES))
def test_phase_commands_validate(phase, monkeypatch):
    monkeypatch.chdir(ROOT)  # the script runs from the repository root
    for argv in PHASES[phase]:
        if argv[0] == "benchmarks/gpu_train_check.py":
            check = _bench("gpu_train_check")
            args = check.parse(argv[1:])
            cfg = check.run_config(args, check_paths=False)
            assert cfg["run"]["iterations"] == args.iterations
            if phase == "big":  # the 1.7B check: compiled layers, resume
                assert cfg["training"]["compile_layers"] is True and args.resume
                assert cfg["model"]["path"]["tiny"]["hidden"] == 2048
        elif argv[0] == "benchmarks/gpu_bench.py":
            bench = _bench("gpu_bench")
            args = bench.parse(argv[1:])
            for spec in args.learner_variants or []:
                bench.parse_variant(spec)
        elif argv[0] == "benchmarks/async_bench.py":
            bench = _bench("async_bench")
            args = bench.parse(argv[1:])
            cfgs = bench.run_configs(args, check_paths=False)  # synchronous first, then one-step-off or streaming
            assert [(c["training"]["max_staleness"], c["training"]["streaming"]) for c in cfgs] == {
                "async": [(0, False), (1, False)], "stream": [(0, False), (1, True)]}[phase]
        elif argv[:2] == ["-m", "rllib_integration.cli"]:
            from rllib_integration.cli import _parser
            from rllib_integration.settings import load_config

            args = _parser().parse_args(argv[2:])
            assert args.command == "train"
            if args.resume:  # the run's own config.yaml: no CONFIG, only run.* may be --set
                assert args.config is None and all(s.startswith("run.") for s in args.sets), argv
            else:
                load_config(args.config, list(args.sets), check_paths=False)
        elif argv[0] == "-c":  # SmolLM2 converted once before parallel trials
            assert argv[1].startswith("from rllib_integration.core.models import smollm2_path"), argv
        elif argv[0] == "benchmarks/ablation.py":  # every trial's run config validates, with its --set overrides
            from rllib_integration.settings import load_config

            ablation = _bench("ablation")
            args = ablation.parser().parse_args(argv[1:])
            base = load_config(args.config, check_paths=False) if args.config else None
            space = ablation.param_space(args.variants, args.seeds, args.iterations, args.sets, tokens=args.tokens,
                                         points=args.points, eval_episodes=args.eval_episodes, regime=args.regime,
                                         base=base)
            trials = space["trial"]["grid_search"]
            assert len(trials) == len(args.variants) * len(args.seeds)
            assert all(t["run_config"]["resources"]["num_gpus_per_learner"] > 0 for t in trials)
        elif argv[0] == "benchmarks/recipe_table.py":
            assert argv[1].endswith("/rows.jsonl"), argv
        elif argv[0] == "benchmarks/run_summary.py":
            assert len(argv) == 2 and argv[1].endswith("/metrics.jsonl"), argv
        else:
            raise AssertionError(f"unknown command in phase {phase}: {argv}")


def test_a_typo_is_caught(tmp_path, monkeypatch):
    """The checks above fail on a misspelt flag, --set key or config name."""
    good = SCRIPT.read_text()
    for bad in (good.replace("--iterations 10", "--iteratoins 10"),
                good.replace("training.compile_layers=true", "training.compile_layer=true"),
                good.replace("for task in planpath sudoku; do\n      timeout", "for task in planpath sudokuu; do\n"
                                                                             "      timeout")):
        assert bad != good
        script = tmp_path / "gpu_session.sh"
        script.write_text(bad)
        monkeypatch.setattr(sys.modules[__name__], "SCRIPT", script)
        phases = _phases()
        monkeypatch.setattr(sys.modules[__name__], "PHASES", phases)
        failed = []
        for phase in phases:
            try:
                test_phase_commands_validate(phase, monkeypatch)
            except (Exception, SystemExit):
                failed.append(phase)
        assert len(failed) == 1, failed
