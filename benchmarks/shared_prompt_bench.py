"""One learner update with and without shared prompts (``training.share_prompts``), in one run.

    python3 benchmarks/shared_prompt_bench.py                      # SmolLM2-135M, LoRA r 16 on q/k/v/o
    python3 benchmarks/shared_prompt_bench.py --tiny --groups 2    # the tiny model: a quick check of the script

The batch is a GRPO update's: ``--groups`` prompts of ``--prompt-tokens`` tokens, ``--k`` candidates each with
completions of ``--min-completion``..``--max-completion`` tokens (random ids, seed 0), collated with
``collate_samples`` as the learner gets them. One update = what ``ATGRPOTorchLearner.update_step`` runs for a
policy: ``accumulate_policy_loss`` over ``--micro-batch-tokens`` micro-batches (default: one), each
``completion_logprobs`` (the module's forward) + ``policy_loss`` + backward; the optimizer step is left out
(the same in both). After an untimed update of two samples in each mode, the two modes alternate
(``--repeats`` rounds, unshared first), fp32, torch threads ``--threads``. Tokens/s counts the batch's tokens
(prompt + completion of every sample, what the unshared pass runs) over the update's wall time, so both modes
count the same work; "run" is the padded tokens the model actually ran. The old log-probs are the model's own
(a no-grad shared pass first), so the ratio is ~1 as in a first update. The max abs differences compare the
shared update's log-probs, loss and every gradient with the unshared one's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from types import SimpleNamespace

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch


def _batch(args, vocab: int, pad_id: int) -> dict:
    from rllib_integration.core.loss import collate_samples

    g = torch.Generator().manual_seed(0)
    samples = []
    for _ in range(args.groups):
        prompt = torch.randint(10, vocab, (args.prompt_tokens,), generator=g).tolist()
        for _ in range(args.k):
            c = int(torch.randint(args.min_completion, args.max_completion + 1, (1,), generator=g))
            samples.append(SimpleNamespace(prompt_token_ids=prompt,
                                           completion_token_ids=torch.randint(10, vocab, (c,), generator=g).tolist(),
                                           logprobs=[0.0] * c))  # replaced by the model's own below
    batch = collate_samples(samples, pad_id)
    batch["advantages"] = torch.randn(len(samples), generator=g)
    batch["row"] = torch.arange(len(samples))  # a 1-D column: each micro-batch carries its rows' indices
    return batch


def _model(args):
    from rllib_integration.core.models import build_tiny_model, load_model, smollm2_path

    path = build_tiny_model() if args.tiny else smollm2_path()
    model, tok = load_model(path, dtype=torch.float32)
    if args.lora_r:
        from peft import LoraConfig, get_peft_model

        torch.manual_seed(0)
        model = get_peft_model(model, LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r,
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
        with torch.no_grad():  # a trained adapter's B is not 0: give every LoRA weight a gradient
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0.0, 0.01)
    return model.train(), tok, path


def _update(model, batch, share: bool, budget):
    from rllib_integration.core.logprobs import completion_logprobs, prompt_groups
    from rllib_integration.core.loss import LossConfig
    from rllib_integration.core.microbatch import accumulate_policy_loss

    logps = torch.zeros_like(batch["completion_mask"])
    ran = []

    def forward(sub):
        ids, mask, cm = sub["input_ids"], sub["attention_mask"], sub["completion_mask"]
        groups = prompt_groups(ids, mask, cm) if share else None
        if groups is not None and groups.shared:
            first = groups.first_row
            active = groups.group >= 0
            ran.append(groups.n_prompts * int(groups.prompt_len[first].max())
                       + int(active.sum()) * int((groups.length - 1 - groups.prompt_len)[active].max()))
        else:
            ran.append(ids.shape[0] * ids.shape[1])
        lp = completion_logprobs(model, ids, mask, cm, share_prompts=share)
        logps[sub["row"], :lp.shape[1]] = lp.detach()
        return {"logp": lp}

    model.zero_grad(set_to_none=True)
    t = time.perf_counter()
    loss, _ = accumulate_policy_loss(forward, batch, LossConfig(), micro_batch_tokens=budget, share_prompts=share)
    dt = time.perf_counter() - t
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return dt, loss, grads, logps, sum(ran), len(ran)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiny", action="store_true", help="the tiny test model instead of SmolLM2")
    ap.add_argument("--lora-r", type=int, default=16, help="LoRA rank on q/k/v/o (0: the full model trains)")
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=62)
    ap.add_argument("--min-completion", type=int, default=20)
    ap.add_argument("--max-completion", type=int, default=32)
    ap.add_argument("--micro-batch-tokens", type=int, default=None, help="training.micro_batch_tokens (default: off)")
    ap.add_argument("--repeats", type=int, default=1, help="rounds of (unshared, shared)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok, path = _model(args)
    batch = _batch(args, len(tok), tok.pad_token_id)
    from rllib_integration.core.logprobs import completion_logprobs
    from rllib_integration.core.microbatch import micro_batch_logprobs

    # old log-probs: the model's own (behavior_logprobs: learner), so the PPO ratio is ~1 and the gradient has a
    # first update's scale (random old log-probs would make it ~exp(-10) smaller)
    batch["old_logprobs"] = micro_batch_logprobs(
        lambda sub: completion_logprobs(model, sub["input_ids"], sub["attention_mask"], sub["completion_mask"],
                                        share_prompts=True), batch, share_prompts=True)
    n_tokens = int(batch["attention_mask"].sum())
    print(f"model {path.name}{f' + LoRA r {args.lora_r} q/k/v/o' if args.lora_r else ' (full)'}; "
          f"{args.groups} groups x K={args.k}, prompt {args.prompt_tokens} tokens, completions "
          f"{args.min_completion}-{args.max_completion}; {n_tokens:,} tokens, micro_batch_tokens "
          f"{args.micro_batch_tokens}; torch threads {args.threads}")
    warm = {k: v[:2] for k, v in batch.items()}  # untimed: the first calls of each path (allocator, kernels)
    for share in (False, True):
        _update(model, warm, share, args.micro_batch_tokens)
    times: dict[bool, list[float]] = {False: [], True: []}
    last: dict[bool, tuple] = {}
    for _ in range(args.repeats):
        for share in (False, True):
            dt, loss, grads, logps, ran, parts = _update(model, batch, share, args.micro_batch_tokens)
            times[share].append(dt)
            last[share] = (loss, grads, logps, ran, parts)
            print(f"  share_prompts={str(share).lower():5s} {dt:7.2f} s  {n_tokens / dt:7.1f} tokens/s  "
                  f"(ran {ran:,} padded tokens in {parts} micro-batch(es))", flush=True)
    (l0, g0, lp0, ran0, p0), (l1, g1, lp1, ran1, p1) = last[False], last[True]
    d_loss = abs(float(l0) - float(l1))
    d_grad = max(float((g0[k] - g1[k]).abs().max()) for k in g0)
    g_max = max(float(g0[k].abs().max()) for k in g0)
    d_lp = float((lp0 - lp1).abs().max())
    t0, t1 = statistics.median(times[False]), statistics.median(times[True])
    print()
    print("| share_prompts | update (s) | tokens/s | padded tokens run | micro-batches |")
    print("|---|---|---|---|---|")
    print(f"| false | {t0:.2f} | {n_tokens / t0:.1f} | {ran0:,} | {p0} |")
    print(f"| true | {t1:.2f} | {n_tokens / t1:.1f} | {ran1:,} | {p1} |")
    print()
    print(f"speed-up {t0 / t1:.2f}x (median of {args.repeats}); max abs difference: log-probs {d_lp:.2e}, "
          f"loss {d_loss:.2e}, gradients {d_grad:.2e} (largest gradient {g_max:.2e}; {len(g0)} tensors)")


if __name__ == "__main__":
    main()
