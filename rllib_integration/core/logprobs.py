"""Memory-bounded log-probs and entropies of the completion tokens (the learner's forward pass).

:func:`completion_logprobs` never builds a float32 ``(batch, length, vocab)`` tensor: it runs the
model body (the decoder, without its LM head) once, gathers the hidden states at the positions
that predict a completion token, and applies the LM head and the log-softmax to those rows in
chunks of ``chunk_tokens``. Each chunk runs under :func:`torch.utils.checkpoint.checkpoint`, so
backward recomputes that chunk's logits instead of keeping them: the peak is one chunk's
``(chunk_tokens, vocab)`` logits plus the hidden states, whatever the batch.

Results are aligned with :func:`loss.sequence_token_logprobs` (shape ``(B, T-1)``, position
``t`` scores token ``t+1``) and are exactly 0 outside ``completion_mask``.

Shared prompts (``share_prompts=True``; a run's ``training.share_prompts``). The K candidates of a GRPO group
share their prompt token for token. :func:`prompt_groups` keys each row of a right-padded batch by its prompt
(the tokens before its first completion token, read off ``completion_mask``); when some prompt is shared by two
or more rows, the body runs each distinct prompt once (one row per prompt, right-padded, with a KV cache), the
cache is expanded over the rows of each prompt (``Cache.batch_select_indices``), and the completions run on top
of it (positions continuing the prompt's, the attention mask covering prompt and completion). Backward through
the expanded cache sums each candidate's gradient into its prompt's single forward, which is what the
per-row computation gives. The log-probs are those of the per-row pass up to float rounding (the attention sums
run in another order): in fp32 within 1e-5 (tests/rllib_integration/core/test_shared_prompts.py). A batch where
no prompt is shared, a layout that is not right-padded, a model with gradient checkpointing on (Hugging Face
drops the KV cache of a checkpointed layer), or one that is not plain full attention in every layer (sliding
windows, linear attention, state-space layers: :func:`full_attention_only`) runs the per-row pass.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch.utils.checkpoint import checkpoint

from .options import DEFAULT_SHARE_PROMPTS

__all__ = ["completion_logprobs", "split_lm_head", "prompt_groups", "PromptGroups", "full_attention_only",
           "DEFAULT_CHUNK_TOKENS"]

DEFAULT_CHUNK_TOKENS = 1024


def split_lm_head(model) -> tuple[torch.nn.Module, torch.nn.Module]:
    """``(body, head)`` of a Hugging Face causal LM (a ``PeftModel`` too): the decoder that returns
    hidden states, and the output projection. Raises ``TypeError`` naming the model otherwise."""
    get_decoder = getattr(model, "get_decoder", None)
    get_head = getattr(model, "get_output_embeddings", None)
    body = get_decoder() if callable(get_decoder) else None
    head = get_head() if callable(get_head) else None
    if body is None or head is None:
        raise TypeError(f"completion_logprobs needs a causal LM with get_decoder() and get_output_embeddings(); "
                        f"got {type(model).__name__}")
    return body, head


def _chunk_logprobs(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor,
                    softcap: Optional[float], with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor]:
    logits = head(hidden).float()
    if softcap:
        logits = torch.tanh(logits / softcap) * softcap
    lse = torch.logsumexp(logits, dim=-1)
    lp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
    if with_entropy:
        ent = lse - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    else:
        ent = torch.zeros_like(lp)
    return lp, ent


@dataclass(frozen=True)
class PromptGroups:
    """The rows of a right-padded batch keyed by their prompt (:func:`prompt_groups`).

    ``group`` ``(B,)``: the index of the row's prompt in ``0..n_prompts-1`` (-1: a row without completion
    tokens, which needs no forward); ``prompt_len`` ``(B,)``: the tokens before the row's first completion
    token (0 without one); ``length`` ``(B,)``: the row's tokens; ``first_row`` ``(n_prompts,)``: the first row
    holding each prompt. Rows with one prompt have the same ``prompt_len`` and the same tokens up to it."""

    group: torch.Tensor
    prompt_len: torch.Tensor
    length: torch.Tensor
    first_row: torch.Tensor

    @property
    def n_prompts(self) -> int:
        return int(self.first_row.numel())

    @property
    def shared(self) -> bool:
        """Some prompt is held by two rows or more (sharing it saves a forward)."""
        return self.n_prompts < int((self.group >= 0).sum())


def prompt_groups(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  completion_mask: torch.Tensor) -> Optional[PromptGroups]:
    """Group the rows of a batch by identical prompt: the tokens ``input_ids[b, :p]`` before the row's first
    completion token (``completion_mask[b, p - 1]`` is its first 1), compared token for token.

    ``None`` when the layout is not the right-padded one :func:`.loss.collate_samples` builds (an attention
    mask that is not 1 on a prefix of the row, or a completion position past the row's end): such a batch
    runs unshared."""
    B, T = input_ids.shape
    cm = completion_mask != 0
    lengths = attention_mask.long().sum(-1)
    cols = torch.arange(T, device=input_ids.device)
    if not bool((attention_mask.bool() == (cols < lengths[:, None])).all()):
        return None
    if T < 2 or bool((cm & (cols[:T - 1] >= (lengths - 1)[:, None])).any()):
        return None
    has = cm.any(-1)
    prompt_len = torch.where(has, cm.int().argmax(-1) + 1, torch.zeros_like(lengths))
    group = torch.full((B,), -1, dtype=torch.long, device=input_ids.device)
    active = has.nonzero().squeeze(-1)
    if not active.numel():
        return PromptGroups(group, prompt_len, lengths, active)
    # key: the prompt length, then the prompt's tokens (-1 past it); one torch.unique over the rows
    p = prompt_len[active]
    keys = torch.where(cols < p[:, None], input_ids[active], torch.full_like(input_ids[active], -1))
    width = int(p.max())
    _, inverse = torch.unique(torch.cat([p[:, None], keys[:, :width]], dim=1), dim=0, return_inverse=True)
    group[active] = inverse
    n = int(inverse.max()) + 1
    first = torch.full((n,), B, dtype=torch.long, device=input_ids.device)
    first = first.scatter_reduce(0, inverse, active, reduce="amin")
    return PromptGroups(group, prompt_len, lengths, first)


def _cache_keyword(body: torch.nn.Module) -> str:
    """The decoder's KV-cache argument: ``cache`` (transformers >= 5.x) or ``past_key_values``."""
    params = inspect.signature(body.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _new_cache(body: torch.nn.Module) -> Any:
    from transformers import DynamicCache

    try:
        return DynamicCache(config=getattr(body, "config", None))
    except TypeError:  # older transformers: no config argument
        return DynamicCache()


def _checkpointing(model) -> bool:
    return any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())


#: a decoder layer's module that carries a state through the sequence (state-space, linear attention, convolution)
_RECURRENT = re.compile(r"mamba|mixer|ssm|recurren|rwkv|deltanet|linearatt|linear_att|conv", re.IGNORECASE)


def full_attention_only(model) -> bool:
    """Whether the shared-prompt pass gives the per-row pass's answer for ``model``: its config says plain causal
    full attention in every layer (no ``sliding_window``, ``layer_types`` absent or all ``"full_attention"``, no
    encoder-decoder) and its decoder layers are standard ones (each a ``self_attn``, none a state-space, linear
    attention or convolution module). The shared pass leaves a padding gap in the KV cache between a prompt shorter
    than the longest and its completion: masked, full attention ignores it, but a sliding window (Gemma 2/3,
    Mistral) counts its slots against the window and a linear-attention or state-space layer runs its state
    through it. Otherwise (or when unsure) :func:`completion_logprobs` runs the per-row pass."""
    config: Any = getattr(model, "config", None)
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    if config is None or getattr(config, "is_encoder_decoder", False):
        return False
    if getattr(config, "sliding_window", None) is not None and getattr(config, "use_sliding_window", True) is not False:
        return False
    if any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or ()):
        return False
    layers = getattr(split_lm_head(model)[0], "layers", None)
    return isinstance(layers, torch.nn.ModuleList) and len(layers) > 0 and all(
        hasattr(layer, "self_attn") and not any(_RECURRENT.search(type(m).__name__) for m in layer.modules())
        for layer in layers)


def _shared_prompt_hidden(body: torch.nn.Module, input_ids: torch.Tensor, groups: PromptGroups,
                          rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """The body's hidden states ``(N, H)`` at the positions ``(rows, cols)`` (each predicting a completion
    token), each distinct prompt run once: see the module docstring.

    Two passes: the prompts (``U`` rows, right-padded to the longest, ``Pmax``) with a KV cache, then each
    row's completion but its last token (``R`` rows, right-padded to ``Smax``) on the row's prompt's cache
    (expanded: ``batch_select_indices``), at positions ``prompt_len + j``. The hidden state at a prompt
    position (the last one, predicting the first completion token) comes from the first pass, the others from
    the second."""
    B, T = input_ids.shape
    dev = input_ids.device
    kw = _cache_keyword(body)
    first, plen = groups.first_row, groups.prompt_len
    U = groups.n_prompts
    p_u = plen[first]
    pmax = int(p_u.max())
    pos = torch.arange(pmax, device=dev)
    prompt_mask = (pos < p_u[:, None]).long()
    cache = _new_cache(body)
    prompt_h = body(input_ids=input_ids[first, :pmax], attention_mask=prompt_mask,
                    position_ids=pos.expand(U, pmax), use_cache=True, **{kw: cache}).last_hidden_state
    H = prompt_h.shape[-1]
    active = (groups.group >= 0).nonzero().squeeze(-1)
    g, p_r = groups.group[active], plen[active]
    s_r = groups.length[active] - 1 - p_r  # inputs past the prompt: the completion but its last token
    smax = int(s_r.max())
    slot = torch.full((B,), -1, dtype=torch.long, device=dev)
    slot[active] = torch.arange(active.numel(), device=dev)
    pr = plen[rows]
    flat = torch.where(cols < pr, groups.group[rows] * pmax + cols, U * pmax + slot[rows] * smax + (cols - pr))
    hidden = prompt_h.reshape(-1, H)
    if smax > 0:
        spos = torch.arange(smax, device=dev)
        suffix_ids = input_ids[active[:, None], (p_r[:, None] + spos).clamp(max=T - 1)]
        suffix_mask = (spos < s_r[:, None]).long()
        cache.batch_select_indices(g)
        out = body(input_ids=suffix_ids, attention_mask=torch.cat([prompt_mask[g], suffix_mask], dim=1),
                   position_ids=p_r[:, None] + spos, use_cache=True, **{kw: cache}).last_hidden_state
        if cache.get_seq_length() != pmax + smax:  # e.g. a layer that dropped the cache: never a wrong answer
            raise RuntimeError(f"share_prompts: the completions did not run on the prompts' KV cache (length "
                               f"{cache.get_seq_length()}, expected {pmax + smax}); run with share_prompts off")
        hidden = torch.cat([hidden, out.reshape(-1, H)])
    return hidden[flat]


def completion_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                        completion_mask: torch.Tensor, *, with_entropy: bool = False,
                        chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
                        share_prompts: bool = DEFAULT_SHARE_PROMPTS):
    """Log-probs ``(B, T-1)`` of ``input_ids[:, 1:]`` at ``completion_mask`` positions (0 elsewhere);
    with ``with_entropy`` also the per-position entropies. See the module docstring.

    Works with left or right padding (position ids come from the attention mask). ``share_prompts``: rows
    with an identical prompt run it once (module docstring, "Shared prompts"); right padding only, other
    layouts run unshared.
    """
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    B, T = input_ids.shape
    if completion_mask.shape != (B, T - 1):
        raise ValueError(f"completion_mask must have shape {(B, T - 1)} (aligned with input_ids[:, 1:]), "
                         f"got {tuple(completion_mask.shape)}")
    body, head = split_lm_head(model)
    rows, cols = completion_mask.bool().nonzero(as_tuple=True)
    groups = prompt_groups(input_ids, attention_mask, completion_mask) if share_prompts else None
    if groups is not None and groups.shared and not _checkpointing(model) and full_attention_only(model):
        h = _shared_prompt_hidden(body, input_ids, groups, rows, cols)
    else:
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        hidden = body(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                      use_cache=False).last_hidden_state
        h = hidden[:, :-1][rows, cols]  # (N, H): only the positions that predict a completion token
    targets = input_ids[:, 1:][rows, cols]
    softcap = getattr(getattr(model, "config", None), "final_logit_softcapping", None)
    lps, ents = [], []
    grad = torch.is_grad_enabled() and h.requires_grad
    for s in range(0, h.shape[0], chunk_tokens):
        args = (head, h[s:s + chunk_tokens], targets[s:s + chunk_tokens], softcap, with_entropy)
        lp, ent = checkpoint(_chunk_logprobs, *args, use_reentrant=False) if grad else _chunk_logprobs(*args)
        lps.append(lp)
        ents.append(ent)
    zeros = torch.zeros((B, T - 1), dtype=torch.float32, device=input_ids.device)
    lp_full = zeros.index_put((rows, cols), torch.cat(lps)) if lps else zeros
    if not with_entropy:
        return lp_full
    ent_full = zeros.index_put((rows, cols), torch.cat(ents)) if ents else zeros
    return lp_full, ent_full
