"""GPU-scale learner pieces on CPU: chunked completion log-probs, micro-batched gradient
accumulation, mixed precision, bf16-safe state encoding, the loss denominator."""

import copy

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rllib_integration.core.logprobs import completion_logprobs
from rllib_integration.core.loss import LossConfig, loss_denominator, policy_loss, sequence_token_logprobs
from rllib_integration.core.microbatch import accumulate_policy_loss, iter_micro_batches, micro_batch_indices
from rllib_integration.core.tensor_codec import decode, encode


def _model(vocab=97, hidden=32, layers=2, seed=0):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=False)
    return LlamaForCausalLM(cfg).float()


def _batch(B=6, T=20, vocab=97, seed=1):
    """Right-padded batch like loss.collate_samples: prompt then completion, random lengths."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (B, T), generator=g)
    attn = torch.zeros(B, T, dtype=torch.long)
    cmask = torch.zeros(B, T - 1)
    for b in range(B):
        p = int(torch.randint(2, 6, (1,), generator=g))
        c = int(torch.randint(1, T - p + 1, (1,), generator=g))
        attn[b, :p + c] = 1
        cmask[b, p - 1:p - 1 + c] = 1
        ids[b, p + c:] = 0
    return {"input_ids": ids, "attention_mask": attn, "completion_mask": cmask,
            "old_logprobs": -torch.rand(B, T - 1, generator=g) * 3 * cmask,
            "advantages": torch.randn(B, generator=g)}


# ---------------------------------------------------------------- chunked log-probs
@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_completion_logprobs_match_full_vocab_path(chunk):
    model, b = _model(), _batch()
    ref_lp, ref_ent = sequence_token_logprobs(model, b["input_ids"], b["attention_mask"], with_entropy=True)
    lp, ent = completion_logprobs(model, b["input_ids"], b["attention_mask"], b["completion_mask"],
                                  with_entropy=True, chunk_tokens=chunk)
    m = b["completion_mask"].bool()
    torch.testing.assert_close(lp[m], ref_lp[m], atol=1e-5, rtol=0)
    torch.testing.assert_close(ent[m], ref_ent[m], atol=1e-5, rtol=0)
    assert (lp[~m] == 0).all() and (ent[~m] == 0).all()


def test_completion_logprobs_gradients_match():
    model, b = _model(), _batch()
    m = b["completion_mask"]
    ref = copy.deepcopy(model)
    (sequence_token_logprobs(ref, b["input_ids"], b["attention_mask"]) * m).sum().backward()
    completion_logprobs(model, b["input_ids"], b["attention_mask"], m, chunk_tokens=5).sum().backward()
    for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=n)


def test_completion_logprobs_rejects_misaligned_mask():
    model, b = _model(), _batch()
    with pytest.raises(ValueError, match="completion_mask must have shape"):
        completion_logprobs(model, b["input_ids"], b["attention_mask"], b["attention_mask"])


def _peak_bytes(fn) -> int:
    """Peak bytes allocated by torch CPU tensors while ``fn`` runs (torch.profiler memory events)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    cur = peak = 0
    mem = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    for ev in sorted(mem, key=lambda e: e.start_ns()):
        cur += ev.nbytes()  # allocations positive, frees negative
        peak = max(peak, cur)
    return peak


def test_logprob_peak_memory_follows_micro_batch_not_batch():
    """Large vocabulary: the old full-vocab forward grows with the batch; micro-batches of chunked
    log-probs keep the peak flat and below one micro-batch's float32 logits."""
    vocab = 16384
    model = _model(vocab=vocab, hidden=16, layers=1)
    cfg = LossConfig()

    def step(B, budget, old=False):
        b = _batch(B=B, T=48, vocab=vocab, seed=B)

        def fwd(sub):
            if old:
                return {"logp": sequence_token_logprobs(model, sub["input_ids"], sub["attention_mask"])}
            return {"logp": completion_logprobs(model, sub["input_ids"], sub["attention_mask"],
                                                sub["completion_mask"], chunk_tokens=16)}
        return lambda: accumulate_policy_loss(fwd, b, cfg, micro_batch_tokens=budget)

    small, big = _peak_bytes(step(4, 4 * 48)), _peak_bytes(step(32, 4 * 48))
    old_small, old_big = _peak_bytes(step(4, None, old=True)), _peak_bytes(step(32, None, old=True))
    model.zero_grad()
    logits_bytes = 4 * 48 * vocab * 4  # one micro-batch's (4, 48, V) float32 logits
    assert big < 1.3 * small, (small, big)  # 8x the batch, about the same peak
    assert big < logits_bytes, (big, logits_bytes)
    assert old_big > 5 * old_small, (old_small, old_big)  # the old path: grows with the batch
    assert old_big > 10 * big, (old_big, big)


# ---------------------------------------------------------------- micro-batch accumulation
def test_micro_batch_indices_respect_budget():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    parts = micro_batch_indices(mask, 6)
    lengths = mask.sum(-1)
    assert sorted(i for p in parts for i in p.tolist()) == [0, 1, 2, 3]
    for p in parts:
        assert len(p) == 1 or len(p) * int(lengths[p].max()) <= 6
    assert [p.tolist() for p in micro_batch_indices(mask, None)] == [[0, 1, 2, 3]]
    with pytest.raises(ValueError, match="micro_batch_tokens"):
        micro_batch_indices(mask, -1)


def test_micro_batches_cut_columns_to_their_longest_row():
    b = _batch(B=8, T=30)
    for sub in iter_micro_batches(b, 40):
        w = sub["input_ids"].shape[1]
        assert sub["completion_mask"].shape[1] == w - 1
        assert int(sub["attention_mask"].sum(-1).max()) == w


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_micro_batched_gradients_equal_full_batch(agg):
    model, b = _model(), _batch(B=8, T=24)
    cfg = LossConfig(agg=agg, norm_tokens=32, entropy_coef=0.01)

    def fwd_of(m):
        def fwd(sub):
            lp, ent = completion_logprobs(m, sub["input_ids"], sub["attention_mask"], sub["completion_mask"],
                                          with_entropy=True, chunk_tokens=16)
            return {"logp": lp, "entropy": ent}
        return fwd

    full = copy.deepcopy(model)
    out = fwd_of(full)(b)
    loss_full, met_full = policy_loss(out["logp"], b["old_logprobs"], b["advantages"], b["completion_mask"], cfg,
                                      entropy=out["entropy"])
    loss_full.backward()
    loss_mb, met_mb = accumulate_policy_loss(fwd_of(model), b, cfg, micro_batch_tokens=40)
    assert len(list(iter_micro_batches(b, 40))) > 2
    assert abs(float(loss_mb) - float(loss_full.detach())) < 1e-6
    for k in ("loss", "pg_loss", "entropy", "num_tokens", "ratio_mean", "ratio_min", "ratio_max", "clip_frac"):
        assert met_mb[k] == pytest.approx(met_full[k], abs=1e-6), k
    for (n, p), (_, q) in zip(model.named_parameters(), full.named_parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=0, msg=n)


def test_sum_norm_divides_by_the_constant_not_the_batch_width():
    b = _batch(B=4, T=24)
    assert loss_denominator(b["completion_mask"], "seq-mean-token-sum-norm", 256) == 4 * 256
    # the same sequences padded wider give the same loss with a constant normaliser
    wide = torch.nn.functional.pad(b["completion_mask"], (0, 40))
    lp = torch.nn.functional.pad(b["old_logprobs"], (0, 40))
    a = policy_loss(b["old_logprobs"], b["old_logprobs"], b["advantages"], b["completion_mask"],
                    agg="seq-mean-token-sum-norm", norm_tokens=256)[0]
    w = policy_loss(lp, lp, b["advantages"], wide, agg="seq-mean-token-sum-norm", norm_tokens=256)[0]
    assert float(a) == pytest.approx(float(w), abs=1e-7)


# ---------------------------------------------------------------- mixed precision, state
def test_fp32_master_weights_keep_small_updates():
    """One Adam step at lr 1e-6: bf16 weights round most updates away; fp32 master weights do not."""
    model = _model()
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    for m in (model, bf16):
        opt = torch.optim.Adam(m.parameters(), lr=1e-6)
        for p in m.parameters():
            p.grad = torch.ones_like(p)
        before = [p.detach().clone() for p in m.parameters()]
        opt.step()
        m.changed = sum(int((p != q).sum()) for p, q in zip(m.parameters(), before, strict=True))
    total = sum(p.numel() for p in model.parameters())
    assert model.changed > 0.99 * total
    assert bf16.changed < 0.5 * total


def test_ratio_is_one_before_first_update_under_autocast(tiny_model_path):
    """Sampler in bf16 (HF backend), learner with fp32 master weights + bf16 autocast: ratio ~ 1."""
    from rllib_integration.core.backends import GenerationRequest, HFBackend, SamplingParams
    from rllib_integration.core.loss import collate_samples
    from rllib_integration.core.models import load_model

    be = HFBackend({"p": tiny_model_path}, device="cpu", dtype=torch.bfloat16)
    comps = be.generate([GenerationRequest("p", prompt=f"task {i}:") for i in range(4)],
                        SamplingParams(max_new_tokens=12, n=2, seed=3))
    from types import SimpleNamespace

    samples = [SimpleNamespace(prompt_token_ids=c.prompt_token_ids, completion_token_ids=c.token_ids,
                               logprobs=c.logprobs) for cs in comps for c in cs]
    b = collate_samples(samples, pad_token_id=0)
    model, _ = load_model(tiny_model_path, dtype=torch.float32, device="cpu")
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        lp = completion_logprobs(model, b["input_ids"], b["attention_mask"], b["completion_mask"])
    m = b["completion_mask"].bool()
    ratio = torch.exp(lp[m] - b["old_logprobs"][m])
    assert float((ratio - 1).abs().mean()) < 0.02, ratio
    assert float((ratio - 1).abs().max()) < 0.1, ratio


def test_tensor_codec_round_trips_bf16_exactly():
    opt_state = {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(5, 3).to(torch.bfloat16),
                               "exp_avg_sq": torch.rand(5, 3).to(torch.bfloat16)}},
                 "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0]}]}
    enc = encode(opt_state)
    import pickle

    enc = pickle.loads(pickle.dumps(enc))
    assert all(isinstance(v, (np.ndarray, dict)) for v in enc["state"][0].values())
    dec = decode(enc, device="cpu")
    for k, v in opt_state["state"][0].items():
        assert dec["state"][0][k].dtype == v.dtype
        assert torch.equal(dec["state"][0][k], v), k
    assert dec["param_groups"] == opt_state["param_groups"]
    with pytest.raises(ValueError, match="unknown tagged dtype"):
        decode({"__torch_dtype__": "float8", "bits": np.zeros(2, dtype=np.int8)})


def test_tensor_codec_snapshots_host_tensors():
    """encode/host_copy never share memory with a host tensor (later updates do not leak into a saved
    state); a device tensor's .cpu() is the one copy (not checkable on CPU, hence data_ptr here)."""
    from rllib_integration.core.tensor_codec import host_copy

    w32, w16 = torch.randn(4, 3), torch.randn(4, 3).to(torch.bfloat16)
    enc = encode({"a": w32, "b": w16})
    h = host_copy(w32)
    before32, before16 = w32.clone(), w16.clone()
    w32.add_(1.0)
    w16.add_(1.0)
    assert h.data_ptr() != w32.data_ptr() and torch.equal(h, before32)
    assert torch.equal(torch.from_numpy(enc["a"]), before32)
    assert torch.equal(decode(enc)["b"], before16)
