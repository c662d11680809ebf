"""The RLModule of one LLM policy: a causal LM (with a LoRA adapter at L2) as a TorchRLModule.

``model_config`` is :meth:`LLMPolicySpec.module_config` (``policy_id``, ``model_path``,
``level``, ``lora``, ``dtype``, ``seed``; optional GPU keys: ``master_weights`` (default True),
``gradient_checkpointing`` (default False), ``logprob_chunk_tokens`` (default 1024), ``share_prompts`` (default
False: rows with one prompt run it once, :func:`.core.logprobs.completion_logprobs`),
``compile_layers`` (default False) with ``activation_memory_budget`` (default 1.0): every decoder
layer ``torch.compile``d, :func:`core.models.compile_decoder_layers`).

* Mixed precision: with a low-precision ``dtype`` (bfloat16/float16) and ``master_weights``
  the trainable weights are kept in float32 (so small Adam updates are not rounded away) and
  the forward passes run under ``torch.autocast`` in ``dtype``. At L2 the frozen base stays in
  ``dtype``; the LoRA adapter is float32. ``master_weights=False`` trains the weights in ``dtype``.
* Log-probs come from :func:`.core.logprobs.completion_logprobs`: only completion positions, LM head
  in chunks of ``logprob_chunk_tokens`` rows, never a ``(batch, length, vocab)`` float32 tensor.
* The KL reference (L1/L3) is a frozen copy kept outside the module's parameters (neither
  trained nor checkpointed) but moved with it: ``module.to(device)`` moves it too.

* ``_forward_train(batch)``: per-token log-probs of ``batch["input_ids"][:, 1:]`` (and the
  entropy when the loss uses it) — what :func:`.core.loss.policy_loss` needs.
* ``_forward`` (inference): the same log-probs without gradients. Text generation itself is the
  generation backend's job (rollout workers), not the RLModule's.
* State: ``get_state`` returns the *trainable* weights — the full model at L1/L3, only the
  LoRA adapter at L2 (keys as ``peft.get_peft_model_state_dict`` gives them). That is what is
  checkpointed and what is synced to the generation backends.

At L2 every policy's module wraps its own copy of the module tree of one frozen base model whose
parameter tensors are shared between the policies of a process (one base in memory, one
adapter per policy), as in the generation backend.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from typing import Any, Collection, Optional, Union

import numpy as np
import torch

from ray.rllib.core.rl_module.torch import TorchRLModule

from .core import seeding
from .core.logprobs import DEFAULT_CHUNK_TOKENS, completion_logprobs, full_attention_only
from .core.tensor_codec import encode, host_copy
from .quiet import install_in_worker

__all__ = ["LLMRLModule"]

_BASES: dict[tuple[str, str], Any] = {}
_LOCK = threading.Lock()


def _shared_base(path: str, dtype: str):
    """One frozen base model per (path, dtype) per process."""
    from .core.models import load_model
    from .policies import torch_dtype

    with _LOCK:
        key = (path, dtype)
        if key not in _BASES:
            model, _ = load_model(path, dtype=torch_dtype(dtype), device="cpu")
            for p in model.parameters():
                p.requires_grad_(False)
            _BASES[key] = model
        return _BASES[key]


def _tree_sharing_tensors(base: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of ``base``'s module tree whose parameters/buffers ARE base's tensors."""
    memo = {id(t): t for t in list(base.parameters()) + list(base.buffers())}
    return copy.deepcopy(base, memo)


class LLMRLModule(TorchRLModule):
    """A causal language model policy (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        install_in_worker()  # the driver's quiet filters, in a Ray worker it started (not on import)
        super().__init__(*args, **kwargs)

    def setup(self) -> None:
        from .core.models import load_model
        from .policies import lora_config, torch_dtype

        cfg: dict[str, Any] = dict(self.model_config) if isinstance(self.model_config, dict) else {}
        self.policy_id = cfg.get("policy_id", "shared")
        self.level = cfg.get("level", "L1")
        path = cfg["model_path"]
        dtype = cfg.get("dtype", "float32")
        low = torch_dtype(dtype) in (torch.bfloat16, torch.float16)
        # Mixed precision: float32 trainable (master) weights, forward under autocast in `dtype`.
        self.autocast_dtype = torch_dtype(dtype) if low and bool(cfg.get("master_weights", True)) else None
        self.chunk_tokens = int(cfg.get("logprob_chunk_tokens") or DEFAULT_CHUNK_TOKENS)
        self.share_prompts = bool(cfg.get("share_prompts", False))
        if self.level == "L2":
            from peft import get_peft_model

            tree = _tree_sharing_tensors(_shared_base(path, dtype))
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seeding.module_init_seed(int(cfg.get("seed", 0)), self.policy_id))
                self.lm = get_peft_model(tree, lora_config(cfg.get("lora") or {}), adapter_name=self.policy_id)
            for name, p in self.lm.named_parameters():
                p.requires_grad_("lora_" in name)
        else:
            load_dtype = torch.float32 if self.autocast_dtype is not None else torch_dtype(dtype)
            model, _ = load_model(path, dtype=load_dtype, device="cpu")
            self.lm = model
        # the shared-prompt pass only where it gives the per-row pass's answer (the learner reads this to cut
        # its micro-batches for the forward that runs)
        self.share_prompts = self.share_prompts and full_attention_only(self.lm)
        if cfg.get("gradient_checkpointing"):
            self.lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            if self.level == "L2":
                self.lm.enable_input_require_grads()  # frozen embeddings: let checkpointed blocks see grads
        if cfg.get("compile_layers"):
            from .core.models import compile_decoder_layers

            compile_decoder_layers(self.lm, memory_budget=float(cfg.get("activation_memory_budget", 1.0)))
        self.lm.train()  # no dropout in the tiny model; HF sets eval() on load
        self.with_entropy = bool(cfg.get("with_entropy", False))
        self.with_reference = bool(cfg.get("with_reference", False))
        # The KL reference is the initial policy: at L2 the base without its adapter, else a frozen copy
        # (kept out of the module's parameters, so it is neither trained nor checkpointed).
        self._ref = None
        if self.with_reference and self.level != "L2":
            ref = copy.deepcopy(self.lm).eval()
            if self.autocast_dtype is not None:
                ref.to(self.autocast_dtype)  # frozen: no master copy needed
            for p in ref.parameters():
                p.requires_grad_(False)
            self._ref = [ref]  # in a list: not a submodule (not trained, not in the state)

    def _apply(self, fn, *args, **kwargs):
        # .to()/.cuda()/.half() go through _apply: move the reference model along with the module.
        out = super()._apply(fn, *args, **kwargs)
        for ref in getattr(self, "_ref", None) or []:
            ref._apply(fn, *args, **kwargs)
        return out

    # -- forward passes ------------------------------------------------------------------
    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        device = next(self.lm.parameters()).device
        return torch.autocast(device_type=device.type, dtype=self.autocast_dtype)

    def _logprobs(self, model, batch: dict[str, Any], with_entropy: bool = False):
        ids, mask = batch["input_ids"].long(), batch["attention_mask"].long()
        cmask = batch.get("completion_mask")
        if cmask is None:  # inference on plain sequences: every next token
            cmask = mask[:, 1:]
        with self._autocast():
            return completion_logprobs(model, ids, mask, cmask, with_entropy=with_entropy,
                                       chunk_tokens=self.chunk_tokens,
                                       share_prompts=self.share_prompts and "completion_mask" in batch)

    def _reference_logprobs(self, batch: dict[str, Any]) -> torch.Tensor:
        with torch.no_grad():
            if self.level == "L2":
                with self.lm.disable_adapter():
                    return self._logprobs(self.lm, batch)
            assert self._ref is not None, "a KL reference exists when kl_coef > 0"
            return self._logprobs(self._ref[0], batch)

    def _forward_train(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.with_reference:
            out["ref_logp"] = self._reference_logprobs(batch)
        if self.with_entropy:
            out["logp"], out["entropy"] = self._logprobs(self.lm, batch, True)
        else:
            out["logp"] = self._logprobs(self.lm, batch)
        return out

    def _forward(self, batch: dict[str, Any], **kwargs) -> dict[str, Any]:
        with torch.no_grad():
            return {"logp": self._logprobs(self.lm, batch)}

    # -- state ---------------------------------------------------------------------------
    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        if self.level == "L2":
            from peft import get_peft_model_state_dict

            return get_peft_model_state_dict(self.lm, adapter_name=self.policy_id)
        return self.lm.state_dict()

    def sync_state(self) -> dict[str, Any]:
        """The trainable weights as the rollout workers need them (:func:`core.tensor_codec.encode`d):
        at L1/L3 cast to the sampling dtype on the module's device *before* the copy to host (with fp32
        master weights and bf16 sampling: half the bytes through the object store, and the same bf16
        values the worker's ``load_state_dict`` would round to); LoRA adapters (L2) as they are. The
        checkpoint path, :meth:`get_state`, is unchanged: full precision."""
        cast = self.autocast_dtype if self.level != "L2" else None
        out = {}
        for k, v in self.trainable_state_dict().items():
            t = v.detach()
            if cast is not None and t.is_floating_point() and t.dtype != cast:
                out[k] = t.to(cast)  # a new tensor, on the module's device
            else:
                out[k] = host_copy(t)
        return encode(out, copy=False)  # each tensor above is this call's own: no second copy

    def get_state(self, components: Optional[Union[str, Collection[str]]] = None, *,
                  not_components: Optional[Union[str, Collection[str]]] = None, inference_only: bool = False,
                  **kwargs) -> dict[str, np.ndarray]:
        out = {}
        for k, v in self.trainable_state_dict().items():
            if v.dtype in (torch.bfloat16, torch.float16):  # numpy has no bf16: float32 (a new array)
                out[k] = v.detach().cpu().float().numpy()
            else:
                out[k] = host_copy(v).numpy()
        return out

    def set_state(self, state: dict[str, Any]) -> None:
        tensors = {k: torch.as_tensor(np.asarray(v)) for k, v in state.items()}
        with torch.no_grad():
            if self.level == "L2":
                from peft import set_peft_model_state_dict

                set_peft_model_state_dict(self.lm, tensors, adapter_name=self.policy_id)
            else:
                res = self.lm.load_state_dict(tensors, strict=False)
                if res.unexpected_keys:
                    raise KeyError(f"policy {self.policy_id!r}: state has keys the model lacks: "
                                   f"{res.unexpected_keys[:5]}")
