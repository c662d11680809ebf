"""Shared prompts (``training.share_prompts``): a prompt held by several rows of a micro-batch runs once, the
completions run on its KV cache, and the log-probs, the loss and every gradient equal the per-row pass's.

Tolerances (fp32, CPU, the tiny model): log-probs and the loss within ``TOL`` = 1e-5 absolute (measured: 9.5e-7,
one float32 step at |log-prob| ~6; the loss 0), each gradient tensor within ``GRAD_RTOL`` = 1e-5 of its largest
entry (measured: 6e-7 full, 1.1e-6 LoRA). A prompt run at the wrong positions (off by one), or the completions run
without the prompt's attention mask, moves the log-probs by over 100 x ``TOL`` (``test_a_wrong_prefix_is_caught``),
so the equality tests fail on them (checked by editing the code that way: 1.4e-3 and 0.14).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch

from rllib_integration.core.logprobs import completion_logprobs, prompt_groups, split_lm_head
from rllib_integration.core.loss import LossConfig, collate_samples
from rllib_integration.core.microbatch import (accumulate_policy_loss, micro_batch_indices,
                                               micro_batch_logprobs)

TOL, GRAD_RTOL = 1e-5, 1e-5
#: (prompt length, candidates): three groups of K = 2..4 and two prompts of one sample each
GROUPS = [(7, 3), (12, 4), (5, 1), (9, 2), (4, 1)]


def _samples(seed: int = 0, groups=GROUPS):
    g = torch.Generator().manual_seed(seed)

    def ids(n):
        return torch.randint(5, 500, (n,), generator=g).tolist()

    out = []
    for p, k in groups:
        prompt = ids(p)
        for _ in range(k):  # mixed completion lengths under one prompt (right padding)
            c = int(torch.randint(1, 10, (1,), generator=g))
            out.append(SimpleNamespace(prompt_token_ids=prompt, completion_token_ids=ids(c),
                                       logprobs=(-torch.rand(c, generator=g) * 6).tolist()))
    out.append(SimpleNamespace(prompt_token_ids=ids(6), completion_token_ids=[], logprobs=[]))  # nothing to score
    return out


def _batch(seed: int = 0, groups=GROUPS):
    b = collate_samples(_samples(seed, groups), pad_token_id=0)
    b["advantages"] = torch.randn(b["input_ids"].shape[0], generator=torch.Generator().manual_seed(seed + 1))
    return b


def _model(path, lora: bool):
    from rllib_integration.core.models import load_model

    model, _ = load_model(path)
    if lora:
        from peft import LoraConfig, get_peft_model

        torch.manual_seed(0)
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj",
                                                                                    "o_proj"]))
        with torch.no_grad():  # peft starts B at 0 (A's gradient 0 too): give the adapter an effect
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.2)
    return model.train()


def _update(model, batch, share: bool, budget=None):
    """One accumulated update: the log-probs (no grad, the same micro-batches), the loss and every gradient."""
    cfg = LossConfig(entropy_coef=0.01)

    def forward(sub):
        lp, ent = completion_logprobs(model, sub["input_ids"], sub["attention_mask"], sub["completion_mask"],
                                      with_entropy=True, share_prompts=share)
        return {"logp": lp, "entropy": ent}

    model.zero_grad()
    loss, _ = accumulate_policy_loss(forward, batch, cfg, micro_batch_tokens=budget, share_prompts=share)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    lp = micro_batch_logprobs(lambda sub: forward(sub)["logp"], batch, micro_batch_tokens=budget,
                              share_prompts=share)
    return lp, loss, grads


def _assert_equal(a, b):
    lp_a, loss_a, g_a = a
    lp_b, loss_b, g_b = b
    torch.testing.assert_close(lp_b, lp_a, atol=TOL, rtol=0)
    torch.testing.assert_close(loss_b, loss_a, atol=TOL, rtol=0)
    assert g_a.keys() == g_b.keys() and g_a
    for k in g_a:
        torch.testing.assert_close(g_b[k], g_a[k], atol=GRAD_RTOL * float(g_a[k].abs().max()), rtol=0, msg=k)


def _spy_shared_path(monkeypatch) -> list:
    """The calls of the shared-prompt pass from now on (the real one runs): a test of equality must see it ran."""
    from rllib_integration.core import logprobs

    calls: list = []
    real = logprobs._shared_prompt_hidden

    def spy(*args, **kwargs):
        calls.append(args[2].n_prompts)
        return real(*args, **kwargs)

    monkeypatch.setattr(logprobs, "_shared_prompt_hidden", spy)
    return calls


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_shared_prompts_equal_the_per_row_pass(tiny_model_path, monkeypatch, lora):
    """Full model (L1/L3) and LoRA (L2): groups with completions of different lengths, prompts of one sample,
    a row without completion tokens; the whole batch in one micro-batch."""
    model = _model(tiny_model_path, lora)
    batch = _batch()
    assert prompt_groups(batch["input_ids"], batch["attention_mask"], batch["completion_mask"]).shared
    calls = _spy_shared_path(monkeypatch)
    plain = _update(model, batch, False)
    assert calls == []
    shared = _update(model, batch, True)
    assert calls and set(calls) == {len(GROUPS)}, calls  # the shared pass ran: each prompt once per forward
    _assert_equal(plain, shared)
    assert all(float(g.abs().max()) > 0 for g in plain[2].values())  # every trained tensor gets a gradient
    assert (plain[0] != 0).sum() == batch["completion_mask"].sum()


@pytest.mark.parametrize("config", [{"sliding_window": 4},
                                    {"layer_types": ["sliding_attention", "full_attention"]},
                                    {"layer_types": ["full_attention", "linear_attention"]}],
                         ids=["sliding_window", "sliding_layer", "linear_layer"])
def test_a_model_not_plain_full_attention_runs_the_per_row_pass(tiny_model_path, monkeypatch, config):
    """The shared pass leaves a padding gap in the KV cache after a prompt shorter than the longest: a sliding
    window (Gemma 2/3, Mistral) counts it against the window, a linear-attention or state-space layer runs its
    state through it. A model whose config says so runs the per-row pass (the tiny Llama, its config told so:
    its own layers compute as before, so the results still equal)."""
    from rllib_integration.core.logprobs import full_attention_only

    model = _model(tiny_model_path, lora=False)
    batch = _batch()
    assert full_attention_only(model)
    plain = _update(model, batch, False)
    assert model.config.num_hidden_layers == 2 and getattr(model.config, "sliding_window", None) is None
    for key, value in config.items():
        monkeypatch.setattr(model.config, key, value, raising=False)
    assert not full_attention_only(model)
    calls = _spy_shared_path(monkeypatch)
    _assert_equal(plain, _update(model, batch, True))
    assert calls == []


def test_a_sliding_window_model_would_be_wrong_on_the_shared_pass(monkeypatch):
    """Why the fallback: a tiny random Mistral with a 6-token window (attention as Mistral computes it) gives other
    log-probs on the shared pass (0.23 here), so it runs the per-row pass, equal to the unshared call."""
    from transformers import MistralConfig, MistralForCausalLM

    from rllib_integration.core import logprobs

    torch.manual_seed(0)
    model = MistralForCausalLM(MistralConfig(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                             sliding_window=6)).eval()
    batch = _batch()
    args = (model, batch["input_ids"], batch["attention_mask"], batch["completion_mask"])
    with torch.no_grad():
        plain = completion_logprobs(*args)
        torch.testing.assert_close(completion_logprobs(*args, share_prompts=True), plain, atol=0, rtol=0)
        monkeypatch.setattr(logprobs, "full_attention_only", lambda model: True)  # the shared pass forced
        assert float((completion_logprobs(*args, share_prompts=True) - plain).abs().max()) > 100 * TOL


def test_micro_batches_keep_a_prompt_together_within_the_budget(tiny_model_path):
    """With ``share_prompts`` the micro-batcher packs a prompt's rows together and counts the tokens the shared
    forward runs (prompts once + completions); the accumulated update equals the unshared one without a budget."""
    batch = _batch(1)
    mask, groups = batch["attention_mask"], prompt_groups(batch["input_ids"], batch["attention_mask"],
                                                          batch["completion_mask"])
    lengths = mask.sum(-1)
    for budget in (30, 60, 1000):
        parts = micro_batch_indices(mask, budget, groups)
        assert sorted(torch.cat(parts).tolist()) == list(range(mask.shape[0]))
        for idx in parts:
            g, p = groups.group[idx], groups.prompt_len[idx]
            act = g >= 0
            shared = act.sum() > len(set(g[act].tolist()))
            if shared:
                size = len(set(g[act].tolist())) * int(p.max()) + len(idx) * int((lengths[idx] - 1 - p)[act].max())
            else:
                size = len(idx) * int(lengths[idx].max())
            assert size <= budget or len(idx) == 1, (budget, idx.tolist(), size)
        if budget >= 60:  # each prompt fits a micro-batch (the largest: 12 + 4 x 9 tokens): it runs once
            part_of = {row: i for i, part in enumerate(parts) for row in part.tolist()}
            for u in range(groups.n_prompts):
                assert len({part_of[row] for row in (groups.group == u).nonzero().squeeze(-1).tolist()}) == 1
        if budget == 1000:
            assert len(parts) == 1
    # a budget below one group's size: the group is split (its prompt runs in each part), still equal
    model = _model(tiny_model_path, lora=False)
    _assert_equal(_update(model, batch, False), _update(model, batch, True, budget=30))


@pytest.mark.parametrize("bug", ["positions+1", "no prompt mask"])
def test_a_wrong_prefix_is_caught(tiny_model_path, monkeypatch, bug):
    """The equality above has the power to see a wrong prefix: the completions' pass run one position off, or
    with the prompts' padding unmasked, moves the log-probs by far more than ``TOL``."""
    model = _model(tiny_model_path, lora=False)
    batch = _batch()
    args = (model, batch["input_ids"], batch["attention_mask"], batch["completion_mask"])
    with torch.no_grad():
        plain = completion_logprobs(*args)
        body, _ = split_lm_head(model)
        forward = body.forward

        @functools.wraps(forward)
        def broken(*a, **kw):
            cache = kw.get("cache", kw.get("past_key_values"))
            if cache is not None and cache.get_seq_length() > 0:  # the completions' pass
                if bug == "positions+1":
                    kw["position_ids"] = kw["position_ids"] + 1
                else:
                    kw["attention_mask"] = torch.ones_like(kw["attention_mask"])
            return forward(*a, **kw)

        monkeypatch.setattr(body, "forward", broken)
        wrong = completion_logprobs(*args, share_prompts=True)
    assert float((wrong - plain).abs().max()) > 100 * TOL


def test_unshared_layouts_run_the_per_row_pass(tiny_model_path):
    """No prompt held twice, a left-padded batch, or gradient checkpointing: the per-row pass, bit for bit."""
    model = _model(tiny_model_path, lora=False)
    batch = _batch(2, groups=[(5, 1), (7, 1), (6, 1)])
    args = (model, batch["input_ids"], batch["attention_mask"], batch["completion_mask"])
    with torch.no_grad():
        assert torch.equal(completion_logprobs(*args, share_prompts=True), completion_logprobs(*args))
        left = [torch.roll(t, 1, dims=1) for t in args[1:]]
        assert prompt_groups(*left) is None
        shared = _batch(0)
        args = (model, shared["input_ids"], shared["attention_mask"], shared["completion_mask"])
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})  # as LLMRLModule
        assert torch.equal(completion_logprobs(*args, share_prompts=True), completion_logprobs(*args))
