"""Arrival processes: when requests arrive, and the rate a pool runs at over time.

Called by :mod:`drill.load.schedule` while a schedule is built (offsets) and by
the load generator while a ``queue_flood`` burst runs (``RateCurve``: the pool's
current rate, which a burst multiplies). Processes (``drill/spec/scenario.py``):

- ``poisson``: exponential gaps at ``rate``;
- ``gamma``: gamma gaps with shape ``burstiness`` and mean ``1/rate``, as
  ``vllm bench serve --burstiness`` (``docs/serving-facts.md`` §5.1; 1 = Poisson,
  below 1 burstier: 0.87 fits the Azure conversation trace, §7.1);
- ``constant``: one arrival every ``1/rate`` s, the first at 0;
- ``stages``: a non-homogeneous Poisson process whose rate follows the stages
  (ramps are linear), drawn by thinning; the last stage's final rate holds
  until the end of the run;
- ``trace``: the rows of an Azure-format CSV, replayed ``speedup`` times faster.

All times are seconds from the start of the run (offsets), never wall clock.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass
from typing import Protocol

from drill.spec.azure_trace import TraceRow, read_trace
from drill.spec.scenario import Arrival, ArrivalProcess, Stage, StageKind, TraceReplay

__all__ = [
    "RateCurve",
    "ConstantRate",
    "StagedRate",
    "WindowedRate",
    "arrival_offsets",
    "rate_curve",
    "trace_window",
    "mean_rate",
]


class RateCurve(Protocol):
    """The arrival rate (requests/s) at offset ``t`` seconds."""

    def __call__(self, t: float) -> float: ...


@dataclass(frozen=True)
class ConstantRate:
    rate: float

    def __call__(self, t: float) -> float:
        return self.rate


@dataclass(frozen=True)
class StagedRate:
    """Piecewise-linear rate: ``segments`` are ``(start_s, end_s, from_rate, to_rate)``; the last holds."""

    segments: tuple[tuple[float, float, float, float], ...]

    def __call__(self, t: float) -> float:
        for start, end, r0, r1 in self.segments:
            if t < end:
                return r0 + (r1 - r0) * (max(t, start) - start) / (end - start)
        return self.segments[-1][3] if self.segments else 0.0

    def peak(self, until_s: float) -> float:
        return max((max(r0, r1) for start, _, r0, r1 in self.segments if start < until_s), default=0.0)


@dataclass(frozen=True)
class WindowedRate:
    """Rate of a replayed trace: arrivals within ``±window_s/2`` of ``t``, per second."""

    offsets: tuple[float, ...]
    window_s: float

    def __call__(self, t: float) -> float:
        low = bisect.bisect_left(self.offsets, t - self.window_s / 2)
        high = bisect.bisect_right(self.offsets, t + self.window_s / 2)
        return (high - low) / self.window_s


def staged(stages: list[Stage]) -> StagedRate:
    segments, start = [], 0.0
    for stage in stages:
        r0 = stage.from_rate if stage.kind is StageKind.RAMP else stage.rate
        r1 = stage.to_rate if stage.kind is StageKind.RAMP else stage.rate
        assert r0 is not None and r1 is not None  # Stage's validator: a ramp has both ends, a hold its rate
        segments.append((start, start + stage.duration, float(r0), float(r1)))
        start += stage.duration
    return StagedRate(tuple(segments))


def trace_window(arrival: Arrival, duration_s: float) -> list[tuple[float, TraceRow]]:
    """The trace rows replayed in ``[0, duration_s)``, with their replay offsets (s)."""
    spec = _trace(arrival)
    end = spec.start + spec.duration if spec.duration is not None else float("inf")
    out: list[tuple[float, TraceRow]] = []
    for row in read_trace(spec.file):
        if spec.start <= row.offset_s < end:
            offset = (row.offset_s - spec.start) / spec.speedup
            if offset >= duration_s:
                break
            out.append((offset, row))
    return out


def arrival_offsets(arrival: Arrival, duration_s: float, rng: random.Random) -> list[float]:
    """Arrival offsets in ``[0, duration_s)`` for a non-trace process, sorted."""
    process = arrival.process
    if process is ArrivalProcess.STAGES:
        return _thinned(staged(arrival.stages), duration_s, rng)
    rate = float(arrival.rate or 0.0)
    if rate <= 0:
        return []
    if process is ArrivalProcess.CONSTANT:
        return [i / rate for i in range(int(duration_s * rate - 1e-9) + 1) if i / rate < duration_s]
    shape = arrival.burstiness if process is ArrivalProcess.GAMMA else 1.0
    return _renewal(rate, shape, duration_s, rng)


def _renewal(rate: float, shape: float, duration_s: float, rng: random.Random) -> list[float]:
    out: list[float] = []
    t = 0.0
    scale = 1.0 / (rate * shape)
    while True:
        t += rng.expovariate(rate) if shape == 1.0 else rng.gammavariate(shape, scale)
        if t >= duration_s:
            return out
        out.append(t)


def _thinned(curve: StagedRate, duration_s: float, rng: random.Random) -> list[float]:
    peak = curve.peak(duration_s) if curve.segments else 0.0
    peak = max(peak, curve(duration_s))
    if peak <= 0:
        return []
    out: list[float] = []
    t = 0.0
    while True:
        t += rng.expovariate(peak)
        if t >= duration_s:
            return out
        if rng.random() * peak < curve(t):
            out.append(t)


def rate_curve(arrival: Arrival, duration_s: float) -> RateCurve:
    """The rate over time of ``arrival`` (trace: counted over a one-minute window of trace time)."""
    if arrival.process is ArrivalProcess.STAGES:
        return staged(arrival.stages)
    if arrival.process is ArrivalProcess.TRACE:
        offsets = tuple(offset for offset, _ in trace_window(arrival, duration_s))
        return WindowedRate(offsets, 60.0 / _trace(arrival).speedup)
    return ConstantRate(float(arrival.rate or 0.0))


def mean_rate(arrival: Arrival, duration_s: float) -> float:
    """Expected arrivals per second over ``[0, duration_s)``."""
    if arrival.process is ArrivalProcess.TRACE:
        return len(trace_window(arrival, duration_s)) / duration_s
    if arrival.process is not ArrivalProcess.STAGES:
        return float(arrival.rate or 0.0)
    curve, total = staged(arrival.stages), 0.0
    steps = 1000
    for i in range(steps):  # midpoint rule: exact for the piecewise-linear pieces up to breakpoints
        total += curve((i + 0.5) * duration_s / steps)
    return total / steps


def _trace(arrival: Arrival) -> TraceReplay:
    """The trace a trace arrival process replays (Arrival's validator requires one)."""
    assert arrival.trace is not None
    return arrival.trace
