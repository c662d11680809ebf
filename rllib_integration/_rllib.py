"""The few places this package reaches into RLlib beyond its public API, each wrapped here once.

Checked against ``ray[rllib]`` 2.60 (``pyproject.toml`` pins ``ray[rllib]==2.60.*``); ``tests/rllib_integration/
test_rllib_private.py`` runs every wrapper against the installed RLlib, so an upgrade that moves one
fails there, not in the middle of a run.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Optional, TypeVar

#: the RLlib version the wrappers below were checked against
CHECKED_RLLIB_VERSION = "2.60"

#: RLlib's private methods this package overrides, by the name of the public method that overrides each
#: (bound by :func:`rllib_hooks`): ``TorchLearner._uncompiled_update`` (one update: forward, loss, backward,
#: optimizer step; ``TorchLearner._update`` calls it, compiled or not), ``Learner._get_optimizer_state`` /
#: ``_set_optimizer_state`` (the optimizers' part of ``Learner.get_state``/``set_state``) and
#: ``Algorithm._get_env_id_and_creator`` (a static method: the env of a config, as ``(id, creator)``) and Tune's
#: ``Trainable._setup_logdir`` (the folder of a built algorithm).
HOOKS = {"update_step": "_uncompiled_update", "optimizer_state": "_get_optimizer_state",
         "load_optimizer_state": "_set_optimizer_state", "env_id_and_creator": "_get_env_id_and_creator",
         "setup_logdir": "_setup_logdir"}

_C = TypeVar("_C", bound=type)


def rllib_hooks(*names: str) -> Callable[[_C], _C]:
    """Class decorator: the class's public methods ``names`` (keys of :data:`HOOKS`) also serve as the RLlib
    private methods they override, e.g. ``@rllib_hooks("update_step")`` makes ``update_step`` the learner's
    ``_uncompiled_update``. A static method stays static."""
    unknown = sorted(set(names) - set(HOOKS))
    if unknown:
        raise ValueError(f"rllib_hooks: {unknown} are not RLlib hooks wrapped here ({sorted(HOOKS)})")

    def bind(cls: _C) -> _C:
        for name in names:
            if name not in cls.__dict__:
                raise TypeError(f"{cls.__name__} defines no {name}() for RLlib's {HOOKS[name]}")
            setattr(cls, HOOKS[name], cls.__dict__[name])
        return cls

    return bind


# -- Learner / TorchLearner ------------------------------------------------------------------------------
def zero_grads(learner: Any) -> None:
    """Zero (to None) the gradients of every optimizer's parameters, as ``TorchLearner._uncompiled_update``
    does first (RLlib: ``Learner._optimizer_parameters``, optimizer -> its parameter refs)."""
    for optim in learner._optimizer_parameters:
        optim.zero_grad(set_to_none=True)


def param_grads(learner: Any) -> dict[Any, Any]:
    """``{param_ref: grad}`` of the registered parameters that have a gradient: what ``postprocess_gradients``
    and ``apply_gradients`` take (RLlib: ``Learner._params``, param ref -> parameter)."""
    return {ref: p.grad for ref, p in learner._params.items() if p.grad is not None}


def record_off_policyness(learner: Any, batch: Any) -> None:
    """Log how many weight updates behind the learner the batch's samples are, as RLlib's own update step does
    first (RLlib: ``TorchLearner._compute_off_policyness``)."""
    learner._compute_off_policyness(batch)


def tensor_batch(learner: Any, batch: Any) -> Any:
    """A ``MultiAgentBatch`` as the learner's tensors on its device, as ``Learner.update`` converts it
    (RLlib: ``Learner._convert_batch_type``)."""
    return learner._convert_batch_type(batch)


def named_optimizers(learner: Any) -> dict[str, tuple[Any, Any]]:
    """``{registered name: (module id, optimizer)}`` of every optimizer of the learner
    (RLlib: ``Learner._named_optimizers`` and ``_optimizer_name_to_module``)."""
    return {name: (learner._optimizer_name_to_module[name], optim)
            for name, optim in learner._named_optimizers.items()}


def load_optimizer_state_as_rllib(learner: Any, state: dict) -> None:
    """RLlib's own ``TorchLearner._set_optimizer_state`` (for an override that converts the state first)."""
    from ray.rllib.core.learner.torch.torch_learner import TorchLearner

    TorchLearner._set_optimizer_state(learner, state)


# -- Algorithm ------------------------------------------------------------------------------------------
def set_up_metrics(algo: Any) -> None:
    """The Ray (Prometheus) metrics ``Algorithm.train``/``log_result`` report to, which ``Algorithm.setup``
    creates (for an algorithm whose ``setup`` does not call RLlib's) (RLlib: ``Algorithm._set_up_metrics``)."""
    algo._set_up_metrics()


def wants_component(obj: Any, component: str, components: Any, not_components: Any) -> bool:
    """Whether ``get_state(components=, not_components=)`` of a ``Checkpointable`` asks for ``component``
    (RLlib: ``Checkpointable._check_component``)."""
    return bool(obj._check_component(component, components, not_components))


def subcomponents(obj: Any, component: str, components: Any) -> Any:
    """The part of ``components`` (or ``not_components``) below ``component``, to pass on to that component's
    ``get_state`` (RLlib: ``Checkpointable._get_subcomponents``)."""
    return obj._get_subcomponents(component, components)


# -- Tune's Trainable ------------------------------------------------------------------------------------
def tune_storage(algo: Any) -> Optional[Any]:
    """The Tune storage context of a trainable run by Tune, else None (a plain ``config.build_algo()``)
    (Tune: ``Trainable._storage``)."""
    return getattr(algo, "_storage", None)


def logdir(algo: Any) -> Optional[str]:
    """The folder of a trainable as set up, else None (Tune: ``Trainable._logdir``; its ``logdir`` property
    adds a trailing separator)."""
    return getattr(algo, "_logdir", None)


def set_logdir(algo: Any, path: str) -> None:
    """Make ``path`` the folder of a trainable (what ``_setup_logdir`` sets) (Tune: ``Trainable._logdir``)."""
    algo._logdir = path


def set_training_iteration(algo: Any, iteration: int) -> None:
    """Restore a trainable's iteration counter (what ``algo.iteration`` / ``training_iteration`` report and
    ``train()`` increments) (Tune: ``Trainable._iteration``; the property has no setter)."""
    algo._iteration = iteration


def setup_logdir_as_tune(algo: Any) -> None:
    """Tune's own ``Trainable._setup_logdir`` (the trial's folder under Tune), for an override that calls it."""
    from ray.tune.trainable import Trainable

    Trainable._setup_logdir(algo)


# -- Tune's env registry --------------------------------------------------------------------------------
def registered_env_creator(name: str) -> Optional[Any]:
    """The env creator registered under ``name`` with ``ray.tune.registry.register_env``, else None
    (RLlib/Tune: ``ray.tune.registry._global_registry``; Tune has no public lookup)."""
    from ray.tune.registry import ENV_CREATOR, _global_registry

    return _global_registry.get(ENV_CREATOR, name) if _global_registry.contains(ENV_CREATOR, name) else None


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
