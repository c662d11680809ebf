"""Train a run config with ATGRPO on Ray and report what a GPU run needs to show.

Per iteration: wall time, the algorithm's timers (generate, env, sandbox, update, sync), training
success, and the learner process's peak CUDA memory (the local learner runs in this process when
``resources.num_learners`` is 0). With ``--resume``: after the iterations, save a checkpoint, build
a fresh algorithm from it, check that its learner weights equal the saved ones exactly, and train one
more iteration. Writes everything as JSON (``--out``). Runs on CPU too (tiny model), which is how the
test suite smoke-tests it::

    python benchmarks/gpu_train_check.py configs/gpu/planpath_smollm2.yaml --iterations 10 --out smol.json
    python benchmarks/gpu_train_check.py configs/gpu/planpath_smollm2.yaml --resume --iterations 3 \\
        --set 'model.path={tiny: {hidden: 2048, layers: 28, heads: 16, kv_heads: 8, intermediate: 6144}}'
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _peak_gib() -> Optional[float]:
    import torch

    if not torch.cuda.is_available():
        return None
    return round(torch.cuda.max_memory_allocated() / 2**30, 3)


def _release_gpu_memory() -> None:
    """Collect garbage, return cached CUDA blocks and restart the peak-memory count."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _weights_digest(algo) -> dict[str, str]:
    """One sha256 per policy over the learner's weights (raw bytes, any dtype)."""
    import numpy as np
    import torch

    out = {}
    for pid, state in algo.learner_group.get_weights().items():
        h = hashlib.sha256()
        for name in sorted(state):
            v = state[name]
            arr = v.detach().cpu().contiguous().view(torch.uint8).numpy() if isinstance(v, torch.Tensor) \
                else np.ascontiguousarray(v).view(np.uint8)
            h.update(name.encode())
            h.update(arr.tobytes())
        out[pid] = h.hexdigest()
    return out


def _compiled_layers(algo) -> dict[str, list[int]]:
    """Per policy: [compiled, all] decoder layers of the learner's model (``training.compile_layers``)."""
    def count(learner) -> dict[str, list[int]]:
        from rllib_integration.core.models import decoder_layers

        out = {}
        for pid in learner.module.keys():
            layers = decoder_layers(learner.module[pid].lm)
            out[pid] = [sum(getattr(x, "_compiled_call_impl", None) is not None for x in layers), len(layers)]
        return out
    return next(iter(algo.learner_group.foreach_learner(count))).get()


def _row(i: int, result: Mapping[str, Any], wall: float) -> dict[str, Any]:
    return {"iteration": i, "wall_s": round(wall, 2), "success_rate": result.get("success_rate"),
            "timers": {k: round(float(v), 2) for k, v in (result.get("timers") or {}).items()},
            "tokens_per_s": (result.get("throughput") or {}).get("tokens_per_s"),
            "valid_ratio": {a: m.get("valid_ratio") for a, m in (result.get("agents") or {}).items()},
            "learner_peak_gib": _peak_gib()}


def parse(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", nargs="?")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--resume", action="store_true", help="save, restore into a fresh algorithm, continue 1")
    ap.add_argument("--out", default=None, help="JSON file to write")
    ap.add_argument("--num-cpus", type=int, default=None)
    return ap.parse_args(argv)


def run_config(args: argparse.Namespace, *, check_paths: bool = True) -> dict[str, Any]:
    """The validated run config these arguments train (fails before Ray, naming the key)."""
    from rllib_integration.settings import load_config

    return load_config(args.config, list(args.sets) + [f"run.iterations={args.iterations}"], check_paths=check_paths)


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    args = parse(argv)
    cfg = run_config(args)
    import ray

    from rllib_integration import ATGRPO, ATGRPOConfig

    ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    report: dict[str, Any] = {"config": args.config, "sets": args.sets, "rows": []}
    t0 = time.perf_counter()
    algo = ATGRPOConfig.from_run_config(cfg).build_algo()
    report["setup_s"] = round(time.perf_counter() - t0, 1)
    report["policies"] = algo.policy_mapping
    try:
        for i in range(1, args.iterations + 1):
            t = time.perf_counter()
            result = algo.train()
            report["rows"].append(_row(i, result, time.perf_counter() - t))
            print(json.dumps(report["rows"][-1]), flush=True)
        report["compiled_layers"] = _compiled_layers(algo)
        if args.resume:
            ckpt = Path(tempfile.mkdtemp(prefix="atgrpo_ckpt_"))
            t = time.perf_counter()
            algo.save_to_path(str(ckpt))
            report["save_s"] = round(time.perf_counter() - t, 2)
            before = _weights_digest(algo)
            algo.stop()
            # Free the old learner before restoring (a name still bound to it kept its weights and Adam
            # state alive during the restore: session 1's "57.5 GiB after restore" was both learners),
            # then measure the restored learner's peak on its own.
            algo = None
            _release_gpu_memory()
            t = time.perf_counter()
            algo = ATGRPO.from_checkpoint(str(ckpt))
            report["restore_s"] = round(time.perf_counter() - t, 2)
            after = _weights_digest(algo)
            report["restored_weights_identical"] = before == after
            report["restored_compiled_layers"] = _compiled_layers(algo)
            t = time.perf_counter()
            result = algo.train()
            report["continued"] = _row(args.iterations + 1, result, time.perf_counter() - t)
            print(json.dumps({k: report[k] for k in ("save_s", "restore_s", "restored_weights_identical")}),
                  flush=True)
    finally:
        if algo is not None:
            algo.stop()
        ray.shutdown()
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    main()
