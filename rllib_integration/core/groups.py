"""Group labels and per-group statistics for the advantage estimators (:mod:`.advantages`, :mod:`.gigpo`).

Labels (numbers, strings or other hashables, or ``(task_id, env_idx, turn, agent)`` key rows) become dense
integer codes with ``np.unique(..., return_inverse=True)``; per-group sums come from ``np.bincount``. No
Python loop over samples. Population std (``ddof=0``), two passes.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from .choices import KEY_FIELDS

__all__ = ["group_codes", "group_ids_from_keys", "dynamic_sampling_mask", "episode_returns", "group_normalised"]


def _column_codes(col: np.ndarray) -> tuple[np.ndarray, int]:
    """Integer codes for one 1-D column of labels (numbers, strings or other hashables)."""
    try:
        uniq, inv = np.unique(col, return_inverse=True)
    except TypeError:
        # Mixed, unorderable objects: order by their string form, then by type name.
        # Labels equal as strings but of different types (1 vs "1") stay distinct.
        as_str = np.array([f"{type(v).__name__}:{v!r}" for v in col.tolist()], dtype=object)
        uniq, inv = np.unique(as_str, return_inverse=True)
    return inv.reshape(-1).astype(np.int64, copy=False), len(uniq)


def group_codes(group_ids: Any) -> tuple[np.ndarray, int]:
    """Return ``(codes, n_groups)``: dense int64 codes ``0..n_groups-1`` for the labels.

    Accepts a 1-D array/list of labels, or a 2-D array / list of tuples (each row one key;
    rows are compared field by field).
    """
    if isinstance(group_ids, np.ndarray) and group_ids.ndim == 1 and group_ids.dtype.kind in "iub":
        uniq, inv = np.unique(group_ids, return_inverse=True)
        return inv.reshape(-1).astype(np.int64, copy=False), len(uniq)
    if isinstance(group_ids, np.ndarray):
        arr = group_ids
    else:
        seq = list(group_ids)
        if seq and isinstance(seq[0], tuple):
            arr = np.empty((len(seq), len(seq[0])), dtype=object)
            arr[:] = seq
        else:
            typed: np.ndarray | None = None
            if seq and isinstance(seq[0], (int, float, str, np.integer, np.floating, np.str_)):
                try:
                    cand = np.asarray(seq)
                    want = "US" if isinstance(seq[0], (str, np.str_)) else "iufb"
                    if cand.ndim == 1 and cand.dtype.kind in want:
                        typed = cand
                except (ValueError, TypeError):
                    typed = None
            if typed is None:
                arr = np.empty(len(seq), dtype=object)
                arr[:] = seq
            else:
                arr = typed
    if arr.ndim == 1:
        return _column_codes(arr)
    if arr.ndim != 2:
        raise ValueError(f"group_ids must be 1-D (labels) or 2-D (rows of key fields), got shape {arr.shape}")
    return _rows_to_codes(arr)


def _rows_to_codes(arr: np.ndarray) -> tuple[np.ndarray, int]:
    n, m = arr.shape
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    cols = []
    for j in range(m):  # loop over key fields (a handful), not over samples
        codes, _ = _column_codes(arr[:, j])
        cols.append(codes)
    mat = np.stack(cols, axis=1)
    uniq, inv = np.unique(mat, axis=0, return_inverse=True)
    return inv.reshape(-1).astype(np.int64, copy=False), len(uniq)


def group_ids_from_keys(
    keys: Iterable[Sequence[Any]] | np.ndarray,
    by: Sequence[str] = KEY_FIELDS,
) -> np.ndarray:
    """Integer group ids from ``(task_id, env_idx, turn, agent)`` keys, keeping fields ``by``.

    ``by=KEY_FIELDS`` (default) gives AT-GRPO groups (same state, same agent);
    ``by=("task_id", "agent")`` per-agent GRPO (DrMAS); ``by=("task_id",)`` plain GRPO.
    Keys may be tuples, namedtuples (e.g. ``rollout.GroupKey``) or a 2-D object array.
    """
    bad = [f for f in by if f not in KEY_FIELDS]
    if bad or not by:
        raise ValueError(f"by must be a non-empty subset of {KEY_FIELDS}, got {tuple(by)!r}")
    if isinstance(keys, np.ndarray):
        arr = keys
    else:
        rows = [tuple(k) for k in keys]
        arr = np.empty((len(rows), len(KEY_FIELDS)), dtype=object)
        if rows:
            if any(len(r) != len(KEY_FIELDS) for r in rows[:1]):
                raise ValueError(f"each key must have the fields {KEY_FIELDS}, got {rows[0]!r}")
            arr[:] = rows
    if arr.ndim != 2 or arr.shape[1] != len(KEY_FIELDS):
        raise ValueError(f"keys must be rows of {KEY_FIELDS}, got shape {arr.shape}")
    idx = [KEY_FIELDS.index(f) for f in by]
    codes, _ = _rows_to_codes(arr[:, idx])
    return codes


def _group_stats(rewards: np.ndarray, codes: np.ndarray, n_groups: int):
    counts = np.bincount(codes, minlength=n_groups).astype(np.float64)
    sums = np.bincount(codes, weights=rewards, minlength=n_groups)
    means = sums / np.maximum(counts, 1.0)
    return counts, sums, means


def _constant_groups(rewards: np.ndarray, codes: np.ndarray, n_groups: int) -> np.ndarray:
    """Bool per group: all rewards in the group are exactly equal (includes singletons)."""
    if rewards.size == 0:
        return np.zeros(n_groups, dtype=bool)
    order = np.argsort(codes, kind="stable")
    sc = codes[order]
    sr = rewards[order]
    starts = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]])
    gmax = np.maximum.reduceat(sr, starts)
    gmin = np.minimum.reduceat(sr, starts)
    const = np.zeros(n_groups, dtype=bool)
    const[sc[starts]] = gmax == gmin
    return const


def _codes_of(labels: Any, n: int, name: str) -> np.ndarray:
    codes, _ = group_codes(labels)
    if codes.shape[0] != n:
        raise ValueError(f"{name} ({codes.shape[0]}) and rewards ({n}) differ in length")
    return codes


def episode_returns(rewards: Any, episode_ids: Any) -> np.ndarray:
    """Per sample, the return of its episode: the sum of the rewards of the samples with its episode label
    (every role's: the team's return)."""
    r = np.asarray(rewards, dtype=np.float64)
    ep, n_ep = group_codes(episode_ids)
    return np.bincount(ep, weights=r, minlength=n_ep)[ep]


def _episode_entries(r: np.ndarray, task: np.ndarray, ep: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One entry per (task group, episode) pair: ``(pair_task, pair_return, pair)``, the pair's task-group code
    and episode return, and each sample's pair index."""
    ep_return = np.bincount(ep, weights=r)
    pair, _ = _rows_to_codes(np.stack([task, ep], axis=1))
    _, first = np.unique(pair, return_index=True)
    pair_task, _ = group_codes(task[first])
    return pair_task, ep_return[ep[first]], pair


def _centred_and_std(values: np.ndarray, codes: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray,
                                                                                        np.ndarray]:
    """Per entry: its value minus its group's mean, its group's population std, and whether the group is
    constant (singletons included)."""
    counts, _, means = _group_stats(values, codes, n_groups)
    centred = values - means[codes]
    var = np.bincount(codes, weights=centred * centred, minlength=n_groups) / np.maximum(counts, 1.0)
    return centred, np.sqrt(var)[codes], _constant_groups(values, codes, n_groups)[codes]


def dynamic_sampling_mask(rewards: Any, group_ids: Any) -> np.ndarray:
    """Bool mask keeping samples whose group has non-zero reward variance (DAPO dynamic sampling).

    Singleton groups and groups whose rewards are all exactly equal are dropped (False).
    """
    r = np.asarray(rewards, dtype=np.float64)
    codes, n_groups = group_codes(group_ids)
    if codes.shape[0] != r.shape[0]:
        raise ValueError(f"rewards ({r.shape[0]}) and group_ids ({codes.shape[0]}) differ in length")
    return ~_constant_groups(r, codes, n_groups)[codes]


def group_normalised(values: Any, labels: Any, *, std_norm: bool = True, eps: float = 1e-6) -> np.ndarray:
    """Per entry ``(v - mean_g) / (std_g + eps)`` (``std_norm``) or ``v - mean_g``; constant groups (singletons
    included) give exactly 0: what :func:`~.advantages.compute_advantages` gives with ``at_grpo`` / ``dr_grpo``."""
    v = np.asarray(values, dtype=np.float64)
    codes, n_groups = group_codes(labels)
    centred, std, const = _centred_and_std(v, codes, n_groups)
    if std_norm:
        with np.errstate(divide="ignore", invalid="ignore"):  # eps=0: constant groups, set to 0 below
            centred = centred / (std + eps)
    return np.where(const, 0.0, centred)
