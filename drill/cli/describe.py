"""Render a plugin's self-description from its class docstring and its Params schema."""

from __future__ import annotations

import inspect

from pydantic import BaseModel


def describe_params(params: type[BaseModel]) -> list[str]:
    lines = []
    for name, info in params.model_fields.items():
        key = info.alias or name
        annotation = getattr(info.annotation, "__name__", None) or str(info.annotation).replace("typing.", "")
        default = "required" if info.is_required() else f"default {info.get_default(call_default_factory=True)!r}"
        doc = f" — {info.description}" if info.description else ""
        lines.append(f"  {key}: {annotation} ({default}){doc}")
    return lines or ["  (none)"]


def describe_fault(fault_cls) -> str:
    doc = inspect.cleandoc(fault_cls.__doc__ or "(no description)")
    needs = ", ".join(sorted(c.value for c in fault_cls.needs)) or "none"
    lines = [f"{fault_cls.kind} — {fault_cls.summary}", "", doc, "", "Params:"]
    lines += describe_params(fault_cls.Params)
    lines += ["", f"Needs from the target: {needs}", f"Realism: {fault_cls.realism.value}",
              f"Acts on: {fault_cls.scope}", "", "Revert:", f"  {fault_cls.revert_semantics or 'see above'}"]
    return "\n".join(lines)
