"""The Ray resources a run's actors need, checked against what a Ray instance or cluster has.

A run starts its rollout workers and, with ``resources.num_learners > 0``, remote learners as
Ray actors; the algorithm's own process (the driver, or a Tune trial whose placement group Tune
sizes from :meth:`ATGRPO.default_resource_request`) is the caller's. :func:`actor_resources`
counts them (the learners as RLlib's ``_get_learner_bundles`` does with ``num_cpus_per_learner``
"auto": 1 CPU per learner without a GPU; with ``main_process``, a Tune trial's own bundle too);
:func:`check_resources` fails with a message naming the settings when they cannot fit. Both work
on plain numbers, so ``llm-marl train --num-cpus N`` checks before Ray is imported, and
``ATGRPOConfig.check_resources`` against a running cluster. :func:`machine_resources` is what a
local ``ray.init()`` would find on this machine (``build_algo()`` checks against it before it
starts Ray itself), and :func:`watch_pending_placement` warns when a Tune trial's placement group
fits the cluster but stays pending (its resources held by others).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from .settings import ConfigError, default_of

__all__ = ["ActorPlan", "PENDING_WARN_S", "actor_resources", "check_resources", "cluster_address", "describe_plan",
           "machine_resources", "ray_address_file", "watch_pending_placement"]

logger = logging.getLogger(__name__)

#: a Tune trial whose placement group stays pending this long (at most; ``rollout.start_timeout_s`` if
#: shorter) gets a warning naming what it needs and what is free
PENDING_WARN_S = 60.0


@dataclasses.dataclass(frozen=True)
class ActorPlan:
    """The actors of a run: rollout workers and remote learners, with their per-actor resources,
    and (``main_process``, Tune trials only) the bundle of the algorithm's own process."""

    num_rollout_actors: int
    # the defaults of the run settings of the same name (default_of: written once, in the schema)
    num_cpus_per_rollout_worker: float = default_of("rollout.num_cpus_per_rollout_worker")
    num_gpus_per_rollout_worker: float = default_of("rollout.num_gpus_per_rollout_worker")
    num_learners: int = default_of("resources.num_learners")
    num_gpus_per_learner: float = default_of("resources.num_gpus_per_learner")
    num_cpus_per_learner: Union[float, str] = "auto"
    main_process: Optional[Mapping[str, float]] = None

    @classmethod
    def of_run_config(cls, cfg: Mapping[str, Any]) -> "ActorPlan":
        r, res = cfg["rollout"], cfg["resources"]
        return cls(r["num_rollout_actors"], r["num_cpus_per_rollout_worker"], r["num_gpus_per_rollout_worker"],
                   res["num_learners"], res["num_gpus_per_learner"])

    @classmethod
    def of_config(cls, c: Any, main_process: Optional[Mapping[str, float]] = None) -> "ActorPlan":
        return cls(int(c.num_rollout_actors), float(c.num_cpus_per_rollout_worker),
                   float(c.num_gpus_per_rollout_worker), int(c.num_learners), float(c.num_gpus_per_learner),
                   getattr(c, "num_cpus_per_learner", "auto"), main_process)


def actor_resources(plan: ActorPlan) -> dict[str, float]:
    """Total CPU/GPU of the run's actors (and of the trial's own bundle, if ``plan.main_process``)."""
    cpl = plan.num_cpus_per_learner
    if cpl == "auto":
        cpl = 1.0 if not plan.num_gpus_per_learner else 0.0
    main = plan.main_process or {}
    cpu = (plan.num_rollout_actors * plan.num_cpus_per_rollout_worker + (plan.num_learners * float(cpl))
           + float(main.get("CPU", 0.0)))
    gpu = (plan.num_rollout_actors * plan.num_gpus_per_rollout_worker + plan.num_learners * plan.num_gpus_per_learner
           + float(main.get("GPU", 0.0)))
    return {k: float(v) for k, v in (("CPU", cpu), ("GPU", gpu)) if v}


def describe_plan(plan: ActorPlan, python: bool) -> str:
    """The settings behind the plan's resources (YAML keys; with ``python``, the ATGRPOConfig keywords too)."""
    parts = []
    if plan.main_process:
        main = plan.main_process
        gpu = f" + {float(main['GPU']):g} GPU" if main.get("GPU") else ""
        parts.append(f"{float(main.get('CPU', 0)):g} CPU{gpu} for the Tune trial's own process "
                     "(resources.num_cpus_for_main_process, and num_gpus_per_learner for its local learner)")
    workers = (f"rollout.num_rollout_actors={plan.num_rollout_actors} x (num_cpus_per_rollout_worker="
               f"{plan.num_cpus_per_rollout_worker:g}, "
               f"num_gpus_per_rollout_worker={plan.num_gpus_per_rollout_worker:g})")
    if python:
        workers += " [.rollouts(num_rollout_actors=, num_cpus_per_rollout_worker=, num_gpus_per_rollout_worker=)]"
    parts.append(workers)
    if plan.num_learners:
        parts.append(f"resources.num_learners={plan.num_learners} x (num_gpus_per_learner="
                     f"{plan.num_gpus_per_learner:g})" + (" [.learners(...)]" if python else ""))
    return " + ".join(parts)


def _free_text(free: Mapping[str, float], total: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {float(free.get(k, 0.0)):g} of {float(total.get(k, 0.0)):g}" for k in ("CPU", "GPU"))


def check_resources(plan: ActorPlan, available: Mapping[str, float], *, source: str,
                    free: Optional[Mapping[str, float]] = None, python: bool = False,
                    advice: str = "Give Ray more (--num-cpus, more nodes) or ask for less") -> None:
    """Raise :class:`ConfigError` if the run's actors need more CPU/GPU than ``available`` (the totals of
    ``source``); the message names the settings and, given ``free``, what is free now."""
    needs = actor_resources(plan)
    short = {k: (v, float(available.get(k, 0.0))) for k, v in needs.items() if v > float(available.get(k, 0.0)) + 1e-9}
    if not short:
        return
    parts = [f"{v:g} {k} (has {have:g})" for k, (v, have) in short.items()]
    free_now = f"; free now: {_free_text(free, available)}" if free is not None else ""
    raise ConfigError(f"the run needs {', '.join(parts)} from {source}: {describe_plan(plan, python)}{free_now}. "
                      f"{advice}")


def cluster_address() -> Optional[str]:
    """``RAY_ADDRESS`` where it names a cluster to connect to (not unset, empty or ``local``)."""
    addr = os.environ.get("RAY_ADDRESS", "").strip()
    return addr if addr and addr != "local" else None


def ray_address_file() -> Path:
    """Where ``ray start`` records the cluster that ``RAY_ADDRESS=auto`` (and a plain ``ray.init()``)
    connects to (Ray's own lookup)."""
    tmp = os.environ.get("RAY_TMPDIR") or (os.environ.get("TMPDIR") if sys.platform.startswith("linux") else None)
    return Path(tmp or "/tmp") / "ray" / "ray_current_cluster"


def machine_resources() -> dict[str, float]:
    """CPU/GPU of a local Ray instance started here without arguments (Ray's own detection: the
    container's CPU limit, the visible NVIDIA GPUs)."""
    try:
        from ray._private.utils import get_num_cpus

        cpus = float(get_num_cpus())
    except Exception:  # a Ray without the private helper: what Python sees
        cpus = float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
    gpus = 0.0
    try:
        from ray._private.resource_and_label_spec import ResourceAndLabelSpec

        gpus = float(ResourceAndLabelSpec._get_current_node_accelerator(None, {})[1])
    except Exception:
        try:
            import torch

            gpus = float(torch.cuda.device_count())
        except Exception:
            gpus = 0.0
    return {"CPU": cpus, "GPU": gpus}


# ------------------------------------------------------------------ Tune: a trial that waits for resources
def _signature(bundles: Any) -> tuple:
    """Bundles (a list, or the ``{index: bundle}`` of ``placement_group_table``) -> a comparable key."""
    items = [bundles[i] for i in sorted(bundles)] if isinstance(bundles, Mapping) else list(bundles)
    return tuple(tuple(sorted((k, round(float(v), 6)) for k, v in b.items() if float(v))) for b in items)


class _PendingWatch:
    """One daemon thread per process: warns when a placement group with registered bundles stays
    ``PENDING`` longer than its threshold, naming what it needs and what the cluster has free
    (again every 10 thresholds while it waits). Ends with the Ray session, or after 10 idle minutes."""

    IDLE_S = 600.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple, tuple[str, float]] = {}
        self._pending_since: dict[str, float] = {}
        self._warned_at: dict[str, float] = {}
        self._thread: Optional[threading.Thread] = None
        self._active = time.monotonic()

    def add(self, bundles: Sequence[Mapping[str, float]], describe: str, after_s: float) -> None:
        with self._lock:
            self._requests[_signature(bundles)] = (describe, float(after_s))
            self._active = time.monotonic()
            if self._thread is None or not self._thread.is_alive():
                self._pending_since.clear()
                self._warned_at.clear()
                self._thread = threading.Thread(target=self._run, name="atgrpo-pending-placement", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        import ray
        from ray.util import placement_group_table

        while True:
            with self._lock:
                requests = dict(self._requests)
            poll = max(0.2, min([after for _, after in requests.values()] + [10.0]) / 4)
            time.sleep(poll)
            try:
                if not ray.is_initialized():
                    break
                table = placement_group_table()
                self._check(table, requests)
            except Exception:  # the session went away under us
                logger.debug("pending-placement watch stopped", exc_info=True)
                break
            with self._lock:
                if not self._pending_since and time.monotonic() - self._active > self.IDLE_S:
                    self._requests.clear()
                    break
        with self._lock:
            self._thread = None

    def _check(self, table: Mapping[str, Any], requests: Mapping[tuple, tuple[str, float]]) -> None:
        import ray

        now = time.monotonic()
        pending = set()
        for pg_id, info in table.items():
            req = requests.get(_signature(info.get("bundles") or {}))
            if req is None or info.get("state") != "PENDING":
                continue
            pending.add(pg_id)
            describe, after_s = req
            since = self._pending_since.setdefault(pg_id, now)
            last = self._warned_at.get(pg_id)
            if now - since < after_s or (last is not None and now - last < 10 * after_s):
                continue
            self._warned_at[pg_id] = now
            total, free = ray.cluster_resources(), ray.available_resources()
            logger.warning(
                "ATGRPO: a Tune trial has waited %.0fs for its placement group (it stays PENDING until these are "
                "free): it needs %s; the cluster has %s free. Other trials or jobs hold them: free or add "
                "resources, run fewer trials at once (tune.TuneConfig(max_concurrent_trials=...)), or ask for less.",
                now - since, describe, _free_text(free, total))
        with self._lock:
            if pending:
                self._active = now
            for pg_id in set(self._pending_since) - pending:
                self._pending_since.pop(pg_id, None)
                self._warned_at.pop(pg_id, None)


_WATCH = _PendingWatch()


def watch_pending_placement(bundles: Sequence[Mapping[str, float]], describe: str, after_s: float) -> None:
    """Warn (logging, from a daemon thread) when a placement group with these bundles stays pending
    for ``after_s`` seconds: Tune itself only warns about trials that can never fit the cluster."""
    _WATCH.add(bundles, describe, after_s)
