"""Host-side cost of the HF backend around ``model.generate`` (runs on CPU; no GPU needed).

On a GPU the static-cache decoding step is compiled and replayed as a CUDA graph, so what the
backend adds per step on the host (logits processors, stopping criteria, eager ops launched
between graph replays) and per call (building the batch, cutting completions at eos, decoding
text) is what separates it from raw ``generate`` (issue 10: 0.89x of raw static-cache generate on
an H100). This measures both parts device-independently:

1. **ops per decode step**: PyTorch operators dispatched per generated token (torch.profiler,
   CPU), raw static-cache ``generate`` against ``HFBackend`` (static cache, ``logprobs=sampled``)
   on the same prompts, whose width is a multiple of 64 so neither pads: all ``aten::`` operators,
   and the kernel ones (the innermost operators doing work, not views, metadata or allocations:
   on a GPU each one outside the compiled step is a kernel launch between CUDA-graph replays).
2. **host ms per call** outside ``model.generate``: everything ``HFBackend._generate_batch`` does
   before and after it (left-padding the prompts, the recorder's final gather, copying tokens
   and log-probs to the host, cutting at eos, decoding the text), for ``--rows`` completions of
   ``--new-tokens`` tokens (``generate`` is timed separately and subtracted).

    python benchmarks/hf_host_bench.py --rows 64 --new-tokens 256 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _model(path: str | None):
    from rllib_integration.core.models import build_tiny_model, load_model

    model, tok = load_model(Path(path) if path else build_tiny_model(), dtype=torch.float32, device="cpu")
    tok.pad_token = tok.pad_token or tok.eos_token
    return model.eval(), tok


#: operators that only make a view or tensor metadata, or allocate: no kernel runs for them on a GPU
NO_KERNEL = frozenset(f"aten::{n}" for n in (
    "as_strided", "view", "_unsafe_view", "reshape", "_reshape_alias", "select", "slice", "narrow", "squeeze",
    "unsqueeze", "expand", "t", "transpose", "permute", "detach", "detach_", "alias", "resolve_conj",
    "resolve_neg", "real", "lift_fresh", "empty", "empty_strided", "empty_like", "new_empty", "to",
    "contiguous", "result_type", "size", "stride", "is_nonzero", "item", "_local_scalar_dense", "resize_"))


def _counts(prof) -> tuple[int, int]:
    """(operators, kernel operators): every dispatched ``aten::`` operator, and those of them that
    are not in :data:`NO_KERNEL` and call only such operators (the innermost operator doing the
    work: on a GPU each launches a kernel)."""
    ops = [e for e in prof.events() if e.name.startswith("aten::")]
    kernels = [e for e in ops if e.name not in NO_KERNEL and all(c.name in NO_KERNEL for c in e.cpu_children)]
    return len(ops), len(kernels)


def ops_per_step(model, tok, rows: int, prompt_len: int, new_tokens: int) -> dict[str, dict[str, float]]:
    """Operators dispatched per decode step, all and kernel ones (eos suppressed on every eos id the
    backend stops on, and both paths checked to run all their steps): each path is profiled at
    ``new_tokens`` and at half of it, and the difference is divided by the extra steps, which
    cancels the per-call operators (prefill, setup, post-processing)."""
    from torch.profiler import ProfilerActivity, profile
    from transformers import GenerationConfig

    from rllib_integration.core.backends import HFBackend, SamplingParams

    if new_tokens < 2:
        raise ValueError(f"new_tokens must be >= 2 (two lengths are differenced), got {new_tokens}")
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(3, min(tok.vocab_size, model.config.vocab_size), (rows, prompt_len), generator=g)
    be = HFBackend({"p": (model, tok)}, device="cpu", static_cache=True, max_batch_size=rows, compile=False)
    eos_ids = HFBackend._eos_ids(model, tok)
    ids = prompts.tolist()

    def raw(n: int) -> list[int]:
        cfg = GenerationConfig(max_new_tokens=n, do_sample=True, temperature=1.0, top_k=0,
                               pad_token_id=tok.pad_token_id, eos_token_id=eos_ids,
                               cache_implementation="static", disable_compile=True)
        torch.manual_seed(3)
        with torch.no_grad():
            out = model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), generation_config=cfg)
        return [row.shape[0] - sum(int(t in eos_ids) for t in row.tolist()) for row in out[:, prompt_len:]]

    def backend(n: int) -> list[int]:
        comps = be._generate_batch("p", ids, SamplingParams(temperature=1.0, max_new_tokens=n, seed=3), seed=3)
        return [len(c.token_ids) if c.finish_reason == "length" else -1 for c in comps]

    def counts(fn, n: int) -> tuple[int, int]:
        fn(n)  # warm-up
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            lengths = fn(n)
        if lengths != [n] * rows:  # every row ran every step without eos
            raise RuntimeError(f"eos was sampled despite the bias: lengths {lengths}")
        return _counts(prof)

    # eos made unlikely by a bias on the LM head (min_new_tokens would add a logits processor to raw
    # generate only); the head's own bias, if any, is put back afterwards
    old_bias = model.lm_head.bias
    bias = torch.zeros(model.config.vocab_size) if old_bias is None else old_bias.detach().clone()
    bias[eos_ids] -= 1e4
    model.lm_head.register_parameter("bias", torch.nn.Parameter(bias, requires_grad=False))
    short = new_tokens // 2
    try:
        out = {}
        for name, fn in (("raw_generate_static", raw), ("hf_backend_static", backend)):
            (a_ops, a_k), (b_ops, b_k) = counts(fn, new_tokens), counts(fn, short)
            out[name] = {"ops": (a_ops - b_ops) / (new_tokens - short), "kernels": (a_k - b_k) / (new_tokens - short)}
        return out
    finally:
        model.lm_head.register_parameter("bias", old_bias)


def host_ms(model, tok, rows: int, prompt_len: int, new_tokens: int, repeats: int) -> dict[str, float]:
    """Milliseconds per ``_generate_batch`` call spent outside ``model.generate`` (min and median)."""
    from rllib_integration.core.backends import HFBackend, SamplingParams

    g = torch.Generator().manual_seed(2)
    vocab = min(tok.vocab_size, model.config.vocab_size)
    ids = [torch.randint(3, vocab, (prompt_len - (i % 7),), generator=g).tolist() for i in range(rows)]
    be = HFBackend({"p": (model, tok)}, device="cpu", static_cache=True, max_batch_size=rows, compile=False)
    params = SamplingParams(temperature=1.0, max_new_tokens=new_tokens, seed=3)
    inner = model.generate
    spent = []

    def timed(**kw):
        t0 = time.perf_counter()
        try:
            return inner(**kw)
        finally:
            spent.append(time.perf_counter() - t0)

    model.generate = timed
    outside = []
    try:
        be._generate_batch("p", ids, params, seed=3)
        for _ in range(repeats):
            spent.clear()
            t0 = time.perf_counter()
            comps = be._generate_batch("p", ids, params, seed=3)
            outside.append((time.perf_counter() - t0 - sum(spent)) * 1e3)
    finally:
        del model.generate
    return {"min_ms": min(outside), "median_ms": statistics.median(outside),
            "tokens": sum(len(c.token_ids) for c in comps)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="a model directory (default: the embedded tiny model)")
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=64, help="a multiple of 64: the static cache pads to that")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=None, help="write the results as JSON")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    model, tok = _model(args.model)
    res = {"ops_per_step": ops_per_step(model, tok, args.rows, args.prompt_len, min(args.new_tokens, 32)),
           "host_outside_generate": host_ms(model, tok, args.rows, args.prompt_len, args.new_tokens, args.repeats),
           "args": vars(args)}
    ops = res["ops_per_step"]
    raw, be = ops["raw_generate_static"], ops["hf_backend_static"]
    for kind in ("ops", "kernels"):
        print(f"{kind} per decode step: raw generate (static) {raw[kind]:.1f}, HFBackend (static) {be[kind]:.1f}, "
              f"added {be[kind] - raw[kind]:+.1f}")
    h = res["host_outside_generate"]
    print(f"HFBackend host time outside generate, {args.rows} x {args.new_tokens} tokens: "
          f"min {h['min_ms']:.1f} ms, median {h['median_ms']:.1f} ms ({h['tokens']} tokens)")
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    main()
