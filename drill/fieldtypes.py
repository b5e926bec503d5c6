"""The types a JSON-lines record's fields document, checked when a line is read (evidence from someone else).

A record class (a dataclass: :class:`~drill.rundir.records.RequestRecord`, a journal event's payload) says what
each field holds in its annotations; :func:`field_rules` turns the simple ones (``str``, ``int``, ``float``,
``bool``, ``list[float]``, ``list[Any]``, ``dict[str, Any]``, each maybe ``| None``) into tests, and
:func:`check_fields` raises ``ValueError`` naming the field for a value of another type — so the reader counts
the line as unreadable (``file:line``) and a check is INCONCLUSIVE, instead of a TypeError deep in a check.
A number must be finite and an integer must fit a float; a UNIX time (``ts``, ``*_ts``) must be one a clock
can read: ``"ttft_ms": "fast"``, ``1e999``, a 400-digit integer and a ``ts`` of 1e308 are all refused.
Fields of other types are left to the record's own conversion.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import NamedTuple

__all__ = ["FieldRule", "check_fields", "field_rules"]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63


def _is_number(value: object) -> bool:
    return _is_int(value) or (isinstance(value, float) and math.isfinite(value))


_TESTS: dict[str, tuple[str, Callable[[object], bool]]] = {
    "float": ("a finite number", _is_number),
    "int": ("an integer", _is_int),
    "str": ("a string", lambda v: isinstance(v, str)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "list[float]": ("a list of finite numbers", lambda v: isinstance(v, list) and all(_is_number(x) for x in v)),
    "list[Any]": ("a list", lambda v: isinstance(v, list)),
    "dict[str, Any]": ("an object", lambda v: isinstance(v, dict)),
}


#: A UNIX time in seconds (a field named ``ts`` or ``*_ts``) is within this of 1970 (about the year 5100): a time
#: beyond it is no clock's reading, and datetime cannot show it.
MAX_UNIX_S = 1e11


def _is_unix_time(value: object) -> bool:
    return _is_number(value) and abs(value) < MAX_UNIX_S  # type: ignore[arg-type]  # a number, tested first


class FieldRule(NamedTuple):
    what: str  # "a finite number"
    test: Callable[[object], bool]
    optional: bool  # null is allowed


def field_rules(record: type) -> dict[str, FieldRule]:
    """Field name -> its rule, for the fields of dataclass ``record`` whose annotation is a simple type."""
    rules = {}
    for f in fields(record):
        annotation = str(f.type)
        optional = annotation.endswith(" | None")
        base = annotation.removesuffix(" | None")
        if base == "float" and (f.name == "ts" or f.name.endswith("_ts")):
            rules[f.name] = FieldRule("a UNIX time in seconds", _is_unix_time, optional)
        elif base in _TESTS:
            rules[f.name] = FieldRule(*_TESTS[base], optional)
    return rules


def check_fields(rules: Mapping[str, FieldRule], data: Mapping[str, object]) -> None:
    """``ValueError`` naming the first field of ``data`` whose value its rule refuses (fields without one pass)."""
    for name, value in data.items():
        rule = rules.get(name)
        if rule is None or (value is None and rule.optional) or rule.test(value):
            continue
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ValueError(f"field {name!r} must be {rule.what}{' or null' if rule.optional else ''}, not {shown}")
