"""The paper's ablation on the embedded task, through ``tune.Tuner``, at equal generated-token budgets: after the
same warm start, does AT-GRPO's tree sampling with (task, env, turn, agent) groups beat parallel sampling, agent
groups and the faithful baselines (DrMAS per-agent GRPO, GRPO with one shared policy), and does a policy per role
(L3) beat one shared policy (L1)?

    python3 benchmarks/ablation.py [--variants at_grpo_l3 ...] [--seeds 0 1 ... 7] [--tokens 150000]
        [--regime embedded|paper_planpath|paper_sudoku] [--points 4] [--eval-episodes 64] [--concurrent 1]
        [--out benchmarks/ablation] [--set key=value ...] [--config RUN_CONFIG.yaml]

``--config`` starts every trial from a run config of ``llm-marl train`` instead of the embedded default (the
variants then change only what they name: with ``configs/smollm2_cpu.yaml``, ``at_grpo_l3`` is that config as it
is, L2 included, and ``at_grpo_flipped_l3`` its control), so a recipe and its ablation share one file.

The variants (``VARIANTS``; a plain run: ``SWEEP``, the factorial {tree, parallel} x {node, agent groups} x
{L3, L1} and the two baselines; docs/training_core.md "Baselines by name") each change only what they are about
in the embedded default (``rllib_integration.settings.DEFAULT_CONFIG``: the warm start, then RL on PlanPath-v0
3x3). One Tune trial per (variant, seed): it builds the algorithm (the warm start, with greedy held-out
evaluations before and after it), then trains until it has generated ``--tokens`` tokens (all sampled
candidates' completion tokens; an iteration of parallel sampling generates more than one of tree sampling, so
the variants get different numbers of iterations but the same generation budget), evaluating greedily on
``--eval-episodes`` eval-split boards at ``--points`` evenly spaced token counts (the last at the budget). The
eval reports each role's own correctness too (``core.metrics.role_correctness``: the tool's program correct,
the executor correct given a correct proposal and without one).

Output under ``--out``: ``ablation.md`` (one Markdown table: per variant the mean and 95% confidence
interval (Student t over seeds) of held-out success after the warm start and at the end of the budget, the
gain, the gain's difference from AT-GRPO's paired by seed, the roles' correctness, tokens, iterations and
training time), ``ablation.png`` (learning curves: success against generated tokens and against training wall
time, mean and 95% CI over seeds) and ``rows.jsonl`` (every evaluation of every trial). The table is printed
too; copy it into benchmarks/RESULTS.md "Ablation".
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from rllib_integration.settings import DEFAULT_CONFIG, apply_overrides, validate_config  # noqa: E402

#: variant -> its overrides of the embedded default (dotted keys as for ``--set``). The factorial is
#: {tree, parallel} sampling x {node, agent} groups x {L3, L1}; node groups are AT-GRPO's (task, env, turn, agent),
#: agent groups pool an agent's turns of one env, (task, env, agent), with the same estimator (each step's own
#: reward), so only the grouping changes. Then the baselines of docs/training_core.md "Baselines by name".
_PAR = {"sampling.mode": "parallel"}
_AGENT = {"training.group_by": ["task_id", "env_idx", "agent"]}
_L1 = {"specialization": "L1", "policies": {}}
VARIANTS: dict[str, dict[str, Any]] = {
    # AT-GRPO: tree sampling, groups (task, env, turn, agent), a policy per role (the default)
    "at_grpo_l3": {},
    # the paper's parallel-sampling baseline: AT-GRPO's groups (task, env, turn, agent) over K independent
    # episodes per env instead of a tree (PettingLLMs' uid = (env_id // N, turn, agent))
    "at_grpo_parallel_l3": {**_PAR},
    # agent groups (task, env, agent): the K candidates of every node of one env's tree (or the K episodes) of an
    # agent in one group, turns pooled
    "agent_groups_l3": {**_AGENT},
    "agent_groups_parallel_l3": {**_PAR, **_AGENT},
    # the same four with one shared policy for both roles (one lr: `training.lr`, the executor's of L3)
    "at_grpo_l1": {**_L1},
    "at_grpo_parallel_l1": {**_L1, **_PAR},
    "agent_groups_l1": {**_L1, **_AGENT},
    "agent_groups_parallel_l1": {**_L1, **_PAR, **_AGENT},
    # DrMAS per-agent GRPO: every step of an agent valued at its episode's return, per agent over the K episodes
    "drmas_grpo_l3": {**_PAR, "training.estimator": "drmas_grpo", **_AGENT},
    # GRPO with one shared policy: episode returns, roles pooled, over the K episodes per env
    "grpo_shared_l1": {**_L1, **_PAR, "training.estimator": "episode_grpo",
                       "training.group_by": ["task_id", "env_idx"]},
    # tree, node groups, L1 at the L3 tool's lr (1e-4) instead of the executor's (1e-3): separates "one policy"
    # from "one lr" in the L1 vs L3 comparison (not in the default sweep)
    "at_grpo_l1_tool_lr": {**_L1, "training.lr": 1e-4},
    # each step's own reward grouped per (task, agent), turns and envs pooled (this project's earlier
    # "per-agent GRPO"; not DrMAS's estimator, kept to compare with earlier results; not in the default sweep)
    "grpo_parallel_l3": {**_PAR, "training.estimator": "grpo_per_agent", "training.group_by": ["task_id", "agent"]},
    # the control: AT-GRPO with every advantage's sign flipped, a run that must not learn (not in the default sweep)
    "at_grpo_flipped_l3": {"training.flip_advantages": True},
}
#: regime -> its overrides of the embedded default, applied before the variant's: ``embedded`` (PlanPath 3x3, 2 turns,
#: K=8, 4 envs per iteration) and the paper's regime scaled to the tiny model on CPU (AT-GRPO's plan-path: 10x10,
#: 4 turns, K=4, batch 128; here 6x6, 4 turns, K=4, 4 envs per iteration as in the embedded regime), and its
#: Sudoku 4x4 (4 turns, K=4, compact prompts; the tiny model learns to copy the tool's 16-cell grid only from a
#: larger warm start: 256 expert episodes x 10 epochs, against 16 x 30 for plan-path; both roles' outputs must be
#: exact, and at temperature 1 no sampled executor grid is valid, so every variant samples at 0.5)
REGIMES: dict[str, dict[str, Any]] = {
    "embedded": {},
    "paper_planpath": {"env.config.size": 6, "env.config.max_turns": 4, "sampling.k": 4},
    "paper_sudoku": {"env.id": "llm_marl/Sudoku-v0",
                     "env.config": {"size": 4, "max_turns": 4, "prompt_style": "compact"},
                     "sampling.k": 4, "sampling.max_new_tokens": 440, "sampling.temperature": 0.5,
                     "warm_start.episodes": 256, "warm_start.epochs": 10},
}
#: the variants a plain ``python3 benchmarks/ablation.py`` runs: the factorial and the two faithful baselines
SWEEP = [v for v in VARIANTS if v not in ("grpo_parallel_l3", "at_grpo_l1_tool_lr", "at_grpo_flipped_l3")]
DESCRIPTIONS = {
    "at_grpo_l3": "AT-GRPO: tree, node groups, L3 (the default)",
    "at_grpo_parallel_l3": "parallel, node groups, L3 (the paper's parallel baseline)",
    "agent_groups_l3": "tree, agent groups, L3",
    "agent_groups_parallel_l3": "parallel, agent groups, L3",
    "at_grpo_l1": "tree, node groups, L1",
    "at_grpo_parallel_l1": "parallel, node groups, L1",
    "agent_groups_l1": "tree, agent groups, L1",
    "agent_groups_parallel_l1": "parallel, agent groups, L1",
    "drmas_grpo_l3": "DrMAS per-agent GRPO (episode return per (task, env, agent), parallel), L3",
    "grpo_shared_l1": "GRPO, one shared policy (episode return per (task, env), parallel), L1",
    "grpo_parallel_l3": "step rewards grouped per (task, agent), parallel, L3 (not DrMAS)",
    "at_grpo_l1_tool_lr": "tree, node groups, L1 at the L3 tool's lr (1e-4)",
    "at_grpo_flipped_l3": "control: AT-GRPO with the advantages' sign flipped",
}


def _set(cfg: dict, dotted: str, value: Any) -> None:
    node = cfg
    parts = dotted.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = copy.deepcopy(value)


#: evaluation "never" except where the trial calls it (the warm start's before/after evaluations need a
#: non-zero interval); the trial evaluates at its token checkpoints itself
_NEVER = 10**9


def variant_config(variant: str, seed: int, iterations: int, sets: Sequence[str] = (),
                   base: Optional[Mapping[str, Any]] = None, eval_episodes: Optional[int] = None,
                   regime: str = "embedded") -> dict[str, Any]:
    """The validated run config of one trial: the embedded default (or ``base``), the regime's and the variant's
    overrides, the seed (RL sampling and problems; ``warm_start.seed`` is left alone, so every trial
    starts from the same demonstrations), ``iterations`` as the run's cap, evaluation only where the trial
    asks for it (after the warm start and at its token checkpoints, ``eval_episodes`` boards), then ``sets``."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; known: {sorted(VARIANTS)}")
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    if regime not in REGIMES:
        raise ValueError(f"unknown regime {regime!r}; known: {sorted(REGIMES)}")
    cfg = copy.deepcopy(dict(base if base is not None else DEFAULT_CONFIG))
    for key, value in [*REGIMES[regime].items(), *VARIANTS[variant].items()]:
        _set(cfg, key, value)
    _set(cfg, "training.seed", int(seed))
    _set(cfg, "evaluation.interval", _NEVER)
    _set(cfg, "evaluation.final_iteration", _NEVER)
    if eval_episodes is not None:
        _set(cfg, "evaluation.num_episodes", int(eval_episodes))
    _set(cfg, "run.iterations", int(iterations))
    return validate_config(apply_overrides(cfg, list(sets)), check_paths=False)


#: ``--tokens 0``: no token budget, the trial's one evaluation comes after its ``--iterations``
NO_BUDGET = 10**15


def checkpoints(tokens: int, points: int) -> list[int]:
    """The generated-token counts at which a trial is evaluated: ``points`` evenly up to the budget ``tokens``
    (0: no budget, one evaluation at the end of the trial's iterations)."""
    if tokens == 0:
        return [NO_BUDGET]
    if tokens < 0 or points < 1:
        raise ValueError(f"the token budget must be >= 0 and the evaluation points >= 1, got {tokens}, {points}")
    return [round(tokens * (i + 1) / points) for i in range(points)]


def _eval_row(ev: Mapping[str, Any]) -> dict[str, float]:
    roles = ev.get("roles", {})
    return {"success": float(ev.get("success_rate", float("nan"))),
            **{f"valid_{a}": float(m["valid_ratio"]) for a, m in ev.get("agents", {}).items()},
            **{k: float(v) for k, v in roles.items()}}


def _trial(config: dict) -> None:
    """One Tune trial: build ATGRPO from the run config (warm start and its evaluations), then train until the
    trial's generated-token budget is spent (or the iteration cap), evaluating greedily at each token checkpoint.
    Reports once per evaluation: tokens generated so far, training wall time (without evaluations), the eval row."""
    import torch
    from ray import tune

    from rllib_integration import ATGRPOConfig

    torch.set_num_threads(1)
    trial = config["trial"]
    run_cfg = trial["run_config"]
    marks = list(trial["checkpoints"])
    algo = ATGRPOConfig.from_run_config(run_cfg).build_algo()
    try:
        ws = algo.warm_start_metrics or {}
        tokens, train_s, it = 0, 0.0, 0
        after = _eval_row(ws.get("eval_after", {}))
        tune.report({"point": 0, "tokens": 0, "train_s": 0.0, "iterations": 0,
                     "eval_before_ws": float(ws.get("eval_before", {}).get("success_rate", float("nan"))),
                     "eval_after_ws": after["success"], **{f"eval_{k}": v for k, v in after.items()},
                     "warm_start_s": float(ws.get("time_s", 0.0))})
        for point, mark in enumerate(marks, start=1):
            while tokens < mark and it < run_cfg["run"]["iterations"]:
                t0 = time.perf_counter()
                r = algo.train()
                train_s += time.perf_counter() - t0
                tokens += int(r["throughput"]["tokens_generated"])
                it += 1
            ev = _eval_row(algo.evaluate())
            tune.report({"point": point, "tokens": tokens, "train_s": train_s, "iterations": it,
                         "eval_after_ws": after["success"], **{f"eval_{k}": v for k, v in ev.items()}})
            if it >= run_cfg["run"]["iterations"]:
                break
    finally:
        algo.stop()


def param_space(variants: Sequence[str], seeds: Sequence[int], iterations: int, sets: Sequence[str] = (),
                tokens: int = 150_000, points: int = 4, eval_episodes: Optional[int] = 64,
                regime: str = "embedded", base: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """Tune's param space: a grid over (variant, seed), each with its full run config and token checkpoints
    (``base``: the run config the trials start from; default the embedded one)."""
    from ray import tune

    marks = checkpoints(tokens, points)
    configs = [{"variant": v, "seed": s, "checkpoints": marks,
                "run_config": variant_config(v, s, iterations, sets, base=base, eval_episodes=eval_episodes,
                                             regime=regime)}
               for s in seeds for v in variants]  # seed-major: a sweep cut short has every variant on its first seeds
    return {"trial": tune.grid_search(configs)}


#: two-sided 95% Student t quantiles by degrees of freedom (1-30); 1.96 beyond
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def mean_ci(xs: Sequence[float]) -> tuple[float, float]:
    """The mean and the half-width of its 95% confidence interval (Student t over the seeds; 0 for one value)."""
    xs = [float(x) for x in xs]
    if not xs:
        raise ValueError("no values")
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return m, 0.0
    t = _T95[len(xs) - 2] if len(xs) - 1 <= len(_T95) else 1.96
    return m, t * statistics.stdev(xs) / math.sqrt(len(xs))


def _fmt(xs: Sequence[float], signed: bool = False) -> str:
    xs = [x for x in xs if not math.isnan(x)]
    if not xs:
        return "-"
    m, h = mean_ci(xs)
    return f"{m:+.2f} ± {h:.2f}" if signed else f"{m:.2f} ± {h:.2f}"


def finals(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int], dict[str, Any]]:
    """Per (variant, seed): the first report (after the warm start) merged with the last (end of budget)."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: r["point"]):
        key = (r["variant"], r["seed"])
        out[key] = {**out.get(key, {}), **r} if r["point"] else dict(r)
        out[key].setdefault("eval_before_ws", r.get("eval_before_ws", float("nan")))
    return out


def summary(rows: Sequence[Mapping[str, Any]], reference: str = "at_grpo_l3") -> str:
    """The Markdown table: per variant, seeds, held-out success after the warm start and at the end of the
    budget, the gain and its difference from ``reference`` paired by seed (mean ± 95% CI half-width), each
    role's own correctness at the end, tokens, iterations and training time."""
    fin = finals(rows)
    variants = list(dict.fromkeys(v for v, _ in fin))
    gain = {k: r["eval_success"] - r["eval_after_ws"] for k, r in fin.items()}
    lines = ["| variant | seeds | after warm start | end of budget | gain | gain - AT-GRPO's (paired) | tool "
             "correct | executor correct: given a correct proposal / without | tokens (k) | iterations | train "
             "time |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for v in variants:
        ks = sorted(k for k in fin if k[0] == v)
        rs = [fin[k] for k in ks]
        paired = [gain[k] - gain[(reference, k[1])] for k in ks if (reference, k[1]) in gain]
        diff = _fmt(paired, signed=True) if v != reference and paired else "-"
        lines.append(
            f"| {DESCRIPTIONS.get(v, v)} | {len(rs)} | {_fmt([r['eval_after_ws'] for r in rs])} | "
            f"{_fmt([r['eval_success'] for r in rs])} | {_fmt([gain[k] for k in ks], signed=True)} | {diff} | "
            f"{_fmt([r.get('eval_tool_correct', math.nan) for r in rs])} | "
            f"{_fmt([r.get('eval_executor_correct_given_tool_correct', math.nan) for r in rs])} / "
            f"{_fmt([r.get('eval_executor_correct_without', math.nan) for r in rs])} | "
            f"{statistics.fmean(r['tokens'] for r in rs) / 1000:.0f} | "
            f"{statistics.fmean(r['iterations'] for r in rs):.1f} | "
            f"{statistics.fmean(r['train_s'] for r in rs):.0f} s |")
    return "\n".join(lines)


def curves(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[tuple[float, float, float, float]]]:
    """Per variant, per evaluation point: (mean tokens, mean training seconds, mean success, 95% CI half-width)."""
    out: dict[str, list[tuple[float, float, float, float]]] = {}
    for v in dict.fromkeys(r["variant"] for r in rows):
        pts = sorted({r["point"] for r in rows if r["variant"] == v})
        out[v] = []
        for p in pts:
            rs = [r for r in rows if r["variant"] == v and r["point"] == p]
            m, h = mean_ci([r["eval_success"] for r in rs])
            out[v].append((statistics.fmean(r["tokens"] for r in rs), statistics.fmean(r["train_s"] for r in rs), m, h))
    return out


def _plot(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cv = curves(rows)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for i, (v, pts) in enumerate(cv.items()):
        style = "-" if v.endswith("l3") else "--"
        for ax, x in ((axes[0], [p[0] / 1000 for p in pts]), (axes[1], [p[1] for p in pts])):
            y, h = [p[2] for p in pts], [p[3] for p in pts]
            ax.errorbar(x, y, yerr=h, label=v, linestyle=style, marker="o", markersize=3, capsize=2,
                        color=f"C{i % 10}", alpha=0.85)
    axes[0].set_xlabel("generated tokens (thousands)")
    axes[1].set_xlabel("training wall time (s, without evaluations)")
    axes[0].set_ylabel("held-out greedy success (mean, 95% CI)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.set_ylim(-0.02, 1.02)
    axes[1].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def parser() -> argparse.ArgumentParser:
    """The command line (``benchmarks/gpu_session.sh``'s test parses its commands with it)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", nargs="+", default=SWEEP, choices=list(VARIANTS))
    ap.add_argument("--seeds", nargs="+", type=int, default=list(range(8)))
    ap.add_argument("--tokens", type=int, default=150_000,
                    help="generated-token budget of every trial (0: none, --iterations iterations as the main job)")
    ap.add_argument("--points", type=int, default=4, help="evaluations along the budget (the last at its end)")
    ap.add_argument("--iterations", type=int, default=60, help="iteration cap of a trial (with --tokens 0: its length)")
    ap.add_argument("--eval-episodes", type=int, default=64)
    ap.add_argument("--regime", default="embedded", choices=list(REGIMES), help="the task regime (REGIMES)")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="override a run-config key of every trial")
    ap.add_argument("--config", default=None, help="a run config (YAML) every trial starts from, instead of the "
                    "embedded default")
    ap.add_argument("--out", default="benchmarks/ablation")
    ap.add_argument("--num-cpus", type=int, default=None)
    ap.add_argument("--concurrent", type=int, default=1, help="trials at once (default 1: fair timings)")
    ap.add_argument("--from-tune", metavar="DIR", help="only rebuild the outputs from the trials finished so far in "
                    "a sweep's Tune directory (<out>/tune/ablation), e.g. of a sweep stopped early")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    if args.from_tune:
        rows = rows_from_tune(Path(args.from_tune))
        write_outputs(rows, Path(args.out).resolve(), header=f"rebuilt from {args.from_tune}: {len(rows)} reports of "
                      f"{len({(r['variant'], r['seed']) for r in rows})} trials")
        return 0

    import ray
    from ray import tune

    from rllib_integration.settings import load_config

    base = load_config(args.config, check_paths=False) if args.config else None
    space = param_space(args.variants, args.seeds, args.iterations, args.sets, tokens=args.tokens,
                        points=args.points, eval_episodes=args.eval_episodes, regime=args.regime, base=base)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
                 [os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.environ.get("PYTHONPATH", "")])}})
    # the trial's own process (algorithm + learner) and its rollout workers
    from rllib_integration import ATGRPO, ATGRPOConfig

    first = space["trial"]["grid_search"][0]["run_config"]
    resources = ATGRPO.default_resource_request(ATGRPOConfig.from_run_config(first))
    tuner = tune.Tuner(tune.with_resources(_trial, resources), param_space=space,
                       tune_config=tune.TuneConfig(max_concurrent_trials=args.concurrent),
                       run_config=tune.RunConfig(storage_path=str(out / "tune"), name="ablation", verbose=1))
    t0 = time.perf_counter()
    results = tuner.fit()
    for res in results:
        if res.error:
            print(f"trial {res.config['trial']['variant']} seed {res.config['trial']['seed']} failed: {res.error}")
    rows = rows_from_tune(out / "tune" / "ablation")
    write_outputs(rows, out, header=(f"regime {args.regime}, token budget {args.tokens} per trial, evaluated at "
                                     f"{args.points} points on {args.eval_episodes} eval boards, seeds {args.seeds}, "
                                     f"{time.perf_counter() - t0:.0f} s in all"))
    ray.shutdown()
    return 0


_ROW_KEYS = ("point", "tokens", "train_s", "iterations", "warm_start_s")


def rows_from_tune(directory: Path) -> list[dict[str, Any]]:
    """Every report of every trial under a Tune experiment directory (each trial's ``params.json`` and
    ``result.json``), sorted by variant, seed and evaluation point; trials that reported nothing are skipped."""
    rows: list[dict[str, Any]] = []
    for params in sorted(directory.glob("*/params.json")):
        trial = json.loads(params.read_text())["trial"]
        results = params.parent / "result.json"
        for line in results.read_text().splitlines() if results.exists() else []:
            r = json.loads(line)
            rows.append({"variant": trial["variant"], "seed": trial["seed"],
                         **{k: v for k, v in r.items() if k in _ROW_KEYS or k.startswith("eval_")}})
    rows.sort(key=lambda r: (list(VARIANTS).index(r["variant"]), r["seed"], r["point"]))
    return rows


def write_outputs(rows: Sequence[Mapping[str, Any]], out: Path, header: str) -> None:
    """``rows.jsonl`` (every report), ``ablation.md`` (the table and per-seed lines) and ``ablation.png``."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / "rows.jsonl").open("w") as f:
        for r in rows:
            f.write(json.dumps({k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}) + "\n")
    table = summary(rows)
    fin = finals(rows)
    (out / "ablation.md").write_text(
        f"{header}\n\n{table}\n\n" + "\n".join(
            f"- {v} seed {s}: after warm start {r['eval_after_ws']:.3f}, end {r['eval_success']:.3f} "
            f"({r['tokens'] / 1000:.0f}k tokens, {r['iterations']} iterations)" for (v, s), r in fin.items()) + "\n")
    _plot(rows, out / "ablation.png")
    print(table)
    print(f"-> {out / 'ablation.md'}, {out / 'ablation.png'}, {out / 'rows.jsonl'}")


if __name__ == "__main__":
    sys.exit(main())
