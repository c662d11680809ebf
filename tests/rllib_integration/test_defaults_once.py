"""Every default of a run setting is written once: in the schema (rllib_integration/settings/schema.py), or,
for the training core's own records, in rllib_integration/core/options.py, which the schema reads.

No Ray, no torch: these read source and the schema.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from rllib_integration.core.options import LORA_DEFAULTS, HFOptions, LossConfig
from rllib_integration.settings import SETTINGS, default_of, validate_config

PKG = Path(__file__).resolve().parents[2] / "rllib_integration"
#: where defaults are written: the schema, and the core records it reads
SOURCES = {PKG / "settings", PKG / "core" / "options.py"}

#: Keyword defaults named like a setting that are left as they are, with the reason. Keys: (module path
#: relative to rllib_integration, function or class, name). A new literal default named like a setting fails
#: the test below: take it from the one source (``default_of("section.key")`` in the RLlib layer; a field of
#: a record in core/options.py that the schema reads, in the core) or add it here with its reason.
_GREEDY = "a different meaning: greedy/evaluation use, not the training setting"
_CORE_API = ("the training core's own keyword default for a plain script (the RLlib layer always passes the "
             "setting); left: moving it into core/options.py is the next step, and where it differs from the run's "
             "(SamplingParams.max_new_tokens 64 vs 16, warm_start epochs 3 / lr 1e-4 vs 30 / 5e-3) a script's "
             "behaviour would change")
LEFT: dict[tuple[str, str, str], str] = {
    ("export.py", "act", "temperature"): _GREEDY, ("export.py", "play", "temperature"): _GREEDY,
    ("export.py", "act", "seed"): _GREEDY, ("export.py", "play", "seed"): _GREEDY,
    ("core/backends/hf.py", "warmup", "max_new_tokens"): "the length of the two compile calls, not a sampling limit",
    ("core/loss.py", "loss_denominator", "agg"): _CORE_API, ("core/loss.py", "aggregate", "agg"): _CORE_API,
    ("core/loss.py", "kl_penalty", "estimator"): _CORE_API,
    ("core/advantages.py", "compute_advantages", "estimator"): _CORE_API,
    ("core/advantages.py", "advantages_of_samples", "estimator"): _CORE_API,
    ("core/advantages.py", "advantages_of_samples", "filter_zero_variance"): _CORE_API,
    **{("core/advantages.py", fn, "episodes"): "an estimator's flag (it compares K episodes of a task), not "
       "warm_start.episodes" for fn in ("AdvantageEstimator", "register_estimator")},
    ("core/rollout.py", "__init__", "tree_select"): _CORE_API,
    ("core/backends/base.py", "SamplingParams", "temperature"): _CORE_API,
    ("core/backends/base.py", "SamplingParams", "top_p"): _CORE_API,
    ("core/backends/base.py", "SamplingParams", "max_new_tokens"): _CORE_API,
    ("core/rollout.py", "__init__", "k"): _CORE_API, ("core/rollout.py", "__init__", "chat"): _CORE_API,
    ("core/models.py", "build_tiny_model", "seed"): "the tiny model's own seed (model.tiny.seed), not training.seed",
    **{("core/warm_start.py", fn, name): _CORE_API
       for fn, names in {"collect_demonstrations": ("num_episodes", "seed"), "encode_demonstrations": ("chat",),
                         "demonstration_loss": ("chat", "batch_size"),
                         "warm_start": ("epochs", "lr", "batch_size", "chat", "seed")}.items() for name in names},
    **{(f, fn, "modules"): "an empty tuple: none (env.modules' default is an empty list)"
       for f, fn in (("envs.py", "EnvEntry"), ("envs.py", "resolve_env"), ("envs.py", "check_env"))},
}


def _setting_names() -> set[str]:
    out = set()
    for s in SETTINGS:
        if not s.key.startswith("policies.<id>"):
            out.add(s.name)
            if s.attr:
                out.add(s.attr)
    return out


def _literal_defaults(path: Path):
    """(function or class, name, value) of every parameter default and class-body field default that is a
    literal other than None."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        pairs: list[tuple[str, ast.expr]] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            pos = a.posonlyargs + a.args
            pairs += [(x.arg, d) for x, d in zip(pos[len(pos) - len(a.defaults):], a.defaults, strict=True)]
            pairs += [(x.arg, d) for x, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None]
        elif isinstance(node, ast.ClassDef):
            pairs += [(st.target.id, st.value) for st in node.body if isinstance(st, ast.AnnAssign)
                      and isinstance(st.target, ast.Name) and st.value is not None]
        for name, default in pairs:
            try:
                value = ast.literal_eval(default)
            except ValueError:
                continue  # not a literal: taken from somewhere (default_of, a record's field, a constant)
            if value is not None:
                yield node.name, name, value  # type: ignore[attr-defined]


def test_no_setting_default_is_written_twice():
    names = _setting_names()
    found = {}
    for path in sorted(PKG.rglob("*.py")):
        if any(path == src or src in path.parents for src in SOURCES):
            continue
        for owner, name, value in _literal_defaults(path):
            if name in names:
                found[(str(path.relative_to(PKG)), owner, name)] = value
    new = {k: v for k, v in found.items() if k not in LEFT}
    assert not new, ("defaults of run settings written again (take them from the schema: default_of('section.key'), "
                     f"or from core/options.py): {new}")
    assert not set(LEFT) - set(found), f"LEFT names defaults that are gone: {sorted(set(LEFT) - set(found))}"


def test_the_scan_sees_a_literal_default():
    """The scan is not blind: the core's records, left out above because they are the source, hold literals."""
    found = {(owner, name) for owner, name, _ in _literal_defaults(PKG / "core" / "options.py")}
    assert {("LossConfig", "clip_high"), ("HFOptions", "max_batch_size")} <= found


@pytest.mark.parametrize("record,section,fields", [
    (LossConfig(), "training", {"clip_low": "clip_low", "clip_high": "clip_high", "kl_coef": "kl_coef",
                                "kl_estimator": "kl_estimator", "entropy_coef": "entropy_coef", "agg": "agg"}),
    (HFOptions(), "rollout", {"max_batch_size": "max_batch_size", "static_cache": "static_cache",
                              "compile": "compile", "logprobs": "logprobs"}),
])
def test_a_script_gets_the_defaults_of_a_run(record, section, fields):
    """``LossConfig()`` in a plain script and a run without ``training:`` keys use the same values
    (clip_high was 0.2 in LossConfig and 0.28 in the schema)."""
    full = validate_config({}, check_paths=False)
    assert {f: getattr(record, f) for f in fields} == {f: full[section][k] for f, k in fields.items()}
    assert LossConfig().clip_high == 0.28


def test_lora_defaults_and_the_hf_warmup_difference():
    assert validate_config({}, check_paths=False)["lora"] == LORA_DEFAULTS
    # the one field of HFOptions whose run default differs, on purpose: a run compiles while its workers start
    assert (HFOptions().warmup, default_of("rollout.warmup")) == (False, True)
    assert {f.name for f in dataclasses.fields(HFOptions)} == {"max_batch_size", "static_cache", "compile",
                                                               "logprobs", "warmup"}


def test_the_schema_reads_the_core_records_defaults():
    """The settings that a core record also holds take their default from the record (``setting(LOSS.agg, ...)``),
    not from a literal of their own."""
    core_held = {"training": {f.name for f in dataclasses.fields(LossConfig)},
                 "rollout": {f.name for f in dataclasses.fields(HFOptions)} - {"warmup"},
                 "lora": set(LORA_DEFAULTS)}
    section_of = {"TrainingSettings": "training", "RolloutSettings": "rollout", "LoraSettings": "lora"}
    tree = ast.parse((PKG / "settings" / "schema.py").read_text())
    literal, read = [], []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in section_of):
        for st in cls.body:
            if (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and isinstance(st.value, ast.Call)
                    and st.target.id in core_held[section_of[cls.name]]):
                (read if isinstance(st.value.args[0], (ast.Attribute, ast.Subscript)) else literal).append(st.target.id)
    assert not literal, f"written as literals in the schema, but held by a core record: {literal}"
    assert len(read) == 7 + 4 + 4, read
