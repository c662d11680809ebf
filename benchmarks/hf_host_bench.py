"""Host-side cost of the HF backend around ``model.generate`` (runs on CPU; no GPU needed).

On a GPU the static-cache decoding step is compiled and replayed as a CUDA graph, so what the
backend adds per step on the host (logits processors, stopping criteria, eager ops launched
between graph replays) and per call (building the batch, cutting completions at eos, decoding
text) is what separates it from raw ``generate`` (issue 10: 0.89x of raw static-cache generate on
an H100). This measures both parts device-independently:

1. **ops per decode step**: PyTorch operators dispatched per generated token (torch.profiler,
   CPU), raw static-cache ``generate`` against ``HFBackend`` (static cache, ``logprobs=sampled``)
   on the same prompts, whose width is a multiple of 64 so neither pads. Every operator outside
   the compiled step is one kernel launch (or more) on a GPU.
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
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _model(path: str | None):
    from rllib_integration.core.models import build_tiny_model, load_model

    model, tok = load_model(Path(path) if path else build_tiny_model(), dtype=torch.float32, device="cpu")
    tok.pad_token = tok.pad_token or tok.eos_token
    return model.eval(), tok


def ops_per_step(model, tok, rows: int, prompt_len: int, new_tokens: int) -> dict[str, float]:
    """Operators dispatched per decode step (eos suppressed, so both run all their steps): each path
    is profiled at ``new_tokens`` and at half of it, and the difference is divided by the extra
    steps, which cancels the per-call operators (prefill, setup, post-processing)."""
    from torch.profiler import ProfilerActivity, profile
    from transformers import GenerationConfig

    from rllib_integration.core.backends import HFBackend, SamplingParams

    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(3, min(tok.vocab_size, model.config.vocab_size), (rows, prompt_len), generator=g)
    be = HFBackend({"p": (model, tok)}, device="cpu", static_cache=True, max_batch_size=rows, compile=False)
    ids = prompts.tolist()

    def raw(n: int) -> None:
        cfg = GenerationConfig(max_new_tokens=n, do_sample=True, temperature=1.0, top_k=0,
                               pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                               cache_implementation="static", disable_compile=True)
        torch.manual_seed(3)
        with torch.no_grad():
            model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), generation_config=cfg)

    def backend(n: int) -> None:
        be._generate_batch("p", ids, SamplingParams(temperature=1.0, max_new_tokens=n, seed=3), seed=3)

    def n_ops(fn, n: int) -> int:
        fn(n)  # warm-up
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            fn(n)
        return sum(Counter(e.name for e in prof.events()).values())

    # eos made unlikely by a bias on the LM head (min_new_tokens would add a logits processor to raw
    # generate only)
    bias = torch.zeros(model.config.vocab_size)
    bias[tok.eos_token_id] = -1e4
    model.lm_head.register_parameter("bias", torch.nn.Parameter(bias, requires_grad=False))
    short = max(1, new_tokens // 2)
    try:
        return {name: (n_ops(fn, new_tokens) - n_ops(fn, short)) / (new_tokens - short)
                for name, fn in (("raw_generate_static", raw), ("hf_backend_static", backend))}
    finally:
        model.lm_head.register_parameter("bias", None)


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
    print(f"ops per decode step: raw generate (static) {ops['raw_generate_static']:.1f}, "
          f"HFBackend (static) {ops['hf_backend_static']:.1f}, "
          f"added {ops['hf_backend_static'] - ops['raw_generate_static']:+.1f}")
    h = res["host_outside_generate"]
    print(f"HFBackend host time outside generate, {args.rows} x {args.new_tokens} tokens: "
          f"min {h['min_ms']:.1f} ms, median {h['median_ms']:.1f} ms ({h['tokens']} tokens)")
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    main()
