"""Per-iteration metrics of an ATGRPO run, and their jsonl/csv files.

:func:`rollout_metrics` turns one iteration's samples, advantages and episodes into a nested
dict (Tune flattens it with ``/``):

- ``success_rate``, ``reward_mean`` (chosen actions), ``episode_return_mean``, ``episode_len_mean``;
- ``agents/<agent>/{reward_mean, valid_ratio, success_rate, num_samples}`` — ``valid_ratio`` over
  every sampled candidate of that agent, ``reward_mean`` over the continued (chosen) ones;
- ``tasks/<task family>/{success_rate, episodes}`` (family = task id before the first ``/``);
- ``advantages/{mean, std, abs_mean, nonzero_frac}``, ``groups/{num, mean_size, zero_variance_frac,
  kept_samples}``.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

__all__ = ["rollout_metrics", "flatten", "MetricsWriter", "episode_metrics", "role_correctness", "without_config"]


def _family(task_id: str) -> str:
    return str(task_id).split("/", 1)[0] or "task"


def episode_metrics(episodes: Sequence[Any]) -> dict[str, Any]:
    if not episodes:
        return {"success_rate": 0.0, "episodes": 0}
    succ = np.array([float(e.success) for e in episodes])
    out: dict[str, Any] = {
        "success_rate": float(succ.mean()),
        "episodes": len(episodes),
        "episode_return_mean": float(np.mean([e.total_reward for e in episodes])),
        "episode_len_mean": float(np.mean([e.steps for e in episodes])),
    }
    fam: dict[str, list] = defaultdict(list)
    for e in episodes:
        fam[_family(e.task_id)].append(float(e.success))
    out["tasks"] = {f: {"success_rate": float(np.mean(v)), "episodes": len(v)} for f, v in sorted(fam.items())}
    return out


def role_correctness(samples: Sequence[Any], first: str = "tool", then: str = "executor") -> dict[str, Any]:
    """Each role's own correctness in a team where ``first`` acts before ``then`` in every turn (the grid
    tasks' tool and executor), from the team term of each step's reward (``reward_parts["team"]``: for
    the grid tasks ``1[the tool's proposal would solve the current board]`` and ``1[the executor solved
    it]``):

    - ``<first>_correct``: share of ``first``'s steps whose team term is 1 (the tool's program correct);
    - ``<then>_correct_given_<first>_correct``: share of ``then``'s steps that solved, over the turns
      where ``first``'s step of that turn was correct (the executor follows a correct proposal);
    - ``<then>_correct_without``: the same over the turns where it was not (the executor alone);

    each with its count ``n_...`` (the denominators differ). Empty when either role has no step."""
    def hit(s: Any) -> bool:
        return float(s.reward_parts.get("team", 0.0)) >= 1.0

    firsts = {(s.env_idx, s.candidate, s.turn): hit(s) for s in samples if s.agent == first}
    thens = [((s.env_idx, s.candidate, s.turn), hit(s)) for s in samples if s.agent == then]
    if not firsts or not thens:
        return {}
    given = [h for key, h in thens if firsts.get(key, False)]
    without = [h for key, h in thens if not firsts.get(key, False)]

    def share(xs: list[bool]) -> float:
        return float(np.mean(xs)) if xs else float("nan")

    return {f"{first}_correct": share(list(firsts.values())), f"n_{first}": len(firsts),
            f"{then}_correct_given_{first}_correct": share(given), f"n_{then}_given": len(given),
            f"{then}_correct_without": share(without), f"n_{then}_without": len(without)}


def rollout_metrics(samples: Sequence[Any], advantages: np.ndarray, group_ids: np.ndarray, keep: np.ndarray,
                    episodes: Sequence[Any]) -> dict[str, Any]:
    out = episode_metrics(episodes)
    if not samples:
        return out
    chosen = np.array([bool(s.chosen) for s in samples])
    rewards = np.array([float(s.reward) for s in samples])
    out["reward_mean"] = float(rewards[chosen].mean()) if chosen.any() else 0.0
    out["candidate_reward_mean"] = float(rewards.mean())
    agents: dict[str, dict[str, Any]] = {}
    succ_by_env = {(e.env_idx, e.episode): float(e.success) for e in episodes}
    for agent in sorted({s.agent for s in samples}):
        idx = np.array([s.agent == agent for s in samples])
        ch = idx & chosen
        envs = {(s.env_idx, 0) for s in samples if s.agent == agent}
        agents[agent] = {
            "reward_mean": float(rewards[ch].mean()) if ch.any() else 0.0,
            "valid_ratio": float(np.mean([s.valid for s in samples if s.agent == agent])),
            "success_rate": float(np.mean([succ_by_env.get(e, 0.0) for e in envs])) if envs else 0.0,
            "num_samples": int(idx.sum()),
            "completion_tokens_mean": float(np.mean([len(s.completion_token_ids) for s in samples
                                                     if s.agent == agent])),
        }
    out["agents"] = agents
    adv = np.asarray(advantages, dtype=np.float64)
    out["advantages"] = {"mean": float(adv.mean()), "std": float(adv.std()), "abs_mean": float(np.abs(adv).mean()),
                         "nonzero_frac": float((adv != 0).mean())}
    _, inv, counts = np.unique(group_ids, return_inverse=True, return_counts=True)
    zero_var = np.array([np.ptp(rewards[inv == g]) == 0 for g in range(len(counts))])
    out["groups"] = {"num": int(len(counts)), "mean_size": float(counts.mean()),
                     "zero_variance_frac": float(zero_var.mean()), "kept_samples": int(np.asarray(keep).sum()),
                     "total_samples": int(len(samples))}
    return out


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "/"))
        elif isinstance(v, (int, float, str, bool)) or v is None:
            out[key] = v
        elif isinstance(v, (np.integer, np.floating)):
            out[key] = v.item()
    return out


def without_config(result: Mapping[str, Any]) -> dict[str, Any]:
    """A result without RLlib's ``config`` key (every setting, repeated in every result): a run writes its settings
    once (``config.yaml``), not in every metrics row."""
    return {k: v for k, v in result.items() if k != "config"}


class MetricsWriter:
    """Appends each iteration's flattened metrics (RLlib's ``config`` key left out) to ``metrics.jsonl`` (each line
    flushed and fsynced) and rewrites ``metrics.csv`` (under a temporary name, then renamed).

    ``resume_after=N`` continues a run's files: the rows of ``metrics.jsonl`` up to iteration ``N`` (the
    checkpoint the run resumes from) are kept, later ones (written after that checkpoint, before the stop) are
    dropped, and a line cut short by the stop is ignored; without it the files start empty."""

    def __init__(self, out_dir: str | os.PathLike, *, resume_after: int | None = None):
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.jsonl = self.dir / "metrics.jsonl"
        self.csv = self.dir / "metrics.csv"
        self.rows: list[dict[str, Any]] = []
        if resume_after is not None and self.jsonl.is_file():
            self.rows = [r for r in _read_rows(self.jsonl) if int(r.get("training_iteration", 0)) <= resume_after]
        _replace(self.jsonl, "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.rows))
        if self.rows:
            self._write_csv()

    def write(self, result: Mapping[str, Any]) -> dict[str, Any]:
        """Append one result's row: flattened, without NaNs and without RLlib's ``config`` key."""
        row = {k: v for k, v in flatten(without_config(result)).items()
               if not (isinstance(v, float) and math.isnan(v))}
        self.rows.append(row)
        with self.jsonl.open("a") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self._write_csv()
        return row

    def _write_csv(self) -> None:
        import io

        keys = sorted({k for r in self.rows for k in r})
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=keys)
        w.writeheader()
        for r in self.rows:
            w.writerow(r)
        _replace(self.csv, buf.getvalue())


def _read_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:  # the last line, cut short by a stop
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _replace(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole: to a temporary name, fsynced, then renamed over it."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
