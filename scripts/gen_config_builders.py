"""Write ``rllib_integration/config_builders.py``: ``ATGRPOConfig``'s typed builder methods, from the schema.

Each AT-GRPO builder (``.llm``, ``.sampling``, ``.rollouts``, and the AT-GRPO keywords of RLlib's
``.environment``, ``.training``, ``.evaluation``) gets one keyword per setting, typed with the schema's
annotation and documented (Args) with its description, YAML key and default, so IDEs and mypy see
each setting's type (as RLlib's own builders do). Run after changing the schema::

    python scripts/gen_config_builders.py          # rewrite the file
    python scripts/gen_config_builders.py --check  # exit 1 if it is out of date (a test runs this)
"""

from __future__ import annotations

import argparse
import sys
import textwrap
import types
import typing
from collections import defaultdict
from pathlib import Path
from typing import Annotated, Any, Literal

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rllib_integration.settings import SETTINGS, RunSettings, SettingInfo  # noqa: E402

TARGET = ROOT / "rllib_integration" / "config_builders.py"
#: builders that are RLlib's own too: RLlib's keywords pass on to ``AlgorithmConfig.<builder>``
RLLIB_BUILDERS = ("environment", "training", "evaluation")
#: builders with AT-GRPO settings only
OWN_BUILDERS = ("llm", "sampling", "rollouts")
SUMMARY = {
    "llm": "The models: path(s), dtype, device, specialization level (L1/L2/L3) and LoRA.",
    "sampling": "Generation in rollouts: tree or parallel sampling, K candidates, temperature, reply length.",
    "rollouts": "The rollout-worker actors: how many, their resources, envs per iteration, backend and sandbox.",
    "environment": "RLlib's ``environment()`` plus the modules that register your tasks.",
    "training": "RLlib's ``training()`` (``lr``, ``grad_clip``, ...) plus AT-GRPO's estimator and loss.",
    "evaluation": "RLlib's ``evaluation()`` plus AT-GRPO's held-out evaluation settings.",
}


def annotation_source(ann: Any) -> str:
    """Python source of a schema annotation, for a signature (constraints dropped; schema-only types -> Any)."""
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is Annotated:
        return annotation_source(args[0])
    if origin is Literal:
        return "Literal[" + ", ".join(repr(a) for a in args) + "]"
    if origin in (typing.Union, types.UnionType):
        inner = [annotation_source(a) for a in args if a is not type(None)]
        body = inner[0] if len(inner) == 1 else "Union[" + ", ".join(inner) + "]"
        return f"Optional[{body}]" if type(None) in args else body
    if origin in (list, tuple, typing.Sequence):
        return f"Sequence[{annotation_source(args[0])}]" if args else "Sequence[Any]"
    if origin is dict or ann is dict:
        return "Mapping[str, Any]"
    if ann in (int, float, bool, str):
        return ann.__name__
    return "Any"


def _annotation(s: SettingInfo) -> Any:
    section, _, name = s.key.partition(".")
    field = RunSettings.model_fields.get(section)
    if field is None:
        return Any
    if not name:
        return field.annotation
    sub = getattr(field.annotation, "model_fields", {}).get(name)
    return sub.annotation if sub is not None else Any


def _wrap(text: str, indent: int) -> str:
    return textwrap.fill(text, width=112, initial_indent=" " * indent, subsequent_indent=" " * (indent + 4))


def _keywords(builder: str) -> list[tuple[str, str, str]]:
    """``(keyword, annotation source, Args text)`` of each AT-GRPO keyword of ``builder``, in schema order."""
    by_attr: dict[str, list[SettingInfo]] = defaultdict(list)
    for s in SETTINGS:
        if s.builder == builder and s.attr and not s.rllib:
            by_attr[s.attr].append(s)
    out = []
    for attr, group in by_attr.items():
        if len(group) > 1 or group[0].key.startswith("policies"):  # a whole section (lora, warm_start) or a table
            if group[0].key.startswith("policies"):
                doc = f"{group[0].doc} (YAML ``policies.<id>.model``): policy id -> model."
            else:
                parts = "; ".join(f"``{s.name}`` ({s.doc}, default ``{s.default!r}``)" for s in group)
                doc = f"The ``{group[0].section}`` section as a mapping (keys left out keep their value): {parts}."
            out.append((attr, "Mapping[str, Any]", doc))
            continue
        s = group[0]
        doc = f"{s.doc} (YAML ``{s.key}``; default ``{s.default!r}``)."
        out.append((attr, annotation_source(_annotation(s)), doc))
    return out


def _param_lines(param: str, width: int = 120) -> list[str]:
    """The signature lines of one keyword: one line, or a long ``Literal[...]`` with its values wrapped."""
    line = f"        {param},"
    if len(line) <= width or "Literal[" not in param:
        return [line]
    head, rest = param.split("Literal[", 1)
    values, tail = rest.split("]", 1)
    out, cur = [f"        {head}Literal["], ""
    for v in values.split(", "):
        if cur and len(f"            {cur} {v},") > width:
            out.append(f"            {cur}")
            cur = ""
        cur = f"{cur} {v}," if cur else f"{v},"
    out.append(f"            {cur}")
    return out + [f"        ]{tail},"]


def _method(builder: str) -> str:
    rllib = builder in RLLIB_BUILDERS
    kws = _keywords(builder)
    params = ["self"]
    if builder == "environment":
        params.append("env: Any = NOT_PROVIDED")
    params.append("*")
    params += [f"{name}: {ann} = NOT_PROVIDED" for name, ann, _ in kws]
    params.append("**rllib_kwargs: Any" if rllib else "**unknown: Never")
    lines = [f"    def {builder}(", *[ln for p in params for ln in _param_lines(p)], "    ) -> Self:"]
    doc = [f'        """{SUMMARY[builder]}', "", "        Args:"]
    if builder == "environment":
        doc.append(_wrap("env: the env: a registered id (an llm_marl task, a task of your own, an id given to "
                         "``register_env``), a ``\"module:Class\"`` entry point, a PettingZoo AEC env class or an "
                         "RLlib creator (YAML ``env.id``).", 12))
    doc += [_wrap(f"{name}: {text}", 12) for name, _, text in kws]
    if rllib:
        extra = (" (``evaluation_duration`` sets ``evaluation_num_episodes``)" if builder == "evaluation" else "")
        doc.append(_wrap(f"**rllib_kwargs: RLlib's own ``AlgorithmConfig.{builder}()`` keywords{extra}.", 12))
    else:
        doc.append(_wrap("**unknown: none: an unknown keyword raises ConfigError naming the close match "
                         "(typed ``Never`` so that type checkers flag it too).", 12))
    doc.append('        """')
    ours = [f"            {name!r}: {name}," for name, _, _ in kws]
    if builder == "environment":
        ours.insert(0, "            'env': env,")
    rest = "rllib_kwargs" if rllib else "unknown"
    body = "\n".join([f"        return self._apply_builder({builder!r}, {{", *ours, f"        }}, {rest})"])
    return "\n".join(lines + doc + [body])


HEADER = '''"""``ATGRPOConfig``'s typed builder methods. GENERATED by ``scripts/gen_config_builders.py`` from the
settings schema (:mod:`rllib_integration.settings`): do not edit; run the script after changing the schema.

Each keyword is one AT-GRPO setting (its ``ATGRPOConfig`` attribute), typed with the schema's annotation;
a keyword left out keeps its value. Values are validated by ``ATGRPOConfig.validate()`` against the same
schema as the YAML files.
"""

from __future__ import annotations

from typing import Any, Literal, Mapping, Never, Optional, Self, Sequence, Union

from ray.rllib.algorithms.algorithm_config import NotProvided

__all__ = ["ConfigBuilders", "NOT_PROVIDED", "RLLIB_BUILDERS"]

#: RLlib's "keyword not given" marker, typed Any so that it is a default of any annotation
NOT_PROVIDED: Any = NotProvided
#: the builders that are RLlib's own too: their other keywords go on to ``AlgorithmConfig.<builder>()``
RLLIB_BUILDERS = {rllib_builders}


class ConfigBuilders:
    """The builder methods of :class:`~rllib_integration.config.ATGRPOConfig` that set AT-GRPO settings."""

    def _apply_builder(self, builder: str, ours: dict[str, Any], rest: dict[str, Any]) -> Self:
        raise NotImplementedError  # ATGRPOConfig's: sets ``ours``, passes ``rest`` on to RLlib's builder
'''


def render() -> str:
    builders = {s.builder for s in SETTINGS if s.builder and s.attr and not s.rllib}
    missing = builders - set(OWN_BUILDERS) - set(RLLIB_BUILDERS)
    if missing:  # a new builder name in the schema: say here whether it is RLlib's too
        raise SystemExit(f"settings with builder(s) {sorted(missing)}: add them to OWN_BUILDERS or RLLIB_BUILDERS in "
                         f"{Path(__file__).name}")
    methods = [_method(b) for b in (*OWN_BUILDERS, *RLLIB_BUILDERS)]
    text = HEADER.replace("{rllib_builders}", repr(RLLIB_BUILDERS)) + "\n" + "\n\n".join(methods) + "\n"
    unused = [n for n in ("Literal", "Mapping", "Never", "Optional", "Sequence", "Union") if f"{n}[" not in text
              and f": {n}" not in text and f"-> {n}" not in text]
    for name in unused:
        text = text.replace(f", {name}", "", 1) if f", {name}" in text else text.replace(f"{name}, ", "", 1)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if TARGET.read_text() != text:
            print(f"{TARGET.relative_to(ROOT)} is out of date: run python scripts/gen_config_builders.py")
            return 1
        return 0
    TARGET.write_text(text)
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
