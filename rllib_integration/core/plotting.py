"""Learning-curve PNG of a run (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

__all__ = ["plot_learning_curve", "curve_labels"]


def curve_labels(run_config: Mapping[str, Any]) -> dict[str, str]:
    """The title and legend labels of a run's learning curve, from its settings (a validated run config,
    ``settings.load_config``): the env, specialization, estimator and name in the title; how the training episodes
    were played (tree: the continued candidate of K; parallel: K episodes per task) and how eval samples."""
    sampling, training = run_config.get("sampling", {}), run_config.get("training", {})
    k, mode = sampling.get("k", "?"), sampling.get("mode", "tree")
    if mode == "tree":
        how = f"tree, {sampling.get('tree_select', 'best')} of K={k}"
    else:
        how = f"parallel, K={k} episodes per task"
    temp = float(run_config.get("evaluation", {}).get("temperature", 0.0))
    env = run_config.get("env", {}).get("id", "")
    parts = [run_config.get("specialization", ""), training.get("estimator", ""),
             run_config.get("run", {}).get("name", "")]
    return {"title": f"{env} ({', '.join(str(p) for p in parts if p)})",
            "train": f"train ({how})",
            "eval": "eval split (greedy)" if temp == 0 else f"eval split (temperature {temp:g})"}


def plot_learning_curve(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike, title: str = "",
                        labels: Mapping[str, str] | None = None) -> str:
    """Plot success rate (train and, where present, eval) and mean reward per iteration.

    Eval rows at iteration -1 (before a warm start) and 0 (after it, before RL) are drawn with
    a dotted line between them marking the warm start. ``labels``: ``train`` and ``eval`` legend labels and the
    ``title`` (:func:`curve_labels` makes them from a run's settings); an explicit ``title`` wins."""
    labels = dict(labels or {})
    title = title or labels.get("title", "")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    it = [r.get("training_iteration", i + 1) for i, r in enumerate(rows)]
    train = [(i, r) for i, r in zip(it, rows, strict=True) if "success_rate" in r]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    a1.plot([i for i, _ in train], [r["success_rate"] for _, r in train], "o-", label=labels.get("train", "train"))
    ev = [(i, r["evaluation/success_rate"]) for i, r in zip(it, rows, strict=True) if "evaluation/success_rate" in r]
    if ev:
        a1.plot([e[0] for e in ev], [e[1] for e in ev], "s--", label=labels.get("eval", "eval split"))
        before = [e for e in ev if e[0] < 0]
        if before:  # iteration -1: before the warm start; 0: after it, before RL
            a1.axvline(-0.5, color="grey", lw=1, ls=":")
            a1.annotate("warm start", (-0.5, 1.0), fontsize=8, ha="center", va="top", color="grey")
            a1.plot([before[0][0]], [before[0][1]], "v", color="black", label="eval before warm start")
    a1.set_xlabel("iteration")
    a1.set_ylabel("success rate")
    a1.set_ylim(-0.02, 1.02)
    a1.legend()
    a1.grid(alpha=0.3)
    a2.plot([i for i, _ in train], [r.get("reward_mean", float("nan")) for _, r in train], "o-",
             label="reward (chosen actions)")
    agents = sorted({k.split("/")[1] for r in rows for k in r if k.startswith("agents/") and k.endswith("valid_ratio")})
    for a in agents:
        a2.plot([i for i, _ in train], [r.get(f"agents/{a}/valid_ratio", float("nan")) for _, r in train], ".--",
                 label=f"{a} valid ratio")
    a2.set_xlabel("iteration")
    a2.legend(fontsize=8)
    a2.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)
