"""Located problems in input files, rendered the way compilers do.

Every problem is one :class:`Diagnostic`::

    drills/x.yaml:14:11: error: faults[0].params.latency_ms: expected an integer, got 'fast' (str)
      hint: did you mean 'latency'?

``file:line:col`` points at the offending key or value, the key path names it,
the message says what was found and what was expected, and the hint says what
to type.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Diagnostic", "KeyPath", "Position", "format_path", "describe_value"]

KeyPath = tuple  # tuple[str | int, ...]


@dataclass(frozen=True)
class Position:
    source: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.source}:{self.line}:{self.col}"


@dataclass(frozen=True)
class Diagnostic:
    position: Position
    path: KeyPath
    message: str
    hint: str | None = None
    severity: str = "error"

    def render(self) -> str:
        where = format_path(self.path)
        head = f"{self.position}: {self.severity}: "
        head += f"{where}: {self.message}" if where else self.message
        return f"{head}\n  hint: {self.hint}" if self.hint else head

    def sort_key(self) -> tuple:
        return (self.position.source, self.position.line, self.position.col, self.message)


def format_path(path: Iterable[object]) -> str:
    """``("faults", 0, "params")`` -> ``faults[0].params``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def describe_value(value: object) -> str:
    """Short, safe rendering of a bad value with its YAML type."""
    kind = {
        dict: "mapping",
        list: "list",
        str: "text",
        bool: "boolean",
        int: "integer",
        float: "number",
        type(None): "null",
    }.get(type(value), type(value).__name__)
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({kind})"
