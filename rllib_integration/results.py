"""What one ATGRPO iteration reports: rollout and learner metrics, timers, throughput, and the watch on
the learning signal (a run whose groups all score alike learns nothing: it says so, and what to change)."""

from __future__ import annotations

import logging
import warnings
from collections import defaultdict
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from .core.metrics import rollout_metrics

__all__ = ["iteration_results", "LearningSignalWatch", "no_signal_message", "NO_SIGNAL_WARN_ITERATIONS",
           "ROLE_STARVED_WARN_ITERATIONS", "RoleWithoutSamplesWarning", "role_starved_message", "wall_timings",
           "count_params", "plain", "sandbox_counters", "SANDBOX_COUNTERS", "MAX_DROPPED_FRACTION",
           "SandboxFaultError"]

logger = logging.getLogger(__name__)

#: iterations in a row without any reward variance after which the run warns (see ``no_signal_message``)
NO_SIGNAL_WARN_ITERATIONS = 3
#: iterations in a row in which a role got no sample after which the run warns (see ``role_starved_message``)
ROLE_STARVED_WARN_ITERATIONS = 3
#: the ``sandbox/*`` counters of a result: the sandboxes' infrastructure faults (``sandboxes.base.FAULT_COUNTERS``)
#: in the rollout workers during the batch, and the episodes dropped for one
SANDBOX_COUNTERS = ("dead_workers_replaced", "runs_retried", "infrastructure_errors", "workers_recycled",
                    "dropped_episodes")
#: a batch whose dropped episodes are more than this share of its episodes stops the run (:class:`SandboxFaultError`)
MAX_DROPPED_FRACTION = 0.5


class SandboxFaultError(RuntimeError):
    """Too many episodes of a batch were dropped for sandbox infrastructure faults: the run stops."""


def sandbox_counters(parts: Sequence[Mapping[str, Any]], *, what: str = "training",
                     max_dropped_fraction: float = MAX_DROPPED_FRACTION) -> dict[str, int]:
    """The ``sandbox/*`` counters of a batch: each counter of :data:`SANDBOX_COUNTERS` summed over its parts (the
    rollout workers' results, ``part["sandbox"]``). Raises :class:`SandboxFaultError`, naming the fault, when the
    dropped episodes are more than ``max_dropped_fraction`` of the batch's episodes (kept + dropped): sandboxes
    that keep losing their workers are a broken machine, not something to train around."""
    out = dict.fromkeys(SANDBOX_COUNTERS, 0)
    for p in parts:
        for name, n in (p.get("sandbox") or {}).items():
            out[name] = out.get(name, 0) + int(n)
    dropped = out["dropped_episodes"]
    total = dropped + sum(len(p.get("episodes", ())) for p in parts)
    if dropped and dropped > max_dropped_fraction * total:
        first: Mapping[str, Any] = next((d for p in parts for d in p.get("dropped", ())), {})
        raise SandboxFaultError(
            f"{what}: {dropped} of {total} episodes of this batch were dropped for a sandbox infrastructure fault "
            f"(sandboxes.SandboxInfrastructureError: the sandbox lost its worker under a program, also on the fresh "
            f"workers it retried on), more than {max_dropped_fraction:.0%}; the run stops rather than train on what "
            f"is left. First: env {first.get('env_idx')} (task {first.get('task_id')!r}), turn {first.get('turn')}, "
            f"{first.get('agent')}'s step: {first.get('error')}. Counters: {out}. Check the machine (memory: the "
            "kernel's OOM killer, dmesg; bubblewrap; the sandbox's processes) and see docs/sandboxes.md.")
    return out


class RoleWithoutSamplesWarning(UserWarning):
    """A role of the team got no training sample for :data:`ROLE_STARVED_WARN_ITERATIONS` iterations in a row."""


def role_starved_message(cfg: Any, streaks: Mapping[str, int], counts: Mapping[str, int]) -> str:
    """The warning of a run in which the roles ``streaks`` (role -> iterations in a row) got no samples."""
    roles = ", ".join(f"{a} ({n} iterations)" for a, n in sorted(streaks.items()))
    mode = str(getattr(cfg, "mode", "tree"))
    select = str(getattr(cfg, "tree_select", "best"))
    lines = [f"ATGRPO WARNING: no samples of role(s) {roles} in a row, so their policies learn nothing. Samples "
             "per role this iteration: " + ", ".join(f"{a} {n}" for a, n in sorted(counts.items())) + "."]
    if mode == "tree" and select == "best":
        lines.append("Tree sampling continues only the candidate with the best immediate reward "
                     "(sampling.tree_select: best): a role reached only through an action that pays later (a "
                     "router's delegation to it: no reward now) is never played. Use sampling.tree_select: sample "
                     "(continue a random valid candidate) or sampling.mode: parallel (K whole episodes, each action "
                     "as the policy samples it); docs/environments.md \"Orchestrated teams\" says which when.")
    else:
        lines.append("No episode reached these roles: check the task's role order (next_role) and max_turns, or "
                     "that the roles before them write valid actions.")
    return "\n".join(lines)


def no_signal_message(cfg: Any, result: Mapping[str, Any], streak: int) -> str:
    """The warning of a run whose AT-GRPO groups all had zero reward variance ``streak`` iterations in a
    row: what it means, each role's valid ratio and reply length, and the settings to change."""
    agents = result.get("agents", {}) or {}
    valid = {a: float(m.get("valid_ratio", 0.0)) for a, m in agents.items()}
    tokens = {a: float(m.get("completion_tokens_mean", 0.0)) for a, m in agents.items()}
    max_new = int(cfg.max_new_tokens)
    lines = [f"ATGRPO WARNING: no learning signal for {streak} iterations in a row: in every group (K="
             f"{int(cfg.k)} candidates of one (env, turn, agent)) all candidates got the same reward "
             "(groups/zero_variance_frac=1.0), so every advantage is 0 and the policies are not updated. "
             "Valid-action ratio per role: " + (", ".join(f"{a} {v:.2f}" for a, v in sorted(valid.items())) or "-")
             + "; reply tokens (mean): " + (", ".join(f"{a} {t:.1f}" for a, t in sorted(tokens.items())) or "-")
             + f" of sampling.max_new_tokens={max_new}. What to change:"]
    if valid and max(valid.values()) == 0.0:
        lines.append("* no candidate writes a valid action: the model does not follow the task's action format yet.")
        if not int(dict(cfg.warm_start or {}).get("episodes", 0)):
            lines.append("  - turn on the warm start (warm_start.episodes: 16, i.e. .training(warm_start={'episodes': "
                         "16})): a supervised pass on the task's expert demonstrations before RL (llm_marl tasks);")
        if tokens and max(tokens.values()) >= 0.9 * max_new:
            lines.append(f"  - raise sampling.max_new_tokens (now {max_new}): replies are cut at the limit, and an "
                         "action (a program, an answer line) may not fit;")
        lines.append("  - or use a model that follows the format (model.path), or a task whose invalid actions are "
                     "graded (env.config invalid_penalty only shifts them all alike).")
    else:
        lines.append(f"* the candidates act differently but score alike: raise sampling.k (now {int(cfg.k)}) or "
                     f"sampling.temperature (now {float(cfg.temperature):g}) for more diverse candidates, use "
                     "training.group_by [task_id, agent] to compare candidates across envs and turns, or shape the "
                     "rewards (env.config) so that better actions score higher.")
    return "\n".join(lines)


def iteration_results(batch: dict[str, Any], adv: np.ndarray, gids: np.ndarray, keep: np.ndarray,
                      learner_metrics: dict[str, Any], num_updates: int, times: dict[str, float]) -> dict[str, Any]:
    """One iteration's result from its batch (``samples``, ``episodes``, ``timings`` of :func:`wall_timings`, and
    ``sandbox``: :func:`sandbox_counters`, reported as ``sandbox/*``),
    its advantages/groups/keep mask, the learner's metrics per policy and the phase times."""
    samples, episodes, timings = batch["samples"], batch["episodes"], batch["timings"]
    out = rollout_metrics(samples, adv, gids, keep, episodes)
    n_tok = timings["tokens"]
    gen_sum = timings["generate_s_sum"]
    out["learner"] = {pid: {k: v for k, v in (m or {}).items() if isinstance(v, (int, float))}
                      for pid, m in learner_metrics.items()}
    out["num_updates"] = num_updates
    out["timers"] = {"rollout_s": times["rollout_s"], "generate_s": timings["generate_s"],
                     "env_s": timings["env_s"], "sandbox_s": timings["sandbox_s"],
                     "advantage_s": times["advantage_s"], "update_s": times["update_s"],
                     "weight_sync_s": times["weight_sync_s"]}
    out["throughput"] = {"tokens_generated": int(n_tok),
                         "tokens_per_s": float(n_tok / gen_sum) if gen_sum else 0.0,
                         "samples": len(samples), "samples_trained": int(keep.sum())}
    out["env_runners"] = {"episode_return_mean": out.get("episode_return_mean", 0.0), "num_episodes": len(episodes)}
    out["sandbox"] = dict(batch.get("sandbox") or dict.fromkeys(SANDBOX_COUNTERS, 0))
    return out


class LearningSignalWatch:
    """Counts the iterations in a row in which every group's candidates got one reward
    (``groups/zero_variance_frac`` == 1: every advantage is 0, nothing is learned), reported as
    ``groups/zero_variance_streak``; warns loudly, saying what to change, after
    :data:`NO_SIGNAL_WARN_ITERATIONS` of them (and every 10 more).

    Also counts each role's samples: every result gets ``samples_per_role`` (every role of the env, 0 for a role
    that did not act) and ``roles_without_samples_streak`` (iterations in a row without samples, per role); a
    role without samples for :data:`ROLE_STARVED_WARN_ITERATIONS` iterations in a row (and every 10 more) is a
    :class:`RoleWithoutSamplesWarning` and a log warning. ``agents``: the env's roles (default: asked of
    ``cfg.check_env()`` once)."""

    def __init__(self, agents: Optional[Sequence[str]] = None) -> None:
        self.streak = 0
        self.agents: Optional[list[str]] = None if agents is None else list(agents)
        self.role_streaks: dict[str, int] = {}

    def update(self, cfg: Any, out: dict[str, Any]) -> None:
        self._update_roles(cfg, out)
        self._update_signal(cfg, out)

    def _update_roles(self, cfg: Any, out: dict[str, Any]) -> None:
        if self.agents is None:
            self.agents = list(cfg.check_env().agents)
        seen = {a: int(m.get("num_samples", 0)) for a, m in (out.get("agents") or {}).items()}
        counts = {a: seen.get(a, 0) for a in dict.fromkeys([*self.agents, *seen])}
        self.role_streaks = {a: (self.role_streaks.get(a, 0) + 1 if n == 0 else 0) for a, n in counts.items()}
        out["samples_per_role"] = counts
        out["roles_without_samples_streak"] = dict(self.role_streaks)
        due = {a: n for a, n in self.role_streaks.items()
               if n >= ROLE_STARVED_WARN_ITERATIONS and (n - ROLE_STARVED_WARN_ITERATIONS) % 10 == 0}
        if due:
            msg = role_starved_message(cfg, due, counts)
            logger.warning(msg)
            warnings.warn(msg, RoleWithoutSamplesWarning, stacklevel=3)

    def _update_signal(self, cfg: Any, out: dict[str, Any]) -> None:
        groups = out.setdefault("groups", {})
        no_signal = groups.get("zero_variance_frac", 1.0) >= 1.0
        self.streak = self.streak + 1 if no_signal else 0
        groups["zero_variance_streak"] = self.streak
        n = self.streak - NO_SIGNAL_WARN_ITERATIONS
        if n >= 0 and n % 10 == 0:
            logger.warning(no_signal_message(cfg, out, self.streak))


def wall_timings(parts: list[dict[str, Any]]) -> dict[str, float]:
    """Per-phase wall times of a batch sampled by workers in parallel: the phases of the slowest
    worker (they add up to the batch's wall time), plus token and generation-time totals."""
    slowest = max(parts, key=lambda p: p["timings"]["rollout_s"])["timings"] if parts else {}
    out: dict[str, float] = defaultdict(float, {k: float(slowest.get(k, 0.0))
                                                for k in ("generate_s", "env_s", "sandbox_s")})
    for p in parts:
        out["tokens"] += p["timings"]["tokens"]
        out["generate_s_sum"] += p["timings"]["generate_s"]
    return out


def count_params(learner: Any) -> dict[str, dict[str, int]]:
    out = {}
    for pid in learner.module.keys():
        ps = list(learner.module[pid].parameters())
        out[pid] = {"trainable_params": int(sum(p.numel() for p in ps if p.requires_grad)),
                    "total_params": int(sum(p.numel() for p in ps))}
    return out


def plain(x: Any) -> Any:
    """Stats objects (RLlib MetricsLogger leaves) -> python numbers, recursively."""
    if isinstance(x, Mapping):
        return {k: plain(v) for k, v in x.items()}
    if hasattr(x, "peek"):
        try:
            return plain(x.peek())
        except Exception:
            return None
    if hasattr(x, "item") and getattr(x, "ndim", 1) == 0:
        return x.item()
    return x
