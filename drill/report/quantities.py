"""Serving quantities (queue depth, KV-cache use, prefix-cache hit rate, ...) from the scraped ``metrics.jsonl``.

Each serving stack names the same quantity differently; :data:`drill.serving_metrics.METRIC_NAMES` maps a
quantity to the metric of vLLM, SGLang, TGI and llama.cpp's server (sources per name in ``docs/metrics-map.md``).
A run's scrapes are searched in that order and the first stack whose metric the target exported is used. A
quantity the target does not export is **None** ("not available"), never 0: a zero would claim an empty queue
that was never measured.

How each kind of metric becomes a figure:

- a **gauge** (queue depth, running, KV-cache use, SGLang's cache hit rate) is combined across endpoints per
  scrape round — summed for counts of requests, the largest for a share — and a phase's figure is the mean
  (``running``, the hit-rate gauge) or the largest (``queue_depth``, ``kv_cache_usage``) over the phase;
- a **counter** is turned into increments per endpoint (a counter that went down was reset: the replica
  restarted, and its new value is the increment); a phase's figure is the increments summed over the phase
  (``preemptions``), divided by the phase's length (``generation_tokens_per_s``), or by another counter's
  (``prefix_cache_hit_rate`` = Δhits / Δqueries);
- a **histogram** gives the mean over the phase, Δsum / Δcount (``ttft_seconds``).

A failed scrape (``ok: false``) contributes nothing, and the scrape lines that could not be read are counted in
``evidence.reports["metrics.jsonl"]``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from drill.rundir.evidence import PhaseWindow, RunEvidence
from drill.rundir.jsonl import ReadReport, read_jsonl
from drill.serving_metrics import QUANTITIES, Across, MetricKind, PhaseStat, Quantity, Resolved, resolve

__all__ = [
    "Scrape",
    "metric_used",
    "phase_quantities",
    "quantity_series",
    "read_scrapes",
]


@dataclass(frozen=True)
class Scrape:
    """One line of ``metrics.jsonl``: one endpoint at one time, each metric summed over its label sets."""

    ts: float
    source: str
    ok: bool
    totals: dict[str, float]

    @classmethod
    def from_json(cls, data: dict) -> Scrape:
        totals: dict[str, float] = {}
        for key, value in (data.get("samples") or {}).items():
            name = key.split("{", 1)[0]
            totals[name] = totals.get(name, 0.0) + float(value)
        return cls(float(data["ts"]), str(data["source"]), bool(data["ok"]), totals)


def read_scrapes(path: Path, report: ReadReport) -> Iterator[Scrape]:
    """``metrics.jsonl`` as :class:`Scrape` records; unreadable lines are counted in ``report``."""
    return read_jsonl(path, Scrape.from_json, report)


def _scrapes(evidence: RunEvidence) -> list[Scrape]:
    cached = getattr(evidence, "_drill_scrapes", None)
    if cached is None:
        cached = sorted(evidence.read("metrics.jsonl", read_scrapes), key=lambda s: s.ts)
        evidence._drill_scrapes = cached  # type: ignore[attr-defined]  # read once per evidence
    return cached


def _resolve(scrapes: list[Scrape], quantity: str) -> Resolved | None:
    """The quantity as the first server the target exported it for (None: not available)."""
    return resolve({name for s in scrapes if s.ok for name in s.totals}, quantity)


def metric_used(evidence: RunEvidence, quantity: str) -> str | None:
    """The metric a quantity was read from in this run (``vllm:num_requests_waiting``), None if not exported."""
    resolved = _resolve(_scrapes(evidence), quantity)
    return None if resolved is None else resolved.metric


# --- gauges ---------------------------------------------------------------------------------------


def _rounds(scrapes: list[Scrape]) -> Iterator[list[Scrape]]:
    """Scrape rounds: consecutive lines until an endpoint repeats (the scraper visits each once a tick)."""
    current: list[Scrape] = []
    seen: set[str] = set()
    for scrape in scrapes:
        if scrape.source in seen:
            yield current
            current, seen = [], set()
        current.append(scrape)
        seen.add(scrape.source)
    if current:
        yield current


def _combine(values: list[float], across: Across) -> float:
    return sum(values) if across is Across.SUM else max(values)


def _gauge_series(scrapes: list[Scrape], name: str, across: Across) -> list[tuple[float, float]]:
    points = []
    for round_ in _rounds(scrapes):
        values = [s.totals[name] for s in round_ if s.ok and name in s.totals]
        if values:
            points.append((round_[0].ts, _combine(values, across)))
    return points


# --- counters -------------------------------------------------------------------------------------


def _increments(scrapes: list[Scrape], name: str) -> list[tuple[float, float, float]]:
    """(ts, increment, seconds since the endpoint's previous value) per endpoint; a drop is a reset."""
    last: dict[str, tuple[float, float]] = {}
    out = []
    for scrape in scrapes:
        if not scrape.ok or name not in scrape.totals:
            continue
        value = scrape.totals[name]
        previous = last.get(scrape.source)
        last[scrape.source] = (scrape.ts, value)
        if previous is None:
            continue
        delta = value - previous[1]
        out.append((scrape.ts, delta if delta >= 0 else value, scrape.ts - previous[0]))
    return out


def _in(window: PhaseWindow, ts: float) -> bool:
    """A gauge read at ``ts`` (a round's first scrape) belongs to the phase ``[start, end)``."""
    return window.start_ts <= ts < window.end_ts


def _closes_in(window: PhaseWindow, ts: float) -> bool:
    """An increment stamped ``ts`` covers the time up to ``ts``: it belongs to ``(start, end]``."""
    return window.start_ts < ts <= window.end_ts


def _total(increments: list[tuple[float, float, float]], window: PhaseWindow) -> float:
    return sum(delta for ts, delta, _ in increments if _closes_in(window, ts))


def _by_round(scrapes: list[Scrape], increments: list[tuple[float, float, float]]) -> list[tuple[float, list]]:
    """(the round's first ts, the increments stamped within the round) per scrape round."""
    bounds = [(r[0].ts, r[-1].ts) for r in _rounds(scrapes)]
    buckets: list[list[tuple[float, float, float]]] = [[] for _ in bounds]
    ends = [hi for _, hi in bounds]
    for item in increments:
        i = bisect.bisect_left(ends, item[0])
        if i < len(bounds) and bounds[i][0] <= item[0]:
            buckets[i].append(item)
    return [(lo, bucket) for (lo, _), bucket in zip(bounds, buckets, strict=True)]


def _counter_series(scrapes: list[Scrape], name: str) -> list[tuple[float, float]]:
    """Per scrape round, the endpoints' rates (per second) summed."""
    points = []
    for ts, bucket in _by_round(scrapes, _increments(scrapes, name)):
        rates = [delta / dt for _, delta, dt in bucket if dt > 0]
        if rates:
            points.append((ts, sum(rates)))
    return points


def _ratio_series(scrapes: list[Scrape], numerator: str, denominator: str) -> list[tuple[float, float]]:
    num = dict(_by_round(scrapes, _increments(scrapes, numerator)))
    points = []
    for ts, bucket in _by_round(scrapes, _increments(scrapes, denominator)):
        d = sum(delta for _, delta, _ in bucket)
        if d > 0:
            points.append((ts, sum(delta for _, delta, _ in num.get(ts, [])) / d))
    return points


# --- the interface --------------------------------------------------------------------------------


def _series(scrapes: list[Scrape], spec: Quantity, names: tuple[str, ...]) -> list[tuple[float, float]]:
    if spec.kind is MetricKind.GAUGE:
        return _gauge_series(scrapes, names[0], spec.across)
    if spec.kind is MetricKind.COUNTER:
        return _counter_series(scrapes, names[0])
    return _ratio_series(scrapes, names[0], names[1])  # RATIO and HISTOGRAM_MEAN (sum / count)


def quantity_series(evidence: RunEvidence, quantity: str) -> list[tuple[float, float]] | None:
    """(UNIX s, value) over the run, one point per scrape round (stamped with its first scrape); None when the
    target does not export it.

    Gauges are the value; counters a rate per second (``preemptions``: per second, not a count); ratios and
    histogram means are taken over each round's increments.
    """
    scrapes = _scrapes(evidence)
    resolved = _resolve(scrapes, quantity)
    if resolved is None:
        return None
    return _series(scrapes, resolved.quantity, resolved.samples)


def _phase_value(scrapes: list[Scrape], spec: Quantity, names: tuple[str, ...], window: PhaseWindow) -> float | None:
    if spec.kind is MetricKind.GAUGE:
        values = [v for ts, v in _gauge_series(scrapes, names[0], spec.across) if _in(window, ts)]
        if not values:
            return None
        return max(values) if spec.stat is PhaseStat.MAX else sum(values) / len(values)
    if spec.kind is MetricKind.COUNTER:
        increments = _increments(scrapes, names[0])
        if not any(_closes_in(window, ts) for ts, _, _ in increments):
            return None  # no two scrapes in the phase: nothing measured
        total = _total(increments, window)
        if spec.stat is PhaseStat.PER_SECOND:
            return total / window.length_s if window.length_s > 0 else None
        return total
    denominator = _total(_increments(scrapes, names[1]), window)
    if denominator <= 0:
        return None  # no queries (or no observations) in the phase: a ratio of nothing
    return _total(_increments(scrapes, names[0]), window) / denominator


def phase_quantities(evidence: RunEvidence) -> dict[str, dict[str, float | None]]:
    """phase -> quantity -> its figure over the phase (see the module's docstring); None = not available."""
    scrapes = _scrapes(evidence)
    resolved = {q: _resolve(scrapes, q) for q in QUANTITIES}
    out: dict[str, dict[str, float | None]] = {}
    for phase, window in evidence.phases.items():
        out[phase] = {
            q: (None if r is None else _phase_value(scrapes, r.quantity, r.samples, window))
            for q, r in resolved.items()
        }
    return out
