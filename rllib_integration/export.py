"""Using a trained team: generate with the policies of a checkpoint, and export them.

A checkpoint of ``llm-marl train`` (or ``algo.save_to_path``, or a Tune checkpoint) holds each
policy's RLModule. :class:`TrainedTeam` loads them without Ray and generates exactly as the
rollout workers do (same backend, same weights, same prompt formatting)::

    from rllib_integration.export import TrainedTeam

    team = TrainedTeam.from_checkpoint("runs/default")        # a run directory or its checkpoint/
    team.act("executor", "...prompt...")                       # greedy reply of the executor's policy
    episode = team.play(seed=0)                                # one eval-split episode, greedy
    print(episode.success, [(s.agent, s.completion, s.reward) for s in episode.steps])

:func:`export_policies` (``llm-marl export RUN_DIR OUT_DIR``) writes each policy as a
``save_pretrained`` folder that transformers and peft load on their own: at L1/L3 a full model
(``AutoModelForCausalLM.from_pretrained(OUT_DIR/<policy>)``), at L2 the base model once
(``OUT_DIR/base``) and one LoRA adapter per policy
(``PeftModel.from_pretrained(base_model, OUT_DIR/<policy>)``), or with ``merge_lora`` a full
model per policy. Each folder also holds the tokenizer.

In a running algorithm, ``algo.get_module(policy_id).lm`` is the trained Hugging Face model
(a ``PeftModel`` at L2), and :meth:`TrainedTeam.from_algorithm` wraps an ``ATGRPO`` instance.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from .settings import ConfigError, UsageError

__all__ = ["TrainedTeam", "Episode", "load_policy_modules", "export_policies", "find_checkpoint", "run_modules",
           "check_out_dir"]


def _module_dir(checkpoint: Path) -> Path:
    d = checkpoint / "learner_group" / "learner" / "rl_module"
    if not d.is_dir():
        raise ConfigError(f"{str(checkpoint)!r} holds no policies ({str(d)!r} is missing); give a checkpoint "
                          "written by llm-marl train / ATGRPO.save_to_path, or its run directory")
    return d


def _is_checkpoint(p: Path) -> bool:
    return (p / "class_and_ctor_args.pkl").is_file()


def find_checkpoint(path: str | os.PathLike) -> Path:
    """A run directory of ``llm-marl train`` (its ``checkpoint/``) or a checkpoint directory -> the checkpoint.

    Raises :class:`~.settings.UsageError` saying what ``path`` is instead (missing, a file, a run without
    a checkpoint yet, a folder of runs) and what to give."""
    p = Path(path).expanduser()
    for cand in (p, p / "checkpoint"):
        if _is_checkpoint(cand):
            return cand.resolve()
    give = "give the output directory of llm-marl train (e.g. runs/default) or its checkpoint/"
    if not p.exists():
        raise UsageError(f"{str(p)!r} does not exist; {give}")
    if not p.is_dir():
        raise UsageError(f"{str(p)!r} is a file, not a run directory; {give}")
    if (p / "config.yaml").is_file():
        raise UsageError(f"{str(p)!r} holds a run of llm-marl train without its final checkpoint/ (the run stopped "
                         "early or is still running); give a run that finished, or one of its checkpoint_NNNN/ "
                         "(run.checkpoint_every)")
    runs = sorted({str(d.parent if d.name == "checkpoint" else d)
                   for d in [*p.glob("*/checkpoint"), *p.glob("*")] if d.is_dir() and _is_checkpoint(d)})
    if runs:
        more = f" (and {len(runs) - 3} more)" if len(runs) > 3 else ""
        raise UsageError(f"{str(p)!r} is a folder of runs, not a run; give one of them: {', '.join(runs[:3])}{more}")
    raise UsageError(f"{str(p)!r} is neither a run directory of llm-marl train (no checkpoint/ in it) nor a "
                     f"checkpoint (no class_and_ctor_args.pkl); {give}")


def check_out_dir(out_dir: str | os.PathLike, *, what: str = "OUT_DIR") -> Path:
    """The folder ``out_dir`` as a path, after checking that it is (or can be made) a directory: raises
    :class:`~.settings.UsageError` where it, or a parent of it, is an existing file, or nothing can be
    written there. Nothing is created."""
    out = Path(out_dir).expanduser()
    if out.exists() and not out.is_dir():
        raise UsageError(f"{what} {str(out)!r} is an existing file, not a directory; give the path of a "
                         "directory (created if missing)")
    parent = out
    while not parent.exists():
        if parent.parent == parent:
            break
        parent = parent.parent
    if parent != out and parent.exists() and not parent.is_dir():
        raise UsageError(f"{what} {str(out)!r} cannot be created: {str(parent)!r} is a file")
    if parent.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{what} {str(out)!r}: {str(parent)!r} is not writable; give a directory you can write")
    return out


def run_modules(checkpoint: Path, imports: Sequence[str] = ()) -> list[str]:
    """The modules a checkpoint's env needs: ``--import`` plus ``env.modules`` of the run's config.yaml."""
    modules = list(imports)
    for cand in (checkpoint / "config.yaml", checkpoint.parent / "config.yaml"):
        if cand.exists():
            from .settings import load_yaml

            modules += list(((load_yaml(cand.read_text()) or {}).get("env") or {}).get("modules") or [])
            break
    return list(dict.fromkeys(modules))


def load_policy_modules(checkpoint: str | os.PathLike) -> dict[str, Any]:
    """policy id -> its trained :class:`~.rl_module.LLMRLModule`, restored from a checkpoint (no Ray needed)."""
    import torch  # noqa: F401  (RLModule state holds tensors)
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModule

    multi = MultiRLModule.from_checkpoint(str(_module_dir(find_checkpoint(checkpoint))))
    return {pid: multi[pid] for pid in multi.keys()}


def _algorithm_config(checkpoint: Path, imports: Sequence[str]) -> Any:
    """The run's ``ATGRPOConfig`` (its env entry may need the user's task modules imported first)."""
    from .envs import import_env_modules

    import_env_modules(run_modules(checkpoint, imports))
    with open(checkpoint / "class_and_ctor_args.pkl", "rb") as f:
        ctor = pickle.load(f)
    args = ctor.get("ctor_args_and_kwargs", ((), {}))
    config = args[0][0] if args[0] else args[1].get("config")
    if isinstance(config, dict):
        from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

        config = AlgorithmConfig.from_state(config)
    return config


@dataclasses.dataclass
class Episode:
    """One episode played by a :class:`TrainedTeam`: its steps (``Sample`` records: agent, prompt,
    completion, reward, valid, ...) and the env's verdict."""

    steps: list
    success: bool
    total_reward: float


class TrainedTeam:
    """The trained policies of a run, generating as its rollout workers do (see the module docstring)."""

    def __init__(self, modules: Mapping[str, Any], mapping: Mapping[str, str], config: Any, *,
                 device: Optional[str] = None):
        from .policies import LLMPolicySpec, make_backend

        self.modules = dict(modules)
        self.mapping = dict(mapping)
        self.config = config
        self.specs = {pid: LLMPolicySpec(**{k: v for k, v in dict(m.model_config).items()
                                            if k in {f.name for f in dataclasses.fields(LLMPolicySpec)}})
                      for pid, m in self.modules.items()}
        self.backend = make_backend(self.specs, backend="hf", device=device or "cpu")
        for pid, m in self.modules.items():
            self.backend.update_weights(pid, m.trainable_state_dict())

    @classmethod
    def from_checkpoint(cls, checkpoint: str | os.PathLike, *, imports: Sequence[str] = (),
                        device: Optional[str] = None) -> "TrainedTeam":
        """Load a checkpoint (or a run directory of ``llm-marl train``); ``imports``: modules that register
        a task of your own (``env.modules`` of the run's config.yaml are imported too); ``device``: where
        the team generates (default ``cpu``)."""
        path = find_checkpoint(checkpoint)
        config = _algorithm_config(path, imports)
        modules = load_policy_modules(path)
        check = config.check_env()
        from .policies import resolve_mapping

        _, mapping = resolve_mapping(config, check.agents, env_name=check.entry.name)
        return cls(modules, mapping, config, device=device)

    @classmethod
    def from_algorithm(cls, algo: Any) -> "TrainedTeam":
        """The current policies of a running ``ATGRPO`` (a copy: training goes on independently)."""
        modules = {pid: copy.deepcopy(algo.get_module(pid)) for pid in algo.policy_specs}
        return cls(modules, algo.policy_mapping, algo.config)

    # -- generation ---------------------------------------------------------------------
    def _sampler(self, temperature: float, max_new_tokens: Optional[int], seed: int) -> Any:
        from .core.backends.base import SamplingParams
        from .core.rollout import RolloutSampler

        cfg = self.config
        stop = tuple(cfg.stop) if isinstance(cfg.stop, (list, tuple)) else cfg.stop
        params = SamplingParams(temperature=float(temperature), top_p=float(cfg.top_p),
                                max_new_tokens=int(max_new_tokens or cfg.max_new_tokens), stop=stop, seed=int(seed))
        return RolloutSampler(self.backend, lambda agent: self.mapping[agent], params, k=1, chat=bool(cfg.chat),
                              system_prompt=cfg.system_prompt, step_workers=1)

    def act(self, agent: str, prompt: str, *, temperature: float = 0.0, max_new_tokens: Optional[int] = None,
            seed: int = 0) -> str:
        """The reply of ``agent``'s policy to ``prompt`` (greedy by default; chat template and stop strings
        as in training)."""
        if agent not in self.mapping:
            raise KeyError(f"{agent!r} is not an agent of this team; agents: {sorted(self.mapping)}")
        sampler = self._sampler(temperature, max_new_tokens, seed)
        return self.backend.generate([sampler.request(self.mapping[agent], prompt)], sampler.params)[0][0].text

    def play(self, env: Any = None, *, seed: int = 0, split: str = "eval", temperature: float = 0.0) -> Episode:
        """Play one episode (the run's env on ``split`` by default, or ``env``) with the trained team."""
        if env is None:
            check = self.config.check_env()
            env = check.entry({**dict(self.config.env_config), **(dict(self.config.eval_env_config)
                                                                   if split == "eval" else {}), "split": split})
        sampler = self._sampler(temperature, None, seed)
        steps = sampler.collect_parallel([env], seeds=[int(seed)])
        summary = sampler.last_episodes[0]
        return Episode(steps=steps, success=bool(summary.success), total_reward=float(summary.total_reward))


# ------------------------------------------------------------------------------ export
def _save_tokenizer(model_path: str, out: Path) -> None:
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(model_path).save_pretrained(str(out))


def export_policies(checkpoint: str | os.PathLike, out_dir: str | os.PathLike, *, merge_lora: bool = False,
                    imports: Sequence[str] = ()) -> dict[str, Path]:
    """Write each policy of a checkpoint as a ``save_pretrained`` folder; returns policy id -> folder.

    L1/L3: ``OUT_DIR/<policy>/`` a full model + tokenizer. L2: ``OUT_DIR/base/`` (the base model,
    once) and ``OUT_DIR/<policy>/`` its LoRA adapter (``adapter_config.json`` names ``OUT_DIR/base``)
    + tokenizer; with ``merge_lora`` a full model per policy instead. ``team.json`` records the
    agent -> policy mapping and the generation settings of the run.
    """
    path = find_checkpoint(checkpoint)
    out = check_out_dir(out_dir).resolve()  # before loading anything: nothing half-written
    modules = load_policy_modules(path)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for pid, module in sorted(modules.items()):
        cfg = dict(module.model_config)
        dest = out / pid
        if dest.exists():
            shutil.rmtree(dest)
        if cfg.get("level") == "L2" and not merge_lora:
            base = out / "base"
            if not base.exists():
                shutil.copytree(cfg["model_path"], base)
            with tempfile.TemporaryDirectory(dir=out) as tmp:
                module.lm.save_pretrained(tmp, selected_adapters=[pid])
                src = Path(tmp) / pid if (Path(tmp) / pid / "adapter_config.json").exists() else Path(tmp)
                shutil.copytree(src, dest)
            adapter_cfg = dest / "adapter_config.json"
            meta = json.loads(adapter_cfg.read_text())
            meta["base_model_name_or_path"] = str(base)
            adapter_cfg.write_text(json.dumps(meta, indent=2))
        else:
            lm = module.lm
            if cfg.get("level") == "L2":
                lm = copy.deepcopy(lm).merge_and_unload()
            lm.save_pretrained(str(dest))
        _save_tokenizer(cfg["model_path"], dest)
        written[pid] = dest
    try:
        config = _algorithm_config(path, imports)
        check = config.check_env()
        from .policies import resolve_mapping

        _, mapping = resolve_mapping(config, check.agents, env_name=check.entry.name)
        team = {"env": check.entry.name, "policy_mapping": mapping, "chat": bool(config.chat),
                "system_prompt": config.system_prompt, "max_new_tokens": int(config.max_new_tokens),
                "stop": config.stop, "specialization": config.specialization}
        (out / "team.json").write_text(json.dumps(team, indent=2))
    except ConfigError:
        pass  # the env's module is not importable here: the policies are written all the same
    return written
