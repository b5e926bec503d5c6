"""Located problems in input files, rendered the way compilers do.

Every problem is one :class:`Diagnostic`::

    drills/x.yaml:14:11: error: faults[0].params.latency_ms: expected an integer, got 'fast' (str)
      hint: did you mean 'latency'?

``file:line:col`` points at the offending key or value, the key path names it,
the message says what was found and what was expected, and the hint says what
to type.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Diagnostic", "KeyPath", "Position", "did_you_mean", "format_path", "describe_value"]

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


def did_you_mean(word: object, choices: Iterable[str]) -> str | None:
    """The closest of ``choices`` to ``word``, if one is close enough to be a typo."""
    if not isinstance(word, str):
        return None
    options = list(choices)
    lowered = {c.lower(): c for c in options}
    if word.lower() in lowered:
        return lowered[word.lower()]
    match = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return match[0] if match else None


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
