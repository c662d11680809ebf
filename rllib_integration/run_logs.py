"""The logs ``llm-marl train`` writes besides its metrics files: TensorBoard events and experiment trackers
(MLflow, W&B), driven through Tune's own logger callbacks, and ``transcripts.jsonl``, a bounded sample of
each iteration's prompts and completions.

- :class:`RunLoggers` drives Tune's ``TBXLoggerCallback`` and, per ``run.trackers`` entry,
  ``MLflowLoggerCallback`` / ``WandbLoggerCallback`` the way a Tune run does (``setup``,
  ``log_trial_start``, ``log_trial_result``, ``log_trial_end``, ``on_experiment_end``), with one
  :class:`TrialView` standing in for the Tune ``Trial`` of the CLI run (the CLI runs no Tune trial).
  The run config is the trial's ``config`` (MLflow parameters, W&B config), the results go in without
  RLlib's ``config`` key.
- :func:`check_trackers` says, before Ray starts, which tracker's package is missing (a ConfigError).
- :func:`pick_transcripts` picks up to N of an iteration's samples, spread over the roles;
  ``ATGRPO.training_step`` keeps them in ``algo.last_transcripts`` (not in the result, so Tune's results
  stay small) and :class:`TranscriptWriter` appends them to ``transcripts.jsonl``.

Importing this module imports neither Ray nor a tracker.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence

from .core.metrics import without_config
from .settings import ConfigError

__all__ = ["RunLoggers", "TrialView", "check_trackers", "pick_transcripts", "TranscriptWriter", "TRACKER_PACKAGES",
           "without_config"]

#: tracker -> (the module Tune's callback imports, the package to install)
TRACKER_PACKAGES = {"mlflow": ("mlflow", "mlflow"), "wandb": ("wandb", "wandb")}
#: the project (MLflow experiment, W&B project) of a tracker that names none
DEFAULT_PROJECT = "llm-marl"


def check_trackers(trackers: Sequence[Mapping[str, Any]]) -> None:
    """Raise :class:`~.settings.ConfigError` naming the ``pip install`` for a tracker whose package is missing."""
    for t in trackers:
        module, package = TRACKER_PACKAGES[t["type"]]
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"run.trackers: {t['type']!r} needs the {package} package, which is not installed; "
                              f"`pip install {package}` (or `pip install 'llm-marl[{t['type']}]'`), or drop it from "
                              "run.trackers")


class TrialView:
    """The attributes of a Tune ``Trial`` that Tune's logger callbacks read (one per CLI run): its folder,
    config (the run config), id and name."""

    def __init__(self, local_path: str, config: Optional[Mapping[str, Any]], name: str):
        self.local_path = local_path
        self.config: dict[str, Any] = dict(config or {})
        self.evaluated_params: dict[str, Any] = {}
        self.trial_id = f"{name}-{os.urandom(4).hex()}"
        self.trial_name = name
        self.experiment_dir_name = Path(local_path).name
        self.checkpoint = None

    def init_local_path(self) -> None:
        Path(self.local_path).mkdir(parents=True, exist_ok=True)

    def __str__(self) -> str:
        return self.trial_name


def _tracker_callback(t: Mapping[str, Any], group: str) -> Any:
    """Tune's logger callback of one ``run.trackers`` entry."""
    project = t.get("project") or DEFAULT_PROJECT
    tags = dict(t.get("tags") or {})
    if t["type"] == "mlflow":
        from ray.air.integrations.mlflow import MLflowLoggerCallback

        return MLflowLoggerCallback(tracking_uri=t.get("tracking_uri"), experiment_name=project, tags=tags)
    from ray.air.integrations.wandb import WandbLoggerCallback

    extra: dict[str, Any] = {"mode": t["mode"]} if t.get("mode") else {}
    if tags:
        extra["tags"] = sorted(f"{k}:{v}" if v else k for k, v in tags.items())
    return WandbLoggerCallback(project=project, group=t.get("group") or group, **extra)


def _is_wandb(callback: Any) -> bool:
    return type(callback).__name__ == "WandbLoggerCallback"


@contextlib.contextmanager
def _environ(values: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` set for the block (unset ones given), then as it was."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class RunLoggers:
    """TensorBoard events in ``logdir`` and the run's trackers, each a Tune logger callback fed every result.

    ``replay``: the metrics rows of a resumed run up to its checkpoint: its event files are written again from
    them (so nothing after the checkpoint, and nothing twice), and the trackers' new run gets them too."""

    def __init__(self, logdir: Path, *, trackers: Sequence[Mapping[str, Any]], run_config: Optional[Mapping[str, Any]],
                 name: str, replay: Sequence[dict] = ()):
        from ray.tune.logger import TBXLoggerCallback

        self.trial = TrialView(str(logdir), run_config, name)
        self.callbacks: list[Any] = [TBXLoggerCallback()]
        TBXLoggerCallback.setup(self.callbacks[0])
        for t in trackers:
            cb = _tracker_callback(t, group=Path(logdir).name)
            # Tune's W&B callback asks for an API key in setup unless WANDB_MODE says offline/disabled; the mode
            # given here is the run's WANDB_MODE for that check (its logging actor gets it as wandb.init's mode)
            with _environ({"WANDB_MODE": t["mode"]} if t["type"] == "wandb" and t.get("mode") else {}):
                cb.setup()
            self.callbacks.append(cb)
        for p in Path(logdir).glob("events.out.tfevents.*"):
            p.unlink()
        for cb in self.callbacks:
            cb.log_trial_start(self.trial)
        self._held: dict[str, Any] = {}
        for row in replay:
            self.write(row)

    def write(self, result: Mapping[str, Any]) -> None:
        """One result (nested or flat with ``/``): iteration -1 (before a warm start) and 0 are steps too, except
        for W&B, whose steps cannot go below 0 (a run that logs step -1 writes nothing at all): there the result of
        iteration -1 is logged with the next one, under ``before_warm_start/`` (``before_warm_start/evaluation/
        success_rate`` at step 0)."""
        result = without_config(result)
        it = int(result.get("training_iteration", 0))
        for cb in self.callbacks:
            r = result
            if _is_wandb(cb):
                if it < 0:
                    self._held = {"before_warm_start": {k: v for k, v in result.items() if k != "training_iteration"}}
                    continue
                r, self._held = {**result, **self._held}, {}
            cb.log_trial_result(it, self.trial, r)

    def close(self, failed: bool = False) -> None:
        """End the trial in every callback (MLflow: the run FINISHED or FAILED; W&B: its run finished)."""
        for cb in self.callbacks:
            cb.log_trial_end(self.trial, failed=failed)
            cb.on_experiment_end(trials=[self.trial])


# ---------------------------------------------------------------------------- transcripts
def pick_transcripts(samples: Sequence[Any], n: int, iteration: int) -> list[dict[str, Any]]:
    """Up to ``n`` of an iteration's samples (``core.records.Sample``) as JSON-ready records, spread over the roles
    (round robin over the agents, each agent's samples taken evenly spaced through the iteration): iteration,
    agent, policy, task, turn, prompt, completion, reward (and its parts), valid, chosen, group key."""
    if n <= 0 or not samples:
        return []
    by_agent: dict[str, list[Any]] = {}
    for s in samples:
        by_agent.setdefault(str(s.agent), []).append(s)
    agents = sorted(by_agent)
    counts = dict.fromkeys(agents, 0)
    while sum(counts.values()) < min(n, len(samples)):  # round robin: every role gets its share while it has samples
        for a in agents:
            if sum(counts.values()) < n and counts[a] < len(by_agent[a]):
                counts[a] += 1
    picked = [by_agent[a][(j * len(by_agent[a])) // counts[a]] for a in agents for j in range(counts[a])]
    return [_record(s, iteration) for s in picked]


def _record(s: Any, iteration: int) -> dict[str, Any]:
    key = s.group_key
    return {"iteration": int(iteration), "agent": str(s.agent), "policy": str(s.policy_id), "task_id": str(s.task_id),
            "env_idx": int(s.env_idx), "turn": int(s.turn), "candidate": int(s.candidate), "chosen": bool(s.chosen),
            "prompt": s.prompt, "completion": s.completion, "reward": float(s.reward),
            "reward_parts": {k: float(v) for k, v in dict(s.reward_parts).items()}, "valid": bool(s.valid),
            "finish_reason": str(s.finish_reason),
            "group_key": dict(key._asdict()) if hasattr(key, "_asdict") else (list(key) if isinstance(key, tuple)
                                                                              else str(key))}


class TranscriptWriter:
    """Appends each iteration's picked transcripts to ``transcripts.jsonl`` (one JSON object a line, flushed).
    ``resume_after=N`` keeps the lines up to iteration N (the checkpoint a run resumes from); without it the
    file starts empty."""

    def __init__(self, out_dir: str | os.PathLike, *, resume_after: Optional[int] = None):
        from .core.metrics import _read_rows, _replace

        self.path = Path(out_dir) / "transcripts.jsonl"
        rows = []
        if resume_after is not None and self.path.is_file():
            rows = [r for r in _read_rows(self.path) if int(r.get("iteration", 0)) <= resume_after]
        _replace(self.path, "".join(json.dumps(r) + "\n" for r in rows))

    def write(self, records: Sequence[Mapping[str, Any]]) -> None:
        if not records:
            return
        with self.path.open("a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in records))
            f.flush()
