"""Validate located YAML data against pydantic models, collecting located diagnostics.

Models are the single source of truth for what a file may contain; this module
only translates pydantic's error list into :class:`Diagnostic` items that point
at ``file:line:col`` with a key path, the bad value, what was expected and a
did-you-mean hint.
"""

from __future__ import annotations

import os
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from drill.errors import DrillError, did_you_mean
from drill.spec.diagnostics import Diagnostic, KeyPath, describe_value, format_path
from drill.spec.yamlio import Locations

__all__ = ["SpecModel", "at_key", "validate_model", "allowed_keys", "expand_env", "unset_env_refs"]

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_env(value: str, where: str, error: type[DrillError]) -> str:
    """``${NAME}`` in a spec value (a credential, so the drill file need not hold it) replaced by the environment
    variable NAME at start; an unset one raises ``error`` naming ``where`` (the value's key path)."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise error(
                f"{where}: the environment variable {name} is not set", hint=f"export {name}=... before the run"
            )
        return os.environ[name]

    return _ENV_REF.sub(one, value)


def unset_env_refs(model: BaseModel, prefix: KeyPath = ()) -> list[tuple[KeyPath, str]]:
    """``(key path, NAME)`` of each ``${NAME}`` whose variable is not set, in the fields a model names in its
    ``env_fields`` (the fields :func:`expand_env` expands at start) and in the models nested in it — so
    validation says what the run would fail on."""
    found: list[tuple[KeyPath, str]] = []
    expanded = getattr(model, "env_fields", ())
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        where = (*prefix, info.alias or name)
        if name in expanded:
            items = value.items() if isinstance(value, dict) else [(None, value)]
            for key, text in items:
                if isinstance(text, str):
                    at = where if key is None else (*where, key)
                    found += [(at, ref) for ref in _ENV_REF.findall(text) if ref not in os.environ]
        for key, child in _models_in(value):
            found += unset_env_refs(child, where if key is None else (*where, key))
    return found


def _models_in(value: object) -> list[tuple[str | int | None, BaseModel]]:
    if isinstance(value, BaseModel):
        return [(None, value)]
    if isinstance(value, (list, tuple)):
        return [(i, v) for i, v in enumerate(value) if isinstance(v, BaseModel)]
    if isinstance(value, dict):
        return [(k, v) for k, v in value.items() if isinstance(v, BaseModel)]
    return []


M = TypeVar("M", bound=BaseModel)


def at_key(key: str, message: str) -> ValueError:
    """A model validator's error that points at one key of the mapping (``@key: message``)."""
    return ValueError(f"@{key}: {message}")


_AT_KEY = re.compile(r"^@([A-Za-z_][\w-]*): ")


class SpecModel(BaseModel):
    """Base of every model read from a user's file: frozen, unknown keys are errors."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, allow_inf_nan=False)


def validate_model(
    model: type[M], data: object, locations: Locations, prefix: KeyPath = ()
) -> tuple[M | None, list[Diagnostic]]:
    """Validate ``data`` (found at ``prefix`` of the document) as ``model``.

    Returns the instance, or None and every problem found.
    """
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        diagnostics = [_diagnostic(model, err, data, locations, prefix) for err in exc.errors(include_url=False)]
        return None, _unique(diagnostics)


def _clean_loc(loc: tuple, data: object, keep_last: bool) -> KeyPath:
    """Keep the parts of pydantic's loc that are real keys/indices of ``data``.

    Pydantic adds parts of its own (validator and union member names such as
    ``function-after[...]`` or ``str``); walking the data tells them apart from
    user keys, whatever characters those contain. For a missing key the last
    part is not in the data and is kept.
    """
    path: list = []
    node: Any = data
    for i, part in enumerate(loc):
        in_dict = isinstance(node, dict) and part in node
        if in_dict or isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            path.append(part)
            node = node[part]
        elif keep_last and i == len(loc) - 1:
            path.append(part)
    return tuple(path)


def _diagnostic(
    model: type[BaseModel], err: Mapping[str, Any], data: object, locations: Locations, prefix: KeyPath
) -> Diagnostic:
    kind = err["type"]
    loc = _clean_loc(tuple(err["loc"]), data, keep_last=kind == "missing")
    path = prefix + loc
    if kind == "extra_forbidden" and loc:
        return _unknown_key(model, loc, path, locations)
    if kind == "missing" and loc:
        parent_keys = allowed_keys(model, loc[:-1])
        hint: str | None = f"add '{loc[-1]}:'" + (
            f" (keys here: {', '.join(sorted(parent_keys))})" if parent_keys else ""
        )
        return Diagnostic(locations.position_of(path[:-1]), path, f"missing required key '{loc[-1]}'", hint=hint)
    message, hint = _explain(err, model, loc)
    pointed = _AT_KEY.match(message)
    if pointed:
        path = path + (pointed.group(1),)
        message = message[pointed.end() :]
    return Diagnostic(locations.position_of(path), path, message, hint=hint)


def _unique(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """Union members can report the same problem twice; keep one."""
    seen, out = set(), []
    for d in diagnostics:
        key = (d.position, d.path, d.message)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


def _unknown_key(model: type[BaseModel], loc: KeyPath, path: KeyPath, locations: Locations) -> Diagnostic:
    known = sorted(allowed_keys(model, loc[:-1]))
    suggestion = did_you_mean(loc[-1], known)
    hint = f"did you mean '{suggestion}'?" if suggestion else None
    if known and not suggestion:
        hint = f"keys allowed here: {', '.join(known)}"
    where = format_path(path[:-1]) or "the top level"
    return Diagnostic(locations.position_of(path, key=True), path, f"unknown key '{loc[-1]}' in {where}", hint=hint)


_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "text",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "tuple_type": "a list",
    "none_required": "nothing (null)",
    "finite_number": "a finite number",
}


def _explain(err: Mapping[str, Any], model: type[BaseModel], loc: KeyPath) -> tuple[str, str | None]:
    kind, value = err["type"], err.get("input")
    ctx = err.get("ctx") or {}
    got = describe_value(value)
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {got}", None
    if kind in ("literal_error", "enum"):
        expected = str(ctx.get("expected", ""))
        options = re.findall(r"'([^']*)'", expected)
        suggestion = did_you_mean(value, options)
        hint = f"did you mean '{suggestion}'?" if suggestion else None
        return f"expected one of {expected}, got {got}", hint
    if kind == "value_error":
        text = str(ctx.get("error", err["msg"]))
        if "got" in text or isinstance(value, (dict, list)):
            return text, None
        return f"{text} (got {got})", None
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal", "multiple_of"):
        bound = err["msg"].replace("Input should be ", "")
        return f"expected a value {bound}, got {got}", None
    if kind in ("too_short", "too_long", "string_too_short", "string_too_long"):
        return f"{err['msg'].replace('Input', 'value').replace('List', 'list')}, got {got}", None
    if kind == "string_pattern_mismatch":
        return f"expected text matching {ctx.get('pattern')}, got {got}", None
    return f"{err['msg']} (got {got})", None


def allowed_keys(model: type[BaseModel], loc: KeyPath) -> set[str]:
    """The field names (and aliases) accepted at ``loc`` inside ``model``; empty if unknown."""
    current: Any = model
    for part in loc:
        current = _descend(current, part)
        if current is None:
            return set()
    current = _model_in(current)
    if current is None:
        return set()
    names: set[str] = set()
    for name, info in current.model_fields.items():
        names.add(info.alias or name)
    return names


def _descend(annotation: Any, part: object) -> Any:
    annotation = _unwrap(annotation)
    if isinstance(part, int):
        args = typing.get_args(annotation)
        return args[0] if args else None
    model = _model_in(annotation)
    if model is not None:
        for name, info in model.model_fields.items():
            if part in (name, info.alias):
                return info.annotation
        return None
    if typing.get_origin(annotation) is dict:
        return typing.get_args(annotation)[1]
    return None


def _unwrap(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel class in ``annotation`` (directly or inside Optional/Union)."""
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None
