"""Numpy-safe, exact encoding of torch tensors of any dtype (for RLlib state and checkpoints).

RLlib turns learner and optimizer state into numpy arrays, and numpy has no bfloat16 (torch
raises ``TypeError: Got unsupported ScalarType BFloat16``). :func:`encode` walks a nested state
(dicts, lists, tuples) and turns every tensor into a numpy array, storing a bfloat16 tensor as
``{"__torch_dtype__": "bfloat16", "bits": <int16 array of its raw bits>}``; :func:`decode` turns
those back into tensors bit for bit. Other dtypes map to their numpy twin (exact as well).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["encode", "decode", "host_copy", "DTYPE_KEY"]

DTYPE_KEY = "__torch_dtype__"
_BITS = {torch.bfloat16: torch.int16}
_BY_NAME = {str(dt).removeprefix("torch."): (dt, bits) for dt, bits in _BITS.items()}


def host_copy(t: torch.Tensor) -> torch.Tensor:
    """``t`` (detached) on the host, sharing no memory with it: a device tensor's ``.cpu()`` is
    already a fresh copy (no second one is made); a host tensor is cloned."""
    t = t.detach()
    h = t.cpu()
    return h.clone() if h.data_ptr() == t.data_ptr() else h


def encode(obj: Any, copy: bool = True) -> Any:
    """``obj`` with every torch tensor replaced by a numpy array (bf16 as a tagged int16 bit array),
    each made with one copy at most (:func:`host_copy`). ``copy=False``: host tensors are not cloned
    (the arrays share their memory); for tensors the caller owns and will not change."""
    if isinstance(obj, torch.Tensor):
        t = host_copy(obj) if copy else obj.detach().cpu()
        if t.dtype in _BITS:
            return {DTYPE_KEY: str(t.dtype).removeprefix("torch."), "bits": t.view(_BITS[t.dtype]).numpy()}
        return t.numpy()
    if isinstance(obj, dict):
        return {k: encode(v, copy) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(encode(v, copy) for v in obj)
    return obj


def decode(obj: Any, device: Any = None) -> Any:
    """Inverse of :func:`encode` for the tagged entries (bit-exact); other values are returned as
    they are, except that with ``device`` numpy arrays become tensors on it."""
    if isinstance(obj, dict):
        if DTYPE_KEY in obj:
            name = obj[DTYPE_KEY]
            if name not in _BY_NAME:
                raise ValueError(f"tensor_codec.decode: unknown tagged dtype {name!r}; known: {sorted(_BY_NAME)}")
            dt, bits = _BY_NAME[name]
            t = torch.from_numpy(np.ascontiguousarray(obj["bits"])).to(bits).view(dt)
            return t.to(device) if device is not None else t
        return {k: decode(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(decode(v, device) for v in obj)
    if device is not None and isinstance(obj, np.ndarray):
        return torch.from_numpy(obj).to(device)
    return obj
