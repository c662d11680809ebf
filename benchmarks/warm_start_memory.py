"""Peak memory of the warm start with and without micro-batches (issue 40), SmolLM2 with a LoRA per role.

    python3 benchmarks/warm_start_memory.py [--budgets 0 512] [--episodes 8] [--batch-size 8] [--model smollm2]

Each budget runs in a fresh process (its peak RSS is its own): PlanPath-v0 4x4 expert demonstrations (the tool's
program is ~300 tokens, so a batch of 8 is ~2,500 padded tokens), one epoch of
:func:`rllib_integration.core.warm_start.warm_start` at L2 (a LoRA adapter per role, r 16 on q/k/v/o), the
``micro_batch_tokens`` budget given (0: one forward/backward pass per batch, the old behaviour). Prints per budget:
peak RSS of the process (``ru_maxrss``), RSS after loading the model, seconds, and the epoch loss (equal across
budgets up to float rounding: the same update).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def one(budget: int, episodes: int, batch_size: int, model: str) -> dict:
    import torch
    from peft import LoraConfig

    from rllib_integration.core.backends import HFBackend
    from rllib_integration.core.models import build_tiny_model, smollm2_path
    from rllib_integration.core.warm_start import collect_demonstrations, warm_start

    torch.set_num_threads(1)
    torch.manual_seed(0)
    path = str(smollm2_path() if model == "smollm2" else build_tiny_model())
    targets = ["q_proj", "k_proj", "v_proj", "o_proj"]
    lora = {r: LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=targets) for r in ("tool", "executor")}
    backend = HFBackend.with_lora(path, lora, device="cpu")
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    demos = collect_demonstrations("PlanPath-v0", {"size": 4}, num_episodes=episodes, seed=0)
    t0 = time.perf_counter()
    res = warm_start(backend, demos, {"tool": "tool", "executor": "executor"}, epochs=1, lr=1e-4,
                     batch_size=batch_size, progress=False, micro_batch_tokens=budget or None)
    return {"budget": budget, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "rss_after_load_mb": loaded, "seconds": time.perf_counter() - t0, "loss": res.epoch_losses[0],
            "demonstrations": res.num_demonstrations, "completion_tokens": res.completion_tokens}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budgets", nargs="+", type=int, default=[0, 512])
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--model", default="smollm2", choices=["smollm2", "tiny"])
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # the child process
    args = ap.parse_args(argv)
    if args.one is not None:
        print(json.dumps(one(args.one, args.episodes, args.batch_size, args.model)))
        return 0
    for budget in args.budgets:
        out = subprocess.run([sys.executable, __file__, "--one", str(budget), "--episodes", str(args.episodes),
                              "--batch-size", str(args.batch_size), "--model", args.model],
                             capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        r = json.loads(out)
        print(f"micro_batch_tokens={budget or 'off'}: peak RSS {r['peak_rss_mb']:.0f} MB (after loading "
              f"{r['rss_after_load_mb']:.0f} MB), {r['seconds']:.1f} s, loss {r['loss']:.5f} "
              f"({r['demonstrations']} demonstrations, {r['completion_tokens']} completion tokens)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
