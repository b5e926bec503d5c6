"""Per-group statistics of two samples (baseline, fault window), vectorised over every group at once.

- :func:`group_medians`: the median of each group's values (nan for an empty group).
- :func:`rank_test`: the one-sided Mann-Whitney U test ("are the fault window's values larger?") of
  every group, by the normal approximation with tie-averaged ranks and a continuity correction
  (Mann & Whitney 1947; the normal approximation is the usual one for n ≥ 3 per side, e.g. SciPy's
  ``mannwhitneyu(method="asymptotic")``). It needs no distributional assumption and is valid for the
  thin baselines of rarely called operations, where a median/MAD z-score is not: with 3 baseline
  spans a MAD is little more than noise, while a rank test simply has less power.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["RankTest", "group_medians", "rank_test"]


@dataclass(frozen=True)
class RankTest:
    """Per group: the sample sizes and the rank test's z (positive: the fault window's values are larger)."""

    n_base: np.ndarray  # int64
    n_fault: np.ndarray  # int64
    z: np.ndarray  # float64; 0 where either side is empty


def group_medians(values: np.ndarray, group: np.ndarray, groups: int) -> np.ndarray:
    """Median of ``values`` per ``group`` code (0..groups-1); nan for empty groups."""
    order = np.lexsort((values, group))
    ordered = values[order].astype(np.float64)
    counts = np.bincount(group, minlength=groups)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    out = np.full(groups, np.nan)
    has = counts > 0
    low = starts[has] + (counts[has] - 1) // 2
    high = starts[has] + counts[has] // 2
    out[has] = (ordered[low] + ordered[high]) / 2
    return out


def _tied_ranks(values: np.ndarray, group: np.ndarray, order: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """1-based ranks within each group, ties averaged, for the rows in ``order`` (sorted by group, value)."""
    g, v = group[order], values[order]
    n = len(order)
    position = np.arange(n) - starts[g] + 1.0
    new_run = np.ones(n, dtype=bool)
    new_run[1:] = (g[1:] != g[:-1]) | (v[1:] != v[:-1])
    run = np.cumsum(new_run) - 1
    first = np.flatnonzero(new_run)
    last = np.concatenate((first[1:], [n])) - 1
    average = (position[first] + position[last]) / 2
    return average[run]


def rank_test(values: np.ndarray, group: np.ndarray, fault: np.ndarray, groups: int) -> RankTest:
    """The one-sided Mann-Whitney test of each group's fault-window values (``fault`` True) against its
    baseline values (``fault`` False)."""
    order = np.lexsort((values, group))
    counts = np.bincount(group, minlength=groups)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    ranks = _tied_ranks(values, group, order, starts)
    in_fault = fault[order]
    rank_sum = np.bincount(group[order][in_fault], weights=ranks[in_fault], minlength=groups)
    n_fault = np.bincount(group[fault], minlength=groups).astype(np.int64)
    n_base = counts - n_fault
    nf, nb = n_fault.astype(np.float64), n_base.astype(np.float64)
    u = rank_sum - nf * (nf + 1) / 2
    sd = np.sqrt(nf * nb * (nf + nb + 1) / 12)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(sd > 0, (u - nf * nb / 2 - 0.5) / sd, 0.0)
    return RankTest(n_base.astype(np.int64), n_fault, np.nan_to_num(z))
