"""The AT-GRPO TorchLearner: the shared PPO-clip loss over per-token log-probs.

The train batch of a module (built by :meth:`ATGRPO.training_step` from rollout samples with
:func:`.core.loss.collate_samples`) holds ``input_ids``/``attention_mask`` ``(B, T)``,
``completion_mask``/``old_logprobs`` ``(B, T-1)`` and ``advantages`` ``(B,)`` (computed on the
driver with :func:`.core.advantages.compute_advantages` over the whole iteration's groups).
``compute_loss_for_module`` (RLlib's loss hook, reached through RLlib's ``compute_losses`` once per
micro-batch) calls :func:`.core.loss.policy_loss` with that module's (possibly per-policy overridden) clip
ranges, KL/entropy coefficients and aggregation.

Only trainable parameters go to the optimizer (the LoRA adapter at L2; the whole model at
L1/L3), with the module's own learning rate (``config.lr`` or its per-policy override).

GPU-scale update (:meth:`ATGRPOTorchLearner.update_step`, RLlib's ``_uncompiled_update``): each module's minibatch is
split into micro-batches of at most ``config.micro_batch_tokens`` padded tokens
(:mod:`.core.microbatch`; unset or 0 = one micro-batch; with ``config.share_prompts`` a prompt's samples stay
together and their prompt runs once), each micro-batch's loss is backpropagated
with the minibatch's aggregation denominator, and one optimizer step applies the accumulated
gradient (the same gradient as the full batch). With ``training.behavior_logprobs: learner``,
``old_logprobs`` are the learner's own, computed before the iteration's first update by
:meth:`ATGRPOTorchLearner.behavior_logprobs` (no gradient, the same micro-batches), and the batch also
carries the sampler's (``sampler_logprobs``: the drift metrics, and ``config.tis_cap``'s truncated importance
weights). ``seq-mean-token-sum-norm`` divides by
``config.max_new_tokens`` (Dr.GRPO's constant). Optimizer state is checkpointed through
:mod:`.core.tensor_codec`, so bfloat16 state survives RLlib's numpy conversion bit for bit. The RLlib internals
this needs (the hooks it overrides, the learner's parameter and optimizer tables) go through :mod:`._rllib`.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Mapping, Optional

import torch

from ray.rllib.core.learner.torch.torch_learner import TorchLearner

from . import _rllib
from .core.loss import LossConfig
from .core.microbatch import accumulate_loss, merge_loss_metrics, micro_batch_logprobs, micro_batch_policy_loss
from .core.tensor_codec import decode, encode

__all__ = ["ATGRPOTorchLearner"]


def _inference_logprobs(module: Any, batch: dict[str, Any]) -> torch.Tensor:
    """An ``LLMRLModule``'s inference forward: the no-grad log-probs at ``batch["completion_mask"]``."""
    return module.forward_inference(batch)["logp"]


@_rllib.rllib_hooks("update_step", "optimizer_state", "load_optimizer_state")
class ATGRPOTorchLearner(TorchLearner):
    def get_parameters(self, module) -> list:
        return [p for p in module.parameters() if p.requires_grad]

    def configure_optimizers_for_module(self, module_id, config=None) -> None:
        module = self.module[module_id]
        params = self.get_parameters(module)
        # fused CUDA kernel when the parameters live on a GPU (one launch for all tensors)
        fused = bool(params) and all(p.is_cuda for p in params)
        optimizer = torch.optim.Adam(params, eps=1e-8, fused=True if fused else None)
        self.register_optimizer(module_id=module_id, optimizer=optimizer, params=params,
                                lr_or_lr_schedule=config.lr)

    @staticmethod
    def loss_config(config: Any) -> LossConfig:
        """The :class:`LossConfig` of one module from its (per-module) algorithm config."""
        return LossConfig(clip_low=float(config.clip_low), clip_high=float(config.clip_high),
                          kl_coef=float(config.kl_coef), kl_estimator=config.kl_estimator,
                          entropy_coef=float(config.entropy_coef), agg=config.agg,
                          norm_tokens=int(config.max_new_tokens),
                          tis_cap=None if config.tis_cap is None else float(config.tis_cap))

    @staticmethod
    def share_prompts(config: Any, module: Any = None) -> bool:
        """Whether a module's micro-batches are cut for a forward that runs each shared prompt once: its
        ``share_prompts``, unless ``gradient_checkpointing`` is on or the module's model is not plain full
        attention (its ``share_prompts`` False: :func:`.core.logprobs.full_attention_only`); the module's forward
        then runs per sample (:func:`.core.logprobs.completion_logprobs`), so its micro-batches must be counted
        per sample."""
        return (bool(getattr(config, "share_prompts", False))
                and not bool(getattr(config, "gradient_checkpointing", False))
                and bool(getattr(module, "share_prompts", True)))

    def compute_loss_for_module(self, *, module_id: str, config: Any, batch: dict[str, Any],
                                fwd_out: dict[str, Any]) -> torch.Tensor:
        """RLlib's loss hook: :func:`.core.loss.policy_loss` of one module's (micro-)batch given its
        ``forward_train`` output. :meth:`update_step` reaches it through RLlib's
        :meth:`compute_losses` once per micro-batch (the batch then carries the minibatch's aggregation
        denominator, :data:`.core.microbatch.DENOMINATOR_KEY`); override it to change the loss."""
        loss, metrics = micro_batch_policy_loss(batch, fwd_out, self.loss_config(config))
        collecting = getattr(self, "_loss_metric_parts", None)
        parts = collecting.get(module_id) if collecting is not None else None
        if parts is not None:  # inside an update: merged over the micro-batches there
            parts.append(metrics)
        else:
            self.metrics.log_dict({k: float(v) for k, v in metrics.items()}, key=module_id, window=1)
        return loss

    def _micro_batch_loss(self, module_id: str, sub: dict[str, Any],
                          fwd_out: Mapping[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
        """One micro-batch's loss through RLlib's ``compute_losses`` -> ``compute_loss_for_module``."""
        parts: list[dict[str, float]] = []
        assert self._loss_metric_parts is not None  # set by update_step around its micro-batches
        self._loss_metric_parts[module_id] = parts
        loss = self.compute_losses(fwd_out={module_id: fwd_out}, batch={module_id: sub})[module_id]
        return loss, merge_loss_metrics(parts)

    def update_step(self, batch: dict, **kwargs):
        """Micro-batched forward/backward per module, then one optimizer step (module docstring); RLlib's
        ``TorchLearner._uncompiled_update`` (:func:`._rllib.rllib_hooks`).

        RLlib's own update runs one ``forward_train`` over the whole batch, then ``compute_losses`` and
        one backward; here each module's minibatch is split into token-bounded micro-batches and each
        goes ``forward_train`` -> ``compute_losses`` (-> :meth:`compute_loss_for_module`) -> backward,
        so the gradients accumulate to the full minibatch's before the one optimizer step."""
        _rllib.record_off_policyness(self, batch)
        _rllib.zero_grads(self)
        losses = {}
        self._loss_metric_parts: Optional[dict[str, list[dict[str, float]]]] = {}
        try:
            for module_id, mb in batch.items():
                config = self.config.get_config_for_module(module_id)
                module = self.module[module_id]
                loss, metrics = accumulate_loss(module.forward_train,
                                                functools.partial(self._micro_batch_loss, module_id), mb,
                                                self.loss_config(config),
                                                micro_batch_tokens=getattr(config, "micro_batch_tokens", None),
                                                share_prompts=self.share_prompts(config, module.unwrapped()))
                self.metrics.log_dict(metrics, key=module_id, window=1)
                losses[module_id] = loss
        finally:
            self._loss_metric_parts = None
        grads = _rllib.param_grads(self)
        with contextlib.ExitStack() as stack:
            if self.config.num_learners > 1:
                for mod in self.module.values():
                    if isinstance(mod, torch.nn.Module):
                        stack.enter_context(mod.no_sync())  # type: ignore[operator]  # DDP-wrapped (num_learners > 1)
            self.apply_gradients(self.postprocess_gradients(grads))
        return {}, losses, {}

    def behavior_logprobs(self, batch: Any) -> dict[str, Any]:
        """The learner's own log-probs of a ``MultiAgentBatch``'s completion tokens under its current weights:
        ``{module_id: float32 array (B, T-1)}`` aligned with each module's ``completion_mask`` (0 elsewhere).

        What ``training.behavior_logprobs: learner`` uses as ``old_logprobs``: each module's inference forward
        (:func:`.core.logprobs.completion_logprobs`, as ``forward_train`` runs it, autocast included), without
        gradients, over the micro-batches its update cuts (``config.micro_batch_tokens``), so the first
        update's forward sees the same rows and widths and its PPO ratio is 1 (bit for bit on a deterministic
        device). Under DDP (``num_learners > 1``) the unwrapped module runs alone (one learner is asked)."""
        tensors = _rllib.tensor_batch(self, batch)
        out = {}
        for module_id, mb in tensors.policy_batches.items():
            config = self.config.get_config_for_module(module_id)
            module = self.module[module_id].unwrapped()
            forward = functools.partial(_inference_logprobs, module)
            lp = micro_batch_logprobs(forward, mb, micro_batch_tokens=getattr(config, "micro_batch_tokens", None),
                                      share_prompts=self.share_prompts(config, module))
            out[module_id] = lp.cpu().numpy()
        return out

    def get_sync_weights(self) -> dict[str, Any]:
        """``{module_id: LLMRLModule.sync_state()}``: what :meth:`ATGRPO._sync_weights` pushes to the workers."""
        out = {}
        for mid in self.module.keys():
            mod = self.module[mid]
            mod = getattr(mod, "module", mod)  # DDP-wrapped when num_learners > 1
            out[mid] = mod.sync_state()  # type: ignore[union-attr]  # an LLMRLModule (the only module class here)
        return out

    def optimizer_state(self) -> dict:
        """The optimizers' checkpoint state, each optimizer's ``state_dict`` through :func:`.core.tensor_codec.encode`
        (RLlib's ``Learner._get_optimizer_state``)."""
        return {name: {"module_id": module_id, "state": encode(optim.state_dict())}
                for name, (module_id, optim) in _rllib.named_optimizers(self).items()}

    def load_optimizer_state(self, state: dict) -> None:
        """Restore :meth:`optimizer_state` (RLlib's ``Learner._set_optimizer_state``)."""
        _rllib.load_optimizer_state_as_rllib(
            self, {name: {**sd, "state": decode(sd["state"])} for name, sd in state.items()})
