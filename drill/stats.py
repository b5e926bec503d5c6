"""Exact statistics over raw samples (never over pre-aggregated buckets)."""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["PERCENTILES", "percentile", "percentiles"]

#: The percentiles reported everywhere: p50, p90, p95, p99, p99.9.
PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)


def percentile(values: Iterable[float], pct: float) -> float | None:
    """Exact percentile by linear interpolation between closest ranks (numpy's default); None if empty."""
    ordered = sorted(values)
    if not ordered:
        return None
    return _at(ordered, pct)


def percentiles(values: Iterable[float], pcts: Iterable[float] = PERCENTILES) -> dict[str, float | None]:
    """``{"p50": .., "p99.9": ..}`` from one sort."""
    ordered = sorted(values)
    return {f"p{p:g}": (_at(ordered, p) if ordered else None) for p in pcts}


def _at(ordered: list[float], pct: float) -> float:
    rank = (len(ordered) - 1) * pct / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
