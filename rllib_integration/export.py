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
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from .checkpoints import find_checkpoint
from .settings import UsageError

__all__ = ["TrainedTeam", "Episode", "load_policy_modules", "export_policies", "find_checkpoint",
           "check_out_dir"]


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


def load_policy_modules(checkpoint: str | os.PathLike, *, imports: Sequence[str] = ()) -> dict[str, Any]:
    """policy id -> its trained :class:`~.rl_module.LLMRLModule`, rebuilt from the settings a checkpoint
    records and loaded with its weights (no Ray needed, nothing unpickled)."""
    return _load(find_checkpoint(checkpoint), imports)[0]


def _load(path: Path, imports: Sequence[str]) -> tuple[dict[str, Any], Any, dict[str, str]]:
    """The policy modules of a checkpoint, its ``ATGRPOConfig`` and the agent -> policy mapping."""
    from .algorithm import ATGRPOConfig, policy_module_spec
    from .checkpoints import CheckpointError, algorithm_config, read_checkpoint

    ckpt = read_checkpoint(path)
    config = algorithm_config(ckpt, imports, config_cls=ATGRPOConfig)
    spec, mapping, _ = policy_module_spec(config)
    multi: Any = spec.build()  # a MultiRLModule (RLlib types build() as RLModule)
    try:
        multi.set_state(ckpt.state["learner_group"]["learner"]["rl_module"])
    except (KeyError, TypeError, RuntimeError) as e:
        raise CheckpointError(f"{str(path)!r}: its weights do not fit the policies its settings build "
                              f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    return {pid: multi[pid] for pid in multi.keys()}, config, mapping


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
        a task of your own (the ``env.modules`` the checkpoint names are imported too, checked first:
        :func:`~.checkpoints.check_module_paths`); ``device``: where the team generates (default ``cpu``).
        Nothing in the checkpoint is unpickled (:mod:`.checkpoints`)."""
        modules, config, mapping = _load(find_checkpoint(checkpoint), imports)
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
            env = check.entry({**dict(self.config.env_config), **(dict(self.config.env_eval_config)
                                                                   if split == "eval" else {}), "split": split})
        sampler = self._sampler(temperature, None, seed)
        steps = sampler.collect_parallel([env], seeds=[int(seed)])
        summary = sampler.last_episodes[0]
        return Episode(steps=steps, success=bool(summary.success), total_reward=float(summary.total_reward))


# ------------------------------------------------------------------------------ export
def _model_dir(model_path: Any, checkpoint: Path) -> Path:
    """The model folder a checkpoint's policy names (its tokenizer is read there), checked: an existing
    directory of a Hugging Face model outside the run directory; raises CheckpointError saying why not."""
    from .checkpoints import CheckpointError

    d = Path(str(model_path)).expanduser()
    run = checkpoint.parent if checkpoint.name.startswith("checkpoint") else checkpoint
    if not d.is_absolute() or not d.is_dir() or not (d / "config.json").is_file():
        raise CheckpointError(f"{str(checkpoint)!r} names the model folder {str(model_path)!r}, which is not a "
                              "model directory here (an absolute path holding config.json); the policies were "
                              "trained from it and need its tokenizer")
    if d.resolve().is_relative_to(run.resolve()):
        raise CheckpointError(f"{str(checkpoint)!r} names the model folder {str(d)!r} inside its run directory: a "
                              "run directory brings no files of its own to read as a model")
    return d


def _save_tokenizer(model_dir: Path, out: Path) -> None:
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(str(model_dir), trust_remote_code=False).save_pretrained(str(out))


def export_policies(checkpoint: str | os.PathLike, out_dir: str | os.PathLike, *, merge_lora: bool = False,
                    imports: Sequence[str] = ()) -> dict[str, Path]:
    """Write each policy of a checkpoint as a ``save_pretrained`` folder; returns policy id -> folder.

    L1/L3: ``OUT_DIR/<policy>/`` a full model + tokenizer. L2: ``OUT_DIR/base/`` (the base model,
    once, written from the weights the policies were trained on) and ``OUT_DIR/<policy>/`` its LoRA adapter
    (``adapter_config.json`` names ``OUT_DIR/base``) + tokenizer; with ``merge_lora`` a full model per policy
    instead. ``team.json`` records the agent -> policy mapping and the generation settings of the run. The
    checkpoint is read as data (:mod:`.checkpoints`); the model folder it names is checked before its
    tokenizer is read, and nothing else is copied from the host.
    """
    path = find_checkpoint(checkpoint)
    out = check_out_dir(out_dir).resolve()  # before loading anything: nothing half-written
    modules, config, mapping = _load(path, imports)
    model_dirs = {pid: _model_dir(dict(m.model_config).get("model_path"), path) for pid, m in modules.items()}
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
                copy.deepcopy(module.lm).unload().save_pretrained(str(base))
                _save_tokenizer(model_dirs[pid], base)
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
        _save_tokenizer(model_dirs[pid], dest)
        written[pid] = dest
    check = config.check_env()
    team = {"env": check.entry.name, "policy_mapping": mapping, "chat": bool(config.chat),
            "system_prompt": config.system_prompt, "max_new_tokens": int(config.max_new_tokens),
            "stop": config.stop, "specialization": config.specialization}
    (out / "team.json").write_text(json.dumps(team, indent=2))
    return written
