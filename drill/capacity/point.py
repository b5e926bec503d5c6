"""One rate point: the scenario rescaled to one total arrival rate, run open loop, judged against each pool's SLO.

A point runs the load driver (:class:`drill.load.driver.LoadDriver`, the same open-loop generator ``drill load``
and ``drill run`` use) into its own directory, ``points/<sweep>/<NN>-<rate>rps-rep<k>/``: ``requests.jsonl``,
``failing_samples.jsonl``, ``metrics.jsonl`` (the target's ``/metrics`` every second), ``load-driver.log``,
and later ``spans.jsonl`` (:mod:`drill.capacity.ttft_split`). Arrivals run for
``warmup + measure + tail`` seconds; only attempts intended inside ``[warmup, warmup + measure)`` are judged, so
the judged requests never start into an empty stack nor stop with the load; the stop then waits ``drain`` seconds
for in-flight requests (cancelling the rest) and for the target to be idle before the next point.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from drill.capacity.attainment import AttainmentRule, PoolOutcome, SloOutcome, judge_pool
from drill.capacity.ttft_split import TtftSplit
from drill.checks.judging import HARNESS_LAG_MS  # a point whose arrivals went out this late (p95) measured the harness
from drill.load.driver import LoadDriver, LoadPlan
from drill.load.schedule import with_total_rate
from drill.rundir.jsonl import ReadReport
from drill.rundir.records import RequestRecord, read_records
from drill.runner.scraper import MetricsScraper, parse_samples
from drill.spec.scenario import Scenario
from drill.stats import percentile

if TYPE_CHECKING:
    from drill.runner.scraper import MetricsScraper

__all__ = ["PointRequest", "PointRunner", "PointTiming", "RatePoint", "point_directory"]

_BUSY_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")


@dataclass(frozen=True)
class PointTiming:
    """Seconds of one point: arrivals for ``warmup + measure + tail``, judged over ``measure``."""

    warmup_s: float = 4.0
    measure_s: float = 14.0
    tail_s: float = 2.0
    drain_s: float = 5.0
    quiet_timeout_s: float = 20.0

    @property
    def arrivals_s(self) -> float:
        return self.warmup_s + self.measure_s + self.tail_s


@dataclass(frozen=True)
class PointRequest:
    sweep: str  # "full" or "n-1"
    index: int
    rate: float  # total planned arrivals/s
    repetition: int
    seed: int


@dataclass(frozen=True)
class RatePoint:
    """One measured point (``capacity.json``'s ``points``)."""

    sweep: str
    index: int
    rate: float
    repetition: int
    seed: int
    directory: str  # relative to the run directory
    window_s: float
    arrivals_per_s: float  # first attempts intended inside the window, per second
    holds: bool
    ratio: float  # the highest binding ratio over the pools (<= 1: holds)
    pools: tuple[PoolOutcome, ...]
    schedule_lag_p95_ms: float | None
    harness_limited: bool
    quiet: bool | None  # the target was idle before the next point (None: it exports no queue gauges)
    unreadable_records: int
    split: tuple[TtftSplit, ...] = ()
    window_ts: tuple[float, float] = (0.0, 0.0)  # the judged window, UNIX s of intended starts
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def goodput_per_s(self) -> float:
        return sum(p.goodput_per_s for p in self.pools)

    @property
    def binding(self) -> SloOutcome | None:
        """The SLO with the highest observed/bound ratio over every pool."""
        return max((b for p in self.pools if (b := p.binding) is not None), key=lambda s: s.ratio, default=None)


def point_directory(run_dir: Path, request: PointRequest) -> Path:
    return run_dir / "points" / request.sweep / f"{request.index:02d}-{request.rate:.4g}rps-rep{request.repetition}"


@dataclass
class PointRunner:
    """Measures points against one started target."""

    run_dir: Path
    scenario: Scenario
    target_url: str
    model: str | None
    slos: dict[str, dict[str, float]]  # pool -> {slo key: bound in s}
    timing: PointTiming
    rule: AttainmentRule
    headers: dict[str, str] = field(default_factory=dict)
    metrics_urls: dict[str, str] = field(default_factory=dict)

    def measure(self, request: PointRequest) -> RatePoint:
        directory = point_directory(self.run_dir, request)
        directory.mkdir(parents=True, exist_ok=False)
        length = self.timing.arrivals_s
        plan = LoadPlan(
            scenario=with_total_rate(self.scenario, request.rate, length),
            target_url=self.target_url,
            model=self.model,
            duration_s=length,
            run_dir=directory,
            seed=request.seed,
            headers=dict(self.headers),
        )
        scraper = self._scraper(directory)
        try:
            driver = LoadDriver(plan)
            driver.start()
            t0 = driver.t0 or time.time()
            time.sleep(max(0.0, t0 + length - time.time()))
            driver.stop(drain_s=self.timing.drain_s)
            quiet = wait_quiet(self.metrics_urls, self.timing.quiet_timeout_s)
        finally:
            if scraper is not None:
                scraper.stop()
        return self._judge(request, directory, t0, quiet)

    def _scraper(self, directory: Path) -> MetricsScraper | None:
        if not self.metrics_urls:
            return None

        return MetricsScraper(self.metrics_urls, directory / "metrics.jsonl", 1.0).start()

    def _judge(self, request: PointRequest, directory: Path, t0: float, quiet: bool | None) -> RatePoint:
        report = ReadReport(directory / "requests.jsonl")
        start, end = t0 + self.timing.warmup_s, t0 + self.timing.warmup_s + self.timing.measure_s
        records = [r for r in read_records(directory / "requests.jsonl", report) if start <= r.intended_ts < end]
        point = judge_point(request, directory.relative_to(self.run_dir), records, self.slos, self.timing, self.rule)
        unreadable = report.bad_count + (1 if report.torn_last_line is not None else 0)
        if unreadable:
            point = _with_note(point, f"{report.describe()} (those attempts are not judged)", unreadable=unreadable)
        if quiet is False:
            point = _with_note(point, f"the target was still busy {self.timing.quiet_timeout_s:g}s after the point")
        return _replace(point, quiet=quiet, window_ts=(start, end))


def judge_point(
    request: PointRequest,
    directory: Path,
    records: list[RequestRecord],
    slos: dict[str, dict[str, float]],
    timing: PointTiming,
    rule: AttainmentRule,
) -> RatePoint:
    """The point's verdict from its measured attempts (pure: a test gives it records)."""
    window = timing.measure_s
    pools = sorted({r.pool for r in records} | set(slos))
    outcomes = tuple(
        judge_pool(pool, slos.get(pool, {}), [r for r in records if r.pool == pool], window, rule) for pool in pools
    )
    lag = percentile([r.schedule_lag_ms for r in records if r.schedule_lag_ms is not None], 95)
    notes = tuple(f"pool {o.pool} had no measured attempt at this rate" for o in outcomes if not o.attempts)
    ratio = max((o.ratio for o in outcomes), default=math.inf)
    limited = lag is not None and lag > HARNESS_LAG_MS
    if limited:
        notes += (
            f"the load generator sent arrivals late (schedule lag p95 {lag:.0f} ms > {HARNESS_LAG_MS:g} ms): this "
            "point measured the harness machine too",
        )
    return RatePoint(
        sweep=request.sweep,
        index=request.index,
        rate=request.rate,
        repetition=request.repetition,
        seed=request.seed,
        directory=str(directory),
        window_s=window,
        arrivals_per_s=sum(1 for r in records if r.attempt == 1) / window if window > 0 else 0.0,
        holds=bool(records) and all(o.holds for o in outcomes),
        ratio=ratio if records else math.inf,
        pools=outcomes,
        schedule_lag_p95_ms=lag,
        harness_limited=limited,
        quiet=None,
        unreadable_records=0,
        notes=notes,
    )


def _replace(point: RatePoint, **changes: object) -> RatePoint:
    return replace(point, **changes)  # type: ignore[arg-type]


def _with_note(point: RatePoint, note: str, **changes: object) -> RatePoint:
    return _replace(point, notes=point.notes + (note,), **changes)


def wait_quiet(metrics_urls: dict[str, str], timeout_s: float) -> bool | None:
    """Wait until every endpoint reports no running and no waiting request; None when none exports those gauges."""
    if not metrics_urls:
        return None
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while True:
            busy = _busy(client, metrics_urls, parse_samples)
            if busy is None:
                return None
            if busy == 0:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.25)


def _busy(client: httpx.Client, metrics_urls: dict[str, str], parse: Callable[[str], dict[str, float]]) -> float | None:
    total, seen = 0.0, False
    for url in metrics_urls.values():
        try:
            response = client.get(url)
            samples = parse(response.text) if response.status_code == 200 else {}
        except (httpx.HTTPError, ValueError):  # an endpoint that does not answer is not idle
            return 1.0
        for key, value in samples.items():
            if key.split("{", 1)[0] in _BUSY_GAUGES:
                total += value
                seen = True
    return total if seen else None
