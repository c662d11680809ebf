"""Run configs as files: YAML as run configs read it (``1e-3`` is a number), ``--set a.b=value`` overrides,
the embedded default (:data:`DEFAULT_CONFIG`), :func:`load_config`, and a model spec resolved to a
checkpoint directory (:func:`resolve_model_spec`)."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import yaml

from .errors import ConfigError
from .schema import RunSettings
from .table import OLD_KEYS, renamed_keys, warn_renamed
from .validation import validate_config
from .values import missing_checkpoint

__all__ = ["load_yaml", "apply_overrides", "DEFAULT_CONFIG", "load_config", "resolve_model_spec"]


class _Loader(yaml.SafeLoader):
    """YAML with YAML 1.2 floats: ``1e-3`` is a number (YAML 1.1 wants ``1.0e-3``)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


def load_yaml(text: str) -> Any:
    """Parse YAML as run configs are parsed (safe, with YAML 1.2 floats such as ``1e-3``)."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


def _parse_value(text: str) -> Any:
    try:
        return load_yaml(text)
    except yaml.YAMLError:
        return text


def apply_overrides(cfg: Mapping[str, Any], sets: Sequence[str]) -> dict[str, Any]:
    """Apply ``--set a.b.c=value`` overrides (values parsed as YAML) to ``cfg``. Keys of the previous release
    (:data:`~.table.OLD_KEYS`), in ``cfg`` or ``--set``, are renamed with a ``FutureWarning``."""
    out = copy.deepcopy(dict(renamed_keys(cfg)))
    for item in sets or []:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value, e.g. --set training.lr=1e-4")
        key, _, raw = item.partition("=")
        parts = [p for p in key.strip().split(".") if p]
        if not parts:
            raise ConfigError(f"--set {item!r}: empty key")
        if ".".join(parts[:2]) in OLD_KEYS:
            new = OLD_KEYS[".".join(parts[:2])]
            warn_renamed(".".join(parts[:2]), new, "--set key", category=FutureWarning)
            parts[:2] = new.split(".")
        node = out
        for p in parts[:-1]:
            if not isinstance(node.get(p, {}), dict):
                raise ConfigError(f"--set {key}: {p} is not a section")
            node = node.setdefault(p, {})
        node[parts[-1]] = _parse_value(raw)
    return out


#: The embedded default (``llm-marl train`` with no CONFIG): a warm start from the task's own expert, then
#: AT-GRPO, on a task where both roles matter. PlanPath-v0 3x3 with obstacles (density 0.25), compact
#: prompts, two turns: the tool writes a BFS program that runs in the sandbox and the executor answers
#: the moves, using the tool's output. The tiny model (a copy per role: L3) writes no valid action
#: before the warm start; 16 expert episodes x 30 epochs make it partly competent; then 24 AT-GRPO
#: iterations (K=8 candidates per (env, turn, agent), 4 fresh train boards each) with a per-role lr:
#: 1e-4 for the tool (its 320-token program drifts at more) and 1e-3 for the executor. Greedy held-out
#: success is measured before the warm start, after it (iteration 0) and every 6 iterations.
#: See benchmarks/RESULTS.md "Warm start" and "Training (RLlib)" for what it shows.
DEFAULT_CONFIG: dict[str, Any] = {
    "env": {"id": "llm_marl/PlanPath-v0",
            "config": {"size": 3, "obstacle_density": 0.25, "prompt_style": "compact", "max_turns": 2}},
    "model": {"path": "tiny"},
    "specialization": "L3",
    "policies": {"tool": {"lr": 1e-4}, "executor": {"lr": 1e-3}},
    "sampling": {"mode": "tree", "k": 8, "temperature": 1.0, "max_new_tokens": 360, "chat": False},
    "rollout": {"num_rollout_actors": 1, "envs_per_iteration": 4, "num_cpus_per_rollout_worker": 1,
                "train_task_pool": None},
    "training": {"lr": 1e-3, "estimator": "at_grpo", "filter_zero_variance": True, "clip_low": 0.2,
                 "clip_high": 0.28, "grad_clip": 1.0, "seed": 0},
    "evaluation": {"interval": 6, "num_episodes": 64, "temperature": 0.0},
    "warm_start": {"episodes": 16, "epochs": 30, "lr": 5e-3, "batch_size": 8, "seed": 0, "heldout_episodes": 4},
    "run": {"iterations": 24, "output_dir": "runs/default"},
}


def load_config(path: Optional[str | os.PathLike] = None, sets: Optional[Sequence[str]] = None,
                *, check_paths: bool = True) -> dict[str, Any]:
    """Read a YAML run config (or the embedded default), apply ``--set`` overrides, validate."""
    if path is None:
        raw: Any = copy.deepcopy(DEFAULT_CONFIG)
    else:
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"config file {str(p)!r} does not exist")
        try:
            raw = load_yaml(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: not valid YAML: {e}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{p}: a run config is a mapping of sections {sorted(RunSettings.model_fields)}")
    return validate_config(apply_overrides(raw, list(sets or [])), check_paths=check_paths)


def resolve_model_spec(spec: Any, tiny_defaults: Optional[Mapping[str, Any]] = None) -> str:
    """A model spec ('tiny', 'smollm2', a directory or {tiny: {...}}) -> a checkpoint directory."""
    from ..core import models

    if isinstance(spec, Mapping):
        return str(models.build_tiny_model(**{**(tiny_defaults or {}), **dict(spec["tiny"])}))
    if spec == "tiny":
        return str(models.build_tiny_model(**dict(tiny_defaults or {})))
    if spec == "smollm2":
        return str(models.smollm2_path())
    missing = missing_checkpoint(spec)
    if missing:
        raise ConfigError(missing)
    return str(Path(os.path.expanduser(str(spec))))

