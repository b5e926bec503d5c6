"""Render a plugin's self-description from its class docstring and its Params schema.

Used by ``drill faults list`` (one line per fault: its realism per method) and ``drill faults
describe KIND`` (params with units and defaults, mechanisms with what each needs from the target
and how real it is, revert semantics, and the drill-ready YAML example from the docstring).
"""

from __future__ import annotations

import enum
import inspect
import types
import typing
from typing import TYPE_CHECKING

from pydantic import BaseModel
from pydantic.fields import FieldInfo

if TYPE_CHECKING:
    from collections.abc import Iterable

    from drill.api import Capability, Fault

__all__ = ["describe_fault", "describe_params", "realism_summary"]


def _type_name(info: FieldInfo) -> str:
    if any(_is_duration(m) for m in info.metadata):
        return "duration"
    return _render(info.annotation)


def _is_duration(marker: object) -> bool:
    """True for the validator of :data:`drill.units.Duration` (written with a unit, held as seconds)."""
    return getattr(getattr(marker, "func", None), "__name__", "") == "parse_duration"


def _render(annotation: object) -> str:
    """``int``, ``duration``, ``a | b`` for an enum, ``list of …``, ``X | None`` — as a user writes it."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return "duration" if any(_is_duration(m) for m in getattr(annotation, "__metadata__", ())) else _render(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_render(a) for a in args)
    if origin in (list, tuple, frozenset, set):
        return f"list of {_render(args[0])}" if args else "list"
    if origin is dict:
        return f"mapping of {_render(args[0])} to {_render(args[1])}" if args else "mapping"
    if annotation is type(None):
        return "None"
    if inspect.isclass(annotation) and issubclass(annotation, enum.Enum):
        return " | ".join(str(m.value) for m in annotation)
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, (int, float)) and _type_name(info).startswith("duration"):
        from drill.units import format_duration

        return f"default {format_duration(value)}"
    if isinstance(value, enum.Enum):
        value = value.value
    elif isinstance(value, list):
        value = [v.value if isinstance(v, enum.Enum) else v for v in value]
    return f"default {value!r}"


def describe_params(params: type[BaseModel]) -> list[str]:
    """One line per field: ``name: type (default …) — description``."""
    lines = []
    for name, info in params.model_fields.items():
        key = info.alias or name
        doc = f" — {info.description}" if info.description else ""
        lines.append(f"  {key}: {_type_name(info)} ({_default(info)}){doc}")
    return lines or ["  (none)"]


def realism_summary(fault_cls: type[Fault]) -> str:
    """The fault's realism: one value, or ``method: realism`` for each of its mechanisms."""
    if not getattr(fault_cls, "mechanisms", ()):
        return fault_cls.realism.value
    return "; ".join(f"{m.name}: {m.realism.value}" for m in fault_cls.mechanisms)


def _needs(capabilities: Iterable[Capability]) -> str:
    return ", ".join(sorted(c.value for c in capabilities)) or "nothing"


def _mechanism_lines(fault_cls: type[Fault]) -> list[str]:
    if not fault_cls.mechanisms:
        return [f"Needs from the target: {_needs(fault_cls.needs)}", f"Realism: {fault_cls.realism.value}"]
    lines = ["Methods (param `method`):"]
    for m in fault_cls.mechanisms:
        lines.append(f"  {m.name} — {m.summary}")
        lines.append(f"      needs: {_needs(fault_cls.needs | m.needs)}; realism: {m.realism.value}")
    return lines


def describe_fault(fault_cls: type[Fault]) -> str:
    """The full ``drill faults describe`` text of one fault class."""
    doc = inspect.cleandoc(fault_cls.__doc__ or "(no description)")
    lines = [f"{fault_cls.kind} — {fault_cls.summary}", "", doc, "", "Params:"]
    lines += describe_params(fault_cls.Params)
    lines += [
        "",
        *_mechanism_lines(fault_cls),
        f"Acts on: {fault_cls.scope} (chosen by the fault's selector)",
        "",
        "Revert:",
        f"  {fault_cls.revert_semantics or 'see above'}",
    ]
    return "\n".join(lines)
