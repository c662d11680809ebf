"""Gradient accumulation over token-bounded micro-batches (Ray-free; used by the learner).

An optimizer minibatch (``input_ids``/``attention_mask`` ``(B, T)``, right-padded, and the
``(B, T-1)`` columns aligned with ``input_ids[:, 1:]``) is split into micro-batches whose padded
size ``rows x width`` stays within ``micro_batch_tokens``. Rows are packed longest first, and each
micro-batch is cut to its own longest row, so padding costs little. Each micro-batch's loss uses
the *whole minibatch's* aggregation denominator (:func:`loss.loss_denominator`), so the summed
micro-batch gradients equal the full-batch gradient (what one optimizer step then applies).
:func:`micro_batch_logprobs` runs a forward pass (no gradient) over the same micro-batches and puts
the log-probs back in the minibatch's rows (the learner's recomputed behaviour log-probs).

>>> import torch
>>> mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
>>> [idx.tolist() for idx in micro_batch_indices(mask, 8)]
[[2, 0], [1]]
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Optional

import torch

from .loss import LossConfig, loss_denominator, policy_loss

__all__ = ["micro_batch_indices", "iter_micro_batches", "merge_loss_metrics", "accumulate_loss",
           "accumulate_policy_loss", "micro_batch_policy_loss", "micro_batch_logprobs", "DENOMINATOR_KEY", "LossFn"]

_SUMMED = ("loss", "pg_loss", "kl", "entropy", "num_tokens")
_MIN, _MAX = ("ratio_min",), ("ratio_max", "sampler_logp_diff_max")


def micro_batch_indices(attention_mask: torch.Tensor, micro_batch_tokens: Optional[int]) -> list[torch.Tensor]:
    """Row indices of each micro-batch: longest rows first, ``rows * longest <= micro_batch_tokens``
    (a row longer than the budget goes alone). ``None`` or ``0``: one micro-batch of all rows."""
    lengths = attention_mask.long().sum(-1).cpu()
    n = lengths.shape[0]
    if not micro_batch_tokens:
        return [torch.arange(n)] if n else []
    if micro_batch_tokens < 0:
        raise ValueError(f"micro_batch_tokens must be >= 0 (0 = no micro-batching), got {micro_batch_tokens}")
    order = torch.argsort(lengths, descending=True, stable=True)
    out: list[torch.Tensor] = []
    cur: list[int] = []
    width = 0
    for i in order.tolist():
        w = max(width, int(lengths[i]), 1)
        if cur and (len(cur) + 1) * w > micro_batch_tokens:
            out.append(torch.tensor(cur))
            cur, w = [], max(int(lengths[i]), 1)
        cur.append(i)
        width = w
    if cur:
        out.append(torch.tensor(cur))
    return out


def iter_micro_batches(batch: Mapping[str, Any],
                       micro_batch_tokens: Optional[int]) -> Iterator[dict[str, Any]]:
    """Sub-batches of ``batch`` (rows of :func:`micro_batch_indices`, columns cut to their longest row).

    Columns of width ``T`` (``input_ids``, ``attention_mask``) keep ``width`` columns, those of width
    ``T-1`` keep ``width-1``; 1-D columns (``advantages``) are only row-sliced."""
    for _, sub in _indexed_micro_batches(batch, micro_batch_tokens):
        yield sub


def _indexed_micro_batches(batch: Mapping[str, Any],
                           micro_batch_tokens: Optional[int]) -> Iterator[tuple[torch.Tensor, dict[str, Any]]]:
    """:func:`iter_micro_batches` with each micro-batch's row indices in ``batch``."""
    mask = batch["attention_mask"]
    T = mask.shape[1]
    lengths = mask.long().sum(-1)
    for idx in micro_batch_indices(mask, micro_batch_tokens):
        idx = idx.to(mask.device)
        width = max(int(lengths[idx].max()), 2) if idx.numel() else T
        width = min(width, T)
        sub: dict[str, Any] = {}
        for k, v in batch.items():
            if not isinstance(v, torch.Tensor):
                sub[k] = v
                continue
            v = v[idx]
            if v.dim() >= 2 and v.shape[1] == T:
                v = v[:, :width]
            elif v.dim() >= 2 and v.shape[1] == T - 1:
                v = v[:, :width - 1]
            sub[k] = v
        yield idx, sub


def merge_loss_metrics(parts: list[dict[str, float]]) -> dict[str, float]:
    """Metrics of a minibatch from its micro-batches' :func:`loss.policy_loss` metrics (computed with
    the minibatch denominator): shares are summed, per-token means weighted by tokens, min/max kept."""
    if not parts:
        return {}
    if len(parts) == 1:
        return dict(parts[0])
    total = sum(p.get("num_tokens", 0.0) for p in parts) or 1.0
    out: dict[str, float] = {}
    for k in parts[0]:
        vals = [p[k] for p in parts if k in p]
        if k in _SUMMED:
            out[k] = float(sum(vals))
        elif k in _MIN:
            out[k] = float(min(vals))
        elif k in _MAX:
            out[k] = float(max(vals))
        else:
            out[k] = float(sum(p[k] * p.get("num_tokens", 0.0) for p in parts if k in p) / total)
    return out


#: ``loss_fn(micro_batch, forward_output) -> (loss, metrics)``; the micro-batch carries the whole
#: minibatch's aggregation denominator under :data:`DENOMINATOR_KEY`.
LossFn = Callable[[dict[str, Any], Mapping[str, Any]], tuple[torch.Tensor, dict[str, float]]]
#: key of the minibatch denominator (a float) in each micro-batch handed to a :data:`LossFn`
DENOMINATOR_KEY = "loss_denominator"


def accumulate_loss(forward: Callable[[dict[str, Any]], Mapping[str, Any]], loss_fn: LossFn,
                    batch: Mapping[str, Any], config: LossConfig, *, micro_batch_tokens: Optional[int] = None,
                    backward: bool = True) -> tuple[torch.Tensor, dict[str, float]]:
    """Gradient accumulation with any loss: for each micro-batch ``sub`` of ``batch``, ``out = forward(sub)``,
    ``loss, metrics = loss_fn(sub, out)`` and ``loss.backward()``. ``sub[DENOMINATOR_KEY]`` is the whole
    minibatch's denominator (``config.agg``/``config.norm_tokens``), which the loss must divide by for the
    micro-batch gradients to sum to the full-batch one. Returns the detached full-batch loss and the
    merged metrics."""
    denom = loss_denominator(batch["completion_mask"], config.agg, config.norm_tokens)
    total = torch.zeros(())
    parts = []
    for sub in iter_micro_batches(batch, micro_batch_tokens):
        sub[DENOMINATOR_KEY] = denom
        loss, metrics = loss_fn(sub, forward(sub))
        if backward and loss.requires_grad:
            loss.backward()
        total = total + loss.detach().cpu()
        parts.append(metrics)
    return total, merge_loss_metrics(parts)


def micro_batch_policy_loss(sub: Mapping[str, Any], out: Mapping[str, Any],
                            config: LossConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """:func:`loss.policy_loss` of one micro-batch ``sub`` (its ``old_logprobs``, ``advantages``,
    ``completion_mask`` and :data:`DENOMINATOR_KEY`, when present) given the forward output ``out``
    (``logp`` and optionally ``ref_logp``/``entropy``, each ``(b, t-1)``), and the sampler's log-probs
    ``sampler_logprobs`` where the batch has them (the behaviour log-probs recomputed by the learner)."""
    sampler = sub.get("sampler_logprobs")
    return policy_loss(out["logp"], sub["old_logprobs"].float(), sub["advantages"].float(),
                       sub["completion_mask"].float(), config, ref_logprobs=out.get("ref_logp"),
                       entropy=out.get("entropy"), denominator=sub.get(DENOMINATOR_KEY),
                       sampler_logprobs=sampler.float() if sampler is not None else None)


def accumulate_policy_loss(forward: Callable[[dict[str, Any]], Mapping[str, Any]],
                           batch: Mapping[str, Any], config: LossConfig, *,
                           micro_batch_tokens: Optional[int] = None,
                           backward: bool = True) -> tuple[torch.Tensor, dict[str, float]]:
    """:func:`accumulate_loss` with the AT-GRPO policy loss (:func:`micro_batch_policy_loss`): run
    ``forward`` (returns ``logp`` and optionally ``ref_logp``/``entropy``, each ``(b, t-1)``) and
    :func:`loss.policy_loss` on each micro-batch of ``batch``, calling ``backward()`` on each
    micro-batch loss (gradients accumulate in ``.grad``). Returns the detached full-batch loss
    and the merged metrics."""
    return accumulate_loss(forward, lambda sub, out: micro_batch_policy_loss(sub, out, config), batch, config,
                           micro_batch_tokens=micro_batch_tokens, backward=backward)


def micro_batch_logprobs(forward: Callable[[dict[str, Any]], torch.Tensor], batch: Mapping[str, Any], *,
                         micro_batch_tokens: Optional[int] = None) -> torch.Tensor:
    """``forward(micro_batch)`` (a ``(b, w-1)`` log-prob tensor) over the micro-batches of ``batch`` that
    :func:`accumulate_loss` would cut with the same ``micro_batch_tokens``, without gradients, put back in
    ``batch``'s rows: a float32 ``(B, T-1)`` tensor aligned with ``batch["completion_mask"]`` (0 past each
    micro-batch's width). What the learner's ``training.behavior_logprobs: learner`` pass runs."""
    mask = batch["completion_mask"]
    out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    with torch.no_grad():
        for idx, sub in _indexed_micro_batches(batch, micro_batch_tokens):
            lp = forward(sub).float()
            out[idx.to(out.device), :lp.shape[1]] = lp
    return out
