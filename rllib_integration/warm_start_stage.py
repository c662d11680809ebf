"""The warm-start stage of an ATGRPO run (``warm_start.episodes > 0``), before the first rollout.

Weak base models write no valid action, so RL has no signal: the stage collects demonstrations from
the task's own expert on the train split (:func:`core.warm_start.collect_demonstrations`), trains every
policy on them in its learner (:func:`warm_start_learner`, through RLlib's ``foreach_learner``), and
pushes the weights to the rollout workers. A run restored from a checkpoint skips it (its weights are
already warm-started). The Ray-free trainer itself is :mod:`.core.warm_start`.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

from llm_marl_envs import LLMTeamEnv

from .core.seeding import demo_seed
from .core.warm_start import collect_demonstrations
from .settings import ConfigError

__all__ = ["run_warm_start", "warm_start_learner"]


def run_warm_start(cfg: Any, *, env_entry: Any, env_config: dict[str, Any], learner_group: Any,
                   mapping: dict[str, str], model_paths: dict[str, str], evaluate: Callable[[], dict[str, Any]],
                   sync_weights: Callable[[], Any]) -> dict[str, Any]:
    """The ``warm_start`` stage (before the first rollout): expert demonstrations on the train split
    (the run's env config), a supervised pass on every learner's modules (at L2 only the adapters),
    then the weights are pushed to the rollout workers. With evaluation on, the eval split is played
    greedily before it (``eval_before``) and after it (``eval_after``). Returns the stage's metrics.

    Called by :meth:`~.algorithm.ATGRPO.setup` once its learner group and rollout workers are built:
    ``cfg`` is the run's config, ``env_entry``/``env_config`` the env (with its sandbox), ``mapping`` agent ->
    policy, ``model_paths`` policy -> model directory (its tokenizer); ``evaluate`` plays the eval split,
    ``sync_weights`` pushes the learner's weights to the rollout workers."""
    ws = dict(cfg.warm_start)
    probe = env_entry(dict(cfg.env_config))
    if not isinstance(getattr(probe, "unwrapped", probe), LLMTeamEnv):
        raise ConfigError(f"warm_start.episodes={ws['episodes']}: the warm start needs an llm_marl task with an "
                          f"expert (env {cfg.env!r} is not an LLMTeamEnv); set warm_start.episodes=0")
    out: dict[str, Any] = {}
    if cfg.evaluation_interval:
        out["eval_before"] = evaluate()
    t0 = time.perf_counter()
    demos = collect_demonstrations(env_entry, env_config, int(ws["episodes"]), seed=demo_seed(int(ws["seed"])))
    heldout = (collect_demonstrations(env_entry, env_config, int(ws["heldout_episodes"]),
                                      seed=demo_seed(int(ws["seed"]), int(ws["episodes"])))
               if int(ws["heldout_episodes"]) else [])
    collect_s = time.perf_counter() - t0
    if not demos:
        raise ConfigError(f"warm_start: the expert solved none of the {ws['episodes']} demonstration episodes "
                          "of this env config; raise warm_start.episodes or change env.config")
    print(f"warm start: {len(demos)} demonstrations from {ws['episodes']} expert episodes "
          f"({collect_s:.1f}s), {ws['epochs']} epochs", flush=True)
    results = learner_group.foreach_learner(
        warm_start_learner,
        demos=demos, heldout=heldout, mapping=dict(mapping), model_paths=model_paths, epochs=int(ws["epochs"]),
        lr=float(ws["lr"]), batch_size=int(ws["batch_size"]), seed=int(ws["seed"]), chat=bool(cfg.chat),
        system_prompt=cfg.system_prompt, micro_batch_tokens=getattr(cfg, "micro_batch_tokens", None))
    res = next(iter(results)).get()
    sync_weights()
    if cfg.evaluation_interval:
        out["eval_after"] = evaluate()
    out.update(res, collect_s=collect_s, time_s=time.perf_counter() - t0, num_episodes=int(ws["episodes"]),
               loss_first_epoch=res["epoch_losses"][0], loss_last_epoch=res["epoch_losses"][-1])
    if res["heldout_losses"]:
        out.update(heldout_loss_before=res["heldout_losses"][0], heldout_loss_after=res["heldout_losses"][-1])
    return out


def warm_start_learner(learner: Any, *, demos: list, heldout: list, mapping: dict[str, str],
                       model_paths: dict[str, str], epochs: int, lr: float, batch_size: int, seed: int, chat: bool,
                       system_prompt: Optional[str], micro_batch_tokens: Optional[int] = None) -> dict[str, Any]:
    """Run :func:`core.warm_start.warm_start` on a learner's own modules (in place, before any RL
    update): each policy's ``lm`` (a PeftModel with only its adapter trainable at L2) with its
    tokenizer. A KL reference copy (L1/L3) is reset to the warm-started weights."""
    import torch
    from transformers import AutoTokenizer

    from .core.backends import HFBackend
    from .core.warm_start import warm_start

    pids = sorted(set(mapping.values()))
    models = {}
    for pid in pids:
        module = learner.module[pid]
        models[pid] = (module.lm, AutoTokenizer.from_pretrained(model_paths[pid]))
    device = str(next(models[pids[0]][0].parameters()).device)
    torch.manual_seed(seed)
    res = warm_start(HFBackend(models, device=device), demos, mapping, epochs=epochs, lr=lr, batch_size=batch_size,
                     chat=chat, system_prompt=system_prompt, heldout=heldout or None, seed=seed, progress="lines",
                     micro_batch_tokens=micro_batch_tokens)
    for pid in pids:
        module = learner.module[pid]
        module.lm.train()
        if getattr(module, "_ref", None):
            module._ref[0].load_state_dict(module.lm.state_dict())
    return {"epoch_losses": res.epoch_losses, "heldout_losses": res.heldout_losses,
            "policy_losses": res.policy_losses, "num_demonstrations": res.num_demonstrations,
            "completion_tokens": res.completion_tokens, "train_s": res.seconds}
