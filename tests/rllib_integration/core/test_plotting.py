"""The learning curve's title and legends come from the run's real settings (issue 33: they said "(L3, atgrpo)" and
"best of K, tree" for every run)."""

from __future__ import annotations

import matplotlib.pyplot as plt

from rllib_integration.core.plotting import curve_labels, plot_learning_curve
from rllib_integration.settings import load_config

ROWS = [{"training_iteration": -1, "evaluation/success_rate": 0.0},
        {"training_iteration": 0, "evaluation/success_rate": 0.2},
        {"training_iteration": 1, "success_rate": 0.5, "reward_mean": 0.3, "agents/tool/valid_ratio": 0.9},
        {"training_iteration": 2, "success_rate": 0.75, "reward_mean": 0.6, "evaluation/success_rate": 0.4}]


def _legends(monkeypatch, rows, path, **kw) -> tuple[str, list[str]]:
    seen = {}
    real_close = plt.close

    def close(fig=None):
        seen["title"] = fig._suptitle.get_text() if fig._suptitle else ""
        seen["labels"] = [t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts()]
        real_close(fig)

    monkeypatch.setattr(plt, "close", close)
    plot_learning_curve(rows, path, **kw)
    return seen["title"], seen["labels"]


def test_default_run_labels():
    labels = curve_labels(load_config(None))
    assert labels["title"] == "llm_marl/PlanPath-v0 (L3, at_grpo, atgrpo)"
    assert labels["train"] == "train (tree, best of K=8)"
    assert labels["eval"] == "eval split (greedy)"


def test_gigpo_parallel_run_is_not_called_tree(monkeypatch, tmp_path):
    cfg = load_config(None, ["sampling.mode=parallel", "training.estimator=gigpo", "sampling.k=4",
                             "specialization=L1", "policies={}", "evaluation.temperature=0.7", "run.name=mine"])
    labels = curve_labels(cfg)
    title, legend = _legends(monkeypatch, ROWS, tmp_path / "c.png", labels=labels)
    assert title == "llm_marl/PlanPath-v0 (L1, gigpo, mine)"
    assert "train (parallel, K=4 episodes per task)" in legend and "eval split (temperature 0.7)" in legend
    assert not any("tree" in t or "greedy" in t for t in legend), legend
    assert (tmp_path / "c.png").stat().st_size > 1000
