"""How a report shows a value: numbers, timestamps and a verdict's figure lines, one formatter for the builders
(:mod:`drill.report.build`, :mod:`drill.report.detail`) and the renderers (:mod:`drill.report.render`)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from drill.api import Verdict
from drill.report.model import NOT_AVAILABLE, Figure

__all__ = ["format_value", "iso_utc", "verdict_figures"]


def format_value(value: Any, unit: str = "") -> str:
    """A value as a report shows it: fixed precision for floats, sorted keys for mappings, "not available" for None."""
    if value is None:
        return NOT_AVAILABLE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if unit == "ratio":
            return f"{value * 100:.2f}%"
        return _number(value)
    if isinstance(value, dict):
        return ", ".join(f"{k}: {format_value(v)}" for k, v in sorted(value.items()))
    if isinstance(value, (list, tuple)):
        return ", ".join(format_value(v) for v in value)
    return str(value)


def _number(value: float) -> str:
    if value != value:  # NaN
        return NOT_AVAILABLE
    if value == int(value) and abs(value) < 1e12:
        return str(int(value))
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def iso_utc(ts: float | None) -> str | None:
    """UNIX seconds as ISO 8601 UTC with milliseconds (from the run's own timestamps)."""
    if ts is None:
        return None
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


#: Observed keys that are shown in their own section, not as a figure line.
_SECTION_KEYS = frozenset({"pairs", "chain", "attributes"})


def verdict_figures(v: Verdict) -> tuple[Figure, ...]:
    """The figure lines of a verdict: each observed figure beside what was expected, formatted."""
    names = [k for k in v.observed if k not in _SECTION_KEYS and not k.startswith("goodput.")]
    names += [k for k in v.expected if k not in v.observed]
    rows = []
    for name in names:
        unit = v.units.get(name, "")
        observed = format_value(v.observed[name], unit) if name in v.observed else "—"
        rows.append(Figure(name, observed, str(v.expected.get(name, "—")), unit))
    return tuple(rows)
