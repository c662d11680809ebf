"""The few places this package reaches into RLlib beyond its public API, each wrapped here once.

Checked against ``ray[rllib]`` 2.60 (``pyproject.toml`` pins ``ray[rllib]==2.60.*``); ``tests/rllib_integration/
test_rllib_private.py`` runs every wrapper against the installed RLlib, so an upgrade that moves one
fails there, not in the middle of a run.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

#: the RLlib version the wrappers below were checked against
CHECKED_RLLIB_VERSION = "2.60"


def local_learner(learner_group: Any) -> Optional[Any]:
    """The learner of a local ``LearnerGroup`` (``num_learners=0``), else None.
    (RLlib: ``LearnerGroup._learner``; the public ``foreach_learner`` would return a copy of a module.)"""
    return learner_group._learner if learner_group.is_local else None


def one_remote_learner(learner_group: Any) -> dict[str, Any]:
    """``foreach_learner`` keywords that ask one healthy remote learner (all hold the same weights under DDP),
    as ``LearnerGroup.get_state`` does: ``{"remote_actor_ids": [id]}``, or ``{}`` for a local group.
    (RLlib: ``LearnerGroup._worker_manager``.)"""
    manager = None if learner_group.is_local else learner_group._worker_manager
    return {"remote_actor_ids": [manager.healthy_actor_ids()[0]]} if manager is not None else {}


@contextlib.contextmanager
def unfrozen(config: Any) -> Iterator[Any]:
    """Change settings of a frozen ``AlgorithmConfig`` (an algorithm's own, e.g. to evaluate a restored run
    with other settings), frozen again afterwards. (RLlib: ``AlgorithmConfig._is_frozen``; RLlib offers
    ``copy(copy_frozen=False)``, but the algorithm holds on to its own instance.)"""
    was = config._is_frozen
    config._is_frozen = False
    try:
        yield config
    finally:
        config._is_frozen = was


def no_env_runners(algo: Any) -> None:
    """The attributes ``Algorithm.setup`` would set (EnvRunner groups, connectors, offline data, replay
    buffer, ...) for an algorithm that overrides ``setup`` and samples with its own workers, so RLlib's
    ``Algorithm`` methods find them (RLlib: the attributes its ``setup`` sets, read by ``train``/``stop``)."""
    from collections import defaultdict

    algo.local_replay_buffer = None
    algo.remote_requests_in_flight = defaultdict(set)
    algo.env_runner_group = None
    algo.eval_env_runner_group = None
    algo.offline_data = None
    algo.spaces = None
    algo.env_to_module_connector = None
    algo.module_to_env_connector = None
    algo.evaluation_config = None
    algo.evaluation_dataset = None
    algo.reward_estimators = {}
    algo.offline_eval_runner_group = None


def main_process_bundle(config: Any) -> dict[str, float]:
    """Resources of an algorithm's own process (RLlib: ``ray.rllib.algorithms.utils._get_main_process_bundle``)."""
    from ray.rllib.algorithms.utils import _get_main_process_bundle

    return dict(_get_main_process_bundle(config))


def learner_bundles(config: Any) -> list[dict[str, float]]:
    """Resources of the remote learners (RLlib: ``ray.rllib.algorithms.utils._get_learner_bundles``)."""
    from ray.rllib.algorithms.utils import _get_learner_bundles

    return [dict(b) for b in _get_learner_bundles(config)]
