"""Warm start: supervised fine-tuning on demonstrations from each task's own expert (Ray-free).

Weak base models cannot follow a task's action format, so RL never gets a reward to work
with. The field's answer is a small supervised "cold start" before RL; every llm_marl task
has an expert (:meth:`llm_marl_envs.LLMTeamEnv.expert_action`: the grid solvers and search
programs, Code-v0's reference programs and tests, Math-v0's reference answers).

Two steps, usable from a plain script:

1. :func:`collect_demonstrations` plays expert episodes on the **train split only** and
   records, per agent step, the role's prompt (the env's own ``observe``) and the expert's
   text: a :class:`Demonstration`.
2. :func:`warm_start` fine-tunes the policies of an :class:`~rllib_integration.core.backends.HFBackend`
   (or of models given by path / ``(model, tokenizer)``) on them: cross-entropy on the
   completion tokens only (prompt tokens masked), each demonstration going to the policy
   its agent maps to, for every specialization level: L1 (one shared model), L2 (one base
   with a LoRA adapter per policy: only that adapter is trained), L3 (a model per policy).
   Model inputs are built exactly as the rollout sampler builds them
   (:class:`~rllib_integration.core.rollout.RolloutSampler`: chat template with an optional
   system prompt, or raw text), and the completion is the expert's text followed by the
   end-of-sequence token, so the model learns to stop. The warm-started policies are saved
   with ``save_pretrained`` (an adapter directory per policy at L2) and load with
   ``from_pretrained`` / ``PeftModel.from_pretrained`` like any checkpoint.

>>> demos = collect_demonstrations("PlanPath-v0", {"size": 4, "prompt_style": "compact"}, 8)  # doctest: +SKIP
>>> result = warm_start(backend, demos, {"tool": "tool", "executor": "executor"}, epochs=3,
...                     lr=1e-3, save_dir="runs/warm")                                        # doctest: +SKIP
>>> result.epoch_losses                                                                       # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import torch

from .backends.base import SamplingParams
from .logprobs import completion_logprobs
from .loss import aggregate, collate_samples
from .microbatch import DENOMINATOR_KEY, accumulate_loss
from .options import LossConfig
from .rollout import RolloutSampler

__all__ = ["Demonstration", "EncodedDemonstration", "WarmStartResult", "collect_demonstrations",
           "encode_demonstrations", "demonstration_loss", "save_policies", "warm_start"]

PolicyMap = Union[str, Mapping[str, str], Callable[[str], str]]


@dataclasses.dataclass(frozen=True)
class Demonstration:
    """One expert step: what ``agent`` saw (``prompt``) and what the expert wrote (``completion``)."""

    agent: str
    prompt: str
    completion: str
    task_id: str
    turn: int
    episode_seed: int
    env_id: str


@dataclasses.dataclass
class EncodedDemonstration:
    """A demonstration in token ids for one policy (the fields :func:`collate_samples` reads)."""

    policy_id: str
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    logprobs: list[float]
    demo: Demonstration


@dataclasses.dataclass
class WarmStartResult:
    """What :func:`warm_start` did: mean completion-token loss per epoch (all policies), per
    policy per epoch, the held-out loss before/after each epoch (if held-out demos were given),
    where each policy was saved, and how long it took."""

    epoch_losses: list[float]
    policy_losses: dict[str, list[float]]
    heldout_losses: list[float]
    saved: dict[str, Path]
    num_demonstrations: int
    completion_tokens: int
    seconds: float


# ---------------------------------------------------------------------------- demonstrations
def collect_demonstrations(source: Union[str, Callable[[dict[str, Any]], Any]],
                           env_config: Optional[Mapping[str, Any]] = None, num_episodes: int = 16,
                           seed: int = 0, *, only_successful: bool = True, max_steps: int = 200
                           ) -> list[Demonstration]:
    """Play ``num_episodes`` expert episodes of ``source`` (seeds ``seed, seed + 1, ...``) on the
    train split and return every agent step as a :class:`Demonstration`.

    ``source`` is a registered env id, or a factory called with the env's keyword arguments as one
    mapping (e.g. the RLlib layer's ``EnvEntry``, which builds a user's task from its entry point).

    ``env_config`` are the env's keyword arguments; a ``split`` other than ``"train"`` is refused
    (demonstrations never come from evaluation problems). An expert action the env judges
    invalid is a bug in the task's expert and raises. With ``only_successful`` (default) the
    steps of an episode the expert does not solve are left out.
    """
    import llm_marl_envs

    config = dict(env_config or {})
    split = config.pop("split", "train")
    if split != "train":
        raise ValueError(f"collect_demonstrations: env_config split={split!r}; demonstrations come from the "
                         "train split only (evaluation problems must stay unseen)")
    if num_episodes < 1:
        raise ValueError(f"num_episodes must be >= 1, got {num_episodes}")
    if isinstance(source, str):
        env_id, made = source, llm_marl_envs.make(source, split="train", **config)
    else:
        env_id, made = str(getattr(source, "env_id", source)), source({**config, "split": "train"})
    env = getattr(made, "unwrapped", made)
    assert env.split == "train", f"{env_id} was built on split {env.split!r}, not 'train'"
    demos: list[Demonstration] = []
    for ep in range(num_episodes):
        episode_seed = int(seed) + ep
        env.reset(seed=episode_seed)
        steps: list[Demonstration] = []
        for agent in env.agent_iter(max_iter=max_steps):
            obs, _, term, trunc, _ = env.last()
            if term or trunc:
                env.step(None)
                continue
            text = env.expert_action(agent)
            steps.append(Demonstration(agent, obs["prompt"], text, env.task_id, env.turn, episode_seed, env_id))
            env.step(text)
            info = env.infos[agent]
            if not info.get("action_valid", True):
                raise RuntimeError(f"{env_id} seed {episode_seed}: the expert's {agent} action was judged invalid "
                                   f"({info.get('reason', 'no reason given')}); this is a bug in the task's expert")
        if env.success or not only_successful:
            demos.extend(steps)
    return demos


def _sampler(backend: Any, policy_mapping: PolicyMap, chat: bool, system_prompt: Optional[str]) -> RolloutSampler:
    """A sampler used only for its prompt building and policy mapping (the same code as rollouts)."""
    return RolloutSampler(backend, policy_mapping, SamplingParams(), k=1, chat=chat, system_prompt=system_prompt)


def encode_demonstrations(backend: Any, demos: Sequence[Demonstration], policy_mapping: PolicyMap, *,
                          chat: bool = True, system_prompt: Optional[str] = None) -> list[EncodedDemonstration]:
    """Token ids of each demonstration for the policy its agent maps to: the prompt exactly as
    the rollout sampler sends it (``chat``/``system_prompt`` as there), the completion as the
    expert's text plus the tokenizer's end-of-sequence token."""
    sampler = _sampler(backend, policy_mapping, chat, system_prompt)
    out = []
    for d in demos:
        pid = sampler.policy_for(d.agent)
        tok = backend.tokenizer(pid)
        prompt_ids = backend.encode(sampler.request(pid, d.prompt))
        completion_ids = list(tok(d.completion, add_special_tokens=False)["input_ids"])
        if tok.eos_token_id is not None:
            completion_ids.append(int(tok.eos_token_id))
        out.append(EncodedDemonstration(pid, prompt_ids, completion_ids, [0.0] * len(completion_ids), d))
    return out


def _as_backend(backend_or_models: Any, device: Optional[str]) -> Any:
    from .backends import HFBackend

    if isinstance(backend_or_models, HFBackend):
        return backend_or_models
    if isinstance(backend_or_models, Mapping):
        return HFBackend(backend_or_models, device=device)
    raise TypeError("warm_start needs an HFBackend or a mapping {policy_id: model path or (model, tokenizer)}, got "
                    f"{type(backend_or_models).__name__} (other backends cannot be trained in place)")


def _batches(items: list[EncodedDemonstration], batch_size: int, generator: Optional[torch.Generator]):
    order = torch.randperm(len(items), generator=generator).tolist() if generator is not None else range(len(items))
    by_policy: dict[str, list[EncodedDemonstration]] = {}
    for i in order:
        by_policy.setdefault(items[i].policy_id, []).append(items[i])
    batches = [(pid, xs[s:s + batch_size]) for pid, xs in by_policy.items() for s in range(0, len(xs), batch_size)]
    if generator is not None:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
    return batches


def _batch_loss(backend: Any, pid: str, batch: list[EncodedDemonstration], *,
                micro_batch_tokens: Optional[int] = None, backward: bool = False) -> tuple[torch.Tensor, int]:
    """Mean negative log-likelihood of the completion tokens of ``batch`` under policy ``pid`` (detached),
    back-propagated with ``backward``.

    The learner's gradient accumulation (:func:`~.microbatch.accumulate_loss`): with ``micro_batch_tokens``
    the batch is cut into micro-batches of at most that many padded tokens, each one's share of the batch mean
    computed and back-propagated on its own (activations bounded by the budget, the whole batch's gradient);
    without it, one pass over the batch."""
    model = backend.model(pid)  # activates the policy's adapter at L2
    tok = backend.tokenizer(pid)
    device = next(model.parameters()).device
    t = collate_samples(batch, tok.pad_token_id, device=device)

    def forward(sub: dict[str, Any]) -> dict[str, torch.Tensor]:
        # completion positions only, LM head in chunks (no float32 batch x length x vocabulary tensor)
        return {"logp": completion_logprobs(model, sub["input_ids"], sub["attention_mask"], sub["completion_mask"])}

    def nll(sub: dict[str, Any], out: Mapping[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
        return aggregate(-out["logp"], sub["completion_mask"], "token-mean", denominator=sub[DENOMINATOR_KEY]), {}

    loss, _ = accumulate_loss(forward, nll, t, LossConfig(agg="token-mean"), micro_batch_tokens=micro_batch_tokens,
                              backward=backward)
    return loss, int(t["completion_mask"].sum().item())


@torch.no_grad()
def demonstration_loss(backend_or_models: Any, demos: Sequence[Demonstration], policy_mapping: PolicyMap, *,
                       chat: bool = True, system_prompt: Optional[str] = None, batch_size: int = 8,
                       device: Optional[str] = None, micro_batch_tokens: Optional[int] = None) -> float:
    """Mean per-token negative log-likelihood of the demonstrations' completion tokens (the
    warm start's loss, without training): e.g. on held-out demonstrations."""
    backend = _as_backend(backend_or_models, device)
    encoded = encode_demonstrations(backend, demos, policy_mapping, chat=chat, system_prompt=system_prompt)
    total = n = 0.0
    for pid, batch in _batches(encoded, batch_size, None):
        backend.model(pid).eval()
        loss, tokens = _batch_loss(backend, pid, batch, micro_batch_tokens=micro_batch_tokens)
        total += float(loss) * tokens
        n += tokens
    return total / max(n, 1.0)


def _progress(total: int, enabled: Union[bool, str]):
    if not enabled or enabled == "lines":
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # a line per epoch instead
        return None
    return tqdm(total=total, desc="warm start", unit="batch")


def warm_start(backend_or_models: Any, demos: Sequence[Demonstration], policy_mapping: PolicyMap, *,
               epochs: int = 3, lr: float = 1e-4, batch_size: int = 8, weight_decay: float = 0.0,
               max_grad_norm: float = 1.0, chat: bool = True, system_prompt: Optional[str] = None,
               heldout: Optional[Sequence[Demonstration]] = None, save_dir: Optional[str | os.PathLike] = None,
               seed: int = 0, progress: Union[bool, str] = True, device: Optional[str] = None,
               micro_batch_tokens: Optional[int] = None) -> WarmStartResult:
    """Supervised fine-tuning of each policy on the demonstrations its agents map to.

    Args:
        backend_or_models: an :class:`~rllib_integration.core.backends.HFBackend` (its live models
            are trained in place, so a sampler on it samples the warm-started policies; L2:
            ``HFBackend.with_lora``), or ``{policy_id: path or (model, tokenizer)}``.
        demos: from :func:`collect_demonstrations`.
        policy_mapping: agent -> policy id (dict, callable, or one id for all agents), as for
            :class:`~rllib_integration.core.rollout.RolloutSampler`.
        epochs, lr, batch_size, weight_decay, max_grad_norm: AdamW, one optimizer per policy
            over its trainable parameters (at L2: its adapter only), gradient norm clipped.
        chat, system_prompt: how prompts are rendered; use the settings of the RL sampler.
        heldout: demonstrations not trained on (e.g. other train seeds): their loss is measured
            before training and after every epoch.
        save_dir: save every policy to ``save_dir/<policy_id>`` (full model + tokenizer at
            L1/L3; the adapter + tokenizer at L2).
        seed: shuffling seed. ``progress``: a tqdm bar if tqdm is installed, else a line per epoch;
            ``"lines"``: a line per epoch (logs); ``False``: nothing.
        micro_batch_tokens: padded tokens per forward/backward pass (the RL update's
            ``training.micro_batch_tokens``): a batch longer than that is accumulated over micro-batches,
            the same update with activation memory bounded by the budget; None or 0: one pass per batch.

    Returns a :class:`WarmStartResult` (``epoch_losses``: mean completion-token loss of each epoch).
    """
    if epochs < 1 or batch_size < 1 or not lr > 0:
        raise ValueError(f"warm_start needs epochs >= 1, batch_size >= 1 and lr > 0; got epochs={epochs}, "
                         f"batch_size={batch_size}, lr={lr}")
    if not demos:
        raise ValueError("warm_start got no demonstrations (collect_demonstrations returned none?)")
    t0 = time.perf_counter()
    backend = _as_backend(backend_or_models, device)
    encoded = encode_demonstrations(backend, demos, policy_mapping, chat=chat, system_prompt=system_prompt)
    policies = sorted({e.policy_id for e in encoded})
    optimizers: dict[str, torch.optim.Optimizer] = {}
    for pid in policies:
        params = [p for p in backend.model(pid).parameters() if p.requires_grad]
        if not params:
            raise ValueError(f"policy {pid!r} has no trainable parameters")
        optimizers[pid] = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)

    def heldout_loss() -> float:
        assert heldout, "only called with held-out demonstrations"
        return demonstration_loss(backend, heldout, policy_mapping, chat=chat, system_prompt=system_prompt,
                                  batch_size=batch_size, micro_batch_tokens=micro_batch_tokens)

    heldout_losses = [heldout_loss()] if heldout else []
    generator = torch.Generator().manual_seed(int(seed))
    epoch_losses: list[float] = []
    policy_losses: dict[str, list[float]] = {pid: [] for pid in policies}
    n_batches = len(_batches(encoded, batch_size, None))
    bar = _progress(epochs * n_batches, progress)
    try:
        for epoch in range(epochs):
            sums = {pid: [0.0, 0] for pid in policies}
            for pid, batch in _batches(encoded, batch_size, generator):
                model = backend.model(pid)
                model.train()
                optimizers[pid].zero_grad(set_to_none=True)
                loss, tokens = _batch_loss(backend, pid, batch, micro_batch_tokens=micro_batch_tokens, backward=True)
                params = [p for g in optimizers[pid].param_groups for p in g["params"]]
                torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
                optimizers[pid].step()
                model.eval()
                sums[pid][0] += float(loss.detach()) * tokens
                sums[pid][1] += tokens
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(epoch=epoch + 1, loss=f"{loss.item():.3f}")
            for pid in policies:
                policy_losses[pid].append(sums[pid][0] / max(sums[pid][1], 1))
            epoch_losses.append(sum(s for s, _ in sums.values()) / max(sum(n for _, n in sums.values()), 1))
            if heldout:
                heldout_losses.append(heldout_loss())
            if progress and bar is None:
                extra = f", held-out {heldout_losses[-1]:.4f}" if heldout else ""
                print(f"warm start epoch {epoch + 1}/{epochs}: loss {epoch_losses[-1]:.4f}{extra}", flush=True)
    finally:
        if bar is not None:
            bar.close()
    for pid in policies:
        backend.model(pid).eval()
    saved = save_policies(backend, policies, save_dir) if save_dir is not None else {}
    return WarmStartResult(epoch_losses, policy_losses, heldout_losses, saved, len(encoded),
                           sum(len(e.completion_token_ids) for e in encoded), time.perf_counter() - t0)


def save_policies(backend: Any, policies: Sequence[str], save_dir: str | os.PathLike) -> dict[str, Path]:
    """``save_pretrained`` each policy of an HF backend into ``save_dir/<policy_id>``: the model
    and tokenizer (L1/L3), or the policy's LoRA adapter and the tokenizer (L2; load it with
    ``PeftModel.from_pretrained(base, path)`` or ``HFBackend.with_lora(base, {pid: path})``)."""
    root = Path(save_dir)
    root.mkdir(parents=True, exist_ok=True)
    saved: dict[str, Path] = {}
    for pid in policies:
        model, tok = backend.model(pid), backend.tokenizer(pid)
        out = root / pid
        adapter = model.active_adapter if hasattr(model, "peft_config") else None  # set by backend.model(pid)
        if adapter is not None:
            # PeftModel saves a non-"default" adapter into <dir>/<adapter name>.
            model.save_pretrained(str(root), selected_adapters=[adapter])
            if adapter != pid:
                (root / adapter).rename(out)
        else:
            model.save_pretrained(str(out))
        tok.save_pretrained(str(out))
        saved[pid] = out
    return saved
