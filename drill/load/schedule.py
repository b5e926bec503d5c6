"""The request set of a run, decided in advance: who arrives when, in which pool, how long.

``build_schedule`` is called once per process that generates load (the local
runner, or each distributed worker, which then keeps its share with
``Schedule.partition``) and by tests. It is a pure function of the scenario,
the run length and the seed: the same seed gives the same arrivals, pools and
token lengths, so a baseline and a candidate see exactly the same requests.

Random streams are separate per purpose and per pool (``"<seed>:arrival:<pool>"``,
``"<seed>:lengths:<pool>"``...), so adding a pool does not reshuffle another's.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from drill.errors import InputError
from drill.load.lengths import sample_length
from drill.load.rates import ConstantRate, RateCurve, arrival_offsets, mean_rate, rate_curve, trace_window
from drill.spec.azure_trace import TraceRow
from drill.spec.scenario import Arrival, ArrivalProcess, Pool, Scenario

__all__ = ["PlannedRequest", "Schedule", "build_schedule", "with_total_rate", "nominal_rate"]


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One logical request: its intended start (s after the run's start), pool and lengths."""

    index: int
    offset_s: float
    pool: str
    input_tokens: int
    output_tokens: int

    @property
    def logical_id(self) -> str:
        return f"{self.pool}-{self.index}"


@dataclass(frozen=True)
class Schedule:
    """The planned requests in intended-start order, and each pool's rate over time (for bursts)."""

    requests: tuple[PlannedRequest, ...]
    duration_s: float
    curves: dict[str, RateCurve] = field(default_factory=dict)

    def rate_at(self, pool: str, t: float) -> float:
        """Pool ``pool``'s scheduled arrival rate (requests/s) at offset ``t`` s."""
        curve = self.curves.get(pool)
        return curve(t) if curve is not None else 0.0

    def partition(self, index: int, count: int) -> tuple[PlannedRequest, ...]:
        """The share of worker ``index`` of ``count``: every ``count``-th request, round robin."""
        return self.requests[index::count]


@dataclass(frozen=True)
class _Arrived:
    offset_s: float
    pool: Pool
    row: TraceRow | None


def build_schedule(scenario: Scenario, duration_s: float, seed: int) -> Schedule:
    """Every request arriving in ``[0, duration_s)``; raises InputError for an unreadable trace."""
    arrived = _shared_arrivals(scenario, duration_s, seed)
    for pool in scenario.pools:
        if pool.arrival is not None:
            arrived += _pool_arrivals(pool, duration_s, seed)
    arrived.sort(key=lambda a: a.offset_s)
    rngs = {p.name: random.Random(f"{seed}:lengths:{p.name}") for p in scenario.pools}
    requests = tuple(_plan(i, a, rngs[a.pool.name]) for i, a in enumerate(arrived))
    return Schedule(requests, duration_s, _curves(scenario, duration_s))


def _plan(index: int, arrived: _Arrived, rng: random.Random) -> PlannedRequest:
    pool, row = arrived.pool, arrived.row
    try:
        inp = sample_length(pool.input_tokens, rng, row.context_tokens if row else None)
        out = sample_length(pool.output_tokens, rng, row.generated_tokens if row else None)
    except ValueError as exc:
        raise InputError(f"pool {pool.name!r}: {exc}") from exc
    return PlannedRequest(index, arrived.offset_s, pool.name, inp, out)


def _shared_arrivals(scenario: Scenario, duration_s: float, seed: int) -> list[_Arrived]:
    shared = [p for p in scenario.pools if p.arrival is None]
    arrival = scenario.arrival
    if not shared or arrival is None:
        return []
    shares = [p.share if p.share is not None else 1.0 for p in shared]
    pick = random.Random(f"{seed}:share")
    return [
        _Arrived(offset, _choose(shared, shares, pick.random()), row)
        for offset, row in _offsets(arrival, duration_s, random.Random(f"{seed}:arrival"))
    ]


def _pool_arrivals(pool: Pool, duration_s: float, seed: int) -> list[_Arrived]:
    rng = random.Random(f"{seed}:arrival:{pool.name}")
    arrival = pool.arrival
    assert arrival is not None  # called for the pools with their own arrival process
    return [_Arrived(offset, pool, row) for offset, row in _offsets(arrival, duration_s, rng)]


def _offsets(arrival: Arrival, duration_s: float, rng: random.Random) -> list[tuple[float, TraceRow | None]]:
    if arrival.process is ArrivalProcess.TRACE:
        assert arrival.trace is not None  # Arrival's validator: a trace process names its trace
        use = arrival.trace.use_lengths
        return [(offset, row if use else None) for offset, row in trace_window(arrival, duration_s)]
    return [(offset, None) for offset in arrival_offsets(arrival, duration_s, rng)]


def _choose(pools: list[Pool], shares: list[float], u: float) -> Pool:
    total = sum(shares)
    acc = 0.0
    for pool, share in zip(pools, shares):
        acc += share / total
        if u < acc:
            return pool
    return pools[-1]


def _curves(scenario: Scenario, duration_s: float) -> dict[str, RateCurve]:
    curves: dict[str, RateCurve] = {}
    shared = rate_curve(scenario.arrival, duration_s) if scenario.arrival is not None else ConstantRate(0.0)
    for pool in scenario.pools:
        if pool.arrival is not None:
            curves[pool.name] = rate_curve(pool.arrival, duration_s)
        else:
            share = pool.share if pool.share is not None else 1.0
            curves[pool.name] = _Scaled(shared, share)
    return curves


@dataclass(frozen=True)
class _Scaled:
    curve: RateCurve
    factor: float

    def __call__(self, t: float) -> float:
        return self.curve(t) * self.factor


def nominal_rate(scenario: Scenario, duration_s: float) -> float:
    """Expected arrivals per second of the whole scenario over ``[0, duration_s)``."""
    total = (
        mean_rate(scenario.arrival, duration_s)
        if scenario.arrival is not None and any(p.arrival is None for p in scenario.pools)
        else 0.0
    )
    return total + sum(mean_rate(p.arrival, duration_s) for p in scenario.pools if p.arrival is not None)


def with_total_rate(scenario: Scenario, rate: float, duration_s: float) -> Scenario:
    """``scenario`` with every arrival rate scaled so the total is ``rate`` requests/s (``--rate``).

    Pools keep their proportions and stages their shape. Raises InputError for a
    trace replay (change its ``speedup`` instead) or a scenario with no arrivals.
    """
    arrivals = [scenario.arrival] + [p.arrival for p in scenario.pools]
    if any(a is not None and a.process is ArrivalProcess.TRACE for a in arrivals):
        raise InputError("--rate cannot rescale a trace replay", hint="change the trace's 'speedup' instead")
    current = nominal_rate(scenario, duration_s)
    if current <= 0:
        raise InputError("--rate cannot rescale a scenario whose arrival rate is 0")
    factor = rate / current
    pools = [p.model_copy(update={"arrival": _scale(p.arrival, factor)}) for p in scenario.pools]
    return scenario.model_copy(update={"arrival": _scale(scenario.arrival, factor), "pools": pools})


def _scale(arrival: Arrival | None, factor: float) -> Arrival | None:
    if arrival is None:
        return None
    stages = [
        s.model_copy(
            update={k: getattr(s, k) * factor for k in ("rate", "from_rate", "to_rate") if getattr(s, k) is not None}
        )
        for s in arrival.stages
    ]
    rate = None if arrival.rate is None else arrival.rate * factor
    return arrival.model_copy(update={"rate": rate, "stages": stages})
