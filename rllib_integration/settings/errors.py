"""The errors of the run settings and their messages: :class:`ConfigError` (a run config),
:class:`UsageError` (a path or address given to ``llm-marl``), and a pydantic validation error in
this package's words (the dotted key, the expected value, a close-match suggestion for typos)."""

from __future__ import annotations

import difflib
import types
import typing
from typing import Annotated, Any, Literal, Mapping, Optional, Sequence

from pydantic import BaseModel

__all__ = ["ConfigError", "UsageError", "unknown_key_message", "not_one_of", "pydantic_message"]


class ConfigError(ValueError):
    """A user error in a run configuration; the message names the key and the fix."""


class UsageError(ConfigError):
    """A user error outside the run config (a path or an address given to ``llm-marl``): the message says
    what to do. ``llm-marl`` prints it as one line (``llm-marl: error: ...``), like a ConfigError."""


def unknown_key_message(where: str, key: str, known: Sequence[str], *, prefix_where: bool = True) -> str:
    """``unknown config key WHERE.KEY (did you mean WHERE.CLOSE?); known keys of WHERE: [...]``."""
    pre = f"{where}." if where and prefix_where else ""
    hint = difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.5)
    return (f"unknown config key {pre}{key}" + (f" (did you mean {pre}{hint[0]}?)" if hint else "")
            + f"; known keys{' of ' + where if where else ''}: {sorted(known)}")


def not_one_of(value: Any, options: Sequence[Any]) -> str:
    """``'VALUE' is not one of [...] (did you mean 'CLOSE'?)``: a value outside a setting's vocabulary."""
    hint = difflib.get_close_matches(str(value), [str(o) for o in options], n=1)
    return f"{value!r} is not one of {list(options)}" + (f" (did you mean {hint[0]!r}?)" if hint else "")


def _annotation_at(root: type[BaseModel], loc: Sequence[Any]) -> Any:
    """The annotation of the value at ``loc`` in ``root`` (through sections, dict values and list items; ``loc``
    may hold list indices or not)."""
    ann: Any = root
    for part in loc:
        while True:
            origin, args = typing.get_origin(ann), typing.get_args(ann)
            if origin is Annotated:
                ann = args[0]
            elif origin in (typing.Union, types.UnionType):
                inner = [a for a in args if a is not type(None)]
                if len(inner) != 1:
                    return None
                ann = inner[0]
            elif origin is list and not isinstance(part, int):  # list indices dropped: a key of the items
                ann = args[0]
            else:
                break
        origin, args = typing.get_origin(ann), typing.get_args(ann)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            f = ann.model_fields.get(part)
            if f is None:
                return None
            ann = f.annotation
        elif origin is dict:
            ann = args[1]
        elif origin is list:
            ann = args[0]
        else:
            return None
    return ann


def _choices(ann: Any) -> list[Any]:
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is Literal:
        return list(args)
    return [c for a in args for c in _choices(a)]


def _known_keys(root: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    ann = _annotation_at(root, loc)
    while typing.get_origin(ann) in (typing.Union, Annotated):
        ann = [a for a in typing.get_args(ann) if a is not type(None)][0]
    return list(ann.model_fields) if isinstance(ann, type) and issubclass(ann, BaseModel) else []


def pydantic_message(root: type[BaseModel], err: Mapping[str, Any]) -> tuple[Optional[tuple], str]:
    """A pydantic error of validating ``root`` -> (location without list indices, message in our words).

    The location is None where the message names the key itself (an unknown key).
    """
    loc = tuple(err["loc"])
    kind, v, ctx = err["type"], err.get("input"), err.get("ctx") or {}
    if kind == "extra_forbidden":
        where = ".".join(str(p) for p in loc[:-1])
        return None, unknown_key_message(where, str(loc[-1]), _known_keys(root, loc[:-1]))
    loc = tuple(p for p in loc if not isinstance(p, int))
    if kind == "literal_error":
        return loc, not_one_of(v, _choices(_annotation_at(root, loc)))
    bounds = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"), "less_than_equal": ("<=", "le"),
              "less_than": ("<", "lt")}
    if kind in bounds:
        op, name = bounds[kind]
        bound = ctx.get(name)
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return loc, f"must be {op} {bound}, got {v!r}"
    if kind.startswith("int_"):
        return loc, f"expected an integer, got {v!r}"
    if kind.startswith("bool_"):
        return loc, f"expected true or false, got {v!r}"
    if kind.startswith("string_"):
        return loc, f"expected a string, got {v!r}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        keys = _known_keys(root, loc)
        return loc, f"expected a mapping{' of ' + str(sorted(keys)) if keys else ''}, got {v!r}"
    if kind == "list_type":
        return loc, f"expected a list, got {v!r}"
    if kind == "too_short":
        options = _choices(_annotation_at(root, loc))
        return loc, "must not be empty" + (f"; use some of {options}" if options else "")
    if kind == "value_error" and "error" in ctx:
        return loc, str(ctx["error"])
    return loc, err.get("msg", kind)
