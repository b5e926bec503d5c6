"""A verdict's headline figures: the few numbers of its ``observed`` a reader compares from one game day to the next.

Chosen by check kind (the refusal p99 of ``fast_failure``, the SLO percentiles of ``slo``, the rate of
``error_rate``, ...; none for ``fault_landed``); a kind not listed here shows its top-level numbers, at most
:data:`MAX_FIGURES`. A figure a verdict does not report (``None``, or absent) is left out, never shown as 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["HeadlineFigure", "MAX_FIGURES", "headline_figures"]

MAX_FIGURES = 4

#: check kind -> the observed keys that are its headline (a pattern over the key), in this order of preference.
_BY_KIND: dict[str, tuple[str, ...]] = {
    "fast_failure": (r"refusal_ttf_p99_ms", r"waited_share", r"refused_share", r"timeout_share"),
    "slo": (r"[^.]+\.(ttft|tpot|itl|e2e)_p\d+",),
    "error_rate": (r"error_rate",),
    "recovery_time": (r"recovery_s",),
    "first_abnormal_span": (r"onset_s", r"duration_ms"),
    "recovery_replay": (r"originals_passed", r"originals_replayed", r"controls_passed"),
    "fault_landed": (),  # its counts say nothing across game days; its status does
}


@dataclass(frozen=True)
class HeadlineFigure:
    name: str
    value: float
    unit: str = ""

    def to_json(self) -> dict:
        return {"name": self.name, "value": self.value, "unit": self.unit}

    @classmethod
    def from_json(cls, data: dict) -> HeadlineFigure:
        return cls(str(data["name"]), float(data["value"]), str(data.get("unit") or ""))

    def shown(self) -> str:
        """Four significant digits (``480.5``, ``0.1143``); whole numbers with separators from a million up."""
        return f"{self.value:.4g}" if abs(self.value) < 1e6 else f"{self.value:,.0f}"


def _numeric(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def headline_figures(kind: str, observed: dict, units: dict) -> tuple[HeadlineFigure, ...]:
    """The headline figures of one verdict (``observed`` and ``units`` as ``verdicts.json`` has them)."""
    patterns = _BY_KIND.get(kind)
    numbers = {k: v for k, v in observed.items() if _numeric(v)}
    if patterns is None:
        keys = sorted(k for k in numbers if "." not in k)
    else:
        keys = [k for p in patterns for k in sorted(numbers) if re.fullmatch(p, k)]
    chosen = list(dict.fromkeys(keys))[:MAX_FIGURES]
    return tuple(HeadlineFigure(k, float(numbers[k]), str(units.get(k) or "")) for k in chosen)
