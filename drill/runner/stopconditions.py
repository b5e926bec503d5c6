"""Stop conditions: end the fault phase early when the drill hurts more than it may.

Evaluated by the runner every tick of the fault phase (``max_duration`` in
every phase) from live evidence: the request records the load driver appends
to ``requests.jsonl`` and the latest readings of the metrics source (the
``/metrics`` scraper, or the user's Prometheus).

- ``error_rate``: share of requests that finished in the last ``for`` seconds
  with an error, above ``above`` (with at least ``min_requests`` finished).
- ``latency``: client-side percentile of ``metric`` (ttft, tpot, itl, e2e;
  measured from the intended start) over the last ``for`` seconds.
- ``metric``: a serving quantity (``queue_depth``, ``kv_cache_usage``, ...,
  mapped from vLLM, SGLang, TGI or llama.cpp's names by
  :mod:`drill.serving_metrics`) or a raw metric name stays above ``above`` for
  ``for`` seconds. A raw name reads the largest value across the target's
  endpoints; a quantity is combined as the mapping says (a counter is its rate
  per second over the last scrape interval). A metric the target does not
  export is "not available": the condition says so once (the journal and the
  log) and never triggers on it.
- ``max_duration``: the whole drill has run longer than ``value``.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from drill.rundir.records import ErrorClass, RecordTail, RequestRecord
from drill.serving_metrics import METRIC_NAMES, QUANTITIES, Reading, live_value, resolve
from drill.spec.models import StopCondition, StopKind
from drill.stats import percentile

__all__ = ["StopMonitor", "StopTrigger"]


@dataclass(frozen=True)
class StopTrigger:
    condition: StopCondition
    observed: str


def _finished_at(record: RequestRecord) -> float:
    if record.e2e_ms is not None:
        return record.intended_ts + record.e2e_ms / 1000.0
    return record.sent_ts or record.intended_ts


class StopMonitor:
    """Keeps a sliding window of finished requests and evaluates the drill's stop conditions."""

    def __init__(
        self,
        conditions: list[StopCondition],
        requests_path: Path,
        readings: Callable[[], Mapping[str, Reading]],
        started_mono: float,
        note: Callable[[str], None] = lambda message: None,
    ) -> None:
        self.conditions = conditions
        self.tail = RecordTail(requests_path)
        self.readings = readings
        self.note = note
        self._noted: set[int] = set()
        self.started_mono = started_mono
        self._window: deque[tuple[float, RequestRecord]] = deque()
        self._horizon = max([c.for_ for c in conditions] + [1.0])
        self._above_since: dict[int, float] = {}

    def poll(
        self, *, fault_phase: bool, now_wall: float | None = None, now_mono: float | None = None
    ) -> StopTrigger | None:
        now_wall = time.time() if now_wall is None else now_wall
        now_mono = time.monotonic() if now_mono is None else now_mono
        self._ingest(now_wall)
        for i, cond in enumerate(self.conditions):
            if cond.kind is not StopKind.MAX_DURATION and not fault_phase:
                continue
            observed = self._evaluate(i, cond, now_wall, now_mono)
            if observed is not None:
                return StopTrigger(cond, observed)
        return None

    def _ingest(self, now_wall: float) -> None:
        for record in self.tail.read_new():
            if record.error is ErrorClass.CLIENT_DROP and record.attempt > 1:
                continue
            self._window.append((_finished_at(record), record))
        while self._window and self._window[0][0] < now_wall - self._horizon - 5:
            self._window.popleft()

    def _recent(self, seconds: float, now_wall: float) -> list[RequestRecord]:
        return [r for t, r in self._window if t >= now_wall - seconds]

    def _evaluate(self, i: int, cond: StopCondition, now_wall: float, now_mono: float) -> str | None:
        if cond.kind is StopKind.MAX_DURATION:
            elapsed = now_mono - self.started_mono
            return f"drill ran {elapsed:.1f}s (limit {cond.value:g}s)" if elapsed > (cond.value or math.inf) else None
        if cond.kind is StopKind.ERROR_RATE:
            return self._error_rate(cond, now_wall)
        if cond.kind is StopKind.LATENCY:
            return self._latency(cond, now_wall)
        return self._metric(i, cond, now_mono)

    def _error_rate(self, cond: StopCondition, now_wall: float) -> str | None:
        recent = self._recent(cond.for_, now_wall)
        if len(recent) < cond.min_requests:
            return None
        failed = sum(1 for r in recent if not r.ok and (cond.classes is None or r.error in cond.classes))
        share = failed / len(recent)
        if share > (cond.above or 0):
            return f"error rate {share:.1%} over the last {cond.for_:g}s ({failed}/{len(recent)} requests)"
        return None

    def _latency(self, cond: StopCondition, now_wall: float) -> str | None:
        recent = self._recent(cond.for_, now_wall)
        values = [v for v in (_latency_of(r, cond.metric) for r in recent) if v is not None]
        if len(values) < cond.min_requests:
            return None
        value = percentile(values, cond.percentile)
        limit_s = cond.above or math.inf
        if value is not None and value / 1000.0 > limit_s:
            return (
                f"{cond.metric} p{cond.percentile:g} = {value:.0f}ms over the last {cond.for_:g}s "
                f"(limit {limit_s * 1000:.0f}ms)"
            )
        return None

    def _metric(self, i: int, cond: StopCondition, now_mono: float) -> str | None:
        read = self._metric_value(i, str(cond.metric))
        if read is None or read[1] is None or read[1] <= (cond.above or math.inf):
            self._above_since.pop(i, None)
            return None
        metric, value = read
        since = self._above_since.setdefault(i, now_mono)
        if now_mono - since >= cond.for_:
            return f"{metric} = {value:g} above {cond.above:g} for {now_mono - since:.1f}s"
        return None

    def _metric_value(self, i: int, name: str) -> tuple[str, float | None] | None:
        """(what was read, its value now); None when the target does not export it (noted once)."""
        readings = self.readings()
        if not readings:
            return None  # nothing scraped yet, or every endpoint is down: nothing measured, nothing to say
        if name in QUANTITIES:
            resolved = resolve({n for r in readings.values() for n in r.totals}, name)
            if resolved is None:
                tried = ", ".join(m for m in METRIC_NAMES[name].values() if m)
                self._not_available(i, f"{name}: not available — the target exports none of {tried}")
                return None
            return f"{name} ({resolved.metric})", live_value(readings, resolved)
        values = [r.totals[name] for r in readings.values() if name in r.totals]
        if not values:
            self._not_available(i, f"{name}: not available — no endpoint of the target exports it (so far)")
            return None
        return name, max(values)

    def _not_available(self, i: int, message: str) -> None:
        if i not in self._noted:
            self._noted.add(i)
            self.note(f"stop condition {self.conditions[i].label()!r}: {message}; it cannot trigger on it")


def _latency_of(record: RequestRecord, metric: str | None) -> float | None:
    if metric == "e2e":
        if record.ok or record.error is ErrorClass.TIMEOUT:
            return record.e2e_ms
        return None
    if not record.ok:
        return None
    if metric == "ttft":
        return record.ttft_ms
    if metric == "tpot":
        return record.tpot_ms
    gaps = record.itl_ms()
    return max(gaps) if gaps else None
