"""The settings table: every setting of :class:`~.schema.RunSettings` as :class:`SettingInfo` (YAML key,
``ATGRPOConfig`` attribute, builder method, default, meaning), and the translations between a run config
and ``ATGRPOConfig`` that ``rllib_integration.algorithm`` builds on: its attributes and their defaults
(:func:`config_attributes`), its builder keywords (:func:`builder_keywords`), a run config as builder calls
(:func:`builder_calls`), a config's attributes as a run config (:func:`settings_of`) and an error location as
an attribute name (:func:`attribute_name`); and the names of the previous release, accepted with a
warning (:func:`warn_renamed`; :data:`OLD_ATTRIBUTES`, :data:`OLD_KEYS`, :func:`renamed_keys`)."""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
import warnings
from typing import Annotated, Any, Literal, Mapping, Optional, Sequence

from .errors import ConfigError
from .schema import PER_POLICY, PolicySettings, RunSettings, Section

__all__ = ["SettingInfo", "SETTINGS", "default_of", "config_attributes", "builder_keywords", "builder_calls",
           "settings_of", "attribute_name", "OLD_ATTRIBUTES", "OLD_KEYS", "renamed_keys", "warn_renamed"]


@dataclasses.dataclass(frozen=True)
class SettingInfo:
    """One setting as everything else sees it (derived from the schema)."""

    key: str                 # dotted YAML key, e.g. "training.lr" ("policies.<id>.model" for per-policy ones)
    attr: Optional[str]      # the ATGRPOConfig attribute and builder keyword (None: CLI only)
    builder: Optional[str]   # the ATGRPOConfig builder method
    default: Any
    doc: str
    type: str
    rllib: bool = False      # the attribute is RLlib's own AlgorithmConfig setting
    why: Optional[str] = None  # why the attribute is neither the YAML key nor <section>_<key> (RLlib's own name)
    old_attr: Optional[str] = None  # the attribute / builder keyword of the previous release (deprecated alias)
    old_key: Optional[str] = None   # the dotted YAML key of the previous release (deprecated alias)

    @property
    def section(self) -> str:
        return self.key.split(".")[0] if "." in self.key else ""

    @property
    def name(self) -> str:
        return self.key.rsplit(".", 1)[-1]


def _type_name(ann: Any) -> str:
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is Annotated:
        return _type_name(args[0])
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return " or ".join(_type_name(a) for a in inner) + " or null"
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return "mapping"
    return {int: "int", float: "number", bool: "bool", str: "str"}.get(ann, getattr(ann, "__name__", str(ann)))


def _meta(field: Any) -> dict[str, Any]:
    return dict(field.json_schema_extra or {})


def _collect() -> list[SettingInfo]:
    out: list[SettingInfo] = []
    for name, field in RunSettings.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, Section):
            for key, f in ann.model_fields.items():
                m = _meta(f)
                own = m.get("attr") or (f"{name}_{key}" if ann._prefix else key)
                attr = None if ann._builder is None else (ann._as_attr or own)
                out.append(SettingInfo(key=f"{name}.{key}", attr=attr,
                                       builder=m.get("builder") or ann._builder, default=f.default,
                                       doc=f.description or "", type=m.get("type") or _type_name(f.annotation),
                                       rllib=bool(m.get("rllib")), why=m.get("why"), old_attr=m.get("old_attr"),
                                       old_key=f"{name}.{m['old_key']}" if m.get("old_key") else None))
        else:
            m = _meta(field)
            out.append(SettingInfo(key=name, attr=m.get("attr") or name, builder=m.get("builder"),
                                   default=field.default, doc=field.description or "",
                                   type=m.get("type") or _type_name(ann),
                                   rllib=bool(m.get("rllib")), why=m.get("why")))
    pm = PolicySettings.model_fields["model"]
    out.append(SettingInfo(key="policies.<id>.model", attr="policy_models", builder="llm", default={},
                           doc=pm.description or "", type="model"))
    sections = {f.annotation: name for name, f in RunSettings.model_fields.items()}
    for k, sec in PER_POLICY.items():
        out.append(SettingInfo(key=f"policies.<id>.{k}", attr="algorithm_config_overrides_per_module",
                               builder="rl_module", default=None, doc=f"this policy's `{sections[sec]}.{k}`",
                               type=_type_name(sec.model_fields[k].annotation), rllib=True,
                               why="RLlib's per-module overrides"))
    return out


#: every setting, in schema order
SETTINGS: list[SettingInfo] = _collect()
#: the previous release's attribute (and builder keyword) -> the setting's attribute now
OLD_ATTRIBUTES: dict[str, str] = {s.old_attr: s.attr for s in SETTINGS if s.old_attr and s.attr}
#: the previous release's dotted YAML key -> the key now
OLD_KEYS: dict[str, str] = {s.old_key: s.key for s in SETTINGS if s.old_key}


def warn_renamed(old: str, new: str, what: str, stacklevel: int = 3, *,
                 category: type[Warning] = DeprecationWarning) -> None:
    """The warning of a name of the previous release (``what``: e.g. "ATGRPOConfig attribute"): a
    ``DeprecationWarning`` for names in Python code (shown where that code runs as ``__main__`` or under a
    test runner), a ``FutureWarning`` for names a user writes in a run config, ``--set`` or a run directory
    (shown by default: ``llm-marl`` prints it)."""
    warnings.warn(f"{what} {old!r} is deprecated (it will be removed in the next release): use {new!r}",
                  category, stacklevel=stacklevel)


def renamed_keys(raw: Any, *, where: str = "run config") -> Any:
    """A run config (YAML form) with the previous release's keys (:data:`OLD_KEYS`) under their new names, each
    with a ``FutureWarning``; a config that gives both the old and the new key is a :class:`ConfigError`."""
    if not isinstance(raw, Mapping):
        return raw
    out: Any = None
    for old, new in OLD_KEYS.items():
        (sec, old_leaf), new_leaf = old.split("."), new.split(".")[1]
        section = (out or raw).get(sec)
        if not isinstance(section, Mapping) or old_leaf not in section:
            continue
        if new_leaf in section:
            raise ConfigError(f"{old}: the previous name of {new}, which the {where} gives too; keep {new}")
        warn_renamed(old, new, f"{where} key", stacklevel=4, category=FutureWarning)
        out = dict(out or raw)
        out[sec] = {new_leaf if k == old_leaf else k: v for k, v in section.items()}
    return raw if out is None else out


def default_of(key: str) -> Any:
    """The default of the setting with the dotted YAML key ``key`` (a copy): for a record or a keyword of the
    RLlib layer that holds that setting, so its default is the schema's, not written again."""
    for s in SETTINGS:
        if s.key == key:
            return copy.deepcopy(s.default)
    raise KeyError(f"no setting {key!r}")


def config_attributes() -> dict[str, Any]:
    """``ATGRPOConfig`` attribute -> its default, for every setting it holds (one dict per section like ``lora``)."""
    out: dict[str, Any] = {}
    for s in _plain_settings():
        if s.key == "env.id":
            continue  # RLlib's default (no env): validate() asks for one
        section_attr = _section_attr(s)
        if section_attr:
            out.setdefault(section_attr, {})[s.name] = copy.deepcopy(s.default)
            continue
        out[s.attr] = _to_attr(s, copy.deepcopy(s.default))  # type: ignore[index]
    out["policy_models"] = {}
    return out


def builder_keywords(builder: str) -> dict[str, SettingInfo]:
    """The builder method's keywords (attribute names) of the settings it sets."""
    out: dict[str, SettingInfo] = {}
    for s in SETTINGS:
        if s.builder == builder and s.attr is not None:
            out.setdefault(s.attr, s)
    return out


def _to_attr(s: SettingInfo, v: Any) -> Any:
    if s.key == "evaluation.interval":
        return v or None
    return v


def _section_attr(s: SettingInfo) -> Optional[str]:
    sec = RunSettings.model_fields.get(s.section)
    return getattr(sec.annotation, "_as_attr", None) if sec is not None else None


def _plain_settings() -> list[SettingInfo]:
    """The settings held one attribute each (not the per-policy ones, the policy table or the CLI's)."""
    return [s for s in SETTINGS if s.attr is not None and not s.key.startswith("policies")
            and s.key != "policy_mapping"]


def builder_calls(full: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A validated run config -> ``{builder method: {keyword: value}}`` for ``ATGRPOConfig``.

    The policy table (``policies`` / ``policy_mapping``) is left to the caller (it becomes
    RLlib's ``multi_agent`` and per-module overrides); ``policies.<id>.model`` is ``llm(policy_models=)``.
    """
    calls: dict[str, dict[str, Any]] = {}
    for s in _plain_settings():
        if _section_attr(s):
            calls.setdefault(s.builder or "", {})[s.attr] = dict(full[s.section])  # type: ignore[index]
            continue
        value = full[s.section][s.name] if s.section else full[s.key]
        calls.setdefault(s.builder or "", {})[s.attr] = copy.deepcopy(_to_attr(s, value))  # type: ignore[index]
    calls.setdefault("llm", {})["policy_models"] = {pid: spec["model"] for pid, spec in full["policies"].items()
                                                    if spec.get("model") is not None}
    return calls


def settings_of(config: Any) -> dict[str, Any]:
    """The run config (YAML form) that an ``ATGRPOConfig``'s attributes amount to, for validation.

    An env given as a class or creator (not an id) is left out; so is ``policy_mapping_fn``
    (a function), and per-module overrides other than :data:`PER_POLICY`.
    """
    out: dict[str, Any] = {}
    for s in _plain_settings():
        sec_attr = _section_attr(s)
        if sec_attr:
            out.setdefault(s.section, {})[s.name] = dict(getattr(config, sec_attr) or {}).get(s.name, s.default)
            continue
        value = getattr(config, s.attr)  # type: ignore[arg-type]
        if s.key == "evaluation.interval":
            value = value or 0
        if s.key == "env.id" and not isinstance(value, str):
            continue
        if s.section:
            out.setdefault(s.section, {})[s.name] = value
        else:
            out[s.key] = value
    policies: dict[str, dict[str, Any]] = {}
    for pid, model in (getattr(config, "policy_models", None) or {}).items():
        policies.setdefault(pid, {})["model"] = model
    for pid, over in (getattr(config, "algorithm_config_overrides_per_module", None) or {}).items():
        for k in PER_POLICY:
            if k in over:
                policies.setdefault(pid, {})[k] = over[k]
    out["policies"] = policies
    return out


def attribute_name(loc: Sequence[Any]) -> str:
    """An error location in the run config -> the ``ATGRPOConfig`` attribute it came from."""
    loc = [str(p) for p in loc]
    if loc[0] == "policies" and len(loc) >= 3:
        return ("ATGRPOConfig.policy_models" if loc[2] == "model" else
                f"ATGRPOConfig.algorithm_config_overrides_per_module[{loc[1]!r}][{loc[2]!r}]")
    key = ".".join(loc[:2]) if loc[0] in RunSettings.model_fields and len(loc) > 1 else loc[0]
    for s in SETTINGS:
        if s.key == key and s.attr:
            return f"ATGRPOConfig.{s.attr}" + (f"[{s.name!r}]" if _section_attr(s) else "")
    return "ATGRPOConfig." + ".".join(loc)
