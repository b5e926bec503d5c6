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

__all__ = ["RankTest", "SortedSides", "group_medians", "order_by", "rank_test", "sort_sides"]

#: Bits of the minor key in a combined int64 sort key (the major key gets the rest).
_MINOR_BITS = 42


@dataclass(frozen=True)
class RankTest:
    """Per group: the sample sizes and the rank test's z (positive: the fault window's values are larger)."""

    n_base: np.ndarray  # int64
    n_fault: np.ndarray  # int64
    z: np.ndarray  # float64; 0 where either side is empty


def order_by(major: np.ndarray, minor: np.ndarray, *, stable: bool = False) -> np.ndarray:
    """Indices that sort by (major, minor), both non-negative integers: one int64 key and one argsort when
    they fit (minor below 2^42, major below 2^21), else ``np.lexsort``. ``stable`` keeps equal keys in
    their order (and is linear on a few sorted runs: timsort)."""
    if not len(major):
        return np.zeros(0, dtype=np.int64)
    major, minor = major.astype(np.int64, copy=False), minor.astype(np.int64, copy=False)
    if int(minor.max()) < 2**_MINOR_BITS and int(major.max()) < 2 ** (63 - _MINOR_BITS) and int(minor.min()) >= 0:
        return np.argsort((major << _MINOR_BITS) | minor, kind="stable" if stable else None)
    return np.lexsort((minor, major))


@dataclass(frozen=True)
class SortedSides:
    """Each side's values and groups, sorted by (group, value): one sort serves the medians and, for any
    scale of the baseline, the rank test (scaling keeps a side's order, so the merge is two sorted runs)."""

    base_values: np.ndarray
    base_group: np.ndarray
    fault_values: np.ndarray
    fault_group: np.ndarray
    groups: int

    def medians(self, fault: bool) -> np.ndarray:
        if fault:
            return _sorted_medians(self.fault_values, self.fault_group, self.groups)
        return _sorted_medians(self.base_values, self.base_group, self.groups)

    def rank_test(self, scale: float | np.ndarray = 1.0) -> RankTest:
        """The rank test of the fault side against the baseline's values times ``scale``: each fault value's
        count of smaller baseline values (ties counted half) by binary search in the sorted baseline, so
        U needs no merge (values rounded to integers, ns)."""
        scale = np.asarray(scale, dtype=np.float64)
        base = self.base_values * (scale[self.base_group] if scale.ndim else scale)
        base_keys = _keys(self.base_group, base)
        fault_keys = _keys(self.fault_group, self.fault_values)
        n_base = np.bincount(self.base_group, minlength=self.groups).astype(np.int64)
        n_fault = np.bincount(self.fault_group, minlength=self.groups).astype(np.int64)
        if base_keys is None or fault_keys is None:
            return self._merged_rank_test(base)
        below = np.searchsorted(base_keys, fault_keys, side="left")
        upto = np.searchsorted(base_keys, fault_keys, side="right")
        base_start = np.concatenate(([0], np.cumsum(n_base)[:-1]))
        wins = (below - base_start[self.fault_group]) + 0.5 * (upto - below)
        u = np.bincount(self.fault_group, weights=wins, minlength=self.groups)
        return _z(u, n_base, n_fault)

    def _merged_rank_test(self, base: np.ndarray) -> RankTest:
        values = np.concatenate((base, self.fault_values))
        group = np.concatenate((self.base_group, self.fault_group))
        fault = np.concatenate((np.zeros(len(base), dtype=bool), np.ones(len(self.fault_values), dtype=bool)))
        order = np.lexsort((values, group))
        return _rank_test_sorted(values[order], group[order], fault[order], self.groups)


def _keys(group: np.ndarray, values: np.ndarray) -> np.ndarray | None:
    """Sorted-order-preserving int64 keys ``group << 42 | round(value)``, or None when they do not fit."""
    if not len(group):
        return np.zeros(0, dtype=np.int64)
    ints = np.rint(values).astype(np.int64)
    if int(ints.max()) >= 2**_MINOR_BITS or int(ints.min()) < 0 or int(group.max()) >= 2 ** (63 - _MINOR_BITS):
        return None
    return (group.astype(np.int64) << _MINOR_BITS) | ints


def _z(u: np.ndarray, n_base: np.ndarray, n_fault: np.ndarray) -> RankTest:
    """The normal approximation of U (continuity-corrected), z > 0 when the fault side is larger."""
    nf, nb = n_fault.astype(np.float64), n_base.astype(np.float64)
    sd = np.sqrt(nf * nb * (nf + nb + 1) / 12)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(sd > 0, (u - nf * nb / 2 - 0.5) / sd, 0.0)
    return RankTest(n_base, n_fault, np.nan_to_num(z))


def _by_group(group: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``order`` stably re-sorted by ``group``: a radix sort of 16-bit codes where they fit (four times faster
    than ``np.lexsort`` on 100,000 values), else a stable sort."""
    codes = group[order]
    if len(codes) and int(codes.max()) < 2**16 and int(codes.min()) >= 0:
        codes = codes.astype(np.uint16)
    return order[np.argsort(codes, kind="stable")]


def _sorted_medians(ordered: np.ndarray, group: np.ndarray, groups: int) -> np.ndarray:
    counts = np.bincount(group, minlength=groups)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    out = np.full(groups, np.nan)
    has = counts > 0
    low = starts[has] + (counts[has] - 1) // 2
    high = starts[has] + counts[has] // 2
    out[has] = (ordered[low] + ordered[high]) / 2
    return out


def sort_sides(values: np.ndarray, group: np.ndarray, fault: np.ndarray, groups: int) -> SortedSides:
    """:class:`SortedSides` of non-negative ``values`` (ns) per ``group`` code, ``fault`` marking the fault side."""
    order = order_by(group, np.rint(values))
    g, v, side = group[order], values[order].astype(np.float64), fault[order]
    return SortedSides(v[~side], g[~side], v[side], g[side], groups)


def group_medians(values: np.ndarray, group: np.ndarray, groups: int) -> np.ndarray:
    """Median of ``values`` per ``group`` code (0..groups-1); nan for empty groups."""
    order = _by_group(group, np.argsort(values))  # equal values' order does not change a median
    ordered = values[order].astype(np.float64)
    counts = np.bincount(group, minlength=groups)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    out = np.full(groups, np.nan)
    has = counts > 0
    low = starts[has] + (counts[has] - 1) // 2
    high = starts[has] + counts[has] // 2
    out[has] = (ordered[low] + ordered[high]) / 2
    return out


def _tied_ranks(values: np.ndarray, group: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """1-based ranks within each group, ties averaged, of columns sorted by (group, value)."""
    n = len(values)
    new_run = np.ones(n, dtype=bool)
    new_run[1:] = (group[1:] != group[:-1]) | (values[1:] != values[:-1])
    first = np.flatnonzero(new_run)
    last = np.append(first[1:], n) - 1
    average = (first + last) / 2 + 1.0 - starts[group[first]]
    return np.repeat(average, last - first + 1)


def rank_test(values: np.ndarray, group: np.ndarray, fault: np.ndarray, groups: int) -> RankTest:
    """The one-sided Mann-Whitney test of each group's fault-window values (``fault`` True) against its
    baseline values (``fault`` False)."""
    order = np.lexsort((values, group))
    return _rank_test_sorted(values[order], group[order], fault[order], groups)


def _rank_test_sorted(values: np.ndarray, group: np.ndarray, fault: np.ndarray, groups: int) -> RankTest:
    """:func:`rank_test` of columns already sorted by (group, value)."""
    counts = np.bincount(group, minlength=groups)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    ranks = _tied_ranks(values, group, starts)
    rank_sum = np.bincount(group[fault], weights=ranks[fault], minlength=groups)
    n_fault = np.bincount(group[fault], minlength=groups).astype(np.int64)
    n_base = (counts - n_fault).astype(np.int64)
    nf = n_fault.astype(np.float64)
    return _z(rank_sum - nf * (nf + 1) / 2, n_base, n_fault)
