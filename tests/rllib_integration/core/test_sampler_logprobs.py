"""The sampler's log-probs against the learner's, Ray-free: the drift metrics and truncated importance sampling
(``LossConfig.tis_cap``) on hand-made tensors, the ``sampler_logprobs`` column of ``collate_samples``, and
micro-batched updates with that column equal to the full batch."""

import copy
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from rllib_integration.core.logprobs import completion_logprobs
from rllib_integration.core.loss import (SAMPLER_METRICS, LossConfig, collate_samples, policy_loss, sampler_drift,
                                         truncated_is_weights)
from rllib_integration.core.microbatch import (accumulate_policy_loss, iter_micro_batches, merge_loss_metrics,
                                               micro_batch_logprobs)

# Two sequences of 3 positions; the last position of sequence 1 is padding (its values must never count).
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
SAMPLER = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -1.0, -9.0]], dtype=torch.float64)
# the learner's log-probs minus the sampler's, per token: 0.5, -0.25, 0, 1, -2 (padding: 7)
DIFF = torch.tensor([[0.5, -0.25, 0.0], [1.0, -2.0, 7.0]], dtype=torch.float64)
LEARNER = SAMPLER + DIFF
ADV = torch.tensor([1.0, -1.0], dtype=torch.float64)


def test_drift_metrics_by_hand():
    d = [0.5, -0.25, 0.0, 1.0, -2.0]
    m = sampler_drift(LEARNER, SAMPLER, MASK)
    assert m["sampler_logp_diff_mean"] == pytest.approx(sum(abs(x) for x in d) / 5, abs=1e-12)
    assert m["sampler_logp_diff_max"] == pytest.approx(2.0, abs=1e-12)  # the padded 7 is ignored
    assert m["sampler_k3_kl"] == pytest.approx(sum(math.exp(x) - x - 1 for x in d) / 5, abs=1e-12)
    same = sampler_drift(SAMPLER, SAMPLER, MASK)
    assert same == {"sampler_logp_diff_mean": 0.0, "sampler_logp_diff_max": 0.0, "sampler_k3_kl": 0.0}
    assert sampler_drift(LEARNER, SAMPLER, torch.zeros_like(MASK))["sampler_logp_diff_max"] == 0.0


def test_policy_loss_reports_the_drift_from_the_sampler():
    """Without ``sampler_logprobs`` the old log-probs are the sampler's; with them, the drift is measured
    against them, not against ``old_logprobs``."""
    _, m = policy_loss(LEARNER, SAMPLER, ADV, MASK)
    assert {k: m[k] for k in SAMPLER_METRICS[:3]} == sampler_drift(LEARNER, SAMPLER, MASK)
    assert "tis_weight_mean" not in m
    _, m = policy_loss(LEARNER, LEARNER, ADV, MASK, sampler_logprobs=SAMPLER)  # old = the learner's own
    assert m["ratio_min"] == m["ratio_max"] == 1.0
    assert {k: m[k] for k in SAMPLER_METRICS[:3]} == sampler_drift(LEARNER, SAMPLER, MASK)


def test_truncated_importance_weights_by_hand():
    old = SAMPLER + torch.tensor([[math.log(0.5), 0.0, math.log(3.0)], [math.log(2.5), math.log(1.5), 5.0]],
                                 dtype=torch.float64)
    w, cut = truncated_is_weights(old, SAMPLER, 2.0)
    torch.testing.assert_close(w, torch.tensor([[0.5, 1.0, 2.0], [2.0, 1.5, 2.0]], dtype=torch.float64))
    assert cut.tolist() == [[False, False, True], [True, False, True]]
    assert not w.requires_grad
    with pytest.raises(ValueError, match="tis_cap"):
        truncated_is_weights(old, SAMPLER, 0.0)


def test_tis_weighs_the_policy_gradient_term_only():
    """``tis_cap``: each token's PPO term times ``min(exp(old - sampler), cap)``, detached; the KL and entropy
    terms are not weighted. Metrics: the mean weight and the fraction of truncated tokens."""
    old = SAMPLER + torch.tensor([[math.log(0.5), 0.0, math.log(3.0)], [math.log(2.5), math.log(1.5), 5.0]],
                                 dtype=torch.float64)
    lp = old.clone().requires_grad_(True)  # ratio 1: every PPO term is -A
    cfg = LossConfig(tis_cap=2.0, kl_coef=0.1, entropy_coef=0.01)
    ref, ent = old - 0.5, torch.full_like(old, 2.0)
    loss, m = policy_loss(lp, old, ADV, MASK, cfg, sampler_logprobs=SAMPLER, ref_logprobs=ref, entropy=ent)
    weights = [0.5, 1.0, 2.0, 2.0, 1.5]
    pg = [-1.0 * w for w in weights[:3]] + [1.0 * w for w in weights[3:]]
    kl = math.exp(-0.5) + 0.5 - 1.0  # k3 with ref - logp = -0.5 on every token
    assert loss.item() == pytest.approx(sum(pg) / 5 + 0.1 * kl - 0.01 * 2.0, abs=1e-12)
    assert m["pg_loss"] == pytest.approx(sum(pg) / 5, abs=1e-12)
    assert m["tis_weight_mean"] == pytest.approx(sum(weights) / 5, abs=1e-12)
    assert m["tis_truncated_frac"] == pytest.approx(2 / 5)  # 3.0 and 2.5 cut to 2 (the padded token ignored)
    loss.backward()
    # d pg/d logp = -A * ratio * w = -A * w at ratio 1; the KL's k3 gradient is 1 - exp(ref - logp)
    want = torch.tensor([[-w for w in weights[:3]], [w for w in weights[3:]] + [0.0]], dtype=torch.float64)
    want = (want + 0.1 * (1 - math.exp(-0.5)) * MASK) / 5
    torch.testing.assert_close(lp.grad, want)
    with pytest.raises(ValueError, match="sampler_logprobs"):
        policy_loss(lp, old, ADV, MASK, cfg, ref_logprobs=ref, entropy=ent)
    with pytest.raises(ValueError, match="tis_cap"):
        LossConfig(tis_cap=0.0)


def test_collate_samples_keeps_the_sampler_column():
    s1 = SimpleNamespace(prompt_token_ids=[5, 6, 7], completion_token_ids=[8, 9], logprobs=[-0.5, -1.5])
    s2 = SimpleNamespace(prompt_token_ids=[5], completion_token_ids=[4], logprobs=[-2.0])
    plain = collate_samples([s1, s2], pad_token_id=0)
    assert "sampler_logprobs" not in plain
    b = collate_samples([s1, s2], pad_token_id=0, behavior_logprobs=[[-0.25, -1.25], np.array([-3.0])])
    assert b["old_logprobs"].tolist() == [[0, 0, -0.25, -1.25], [-3.0, 0, 0, 0]]
    assert b["sampler_logprobs"].tolist() == plain["old_logprobs"].tolist() == [[0, 0, -0.5, -1.5], [-2.0, 0, 0, 0]]
    with pytest.raises(ValueError, match="behavior_logprobs"):
        collate_samples([s1, s2], pad_token_id=0, behavior_logprobs=[[-0.25], [-3.0]])


def _samples(n=8, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        p, c = int(rng.integers(2, 8)), int(rng.integers(1, 10))
        out.append(SimpleNamespace(prompt_token_ids=rng.integers(5, 500, p).tolist(),
                                   completion_token_ids=rng.integers(5, 500, c).tolist(),
                                   logprobs=(-rng.random(c) * 6).tolist()))
    return out


def test_micro_batched_update_with_the_sampler_column_equals_the_full_batch(tiny_model_path):
    """Learner-recomputed ``old_logprobs`` (micro-batched, no gradient) plus the ``sampler_logprobs`` column and
    ``tis_cap``: gradient accumulation over micro-batches gives the full batch's loss, gradients and metrics."""
    from rllib_integration.core.models import load_model

    model, _ = load_model(tiny_model_path)
    samples = _samples()

    def fwd_of(m):
        def fwd(sub):
            return {"logp": completion_logprobs(m, sub["input_ids"], sub["attention_mask"], sub["completion_mask"],
                                                chunk_tokens=8)}
        return fwd

    b = collate_samples(samples, pad_token_id=0)
    # the learner's behaviour log-probs, micro-batched; the sampler's differ from them by noise (an engine in
    # another dtype), so the TIS weights differ from 1 and some are truncated
    rng = np.random.default_rng(1)
    lp = micro_batch_logprobs(lambda sub: fwd_of(model)(sub)["logp"], b, micro_batch_tokens=30)
    assert not lp.requires_grad
    # put back in the batch's rows: one pass over the whole batch gives the same (up to float rounding: the
    # micro-batches' matrices have other shapes)
    torch.testing.assert_close(lp, fwd_of(model)(b)["logp"].detach(), atol=1e-5, rtol=0)
    behavior = [lp[i][b["completion_mask"][i] > 0] for i in range(len(samples))]
    for s, own in zip(samples, behavior, strict=True):
        s.logprobs = (own.numpy() + rng.normal(0, 0.5, len(own))).tolist()
    b = collate_samples(samples, pad_token_id=0, behavior_logprobs=behavior)
    b["advantages"] = torch.tensor(rng.standard_normal(len(samples)), dtype=torch.float32)
    cfg = LossConfig(tis_cap=1.5)

    full = copy.deepcopy(model)
    out = fwd_of(full)(b)
    loss_full, met_full = policy_loss(out["logp"], b["old_logprobs"], b["advantages"], b["completion_mask"], cfg,
                                      sampler_logprobs=b["sampler_logprobs"])
    loss_full.backward()
    loss_mb, met_mb = accumulate_policy_loss(fwd_of(model), b, cfg, micro_batch_tokens=30)
    subs = list(iter_micro_batches(b, 30))
    assert len(subs) > 2 and all(s["sampler_logprobs"].shape == s["completion_mask"].shape for s in subs)
    assert 0 < met_full["tis_truncated_frac"] < 1 and met_full["sampler_logp_diff_max"] > 0.5
    assert abs(float(loss_mb) - float(loss_full.detach())) < 1e-6
    assert set(met_mb) == set(met_full)
    for k in met_full:
        assert met_mb[k] == pytest.approx(met_full[k], abs=1e-6), k
    for (n, p), (_, q) in zip(model.named_parameters(), full.named_parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=0, msg=n)


def test_drift_max_merges_as_a_max():
    parts = [{"num_tokens": 2.0, "sampler_logp_diff_max": 0.5, "sampler_logp_diff_mean": 0.25},
             {"num_tokens": 6.0, "sampler_logp_diff_max": 0.1, "sampler_logp_diff_mean": 0.05}]
    merged = merge_loss_metrics(parts)
    assert merged["sampler_logp_diff_max"] == 0.5
    assert merged["sampler_logp_diff_mean"] == pytest.approx((2 * 0.25 + 6 * 0.05) / 8)
