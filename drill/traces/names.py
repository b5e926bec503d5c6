"""Span names that carry ids, judged as one operation: ``GET /orders/8812`` and ``GET /orders/9107`` are
``GET /orders/{id}``.

OpenTelemetry asks for low-cardinality span names (the route template, not the URL: the trace API's "Span"
section), but not every instrumentation gives them: a raw URL path, a key or a literal in a statement makes
each span's name its own, and then no (service, span name) pair has enough baseline spans to be judged. An id
here is a whole token — after a separator such as ``/``, ``=``, ``:`` or a space, up to the next — that is a
number, a UUID or a hex string of 8 or more characters with a digit and a letter in it (``v1``, ``sha256``,
``svc-14`` or ``order`` are not).

Names are merged only where they are too thin to be judged on their own: a template that joins two or more
names whose median span count is under the analysis's ``min_judged_spans``. Names that differ only by a
number but each have spans enough (``step 1``, ``step 2``) stay apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from statistics import median

import numpy as np

__all__ = ["ID_PLACEHOLDER", "NameTemplates", "name_template", "name_templates"]

ID_PLACEHOLDER = "{id}"

#: What may come before an id: not ``-``, ``_`` or ``.``, which join a number to a word (``svc-14``, ``replica_0``,
#: ``v1.2``) more often than they set an id apart.
_BEFORE = r"""(?:^|(?<=[/=:\s,;'"(\[{#@|]))"""
_AFTER = r"""(?=$|[/?&=:\s,;'")\]}.#@|-])"""
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_HEX = r"(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}"
_ID = re.compile(f"{_BEFORE}(?:{_UUID}|{_HEX}|[0-9]+){_AFTER}")


def name_template(name: str) -> str:
    """``name`` with every id token replaced by :data:`ID_PLACEHOLDER`."""
    return _ID.sub(ID_PLACEHOLDER, name)


@dataclass(frozen=True)
class NameTemplates:
    """What :func:`name_templates` found: per name code its operation's code, the operations' names, and the
    templates that merged names with how many each merged."""

    code: np.ndarray  # int64 per name code of the table: the operation's code
    names: tuple[str, ...]  # per operation code
    merged: tuple[tuple[str, int], ...]  # (template, names it joined), most names first

    @classmethod
    def each_apart(cls, names: tuple[str, ...]) -> NameTemplates:
        """Every span name its own operation."""
        return cls(np.arange(len(names), dtype=np.int64), tuple(names), ())


def name_templates(names: tuple[str, ...], spans_per_name: np.ndarray, thin_below: int) -> NameTemplates:
    """The operations of a table's span ``names`` (``spans_per_name``: spans of each name): names that differ
    only in ids are one operation when they are thin (median spans per name under ``thin_below``); every other
    name is its own."""
    by_template: dict[str, list[int]] = {}
    for code, name in enumerate(names):
        template = name_template(name)
        if template != name or ID_PLACEHOLDER in name:
            by_template.setdefault(template, []).append(code)
    counts = spans_per_name.tolist()
    joined = {
        template: codes
        for template, codes in by_template.items()
        if len(codes) >= 2 and median(counts[c] for c in codes) < thin_below
    }
    if not joined:
        return NameTemplates.each_apart(names)
    operation_of = {c: template for template, codes in joined.items() for c in codes}
    operations: dict[str, int] = {}
    mapped = np.fromiter(
        (operations.setdefault(operation_of.get(c, n), len(operations)) for c, n in enumerate(names)),
        np.int64,
        len(names),
    )
    merged = sorted(((t, len(codes)) for t, codes in joined.items()), key=lambda tc: (-tc[1], tc[0]))
    return NameTemplates(mapped, tuple(operations), tuple(merged))
