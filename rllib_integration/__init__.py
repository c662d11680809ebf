"""Training LLM teams with AT-GRPO.

Two parts:

* :mod:`rllib_integration.core`: the Ray-free training core (generation backends, models,
  tree rollouts, advantage estimators, loss, metrics), usable from a plain script.
* the RLlib layer beside it: :mod:`.algorithm` (``ATGRPOConfig``/``ATGRPO``: ``training_step`` =
  sample, advantages, update, sync; :func:`register` names it ``"ATGRPO"`` in Tune), :mod:`.config`
  (the config's builders, typed in :mod:`.config_builders`, and its checks), :mod:`.warm_start_stage`,
  :mod:`.results` (what an iteration reports), :mod:`.placement` (placement groups, the local Ray),
  :mod:`.settings` (the one schema of every run setting), :mod:`.envs` (env registration with RLlib),
  :mod:`.policies`, :mod:`.batching`, :mod:`.learner` (the loss, in ``compute_loss_for_module``),
  :mod:`.rl_module`, :mod:`.rollout_worker`, :mod:`._rllib` (the RLlib internals used, in one place)
  and the ``llm-marl`` command line (:mod:`.cli`).

Importing this package imports no Ray (Ray is loaded when the RLlib part is first used) and registers
and patches nothing. :func:`register` puts ``"ATGRPO"`` in Tune's registry and every ``llm_marl/...``
task in RLlib's (``register_env``)::

    import rllib_integration
    from rllib_integration import ATGRPOConfig
    rllib_integration.register()
    tune.Tuner("ATGRPO", param_space=ATGRPOConfig().environment("llm_marl/PlanPath-v0")).fit()
"""

from __future__ import annotations

import importlib
from typing import Any

from sandboxes.version import distribution_version

#: the installed llm-marl distribution's version (``importlib.metadata``)
__version__ = distribution_version()

_RLLIB_NAMES = ("ATGRPO", "ATGRPOConfig", "register", "register_llm_marl_envs")

__all__ = [*_RLLIB_NAMES, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _RLLIB_NAMES:
        try:
            module = importlib.import_module(".algorithm", __name__)
        except ModuleNotFoundError as exc:
            if getattr(exc, "name", None) in ("ray", "torch", "transformers", "peft"):
                raise ImportError(f"rllib_integration.{name} needs the training extras ({exc.name} is missing): "
                                  "pip install torch==2.13.0 && pip install -e '.[train]'") from exc
            raise
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
