"""The knee search, decided without side effects: given the points measured so far, which rate to measure next.

:func:`decide` is a pure function of a :class:`SearchConfig` and the :class:`Observation` s so far; the sweep
(:mod:`drill.capacity.sweep`) measures what it returns and calls it again, so a test drives it step by step with
synthetic points. The rules (``docs/capacity.md``):

- a rate *holds* when every repetition measured at it held (one failing repetition fails the rate);
- **listed rates** (``--rates 2,4,8``): each rate, every repetition, in the order given; then done;
- **auto**: a coarse sweep from ``start`` multiplies (or, when ``start`` already fails, divides) by ``factor``
  until one rate holds and a higher one fails; then bisection (geometric midpoint) between the highest holding
  rate below the lowest failing one (``lo``) and that failing rate (``hi``) until ``hi / lo <= 1 + tolerance``.
  Before a holding rate counts as ``lo`` it is measured at every repetition, and so is the final ``hi`` (each
  repetition's own crossing needs both ends); coarse points far from the knee are measured once;
- the search ends unbracketed when the rate would leave ``[min_rate, max_rate]`` or ``max_points`` runs are spent.

:func:`knee_of` reads the result out of the observations: the measured knee is the highest rate that held at every
repetition below the lowest failing rate (conservative); each repetition's own crossing of the binding SLO (the
highest observed/bound ratio, interpolated in log ratio between its last holding and first failing rate) gives the
estimates a confidence interval is computed from; the knee *estimate* is where the worst repetition's binding
ratio crosses 1 between the measured knee and the lowest failing rate (less sensitive than the bracket's ends to
one borderline point, and never outside them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Done", "Knee", "Next", "Observation", "SearchConfig", "decide", "knee_of", "t_interval"]


@dataclass(frozen=True)
class SearchConfig:
    """How the knee is searched. ``rates``: an explicit list (no search); empty: auto from ``start``."""

    start: float
    rates: tuple[float, ...] = ()
    factor: float = 2.0
    tolerance: float = 0.10
    repetitions: int = 2
    max_points: int = 14
    min_rate: float = 0.0
    max_rate: float = math.inf


@dataclass(frozen=True)
class Observation:
    """One measured point as the planner sees it: did every pool's SLO hold, and the binding observed/bound ratio
    (``math.inf`` when requests failed at the SLO's percentile)."""

    rate: float
    repetition: int
    holds: bool
    ratio: float


@dataclass(frozen=True)
class Next:
    """Measure ``rate`` with repetition ``repetition`` (its seed is the sweep's seed + repetition)."""

    rate: float
    repetition: int
    why: str


@dataclass(frozen=True)
class Done:
    """The search is over. ``bracketed``: a holding rate and a failing one within the tolerance (or, for listed
    rates, a holding rate below a failing one)."""

    bracketed: bool
    reason: str


@dataclass(frozen=True)
class Knee:
    """What the observations say about the knee."""

    bracketed: bool
    knee: float | None  # the highest rate that held at every repetition below ``upper``
    upper: float | None  # the lowest rate that failed
    estimates: tuple[float, ...]  # each repetition's interpolated crossing of the binding SLO
    mean: float | None
    ci_low: float | None  # 95 % t-interval of the estimates' mean (None with fewer than 2 estimates)
    ci_high: float | None
    non_monotone: bool  # a rate held above a failing one (the knee ignores it: conservative)
    estimate: float | None = None  # the headline: where the worst repetition's binding ratio crosses 1 in [knee, upper]


def _by_rate(points: Sequence[Observation]) -> dict[float, list[Observation]]:
    out: dict[float, list[Observation]] = {}
    for p in points:
        out.setdefault(p.rate, []).append(p)
    return out


def _holds(obs: list[Observation]) -> bool:
    return all(o.holds for o in obs)


def _bracket(points: Sequence[Observation]) -> tuple[float | None, float | None]:
    """(lo, hi): the lowest failing rate and the highest holding rate below it (None where absent)."""
    rates = _by_rate(points)
    failing = [r for r, obs in rates.items() if not _holds(obs)]
    hi = min(failing) if failing else None
    holding = [r for r, obs in rates.items() if _holds(obs) and (hi is None or r < hi)]
    return (max(holding) if holding else None), hi


def decide(config: SearchConfig, points: Sequence[Observation]) -> Next | Done:
    """The next rate to measure, or why the search is over."""
    if config.rates:
        return _decide_listed(config, points)
    if len(points) >= config.max_points:
        return Done(False, f"stopped after {len(points)} points (--max-points) before the bracket narrowed")
    if not points:
        return Next(config.start, 0, "coarse sweep: the start rate")
    lo, hi = _bracket(points)
    if hi is None:
        return _coarse_up(config, points)
    if lo is None:
        return _coarse_down(config, hi)
    missing = _missing_repetition(config, points, lo)
    if missing is not None:
        return Next(lo, missing, f"confirm {lo:g}/s with repetition {missing}")
    if hi / lo <= 1.0 + config.tolerance + 1e-9:
        missing = _missing_repetition(config, points, hi)
        if missing is not None:  # every repetition's own crossing: the interval needs both ends per repetition
            return Next(hi, missing, f"measure {hi:g}/s with repetition {missing} too, for the interval")
        return Done(True, f"bracketed: {lo:g}/s held, {hi:g}/s failed (within {config.tolerance:.0%})")
    mid = math.sqrt(lo * hi)
    return Next(mid, 0, f"bisection between {lo:g}/s and {hi:g}/s")


def _decide_listed(config: SearchConfig, points: Sequence[Observation]) -> Next | Done:
    done = {(p.rate, p.repetition) for p in points}
    for rate in config.rates:
        for rep in range(config.repetitions):
            if (rate, rep) not in done:
                return Next(rate, rep, "listed rate")
    lo, hi = _bracket(points)
    if lo is not None and hi is not None:
        return Done(True, f"listed rates measured: {lo:g}/s held, {hi:g}/s failed")
    if hi is None:
        return Done(False, "listed rates measured: every rate held (the knee is above the highest)")
    return Done(False, "listed rates measured: every rate failed (the knee is below the lowest)")


def _coarse_up(config: SearchConfig, points: Sequence[Observation]) -> Next | Done:
    top = max(p.rate for p in points)
    rate = top * config.factor
    if rate > config.max_rate:
        return Done(False, f"every rate up to {top:g}/s held; the next ({rate:g}/s) is above --max-rate")
    return Next(rate, 0, f"coarse sweep: {top:g}/s held")


def _coarse_down(config: SearchConfig, lowest_failing: float) -> Next | Done:
    rate = lowest_failing / config.factor
    if rate < config.min_rate:
        return Done(
            False, f"every rate down to {lowest_failing:g}/s failed; the next ({rate:g}/s) is below the minimum"
        )
    return Next(rate, 0, f"coarse sweep: {lowest_failing:g}/s failed")


def _missing_repetition(config: SearchConfig, points: Sequence[Observation], rate: float) -> int | None:
    have = {p.repetition for p in points if p.rate == rate}
    return next((rep for rep in range(config.repetitions) if rep not in have), None)


def knee_of(points: Sequence[Observation], bracketed: bool, repetitions: int = 1) -> Knee:
    """The knee of the observations: measured (``knee``: held at all ``repetitions``) and interpolated per
    repetition (``estimates``)."""
    _, hi = _bracket(points)
    rates = _by_rate(points)
    confirmed = [
        r
        for r, obs in rates.items()
        if _holds(obs) and (hi is None or r < hi) and {o.repetition for o in obs} >= set(range(repetitions))
    ]
    estimates = tuple(e for rep in sorted({p.repetition for p in points}) if (e := _crossing(points, rep)) is not None)
    mean = sum(estimates) / len(estimates) if estimates else None
    low, high = t_interval(estimates)
    non_monotone = hi is not None and any(r > hi and _holds(obs) for r, obs in rates.items())
    knee = max(confirmed) if confirmed and hi is not None else None
    estimate = _interpolate(knee, hi, rates) if knee is not None and hi is not None else None
    return Knee(bracketed, knee, hi, estimates, mean, low, high, non_monotone, estimate)


def _interpolate(lo: float, hi: float, rates: dict[float, list[Observation]]) -> float:
    """Where the worst repetition's binding ratio crosses 1 between ``lo`` and ``hi`` (log ratio, linear in rate);
    ``lo`` when there is no finite slope."""
    q_lo = max(o.ratio for o in rates[lo])
    q_hi = max(o.ratio for o in rates[hi])
    if not (0 < q_lo < 1 <= q_hi) or math.isinf(q_hi):
        return lo  # no slope to interpolate (failures at the percentile): the measured knee, conservative
    return _cross(lo, hi, q_lo, q_hi)


def _cross(lo: float, hi: float, q_lo: float, q_hi: float) -> float:
    if not (0 < q_lo < 1 <= q_hi) or math.isinf(q_hi):
        return math.sqrt(lo * hi)  # no usable slope (a failed request at the percentile): the midpoint
    return lo + (hi - lo) * (-math.log(q_lo) / (math.log(q_hi) - math.log(q_lo)))


def _crossing(points: Sequence[Observation], repetition: int) -> float | None:
    """Where repetition ``repetition``'s binding ratio crosses 1, between its highest holding and lowest failing
    rate (its own point at a rate, else repetition 0's: coarse points are measured once)."""
    ratio: dict[float, Observation] = {}
    for p in sorted(points, key=lambda o: o.repetition != repetition):
        if p.repetition in (repetition, 0):
            ratio.setdefault(p.rate, p)
    failing = [r for r, o in ratio.items() if not o.holds]
    if not failing:
        return None
    hi = min(failing)
    holding = [r for r, o in ratio.items() if o.holds and r < hi]
    if not holding:
        return None
    lo = max(holding)
    return _cross(lo, hi, ratio[lo].ratio, ratio[hi].ratio)


#: Two-sided 97.5 % quantiles of Student's t for 1..10 degrees of freedom.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def t_interval(values: Sequence[float]) -> tuple[float | None, float | None]:
    """The 95 % confidence interval of the mean of ``values`` (Student's t), or (None, None) with fewer than 2."""
    n = len(values)
    if n < 2:
        return None, None
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
    half = t * sd / math.sqrt(n)
    return mean - half, mean + half
