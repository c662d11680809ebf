"""HF backend GPU options on CPU: sampled-token log-probs without stacked logits, the static KV
cache and the forward log-prob mode give the same tokens and log-probs as plain ``generate``."""

import pytest
import torch

from rllib_integration.core.backends import GenerationRequest, HFBackend, SamplingParams
from rllib_integration.core.models import load_model

PROMPTS = ["solve: 1 2 3", "plan a path", "x", "the grid is 4 by 4 and the goal"]


def _reference(model, tok, prompts, params, pad_rows_to=0):
    """Today's path: raw ``generate`` with ``output_logits=True``, log_softmax of the stacked logits.

    ``pad_rows_to``: the batch the static-cache backend runs (its real rows, then copies of the first
    prompt up to ``max_batch_size``): a seed's samples depend on the batch shape, so the reference runs the
    same rows and only the real ones are compared."""
    from transformers import GenerationConfig

    ids = [tok(p)["input_ids"] for p in prompts for _ in range(params.n)]
    ids += [ids[0]] * max(0, pad_rows_to - len(ids))
    width = max(map(len, ids))
    x = torch.full((len(ids), width), tok.pad_token_id)
    attn = torch.zeros_like(x)
    for b, p in enumerate(ids):
        x[b, width - len(p):] = torch.tensor(p)
        attn[b, width - len(p):] = 1
    greedy = params.temperature == 0
    cfg = GenerationConfig(max_new_tokens=params.max_new_tokens, do_sample=not greedy,
                           temperature=None if greedy else params.temperature,
                           top_p=None if greedy or params.top_p >= 1 else params.top_p, top_k=None if greedy else 0,
                           pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, output_logits=True,
                           return_dict_in_generate=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(params.seed)
        out = model.generate(input_ids=x, attention_mask=attn, generation_config=cfg)
    new = out.sequences[:, width:]
    lp = torch.log_softmax(torch.stack(out.logits, 1).float(), -1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
    return new, lp


@pytest.mark.parametrize("params", [SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=10, n=2, seed=5),
                                    SamplingParams(temperature=1.0, max_new_tokens=10, n=1, seed=9),
                                    SamplingParams(temperature=0.0, max_new_tokens=8, seed=1)],
                         ids=["sampled", "sampled-padded-batch", "greedy"])
@pytest.mark.parametrize("opts", [{}, {"static_cache": True}, {"logprobs": "forward"}],
                         ids=["plain", "static", "forward"])
def test_backend_options_match_plain_generate(tiny_model_path, params, opts, monkeypatch):
    model, tok = load_model(tiny_model_path, dtype=torch.float32, device="cpu")
    model.eval()
    tok.padding_side = "left"
    _as_on_gpu(monkeypatch)  # the static cache pads its batch as on a GPU (transformers compiles nothing on CPU)
    be = HFBackend({"p": (model, tok)}, device="cpu", **opts)
    pad = be.max_batch_size if be.static_cache else 0
    ref_tokens, ref_lp = _reference(model, tok, PROMPTS, params, pad_rows_to=pad)
    comps = [c for cs in be.generate([GenerationRequest("p", prompt=p) for p in PROMPTS], params) for c in cs]
    assert len(comps) == len(PROMPTS) * params.n
    eos = tok.eos_token_id
    for b, c in enumerate(comps):
        want = ref_tokens[b].tolist()
        if eos in want:
            want = want[:want.index(eos) + 1]
        assert c.token_ids == want
        torch.testing.assert_close(torch.tensor(c.logprobs), ref_lp[b, :len(want)], atol=1e-5, rtol=0)


def _as_on_gpu(monkeypatch):
    """Make ``HFBackend`` behave as where transformers compiles decoding (a GPU): pad static batches."""
    monkeypatch.setattr(HFBackend, "compiles_decoding", property(lambda self: self.static_cache))


class _ShapeSpy:
    """Wraps ``model.generate`` to record the input and output shapes of every call."""

    def __init__(self, model):
        self.shapes, self.out_lengths, self._generate = [], [], model.generate
        model.generate = self

    def __call__(self, **kwargs):
        self.shapes.append(tuple(kwargs["input_ids"].shape))
        out = self._generate(**kwargs)
        self.out_lengths.append(out.sequences.shape[1] - kwargs["input_ids"].shape[1])
        return out


def test_static_cache_runs_one_batch_shape(tiny_model_path, monkeypatch):
    """Where decoding compiles, every static-cache call runs ``max_batch_size`` rows (one compiled decode
    shape), whatever the number of requests, and returns exactly the real rows; on CPU none is padded."""
    model, tok = load_model(tiny_model_path, dtype=torch.float32, device="cpu")
    cpu = HFBackend({"p": (model, tok)}, device="cpu", static_cache=True, max_batch_size=8)
    spy = _ShapeSpy(model)
    cpu.generate([GenerationRequest("p", prompt=PROMPTS[0])], SamplingParams(temperature=0.0, max_new_tokens=2))
    assert spy.shapes[0][0] == 1
    model.generate = spy._generate
    _as_on_gpu(monkeypatch)
    be = HFBackend({"p": (model, tok)}, device="cpu", static_cache=True, max_batch_size=8)
    spy = _ShapeSpy(model)
    params = SamplingParams(temperature=1.0, max_new_tokens=6, n=1, seed=3)
    for n in (1, 3, 8, 11):  # 11 = one full chunk of 8, then 3
        out = be.generate([GenerationRequest("p", prompt=PROMPTS[i % len(PROMPTS)]) for i in range(n)], params)
        assert len(out) == n and all(len(cs) == 1 and cs[0].token_ids for cs in out)
    assert [b for b, _ in spy.shapes] == [8] * 5
    assert all(w % 64 == 0 for _, w in spy.shapes)


def test_static_cache_padding_rows_never_prolong_generation(tiny_model_path, monkeypatch):
    """The padding rows are finished after the first step: when the one real row stops (here at a stop
    string it samples early), ``generate`` ends there, not after ``max_new_tokens`` for the copies."""
    model, tok = load_model(tiny_model_path, dtype=torch.float32, device="cpu")
    _as_on_gpu(monkeypatch)
    be = HFBackend({"p": (model, tok)}, device="cpu", static_cache=True, max_batch_size=16)
    spy = _ShapeSpy(model)
    free = SamplingParams(temperature=1.0, max_new_tokens=40, n=1, seed=11)
    text = be.generate([GenerationRequest("p", prompt=PROMPTS[1])], free)[0][0].text
    stop = next(ch for ch in text[:5] if ch.strip())  # a character the real row writes within 5 tokens
    stopped = be.generate([GenerationRequest("p", prompt=PROMPTS[1])],
                          SamplingParams(temperature=1.0, max_new_tokens=40, n=1, seed=11, stop=(stop,)))[0][0]
    assert stopped.finish_reason == "stop"
    assert spy.out_lengths[-1] == len(stopped.token_ids) < 40


def test_warmup_runs_two_full_batches_with_growing_cache_per_model(tiny_model_path, monkeypatch):
    """``warmup()``: per model, two greedy calls of ``max_batch_size`` rows whose cache lengths differ
    (the specialised trace, then the dynamic-cache-length one); policies sharing a model warm it once."""
    model, tok = load_model(tiny_model_path, dtype=torch.float32, device="cpu")
    _as_on_gpu(monkeypatch)
    be = HFBackend({"a": (model, tok), "b": (model, tok)}, device="cpu", static_cache=True, max_batch_size=4)
    spy = _ShapeSpy(model)
    assert be.warmup() > 0
    assert [b for b, _ in spy.shapes] == [4, 4] and spy.shapes[0][1] < spy.shapes[1][1]
    assert HFBackend({"a": (model, tok)}, device="cpu").warmup() == 0.0  # no static cache: nothing to compile



def _compile_decoding_on_cpu(model, monkeypatch) -> list:
    """Let transformers compile the static-cache decoding step on CPU as it does on a GPU (same
    ``get_compiled_call``, same Dynamo guards and automatic dynamic shapes), with a backend that only
    counts the graphs Dynamo traces (no Inductor code generation, no CUDA graphs). Returns the count list."""
    from transformers import CompileConfig
    from transformers.cache_utils import StaticCache

    for hook in ("_default_compile_config", "_valid_auto_compile_criteria"):
        if not hasattr(model, hook):  # transformers' private compile hooks: skip, don't guess, on a new version
            import transformers

            pytest.skip(f"transformers {transformers.__version__} has no {hook}: this test observes decoding "
                        "compiles through it (written for 4.45-5.24)")
    traces: list = []

    def counting_backend(gm, example_inputs):
        traces.append(len(example_inputs))
        return gm.forward

    monkeypatch.setattr(model, "_default_compile_config", lambda: CompileConfig(backend=counting_backend, mode=None))
    # transformers < 5.24 hands generate's cache over as `past_key_values`, 5.24 as `cache`
    monkeypatch.setattr(model, "_valid_auto_compile_criteria", lambda kw, cfg: not cfg.disable_compile and isinstance(
        kw.get("past_key_values", kw.get("cache")), StaticCache))
    _as_on_gpu(monkeypatch)
    torch._dynamo.reset()
    return traces


@pytest.mark.parametrize("warm", [True, False], ids=["warmed-up", "cold"])
def test_warmup_leaves_rollouts_nothing_to_trace(tiny_model_path, monkeypatch, warm):
    """The decoding step compiled as on a GPU (traced by Dynamo on CPU): after the constructor's
    warm-up, rollout calls with other prompt widths (longer caches), row counts, sampling and lengths
    trace nothing; without it the first two calls each trace (the H100's slow first iteration)."""
    model, tok = load_model(tiny_model_path, dtype=torch.float32, device="cpu")
    traces = _compile_decoding_on_cpu(model, monkeypatch)
    try:
        be = HFBackend({"p": (model, tok)}, device="cpu", static_cache=True, max_batch_size=8, warmup=warm)
        assert len(traces) == (2 if warm else 0)
        g = torch.Generator().manual_seed(0)
        per_call = []
        for lens, n in (([150, 170, 90], 12), ([200, 60, 100, 30, 10], 20), ([300], 7), ([250, 251], 30)):
            before = len(traces)
            comps = be._generate_batch("p", [torch.randint(5, 500, (k,), generator=g).tolist() for k in lens],
                                       SamplingParams(temperature=1.0, max_new_tokens=n, seed=1), seed=1)
            assert len(comps) == len(lens)
            per_call.append(len(traces) - before)
        assert per_call == ([0, 0, 0, 0] if warm else [1, 1, 0, 0]), per_call
    finally:
        torch._dynamo.reset()

def test_constructor_warms_up_only_where_decoding_compiles(tiny_model_path, monkeypatch):
    model, tok = load_model(tiny_model_path, dtype=torch.float32, device="cpu")
    calls = []
    monkeypatch.setattr(HFBackend, "warmup", lambda self, *a, **k: calls.append(self) or 0.0)
    cpu = HFBackend({"p": (model, tok)}, device="cpu", static_cache=True, warmup=True)
    assert not cpu.compiles_decoding and calls == []  # transformers compiles nothing on CPU
    monkeypatch.setattr(HFBackend, "compiles_decoding", property(lambda self: self.static_cache))
    gpu_like = HFBackend({"p": (model, tok)}, device="cpu", static_cache=True, warmup=True)
    assert calls == [gpu_like]
    HFBackend({"p": (model, tok)}, device="cpu", static_cache=True, warmup=False)
    HFBackend({"p": (model, tok)}, device="cpu", static_cache=False, warmup=True)
    assert calls == [gpu_like]


def test_backend_rejects_unknown_logprob_mode(tiny_model_path):
    with pytest.raises(ValueError, match="logprobs='full' is not one of"):
        HFBackend({"p": tiny_model_path}, device="cpu", logprobs="full")


def test_update_weights_accumulates_sync_time(tiny_model_path):
    be = HFBackend({"p": tiny_model_path}, device="cpu")
    assert be.sync_seconds == 0.0
    be.update_weights("p", be.model("p").state_dict())
    assert be.sync_seconds > 0.0
