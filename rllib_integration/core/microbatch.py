"""Gradient accumulation over token-bounded micro-batches (Ray-free; used by the learner).

An optimizer minibatch (``input_ids``/``attention_mask`` ``(B, T)``, right-padded, and the
``(B, T-1)`` columns aligned with ``input_ids[:, 1:]``) is split into micro-batches whose padded
size ``rows x width`` stays within ``micro_batch_tokens``. Rows are packed longest first, and each
micro-batch is cut to its own longest row, so padding costs little. Each micro-batch's loss uses
the *whole minibatch's* aggregation denominator (:func:`loss.loss_denominator`), so the summed
micro-batch gradients equal the full-batch gradient (what one optimizer step then applies).
:func:`micro_batch_logprobs` runs a forward pass (no gradient) over the same micro-batches and puts
the log-probs back in the minibatch's rows (the learner's recomputed behaviour log-probs).

With ``share_prompts`` (a run's ``training.share_prompts``) the rows of one prompt (a GRPO group's K
candidates, :func:`.logprobs.prompt_groups`) are packed next to each other, groups with the longest row
first, and a micro-batch's size is what :func:`.logprobs.completion_logprobs` with ``share_prompts`` then runs:
``prompts x longest prompt + rows x longest completion`` when a prompt of it is shared (each prompt once),
``rows x longest row`` otherwise. The forward must share prompts too (``completion_logprobs(...,
share_prompts=True)``; the learner's module does with the same setting).

>>> import torch
>>> mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
>>> [idx.tolist() for idx in micro_batch_indices(mask, 8)]
[[2, 0], [1]]
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Optional

import torch

from .logprobs import PromptGroups, prompt_groups
from .loss import LossConfig, loss_denominator, policy_loss
from .options import DEFAULT_SHARE_PROMPTS

__all__ = ["micro_batch_indices", "iter_micro_batches", "merge_loss_metrics", "accumulate_loss",
           "accumulate_policy_loss", "micro_batch_policy_loss", "micro_batch_logprobs", "DENOMINATOR_KEY", "LossFn"]

_SUMMED = ("loss", "pg_loss", "kl", "entropy", "num_tokens")
_MIN, _MAX = ("ratio_min",), ("ratio_max", "sampler_logp_diff_max")


def micro_batch_indices(attention_mask: torch.Tensor, micro_batch_tokens: Optional[int],
                        groups: Optional[PromptGroups] = None) -> list[torch.Tensor]:
    """Row indices of each micro-batch: longest rows first, ``rows * longest <= micro_batch_tokens``
    (a row longer than the budget goes alone). ``None`` or ``0``: one micro-batch of all rows.

    ``groups`` (:func:`.logprobs.prompt_groups` of the batch): the rows of one prompt packed together and the
    size counted as the shared-prompt forward runs it (module docstring)."""
    lengths = attention_mask.long().sum(-1).cpu()
    n = lengths.shape[0]
    if not micro_batch_tokens:
        return [torch.arange(n)] if n else []
    if micro_batch_tokens < 0:
        raise ValueError(f"micro_batch_tokens must be >= 0 (0 = no micro-batching), got {micro_batch_tokens}")
    if groups is not None:
        return _shared_prompt_micro_batches(lengths, groups, micro_batch_tokens)
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


#: the size state of a micro-batch being packed: (rows, its prompts, rows with a prompt, longest prompt,
#: longest completion input, longest row)
_Part = tuple[int, frozenset, int, int, int, int]
_EMPTY: _Part = (0, frozenset(), 0, 0, 0, 0)


def _plus(part: _Part, unit: int, length: int, plen: int) -> _Part:
    rows, prompts, active, pmax, smax, width = part
    if plen:  # a row with completion tokens: its prompt, and its completion's inputs (all but the last token)
        prompts, active, pmax, smax = prompts | {unit}, active + 1, max(pmax, plen), max(smax, length - 1 - plen)
    return rows + 1, prompts, active, pmax, smax, max(width, length, 1)


def _tokens(part: _Part) -> int:
    """Padded tokens the forward runs on a micro-batch: shared (some prompt twice) or per row."""
    rows, prompts, active, pmax, smax, width = part
    return len(prompts) * pmax + rows * smax if len(prompts) < active else rows * width


def _shared_prompt_micro_batches(lengths: torch.Tensor, groups: PromptGroups, budget: int) -> list[torch.Tensor]:
    """:func:`micro_batch_indices` with ``groups``: prompts whose longest row is longest first, each prompt's
    rows together (longest first). A prompt that does not fit in the current micro-batch but fits in one of its
    own starts a new one; a prompt larger than the budget is split row by row (its prompt then runs in each
    part). Size: :func:`_tokens` (``prompts x longest prompt + rows x longest completion`` when some prompt has
    two rows, else ``rows x longest row``)."""
    group, plen = groups.group.cpu(), groups.prompt_len.cpu()
    n = lengths.shape[0]
    if not n:
        return []
    # unit of each row: its prompt, or a unit of its own (rows without completion tokens)
    unit = torch.where(group >= 0, group, groups.n_prompts + torch.arange(n))
    longest = torch.zeros(int(unit.max()) + 1, dtype=torch.long).scatter_reduce(0, unit, lengths, reduce="amax")
    # sort keys, most significant last: row length, then unit, then the unit's longest row (all descending)
    order = torch.argsort(lengths, descending=True, stable=True)
    order = order[torch.argsort(unit[order], stable=True)]
    order = order[torch.argsort(longest[unit[order]], descending=True, stable=True)]
    units: list[list[int]] = []
    for i in order.tolist():
        if units and int(unit[units[-1][0]]) == int(unit[i]):
            units[-1].append(i)
        else:
            units.append([i])
    row = {i: (int(unit[i]), int(lengths[i]), int(plen[i])) for i in range(n)}
    out: list[torch.Tensor] = []
    cur: list[int] = []
    part = _EMPTY
    for rows in units:
        whole, alone = part, _EMPTY
        for i in rows:
            whole, alone = _plus(whole, *row[i]), _plus(alone, *row[i])
        if cur and _tokens(whole) > budget and _tokens(alone) <= budget:
            out.append(torch.tensor(cur))
            cur, part = [], _EMPTY
        for i in rows:
            nxt = _plus(part, *row[i])
            if cur and _tokens(nxt) > budget:
                out.append(torch.tensor(cur))
                cur, nxt = [], _plus(_EMPTY, *row[i])
            cur.append(i)
            part = nxt
    if cur:
        out.append(torch.tensor(cur))
    return out


def iter_micro_batches(batch: Mapping[str, Any], micro_batch_tokens: Optional[int], *,
                       share_prompts: bool = DEFAULT_SHARE_PROMPTS) -> Iterator[dict[str, Any]]:
    """Sub-batches of ``batch`` (rows of :func:`micro_batch_indices`, columns cut to their longest row).

    Columns of width ``T`` (``input_ids``, ``attention_mask``) keep ``width`` columns, those of width
    ``T-1`` keep ``width-1``; 1-D columns (``advantages``) are only row-sliced. ``share_prompts``: cut for a
    forward that runs each shared prompt once (module docstring)."""
    for _, sub in _indexed_micro_batches(batch, micro_batch_tokens, share_prompts):
        yield sub


def _indexed_micro_batches(batch: Mapping[str, Any], micro_batch_tokens: Optional[int],
                           share_prompts: bool) -> Iterator[tuple[torch.Tensor, dict[str, Any]]]:
    """:func:`iter_micro_batches` with each micro-batch's row indices in ``batch``."""
    mask = batch["attention_mask"]
    T = mask.shape[1]
    lengths = mask.long().sum(-1)
    groups = None
    if share_prompts and micro_batch_tokens and "completion_mask" in batch:
        groups = prompt_groups(batch["input_ids"], mask, batch["completion_mask"])
    for idx in micro_batch_indices(mask, micro_batch_tokens, groups):
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
                    backward: bool = True,
                    share_prompts: bool = DEFAULT_SHARE_PROMPTS) -> tuple[torch.Tensor, dict[str, float]]:
    """Gradient accumulation with any loss: for each micro-batch ``sub`` of ``batch``, ``out = forward(sub)``,
    ``loss, metrics = loss_fn(sub, out)`` and ``loss.backward()``. ``sub[DENOMINATOR_KEY]`` is the whole
    minibatch's denominator (``config.agg``/``config.norm_tokens``), which the loss must divide by for the
    micro-batch gradients to sum to the full-batch one. ``share_prompts``: micro-batches cut for a ``forward``
    that runs each shared prompt once (module docstring). Returns the detached full-batch loss and the merged
    metrics."""
    denom = loss_denominator(batch["completion_mask"], config.agg, config.norm_tokens)
    total = torch.zeros(())
    parts = []
    for sub in iter_micro_batches(batch, micro_batch_tokens, share_prompts=share_prompts):
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
                           micro_batch_tokens: Optional[int] = None, backward: bool = True,
                           share_prompts: bool = DEFAULT_SHARE_PROMPTS) -> tuple[torch.Tensor, dict[str, float]]:
    """:func:`accumulate_loss` with the AT-GRPO policy loss (:func:`micro_batch_policy_loss`): run
    ``forward`` (returns ``logp`` and optionally ``ref_logp``/``entropy``, each ``(b, t-1)``) and
    :func:`loss.policy_loss` on each micro-batch of ``batch``, calling ``backward()`` on each
    micro-batch loss (gradients accumulate in ``.grad``). Returns the detached full-batch loss
    and the merged metrics."""
    return accumulate_loss(forward, lambda sub, out: micro_batch_policy_loss(sub, out, config), batch, config,
                           micro_batch_tokens=micro_batch_tokens, backward=backward, share_prompts=share_prompts)


def micro_batch_logprobs(forward: Callable[[dict[str, Any]], torch.Tensor], batch: Mapping[str, Any], *,
                         micro_batch_tokens: Optional[int] = None,
                         share_prompts: bool = DEFAULT_SHARE_PROMPTS) -> torch.Tensor:
    """``forward(micro_batch)`` (a ``(b, w-1)`` log-prob tensor) over the micro-batches of ``batch`` that
    :func:`accumulate_loss` would cut with the same ``micro_batch_tokens`` and ``share_prompts``, without
    gradients, put back in ``batch``'s rows: a float32 ``(B, T-1)`` tensor aligned with ``batch["completion_mask"]``
    (0 past each micro-batch's width). What the learner's ``training.behavior_logprobs: learner`` pass runs."""
    mask = batch["completion_mask"]
    out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    with torch.no_grad():
        for idx, sub in _indexed_micro_batches(batch, micro_batch_tokens, share_prompts):
            lp = forward(sub).float()
            out[idx.to(out.device), :lp.shape[1]] = lp
    return out
