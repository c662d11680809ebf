"""Real model replies to ``llm_marl/Math-v0`` problems, for the answer checker's table.

    PYTHONPATH=/tmp/smollm2:. python3 benchmarks/math_model_replies.py [--turns 1 2] [--problems 24]

Generates, on the CPU, the replies of SmolLM2-135M-Instruct (``load_smollm2``) and of the
project's tiny random model (``build_tiny_model()`` with its defaults) to the env's reasoner
prompts, wrapped in each model's chat template, for the first ``--problems`` distinct problems
of seeds 0, 1, 2, ... of split ``eval`` (difficulty 1 for even seeds, 2 for odd ones):

- turn 1 (``env.observe("reasoner")["prompt"]`` after ``reset(seed=...)``): greedy, and sampled
  at temperature 1 (top-k and top-p off) for each seed in ``--seeds`` (``torch.manual_seed(seed)``
  before one batched ``generate`` over all problems of a model);
- turn 2: greedy, after the model's own greedy turn-1 reply and the env's expert tool program
  (``print(<reference>)``, run by the ``local`` sandbox backend), so the prompt shows the tool's
  (correct) answer, as it does in a real episode where the tool got it right.

At most ``--max-new-tokens`` (256) tokens a reply. Deterministic on one machine and library
version; a re-run elsewhere may give other sampled replies. ``--turns 2`` regenerates turn 2 only
and keeps the file's turn-1 rows.

Writes ``tests/llm_marl_envs/math/data/model_replies.jsonl``, one reply a line: ``id``,
``problem``, ``reference`` (the env's answer), ``model``, ``turn``, ``decoding``, ``seed``, ``reply`` and
``equal``: the verdict a person gave by reading the reply (the labelling rule is in
``tests/llm_marl_envs/math/test_math_grader_pairs.py`` and docs/math.md), never the checker's.
A re-run keeps the label of every row whose problem, model, turn, decoding, seed and reply are
unchanged and writes ``"equal": null`` for new replies, which the tests refuse until labelled.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "llm_marl_envs" / "math" / "data" / "model_replies.jsonl"
MODELS = {"smollm2-135m-instruct": "smollm2", "tiny-random": "tiny"}


def problems(n: int) -> list[dict]:
    """``n`` distinct eval problems with the env's reasoner prompt."""
    from llm_marl_envs.math import env as math_env

    out: list[dict] = []
    seen: set[str] = set()
    seed = 0
    while len(out) < n:
        difficulty = 1 + seed % 2
        env = math_env.env(split="eval", difficulty=difficulty)
        env.reset(seed=seed)
        task = env.unwrapped.task
        if task.task_id not in seen:
            seen.add(task.task_id)
            out.append({"id": task.task_id, "problem_seed": seed, "difficulty": difficulty, "problem": task.problem,
                        "reference": task.answer, "prompt": env.observe("reasoner")["prompt"]})
        env.close()
        seed += 1
    return out


def load(which: str):
    from rllib_integration.core.models import build_tiny_model, load_model, load_smollm2

    if which == "smollm2":
        return load_smollm2()
    return load_model(build_tiny_model())


def generate(model, tok, prompts: list[str], *, sample: bool, seed: int, max_new_tokens: int,
             batch: int) -> list[str]:
    import torch

    texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
             for p in prompts]
    torch.manual_seed(seed)
    out: list[str] = []
    for i in range(0, len(texts), batch):
        enc = tok(texts[i:i + batch], return_tensors="pt", padding=True, add_special_tokens=False)
        kwargs = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0) if sample else dict(do_sample=False)
        with torch.no_grad():
            ids = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id, **kwargs)
        out += tok.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    return [t.strip() for t in out]


def turn2_prompt(problem: dict, first_reply: str) -> str:
    """The reasoner's turn-2 prompt after its turn-1 ``first_reply`` and the env's expert tool program
    (``print(<reference>)``, ``env.expert_text("tool")``), run by the ``local`` sandbox backend."""
    import warnings

    from llm_marl_envs.math import env as math_env
    from sandboxes.local import LocalSandbox

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "local is not isolation": it runs only the expert program
        box = LocalSandbox()
    env = math_env.env(split="eval", difficulty=problem["difficulty"], sandbox=box)
    env.reset(seed=problem["problem_seed"])
    env.step(first_reply)
    env.step(env.unwrapped.expert_text("tool"))
    assert env.agent_selection == "reasoner" and env.unwrapped.game_state.tool_answer is not None
    prompt = env.observe("reasoner")["prompt"]
    env.close()
    box.close()
    return prompt


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", type=int, default=24)
    parser.add_argument("--seeds", type=int, nargs="*", default=[0], help="sampling seeds (turn 1)")
    parser.add_argument("--turns", type=int, nargs="+", default=[1, 2], choices=[1, 2],
                        help="turns to (re)generate; rows of the other turns are kept from --out")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--batch", type=int, default=24)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    import torch

    torch.set_num_threads(2)
    out = Path(args.out)
    old: list[dict] = []
    if out.exists():
        old = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines() if line.strip()]
    labels = {(r["id"], r["model"], r["turn"], r["decoding"], r["seed"], r["reply"]): r for r in old}
    probs = problems(args.problems)
    rows: list[dict] = [r for r in old if r["turn"] not in args.turns]
    for name, which in MODELS.items():
        model, tok = load(which)
        for turn in sorted(args.turns):
            runs = [("greedy", 0)] + [("sample", s) for s in args.seeds] if turn == 1 else [("greedy", 0)]
            if turn == 1:
                prompts = [p["prompt"] for p in probs]
            else:  # after this model's greedy turn-1 reply to the same problem
                first = {r["id"]: r["reply"] for r in rows
                         if r["model"] == name and r["turn"] == 1 and r["decoding"] == "greedy"}
                prompts = [turn2_prompt(p, first[p["id"]]) for p in probs]
            for decoding, seed in runs:
                t0 = time.perf_counter()
                replies = generate(model, tok, prompts, sample=decoding == "sample", seed=seed,
                                   max_new_tokens=args.max_new_tokens, batch=args.batch)
                print(f"{name} turn {turn} {decoding} seed={seed}: {len(replies)} replies in "
                      f"{time.perf_counter() - t0:.1f} s")
                for p, reply in zip(probs, replies, strict=True):
                    prev = labels.get((p["id"], name, turn, decoding, seed, reply), {})
                    rows.append({"id": p["id"], "problem_seed": p["problem_seed"], "difficulty": p["difficulty"],
                                 "problem": p["problem"], "reference": p["reference"], "model": name, "turn": turn,
                                 "decoding": decoding, "seed": seed, "reply": reply, "equal": prev.get("equal"),
                                 **({"note": prev["note"]} if prev.get("note") else {})})
    order = {name: i for i, name in enumerate(MODELS)}
    rows.sort(key=lambda r: (order[r["model"]], r["turn"], r["decoding"] != "greedy", r["seed"], r["problem_seed"]))
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    kept = sum(r["equal"] is not None for r in rows)
    print(f"wrote {len(rows)} replies to {out} ({kept} with a label, {len(rows) - kept} to label)")


if __name__ == "__main__":
    main()
