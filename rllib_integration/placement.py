"""Where a run's Ray actors go: the placement group of a Tune trial and the local Ray ``build_algo()``
starts, each checked against what the cluster (or this machine) has before anything waits on it."""

from __future__ import annotations

from typing import Any

from . import _rllib
from .envs import task_runtime_env
from .resources import (ActorPlan, PENDING_WARN_S, actor_resources, check_resources, cluster_address, describe_plan,
                        machine_resources, watch_pending_placement)

__all__ = ["trial_bundles", "check_trial_placement", "init_ray_for"]


def trial_bundles(cf: Any) -> list[dict[str, float]]:
    """The placement-group bundles of one trial of config ``cf``: its own process first (a tiny CPU bundle when
    it asks for none), then one per rollout worker, then RLlib's learner bundles."""
    main = _rllib.main_process_bundle(cf)
    workers = [{"CPU": float(cf.num_cpus_per_rollout_worker), "GPU": float(cf.num_gpus_per_rollout_worker)}
               for _ in range(int(cf.num_rollout_actors))]
    bundles = [main] + workers + _rllib.learner_bundles(cf)
    bundles = [{k: v for k, v in b.items() if v} for b in bundles]
    bundles = [b for b in bundles if b] or [{"CPU": 1}]
    if not main or not any(main.values()):
        bundles.insert(0, {"CPU": 0.01})  # the trial's own process needs a (tiny) bundle of its own
    return bundles


def check_trial_placement(cf: Any, bundles: list[dict[str, float]]) -> None:
    """A Tune trial's placement group (``bundles``: the trial's own process first, then its actors) against
    the running cluster (Tune asks for it on the driver, where Ray runs): one that can never fit raises
    :class:`ConfigError` at once, naming the settings and what is free (else the trial is PENDING forever);
    one that fits is watched, and a warning names what it needs and what is free if it stays pending
    (resources held by others) for ``min(resources.PENDING_WARN_S, rollout.start_timeout_s)`` seconds.
    Tune asks for it through :meth:`~.algorithm.ATGRPO.default_resource_request`."""
    import ray

    if not ray.is_initialized():
        return
    main = {k: float(v) for k, v in bundles[0].items() if k in ("CPU", "GPU")}
    plan = ActorPlan.of_config(cf, main_process=main)
    check_resources(
        plan, ray.cluster_resources(), source="the Ray cluster for one Tune trial (its own process and its actors, "
                                              "one placement group)",
        free=ray.available_resources(), python=True,
        advice="Give Ray more (ray.init(num_cpus=...), more nodes) or ask for less (fewer rollout actors, "
               "num_cpus_per_rollout_worker=0.5, .resources(num_cpus_for_main_process=...))")
    needs = ", ".join(f"{v:g} {k}" for k, v in actor_resources(plan).items())
    after = min(float(PENDING_WARN_S), float(cf.start_timeout_s))
    watch_pending_placement(bundles, f"{needs} ({describe_plan(plan, python=True)})", after)


def init_ray_for(cfg: Any) -> None:
    """Start a local Ray of the run's own (if none runs) whose workers import ``env_modules``
    (:func:`~.envs.task_runtime_env`), after checking that the run's actors fit this machine (a local Ray gets what
    it has): an actor that cannot be placed would wait forever. A cluster is joined only when ``RAY_ADDRESS`` names
    it (checked once connected); one that ``ray start`` recorded on this machine (``ray_current_cluster``, perhaps
    another user's, perhaps gone) is not joined silently, as a plain ``ray.init()`` would (``address="local"``)."""
    import ray

    if ray.is_initialized():
        return
    address = cluster_address()
    if not address:
        have = machine_resources()
        cfg.check_resources(have, source=f"this machine (Ray is not running yet: build_algo() starts a local Ray "
                                         f"with its {have['CPU']:g} CPU and {have['GPU']:g} GPU)")
    ray.init(address=None if address else "local", runtime_env=task_runtime_env(cfg.env_modules) or None,
             include_dashboard=False)
    if address:
        cfg.check_resources(source=f"the Ray cluster at RAY_ADDRESS={address!r}")
