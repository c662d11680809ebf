"""Hugging Face transformers generation backend (CPU and GPU).

Two ways to serve several policies:

* **separate models** (specialization L1/L3): ``HFBackend({"coder": path_a, "tester": path_b})``
  — each policy id maps to a checkpoint directory or an already loaded ``(model, tokenizer)``.
  An in-memory model is used as is (not copied), so a learner on the same device can train
  the very module the backend samples from.
* **LoRA adapters on one shared base** (L2): ``HFBackend.with_lora(base_path, {"coder": cfg, ...})``
  — one peft ``PeftModel`` holding one named adapter per policy; the active adapter is switched
  per policy group of a batch (``set_adapter``).

``generate`` groups requests by policy and runs one left-padded ``model.generate`` call per
policy (split into chunks of ``max_batch_size`` sequences).

Log-probabilities: ``Completion.logprobs`` are those of the sampled tokens under the
*model's own distribution* — ``log_softmax`` of the raw logits, before temperature, top-p or
any other processing. They equal what a forward pass over ``prompt + completion`` gives (what
the learner computes as ``old_logprobs``), not the temperature-scaled sampling distribution.
Only the sampled tokens' log-probs are kept (never the stacked ``(batch, steps, vocab)``
logits). Two ways, chosen by ``logprobs=``:

* ``"sampled"`` (default): a logits processor placed *before* temperature/top-p records, at
  each step, ``log_softmax(logits)[chosen]`` of the previous step's raw logits once the
  chosen token is known; temperature and top-p run as our own warpers after it, in the same
  order as ``generate`` would apply them, so the sampled tokens are the same for a seed.
* ``"forward"``: nothing is recorded while generating; one forward pass over prompt +
  completion afterwards (:func:`..logprobs.completion_logprobs`, LM head in chunks).

Options (constructor keywords, also on :meth:`HFBackend.with_lora`; the fields of
:class:`~..options.HFOptions`, whose defaults a run's ``rollout.*`` settings share): ``static_cache`` (use
transformers' static KV cache, ``cache_implementation="static"``: same tokens and log-probs,
faster on GPU, where transformers may also compile the decoding step; prompts are then padded
to a multiple of :data:`STATIC_WIDTH_MULTIPLE` tokens, and every call's batch is padded to
``max_batch_size`` rows where decoding is compiled (:attr:`HFBackend.compiles_decoding`: a GPU;
copies of its first prompt, finished after the first step and dropped from the result), so the
compiled decoding step sees one batch shape and the cache only
grows: transformers re-traces that step for a new (batch, cache length), which costs tens of
seconds (benchmarks/RESULTS.md "GPU"), and a tree rollout's batch shrinks as episodes end. The compile settings are
transformers' own (``dynamic=None``: after the first re-trace the cache length becomes a dynamic
dimension, so a longer prompt later costs no further re-trace; with ``dynamic=False`` every new
cache length re-traced, measured on an H100 in benchmarks/RESULTS.md "GPU"). A seed's samples
depend on the batch shape (torch draws one random number per row and step), so the padded call
samples other tokens than an unpadded one would; it is reproducible for a given
``max_batch_size``, and tokens and log-probs equal plain ``generate`` on the same rows),
``compile`` (``None``: transformers' default; ``False`` sets ``disable_compile``),
``logprobs`` (above), ``warmup`` (compile the decoding step while the backend is built,
:meth:`HFBackend.warmup`, when it will be compiled: static cache on a GPU).
``sync_seconds`` accumulates the time spent in :meth:`update_weights`.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Optional, Sequence

import torch

from ..options import LORA_DEFAULTS, HFOptions
from ..seeding import batch_seed
from .base import Completion, GenerationBackend, GenerationRequest, SamplingParams

__all__ = ["HFBackend"]


def _load(path_or_pair, device, dtype):
    if isinstance(path_or_pair, (str, os.PathLike)):
        from ..models import load_model

        return load_model(Path(path_or_pair), dtype=dtype, device=device)
    model, tok = path_or_pair
    return model, tok


class _CompletionStop:
    """Stopping criterion: a stop string appears in the *completion* text (prompt excluded).

    Checked every step on a tail window of the completion, so the first occurrence is seen
    when it is completed."""

    def __init__(self, tok, stops, prompt_width: int, n_rows: Optional[int] = None) -> None:
        self.tok, self.stops, self.width = tok, [s for s in stops if s], prompt_width
        self.window = max(len(s) for s in self.stops) + 2
        self.n_rows = n_rows  # the real rows (a padded static-cache batch: the rest are never decoded)

    def __call__(self, input_ids, scores, **kwargs):
        gen = input_ids[:self.n_rows, self.width:]
        tails = self.tok.batch_decode(gen[:, -self.window:], skip_special_tokens=True)
        hit = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        hit[:len(tails)] = torch.tensor([any(s in t for s in self.stops) for t in tails], dtype=torch.bool)
        return hit


class _RowsDone:
    """Stopping criterion: the padding rows of a static-cache batch are finished after the first step
    (criteria run after each sampled token), so they never keep ``generate`` running after the real
    rows stop."""

    def __init__(self, done: torch.Tensor) -> None:
        self.done = done

    def __call__(self, input_ids, scores, **kwargs):
        if self.done.device != input_ids.device:
            self.done = self.done.to(input_ids.device)  # once
        return self.done


class _SampledLogprobs:
    """Logits processor recording the sampled tokens' log-probs under the raw logits (see module
    docstring). It sees step ``t``'s logits and, at step ``t+1``, the token chosen at ``t``."""

    def __init__(self) -> None:
        self.prev: Optional[torch.Tensor] = None
        self.steps: list[torch.Tensor] = []

    @staticmethod
    def _gather(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        # Two kernels per step (fused fp32 log_softmax, gather); logit - logsumexp took 12 (its
        # max/exp/sum/log chain; benchmarks/hf_host_bench.py), each a launch between graph replays on a GPU.
        return torch.log_softmax(logits, dim=-1, dtype=torch.float32).gather(-1, tokens.view(-1, 1)).squeeze(-1)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.prev is not None:
            self.steps.append(self._gather(self.prev, input_ids[:, -1]))
        self.prev = scores
        return scores

    def finish(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """``(B, n_new)`` log-probs, given the generated tokens (the last step is gathered here)."""
        if self.prev is not None and len(self.steps) < new_tokens.shape[1]:
            self.steps.append(self._gather(self.prev, new_tokens[:, len(self.steps)].to(self.prev.device)))
        self.prev = None
        if not self.steps:
            return torch.zeros(new_tokens.shape)
        return torch.stack(self.steps, dim=1).cpu()


class _Batch(NamedTuple):
    """A left-padded batch of prompts: ``n_real`` prompts, then any padding rows (static cache)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    width: int
    n_real: int


#: static cache: prompts are left-padded to a multiple of this width, so a compiled decoding step
#: sees few distinct cache lengths.
STATIC_WIDTH_MULTIPLE = 64


class HFBackend(GenerationBackend):
    """Generation with ``transformers`` ``model.generate``; see the module docstring."""

    def __init__(self, policies: Mapping[str, Any], *, device: Optional[str] = None,
                 dtype: Optional[torch.dtype] = None, **options: Any) -> None:
        """``options``: the fields of :class:`~..options.HFOptions` (``max_batch_size``, ``static_cache``,
        ``compile``, ``logprobs``, ``warmup``), defaults there."""
        if not policies:
            raise ValueError("HFBackend needs at least one policy: {policy_id: model path or (model, tokenizer)}")
        opts = self._init_options(device, options)
        self._models: dict[str, Any] = {}
        self._tokenizers: dict[str, Any] = {}
        self._adapter: dict[str, Optional[str]] = {}
        for pid, src in policies.items():
            model, tok = _load(src, self.device, dtype)
            model.to(self.device)
            self._prepare_tokenizer(tok)
            self._models[pid], self._tokenizers[pid], self._adapter[pid] = model, tok, None
        if opts.warmup and self.compiles_decoding:
            self.warmup()

    @classmethod
    def with_lora(cls, base: Any, adapters: Mapping[str, Any], *, device: Optional[str] = None,
                  dtype: Optional[torch.dtype] = None, **options: Any) -> "HFBackend":
        """One shared base model (path or ``(model, tokenizer)``) with one LoRA adapter per policy.

        ``adapters`` maps policy id -> a ``peft.LoraConfig`` (new adapter), a directory saved
        with ``PeftModel.save_pretrained`` (loaded adapter), or ``None`` (a LoraConfig of
        :data:`~..options.LORA_DEFAULTS`: r=8 on the attention projections). ``options``: as for the
        constructor (:class:`~..options.HFOptions`).
        """
        from peft import LoraConfig, PeftModel, get_peft_model

        if not adapters:
            raise ValueError("with_lora needs at least one adapter: {policy_id: LoraConfig | adapter dir | None}")
        self = cls.__new__(cls)
        opts = self._init_options(device, options)
        base_model, tok = _load(base, self.device, dtype)
        cls._prepare_tokenizer(tok)
        peft_model = None
        for pid, spec in adapters.items():
            if spec is None:
                spec = LoraConfig(r=LORA_DEFAULTS["r"], lora_alpha=LORA_DEFAULTS["alpha"],
                                  target_modules=list(LORA_DEFAULTS["target_modules"]),
                                  lora_dropout=LORA_DEFAULTS["dropout"])
            if isinstance(spec, (str, os.PathLike)):
                if peft_model is None:
                    peft_model = PeftModel.from_pretrained(base_model, str(spec), adapter_name=pid, is_trainable=True)
                else:
                    peft_model.load_adapter(str(spec), adapter_name=pid, is_trainable=True)
            else:
                if peft_model is None:
                    peft_model = get_peft_model(base_model, spec, adapter_name=pid)
                else:
                    peft_model.add_adapter(pid, spec)
        assert peft_model is not None  # adapters is not empty (checked above)
        peft_model.to(self.device)
        peft_model.eval()
        self._models = {pid: peft_model for pid in adapters}
        self._tokenizers = {pid: tok for pid in adapters}
        self._adapter = {pid: pid for pid in adapters}
        if opts.warmup and self.compiles_decoding:
            self.warmup()
        return self

    def _init_options(self, device: Optional[str], options: dict[str, Any]) -> HFOptions:
        opts = HFOptions.of("HFBackend", options)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.max_batch_size = int(opts.max_batch_size)
        self.static_cache = bool(opts.static_cache)
        self.compile = opts.compile
        self.logprobs_mode = opts.logprobs
        self.sync_seconds = 0.0
        return opts

    @property
    def compiles_decoding(self) -> bool:
        """True when ``generate`` will compile the decoding step: static cache, compile not disabled,
        and a device transformers compiles on (not the CPU)."""
        return self.static_cache and self.compile is not False and self.device.type != "cpu"

    def warmup(self, max_new_tokens: int = 4) -> float:
        """Compile the static-cache decoding step now instead of in the first rollout: per model, two
        short greedy calls of ``max_batch_size`` rows whose cache lengths differ, so transformers traces
        the step once specialised and once with a dynamic cache length (longer prompts later re-trace
        nothing; measured on an H100, benchmarks/RESULTS.md "GPU"). ``warmup=True`` in the constructor
        calls it when :attr:`compiles_decoding`. Returns the seconds spent."""
        if not self.static_cache:
            return 0.0
        t0 = time.perf_counter()
        seen: set[int] = set()
        params = SamplingParams(temperature=0.0, max_new_tokens=int(max_new_tokens))
        for pid, model in self._models.items():
            if id(model) in seen:  # L1 policies / L2 adapters share one compiled model
                continue
            seen.add(id(model))
            tok = self._tokenizers[pid]
            filler = tok.bos_token_id if tok.bos_token_id is not None else tok.pad_token_id
            for width in (STATIC_WIDTH_MULTIPLE, 2 * STATIC_WIDTH_MULTIPLE):
                self._generate_batch(pid, [[filler] * width], params, seed=0)
        return time.perf_counter() - t0

    @staticmethod
    def _prepare_tokenizer(tok) -> None:
        tok.padding_side = "left"
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token

    # -- interface -----------------------------------------------------------------------
    def policies(self) -> list[str]:
        return list(self._models)

    def tokenizer(self, policy_id: str):
        self._check_policy(policy_id)
        return self._tokenizers[policy_id]

    def model(self, policy_id: str):
        """The torch module serving ``policy_id`` (a ``PeftModel`` in LoRA mode, adapter active)."""
        self._check_policy(policy_id)
        m = self._models[policy_id]
        if self._adapter[policy_id] is not None:
            m.set_adapter(self._adapter[policy_id])
        return m

    def update_weights(self, policy_id: str, state_dict: Mapping[str, Any]) -> None:
        """Copy new weights into the live module (in place; no reload).

        Separate-model mode: a (full or partial) ``state_dict`` of the model; unknown keys raise.
        LoRA mode: the adapter's weights as given by ``peft.get_peft_model_state_dict(model,
        adapter_name=policy_id)`` (keys without the adapter name).
        """
        self._check_policy(policy_id)
        model = self._models[policy_id]
        t0 = time.perf_counter()
        try:
            self._load_state(policy_id, model, state_dict)
        finally:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.sync_seconds += time.perf_counter() - t0

    def _load_state(self, policy_id: str, model, state_dict: Mapping[str, Any]) -> None:
        with torch.no_grad():
            if self._adapter[policy_id] is not None:
                from peft import set_peft_model_state_dict

                res = set_peft_model_state_dict(model, dict(state_dict), adapter_name=self._adapter[policy_id])
                unexpected = [k for k in getattr(res, "unexpected_keys", []) if "lora_" in k]
                if unexpected:
                    raise KeyError(f"update_weights({policy_id!r}): adapter keys not in the model: {unexpected[:5]}")
            else:
                res = model.load_state_dict(dict(state_dict), strict=False)
                if res.unexpected_keys:
                    raise KeyError(f"update_weights({policy_id!r}): keys not in the model: {res.unexpected_keys[:5]}")

    def encode(self, request: GenerationRequest) -> list[int]:
        """Prompt token ids of a request (chat messages rendered with the chat template)."""
        tok = self._tokenizers[request.policy_id]
        if request.messages is not None:
            if not getattr(tok, "chat_template", None):
                raise ValueError(f"policy {request.policy_id!r}: the tokenizer has no chat template; "
                                 "send prompt= text instead of messages=")
            text = tok.apply_chat_template(list(request.messages), tokenize=False, add_generation_prompt=True)
            return list(tok(text, add_special_tokens=False)["input_ids"])
        return list(tok(request.prompt)["input_ids"])

    @torch.no_grad()
    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[list[Completion]]:
        results: list[Optional[list[Completion]]] = [None] * len(requests)
        groups: "OrderedDict[str, list[int]]" = OrderedDict()
        for i, r in enumerate(requests):
            self._check_policy(r.policy_id)
            groups.setdefault(r.policy_id, []).append(i)
        for pid, idx in groups.items():
            prompts = [self.encode(requests[i]) for i in idx]
            flat = [p for p in prompts for _ in range(params.n)]
            outs: list[Completion] = []
            for s in range(0, len(flat), self.max_batch_size):
                outs.extend(self._generate_batch(pid, flat[s:s + self.max_batch_size], params,
                                                 seed=batch_seed(params.seed, s)))
            for j, i in enumerate(idx):
                results[i] = outs[j * params.n:(j + 1) * params.n]
        return results  # type: ignore[return-value]

    # -- internals -----------------------------------------------------------------------
    def _generate_batch(self, pid: str, prompts: list[list[int]], params: SamplingParams,
                        seed: Optional[int]) -> list[Completion]:
        """One ``model.generate`` call over ``prompts`` (token ids): pad them into a batch, configure the
        sampling, generate (seeded), read the new tokens' log-probs, cut each row into its completion."""
        model, tok = self.model(pid), self._tokenizers[pid]
        eos_ids = self._eos_ids(model, tok)
        eos_set = set(eos_ids)
        batch = self._padded_batch(prompts, tok.pad_token_id)
        recorder = _SampledLogprobs() if self.logprobs_mode == "sampled" else None
        kwargs = dict(input_ids=batch.input_ids.to(self.device), attention_mask=batch.attention_mask.to(self.device),
                      generation_config=self._generation_config(tok, params, eos_ids),
                      logits_processor=self._logits_processors(params, recorder),
                      **self._stopping_criteria(tok, params, batch))
        sequences = self._run_generate(model, kwargs, seed)
        new = sequences[:, batch.width:].cpu()  # every row: the recorder's steps cover the padding rows too
        if recorder is not None:
            lps = recorder.finish(new)[:batch.n_real]
        else:
            lps = self._forward_logprobs(model, sequences[:batch.n_real], batch.attention_mask[:batch.n_real],
                                         batch.width, eos_set)
        return [self._completion(tok, pid, p, new[b].tolist(), lps[b].tolist(), eos_set, params.stop)
                for b, p in enumerate(prompts)]

    def _padded_batch(self, prompts: list[list[int]], pad_id: int) -> "_Batch":
        """The prompts left-padded to one width; with the static cache, the width rounded up to a multiple of
        :data:`STATIC_WIDTH_MULTIPLE` and, where decoding compiles, the batch filled to ``max_batch_size``
        rows with copies of the first prompt (one shape for the compiled decode step: module docstring)."""
        width = max(len(p) for p in prompts)
        rows = list(prompts)
        if self.static_cache:
            width = -(-width // STATIC_WIDTH_MULTIPLE) * STATIC_WIDTH_MULTIPLE
            if self.compiles_decoding:  # on CPU nothing is compiled: extra rows would only cost time
                rows += [prompts[0]] * max(0, self.max_batch_size - len(prompts))
        input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        attn = torch.zeros((len(rows), width), dtype=torch.long)
        for b, p in enumerate(rows):
            if p:
                input_ids[b, width - len(p):] = torch.tensor(p, dtype=torch.long)
                attn[b, width - len(p):] = 1
        return _Batch(input_ids, attn, width, len(prompts))

    @staticmethod
    def _logits_processors(params: SamplingParams, recorder: Optional["_SampledLogprobs"]) -> Any:
        """The log-prob recorder (it must see raw logits), then temperature and top-p as our own warpers in
        ``generate``'s own order (``generate`` itself gets temperature 1 / no top-p, so it adds none)."""
        from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

        greedy = params.temperature == 0
        processors = LogitsProcessorList()
        if recorder is not None:
            processors.append(recorder)
        if not greedy and params.temperature != 1.0:
            processors.append(TemperatureLogitsWarper(params.temperature))
        if not greedy and params.top_p < 1:
            processors.append(TopPLogitsWarper(params.top_p))
        return processors

    def _generation_config(self, tok: Any, params: SamplingParams, eos_ids: list[int]) -> Any:
        """``generate``'s config: greedy or plain sampling (the warpers do the rest), the static cache and
        ``compile`` options."""
        from transformers import GenerationConfig

        greedy = params.temperature == 0
        extra: dict[str, Any] = {}
        if self.static_cache:
            extra["cache_implementation"] = "static"
        if self.compile is not None:
            extra["disable_compile"] = not self.compile
        return GenerationConfig(
            max_new_tokens=params.max_new_tokens,
            do_sample=not greedy,
            temperature=None if greedy else 1.0,
            top_p=None,
            # off when sampling: None would fall back to transformers' default top_k=50 and bias it
            top_k=None if greedy else 0,
            pad_token_id=tok.pad_token_id,
            eos_token_id=eos_ids,
            bos_token_id=tok.bos_token_id,
            return_dict_in_generate=True,
            **extra,
        )

    @staticmethod
    def _stopping_criteria(tok: Any, params: SamplingParams, batch: "_Batch") -> dict[str, Any]:
        """``generate``'s ``stopping_criteria`` keyword, where there are any: the stop strings (our own
        criterion: HF's ``stop_strings`` also match across the prompt boundary) and the padding rows."""
        from transformers import StoppingCriteriaList

        criteria = StoppingCriteriaList()
        if params.stop:
            criteria.append(_CompletionStop(tok, params.stop, batch.width, batch.n_real))
        n_rows = batch.input_ids.shape[0]
        if n_rows > batch.n_real:
            criteria.append(_RowsDone(torch.arange(n_rows) >= batch.n_real))
        return {"stopping_criteria": criteria} if criteria else {}

    def _run_generate(self, model: Any, kwargs: dict[str, Any], seed: Optional[int]) -> torch.Tensor:
        """``model.generate(**kwargs)``'s sequences, in eval mode, with torch's generator seeded ``seed`` (this
        call only: the global random state is put back)."""
        was_training = model.training
        model.eval()
        try:
            if seed is None:
                return model.generate(**kwargs).sequences
            devices = [self.device] if self.device.type == "cuda" else []
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(seed)
                return model.generate(**kwargs).sequences
        finally:
            model.train(was_training)

    def _completion(self, tok: Any, pid: str, prompt: list[int], ids: list[int], lp: list[float],
                    eos_set: set[int], stop: Any) -> Completion:
        """One row's completion: cut after its first eos (kept: the learner must learn to stop), then at the
        first stop string."""
        finish = "length"
        cut = len(ids)
        for t, tid in enumerate(ids):
            if tid in eos_set:
                cut, finish = t + 1, "stop"
                break
        ids, lp = ids[:cut], lp[:cut]
        text = tok.decode(ids, skip_special_tokens=True)
        if stop:
            ids, lp, text, hit = self._apply_stop(tok, ids, lp, text, stop)
            if hit:
                finish = "stop"
        return Completion(text=text, token_ids=ids, logprobs=lp, prompt_token_ids=list(prompt),
                          finish_reason=finish, policy_id=pid)

    @torch.no_grad()
    def _forward_logprobs(self, model, sequences: torch.Tensor, prompt_attn: torch.Tensor, width: int,
                          eos_set: set[int]) -> torch.Tensor:
        """``(B, n_new)`` log-probs of the generated tokens by one chunked forward (``logprobs="forward"``)."""
        from ..logprobs import completion_logprobs

        new = sequences[:, width:]
        keep = torch.ones(new.shape, dtype=torch.long, device=new.device)
        for b in range(new.shape[0]):  # tokens after the first eos are padding
            hits = [t for t, tid in enumerate(new[b].tolist()) if tid in eos_set]
            if hits:
                keep[b, hits[0] + 1:] = 0
        attn = torch.cat([prompt_attn.to(new.device), keep], dim=1)
        cmask = torch.zeros((new.shape[0], sequences.shape[1] - 1), device=new.device)
        cmask[:, width - 1:] = keep.float()
        was_training = model.training
        model.eval()
        try:
            lp = completion_logprobs(model, sequences, attn, cmask)
        finally:
            model.train(was_training)
        return lp[:, width - 1:].cpu()

    @staticmethod
    def _eos_ids(model, tok) -> list[int]:
        ids = []
        cfg_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        for e in ([cfg_eos] if isinstance(cfg_eos, int) else list(cfg_eos or [])) + [tok.eos_token_id]:
            if e is not None and e not in ids:
                ids.append(int(e))
        return ids

    @staticmethod
    def _apply_stop(tok, ids, lp, text, stops):
        """Cut at the earliest stop string: text before it, tokens up to the one completing it."""
        pos = [(text.find(s), s) for s in stops if s and text.find(s) >= 0]
        if not pos:
            return ids, lp, text, False
        first, s = min(pos)
        end = first + len(s)
        for k in range(1, len(ids) + 1):
            if len(tok.decode(ids[:k], skip_special_tokens=True)) >= end:
                return ids[:k], lp[:k], text[:first], True
        return ids, lp, text[:first], True
