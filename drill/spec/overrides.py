"""``--set KEY=VALUE``: one key path of a drill and a value read as YAML.

Its own module because the spec's models check a sweep's variable with it and the loader applies overrides with
it (the loader imports the models).
"""

from __future__ import annotations

import re

from drill.spec.diagnostics import KeyPath
from drill.spec.yamlio import load_located

__all__ = ["parse_override"]

_KEY_PATH = re.compile(r"^[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*|\[\d+\])*$")
_SEGMENT = re.compile(r"([A-Za-z_][\w-]*)|\[(\d+)\]")


def parse_override(text: str) -> tuple[KeyPath, object]:
    """``faults[0].params.latency_ms=50`` -> (("faults", 0, "params", "latency_ms"), 50).

    The value is read as YAML, so ``30s`` is text, ``3`` an integer, ``[1, 2]`` a list.
    """
    if "=" not in text:
        raise ValueError(f"expected KEY=VALUE, got {text!r}")
    key, raw = (part.strip() for part in text.split("=", 1))
    if not _KEY_PATH.match(key):
        raise ValueError(f"bad key path {key!r}; write e.g. phases.fault or faults[0].params.latency_ms")
    path = tuple(m.group(1) if m.group(1) is not None else int(m.group(2)) for m in _SEGMENT.finditer(key))
    if not raw:
        return path, ""
    doc = load_located(raw, "<--set>")  # the same bounded reader as drill files: no alias bombs, no .inf
    if doc.diagnostics:
        first = doc.diagnostics[0]
        error = ValueError(f"cannot read the value: {first.message}")
        where = text.index("=") + 1 + text.split("=", 1)[1].index(raw)  # the value's offset in KEY=VALUE
        error.column = where + first.position.col  # type: ignore[attr-defined]
        raise error
    return path, doc.data
