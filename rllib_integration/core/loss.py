"""Token-level PPO-clip policy loss for AT-GRPO (DAPO-style asymmetric clipping).

Per completion token ``t`` of sequence ``i`` with advantage ``A`` (one per sequence,
broadcast over its tokens, or one per token):

    ratio = exp(logp - old_logp)
    pg    = max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high))
    loss_tok = pg + kl_coef * kl(logp, ref_logp) - entropy_coef * entropy

KL estimators (per token, ``d = ref_logp - logp``): ``"k1"`` = ``-d`` = ``logp - ref_logp``;
``"k3"`` = ``exp(d) - d - 1`` (Schulman's unbiased, always >= 0 estimator).

Aggregation (``agg``) over the ``(B, T)`` token matrix with ``mask`` (1 = completion token):

``"token-mean"``
    ``sum(loss * mask) / sum(mask)``: every token of the batch weighs the same (DAPO).
``"seq-mean-token-mean"``
    mean over sequences of ``sum_t(loss * mask) / sum_t(mask)``: every sequence weighs the
    same (original GRPO). Sequences without any completion token are left out.
``"seq-mean-token-sum-norm"``
    ``sum(loss * mask) / (B * norm)`` with the constant normaliser ``norm = norm_tokens``, as in
    Dr.GRPO: the per-sequence token *sum* divided by a constant (the learner passes the maximum
    generation length, ``max_new_tokens``), so length does not rescale the gradient. Without
    ``norm_tokens`` the padded width ``mask.shape[1]`` is used (a function-level fallback only).

Sampler and learner log-probs: ``old_logp`` (the behaviour log-probs of the ratio) are the sampler's as
generated, or the learner's own recomputed ones (a run's ``training.behavior_logprobs: learner``); the
sampler's then come as ``sampler_logprobs``. With ``LossConfig.tis_cap`` the policy-gradient term of each
token is multiplied by the truncated importance weight ``w = min(exp(old_logp - sampler_logp), tis_cap)``
(detached; :func:`truncated_is_weights`), as verl's TIS and TRL's ``vllm_importance_sampling_cap`` do:

    loss_tok = w * pg + kl_coef * kl(logp, ref_logp) - entropy_coef * entropy

and the metrics compare the learner's ``logp`` with the sampler's log-probs (:func:`sampler_drift`,
:data:`SAMPLER_METRICS`).

Micro-batches: every mode is ``numerator / denominator`` where the numerator is a sum over the
sequences of the batch. :func:`loss_denominator` gives the denominator of a whole optimizer
minibatch; passing it as ``denominator=`` to :func:`aggregate` / :func:`policy_loss` for each
micro-batch makes the micro-batch losses (and gradients) *sum* to the full-batch ones.

:class:`LossConfig` (defined in :mod:`.options`, where the run settings read its defaults) holds the
hyper-parameters; ``LossConfig()`` is a run's default loss.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from .choices import AGG_MODES, KL_ESTIMATORS
from .options import LossConfig

__all__ = ["LossConfig", "AGG_MODES", "KL_ESTIMATORS", "policy_loss", "aggregate", "kl_penalty",
           "token_logprobs_from_logits", "entropy_from_logits", "sequence_token_logprobs", "collate_samples",
           "loss_denominator", "sampler_drift", "truncated_is_weights", "SAMPLER_METRICS"]

#: the metrics of :func:`policy_loss` that compare the learner's log-probs with the sampler's (and the truncated
#: importance weights, with ``tis_cap``); a run reports them from each iteration's first optimizer step, where the
#: learner's weights are the ones the sampler had (``learner/<policy>/<name>``)
SAMPLER_METRICS = ("sampler_logp_diff_mean", "sampler_logp_diff_max", "sampler_k3_kl", "tis_weight_mean",
                   "tis_truncated_frac")


def loss_denominator(mask: torch.Tensor, agg: str = "token-mean", norm_tokens: Optional[int] = None) -> float:
    """The denominator :func:`aggregate` divides by for the whole ``(B, T)`` ``mask`` (see the module
    docstring): tokens (``token-mean``), sequences with a completion token (``seq-mean-token-mean``)
    or ``B * norm_tokens`` (``seq-mean-token-sum-norm``). At least 1."""
    if agg == "token-mean":
        return max(float((mask != 0).sum()), 1.0)
    if agg == "seq-mean-token-mean":
        return max(float(((mask != 0).sum(-1) > 0).sum()), 1.0)
    if agg == "seq-mean-token-sum-norm":
        return float(mask.shape[0] * (norm_tokens if norm_tokens is not None else mask.shape[-1]))
    raise ValueError(f"unknown aggregation {agg!r}; choose one of {AGG_MODES}")


def aggregate(values: torch.Tensor, mask: torch.Tensor, agg: str = "token-mean",
              norm_tokens: Optional[int] = None, denominator: Optional[float] = None) -> torch.Tensor:
    """Reduce a ``(B, T)`` per-token tensor to a scalar with one of :data:`AGG_MODES`.

    ``denominator`` (default: :func:`loss_denominator` of ``mask``) lets a micro-batch use its
    whole minibatch's denominator, so that micro-batch results add up to the minibatch's.
    """
    if denominator is None:
        denominator = loss_denominator(mask, agg, norm_tokens)
    mask = mask.to(values.dtype)
    if agg == "seq-mean-token-mean":
        num = ((values * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).sum()
    else:  # token-mean and seq-mean-token-sum-norm share the numerator
        num = (values * mask).sum()
    return num / float(denominator)


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token KL(pi || ref) estimate from sampled-token log-probs."""
    if estimator == "k1":
        return logprobs - ref_logprobs
    if estimator == "k3":
        d = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
        return torch.exp(d) - d - 1.0
    raise ValueError(f"unknown KL estimator {estimator!r}; choose one of {KL_ESTIMATORS}")


def sampler_drift(logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """How far the learner's log-probs of the sampled tokens are from the sampler's, over ``mask``'s tokens.

    With ``d = logprobs - sampler_logprobs`` (learner minus sampler) per completion token:
    ``sampler_logp_diff_mean`` the masked mean of ``|d|``, ``sampler_logp_diff_max`` its max (0 without
    tokens) and ``sampler_k3_kl`` the masked mean of ``exp(d) - d - 1``, the k3 estimate of
    KL(sampler || learner) from the sampler's tokens (verl's rollout/training mismatch ``k3_kl``; ``d``
    clamped to [-20, 20] there). All 0 when the two agree."""
    with torch.no_grad():
        m = mask != 0
        n = float(m.sum())
        d = (logprobs.detach().double() - sampler_logprobs.detach().double())[m]
        dc = d.clamp(-20.0, 20.0)
        return {"sampler_logp_diff_mean": float(d.abs().sum()) / n if n else 0.0,
                "sampler_logp_diff_max": float(d.abs().max()) if n else 0.0,
                "sampler_k3_kl": float((torch.exp(dc) - dc - 1.0).sum()) / n if n else 0.0}


def truncated_is_weights(old_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor,
                         cap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Truncated importance-sampling weights of the sampled tokens, ``min(exp(old - sampler), cap)``
    (detached), and the boolean tensor of the tokens whose weight was truncated (``exp(old - sampler) > cap``).

    ``old_logprobs`` are the behaviour log-probs the PPO ratio divides by (the learner's recomputed ones),
    ``sampler_logprobs`` those of the engine that generated the tokens: the weight corrects the policy
    gradient for sampling from the sampler rather than the learner's policy (verl's TIS, TRL's
    ``vllm_importance_sampling_correction``); the cap bounds its variance."""
    if not cap > 0:
        raise ValueError(f"tis_cap must be > 0, got {cap!r}")
    with torch.no_grad():
        raw = torch.exp(old_logprobs.detach() - sampler_logprobs.detach())
        return raw.clamp(max=float(cap)), raw > float(cap)


def token_logprobs_from_logits(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``log softmax(logits)[..., targets]`` in float32, shape of ``targets``."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Per-position entropy of the categorical distribution given by ``logits``."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def sequence_token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                            with_entropy: bool = False):
    """Log-probs of ``input_ids[:, 1:]`` under ``model`` (shape ``(B, T-1)``), optionally entropies.

    Works with left padding: position ids are derived from the attention mask.
    """
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
    logits = out.logits[:, :-1]
    lp = token_logprobs_from_logits(logits, input_ids[:, 1:])
    if with_entropy:
        return lp, entropy_from_logits(logits)
    return lp


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: Optional[LossConfig] = None,
    *,
    ref_logprobs: Optional[torch.Tensor] = None,
    entropy: Optional[torch.Tensor] = None,
    denominator: Optional[float] = None,
    sampler_logprobs: Optional[torch.Tensor] = None,
    **overrides,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO-clip loss (scalar tensor, differentiable w.r.t. ``logprobs``/``entropy``) and metrics.

    Shapes: ``logprobs``, ``old_logprobs``, ``mask``, ``ref_logprobs``, ``entropy``: ``(B, T)``;
    ``advantages``: ``(B,)`` (one per sequence) or ``(B, T)``. Keyword ``overrides`` replace
    fields of ``config`` (e.g. ``policy_loss(..., clip_high=0.28, agg="token-mean")``).
    ``denominator``: the aggregation denominator of the whole minibatch when ``logprobs`` is one
    micro-batch of it (:func:`loss_denominator`); the loss and ``loss``/``pg_loss``/``kl``/
    ``entropy`` metrics are then this micro-batch's share, and the shares sum to the full values.
    ``sampler_logprobs`` ``(B, T)``: the sampler's log-probs where ``old_logprobs`` are not them (the
    learner's recomputed behaviour log-probs); default ``old_logprobs``. ``config.tis_cap`` needs them.

    Metrics (python floats, masked means over completion tokens): ``pg_loss``, ``clip_frac``
    (tokens where the clipped term is the active one), ``clip_frac_low``/``clip_frac_high``
    (ratio below ``1-clip_low`` with ``A<0`` / above ``1+clip_high`` with ``A>0``),
    ``ratio_mean``/``ratio_min``/``ratio_max``, ``approx_kl_old`` (k3 of old vs new),
    ``kl`` (to the reference; 0 without one), ``entropy`` (if given), ``loss``; the drift of ``logprobs``
    from the sampler's, :func:`sampler_drift` (``sampler_logp_diff_mean``, ``sampler_logp_diff_max``,
    ``sampler_k3_kl``); with ``tis_cap``, ``tis_weight_mean`` (the mean truncated weight) and
    ``tis_truncated_frac`` (the fraction of tokens whose weight was cut to the cap).
    """
    cfg = config or LossConfig()
    if overrides:
        cfg = LossConfig(**{**cfg.__dict__, **overrides})
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    advantages = advantages.to(logprobs.dtype).expand_as(logprobs)
    mask_f = mask.to(logprobs.dtype)

    log_ratio = (logprobs - old_logprobs).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    pg1 = -advantages * ratio
    pg2 = -advantages * ratio.clamp(1.0 - cfg.clip_low, 1.0 + cfg.clip_high)
    pg = torch.maximum(pg1, pg2)
    tis = None
    if cfg.tis_cap is not None:
        if sampler_logprobs is None:
            raise ValueError("tis_cap weighs each token by exp(old_logprobs - sampler_logprobs): pass sampler_logprobs "
                             "(the sampler's log-probs, when old_logprobs are the learner's recomputed ones)")
        tis = truncated_is_weights(old_logprobs, sampler_logprobs, cfg.tis_cap)
        pg = pg * tis[0].to(pg.dtype)
    loss_tok = pg
    pg_loss = aggregate(pg, mask_f, cfg.agg, cfg.norm_tokens, denominator)

    kl_val = torch.zeros((), dtype=logprobs.dtype)
    if ref_logprobs is not None:
        kl_tok = kl_penalty(logprobs, ref_logprobs, cfg.kl_estimator)
        kl_val = aggregate(kl_tok, mask_f, cfg.agg, cfg.norm_tokens, denominator)
        if cfg.kl_coef:
            loss_tok = loss_tok + cfg.kl_coef * kl_tok
    elif cfg.kl_coef:
        raise ValueError("kl_coef > 0 needs ref_logprobs (log-probs of the same tokens under the reference model)")
    ent_val = None
    if entropy is not None:
        ent_val = aggregate(entropy, mask_f, cfg.agg, cfg.norm_tokens, denominator)
        if cfg.entropy_coef:
            loss_tok = loss_tok - cfg.entropy_coef * entropy
    elif cfg.entropy_coef:
        raise ValueError("entropy_coef > 0 needs the per-token entropy (see entropy_from_logits)")
    loss = aggregate(loss_tok, mask_f, cfg.agg, cfg.norm_tokens, denominator)

    with torch.no_grad():
        n = mask_f.sum().clamp(min=1.0)
        m = mask_f > 0

        def mmean(x: torch.Tensor) -> float:
            return float((x.to(mask_f.dtype) * mask_f).sum() / n)

        r_sel = ratio[m]
        metrics = {
            "loss": float(loss.detach()),
            "pg_loss": float(pg_loss.detach()),
            "clip_frac": mmean(pg2 > pg1),
            "clip_frac_low": mmean((ratio < 1.0 - cfg.clip_low) & (advantages < 0)),
            "clip_frac_high": mmean((ratio > 1.0 + cfg.clip_high) & (advantages > 0)),
            "ratio_mean": mmean(ratio),
            "ratio_min": float(r_sel.min()) if r_sel.numel() else 1.0,
            "ratio_max": float(r_sel.max()) if r_sel.numel() else 1.0,
            "approx_kl_old": mmean(torch.exp(-log_ratio) + log_ratio - 1.0),
            "kl": float(kl_val.detach()),
            "num_tokens": float(mask_f.sum()),
        }
        if ent_val is not None:
            metrics["entropy"] = float(ent_val.detach())
        metrics.update(sampler_drift(logprobs, old_logprobs if sampler_logprobs is None else sampler_logprobs, m))
        if tis is not None:
            metrics["tis_weight_mean"] = mmean(tis[0])
            metrics["tis_truncated_frac"] = mmean(tis[1])
    return loss, metrics


def collate_samples(samples, pad_token_id: int, device=None, *,
                    behavior_logprobs: Optional[Sequence[Sequence[float]]] = None) -> dict[str, torch.Tensor]:
    """Right-padded training tensors from rollout samples (anything with ``prompt_token_ids``,
    ``completion_token_ids`` and ``logprobs``).

    Returns ``input_ids``/``attention_mask`` of shape ``(B, T)`` holding ``prompt + completion``,
    and, aligned with :func:`sequence_token_logprobs` output ``(B, T-1)`` (position ``t``
    predicts token ``t+1``), ``completion_mask`` (1 on completion tokens) and
    ``old_logprobs`` (the sampler's log-probs there, 0 elsewhere).

    ``behavior_logprobs``: per sample, other behaviour log-probs of its completion tokens (the learner's
    recomputed ones, a run's ``training.behavior_logprobs: learner``); they become ``old_logprobs`` and the
    sampler's go to an extra column ``sampler_logprobs`` (same layout).
    """
    seqs = [list(s.prompt_token_ids) + list(s.completion_token_ids) for s in samples]
    T = max(len(x) for x in seqs)
    B = len(seqs)
    input_ids = torch.full((B, T), int(pad_token_id), dtype=torch.long)
    attn = torch.zeros((B, T), dtype=torch.long)
    cmask = torch.zeros((B, T - 1), dtype=torch.float32)
    old = torch.zeros((B, T - 1), dtype=torch.float32)
    sampler = torch.zeros((B, T - 1), dtype=torch.float32) if behavior_logprobs is not None else old
    if behavior_logprobs is not None and len(behavior_logprobs) != B:
        raise ValueError(f"behavior_logprobs: one sequence per sample ({B}), got {len(behavior_logprobs)}")
    for b, (s, ids) in enumerate(zip(samples, seqs, strict=True)):
        input_ids[b, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        attn[b, :len(ids)] = 1
        p, c = len(s.prompt_token_ids), len(s.completion_token_ids)
        if c:
            cmask[b, p - 1:p - 1 + c] = 1.0
            sampler[b, p - 1:p - 1 + c] = torch.tensor(list(s.logprobs), dtype=torch.float32)
            if behavior_logprobs is not None:
                behaviour = torch.as_tensor(behavior_logprobs[b], dtype=torch.float32).reshape(-1)
                if behaviour.numel() != c:
                    raise ValueError(f"behavior_logprobs[{b}] has {behaviour.numel()} log-probs for {c} completion "
                                     "tokens")
                old[b, p - 1:p - 1 + c] = behaviour
    out = {"input_ids": input_ids, "attention_mask": attn, "completion_mask": cmask, "old_logprobs": old}
    if behavior_logprobs is not None:
        out["sampler_logprobs"] = sampler
    return {k: v.to(device) for k, v in out.items()} if device is not None else out
