"""Quiet by default: third-party messages that say nothing to a user of ``llm-marl`` are dropped at
their source (issue 20); ``llm-marl train --verbose`` (or ``LLM_MARL_VERBOSE=1``) shows everything.

Each entry is (logger or warning category, a piece of the message, why it is noise for our user):

- RLlib: "running ATGRPO on the new API stack": ATGRPO only runs on it;
- Ray: "Token authentication is enabled for this Ray cluster": the local instance we start;
- Tune: "Install gputil for GPU system monitoring": an optional Tune dependency;
- RLlib: the ``RLModule(config=...)`` deprecation: ours, addressed in the RLModule, not by the user;
- transformers' FutureWarning "`is_gradient_checkpointing` is deprecated", raised when peft wraps a model in
  its adapters (every L2 policy): peft's use of a transformers alias, nothing the user wrote or can change;
- Tune: "Trainable.setup took N seconds ... consider setting reuse_actors=True": an option of Tune's trial
  actors, printed whenever loading the models (SmolLM2) or a warm start takes over 10 s;
- transformers' "Loading weights" bars (one per model per worker; huge lines when redirected);
- vLLM's INFO lines (engine configuration, model loading, KV cache sizes, CUDA graphs: dozens per engine start, in
  every process with an engine): its own documented knob, ``VLLM_LOGGING_LEVEL=WARNING`` (:data:`VLLM_ENV`), which
  vLLM reads when it is imported, here and in the engine processes it starts (they inherit it), and the ``vllm``
  logger's level where vLLM was imported already. Its warnings and errors stay. A ``VLLM_LOGGING_LEVEL`` the user
  set is kept (``VLLM_CONFIGURE_LOGGING=0`` leaves vLLM's logging to the user's own configuration).

:func:`install` runs in the driver (``llm-marl``) and, through the environment variable
``LLM_MARL_QUIET=1`` that the driver's local Ray inherits, in every worker that builds a rollout worker or an
RLModule (:func:`install_in_worker`, from their constructors). Importing a module installs nothing: the filters
are process-wide, so only a process that asked for them gets them. Progress that is ours stays on stdout.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

__all__ = ["NOISE", "VLLM_ENV", "WARNINGS", "install", "verbose"]

#: (logger name, message fragment, why it is dropped)
NOISE: tuple[tuple[str, str, str], ...] = (
    ("ray.rllib.algorithms.algorithm_config", "on the new API stack", "ATGRPO only runs on the new API stack"),
    ("ray._private.authentication.authentication_token_setup", "Token authentication is enabled",
     "the local Ray instance llm-marl starts"),
    ("ray.tune.utils.util", "Install gputil", "an optional Tune dependency for GPU monitoring"),
    ("ray._common.deprecation", "RLModule(config=", "the project's RLModule, not the user's code"),
    ("ray.tune.trainable.trainable", "Trainable.setup took",
     "Tune's hint to reuse its actors; llm-marl's set-up time is its models' loading (and the warm start)"),
)

#: (warning category, message regex, why it is dropped): warnings libraries raise about their own calls
WARNINGS: tuple[tuple[type[Warning], str, str], ...] = (
    (Warning, r".*RLModule\(config=", "the project's RLModule, not the user's code"),
    (FutureWarning, r"`is_gradient_checkpointing` is deprecated", "peft's PeftModel reads transformers' old alias"),
)

#: vLLM's environment variables set when quiet (unless the user set them): its loggers (``vllm.*``) print from WARNING
VLLM_ENV = {"VLLM_LOGGING_LEVEL": "WARNING"}


class _Drop(logging.Filter):
    def __init__(self, fragment: str) -> None:
        super().__init__()
        self.fragment = fragment

    def filter(self, record: logging.LogRecord) -> bool:
        if verbose():  # asked for later in this process (llm-marl main() called again with --verbose)
            return True
        try:
            return self.fragment not in record.getMessage()
        except Exception:  # noqa: BLE001 - a record we cannot format is not ours to drop
            return True


def verbose() -> bool:
    return os.environ.get("LLM_MARL_VERBOSE", "") not in ("", "0")


_installed = False


def install(*, for_workers: bool = False) -> bool:
    """Drop the :data:`NOISE` messages in this process (idempotent; nothing when verbose).
    ``for_workers``: also set ``LLM_MARL_QUIET=1`` so Ray workers started from here do the same.
    True when installed."""
    global _installed
    if verbose():
        return False
    if for_workers:
        os.environ["LLM_MARL_QUIET"] = "1"
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers reads it for its bars
    _quiet_vllm()
    if _installed:
        return True
    for name, fragment, _why in NOISE:
        logging.getLogger(name).addFilter(_Drop(fragment))
    for category, message, _why in WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:
        pass
    _installed = True
    return True


def _quiet_vllm() -> None:
    """:data:`VLLM_ENV` in this process's environment (read by vLLM at its import, inherited by its engine
    processes); where vLLM is imported already, its ``vllm`` logger's level too. A value the user set is kept."""
    for name, value in VLLM_ENV.items():
        if name in os.environ:
            continue
        os.environ[name] = value
        if name == "VLLM_LOGGING_LEVEL" and "vllm" in sys.modules:
            logging.getLogger("vllm").setLevel(value)


def install_in_worker() -> None:
    """Called by the constructors of the worker-side objects (``RolloutWorker``, ``LLMRLModule``): quiet when
    the driver asked for it (``LLM_MARL_QUIET=1``, set by :func:`install` with ``for_workers``)."""
    if os.environ.get("LLM_MARL_QUIET") == "1":
        install()
