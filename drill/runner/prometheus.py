"""The run's serving metrics from the user's Prometheus, for when the replicas' ``/metrics`` are out of reach.

A drop-in for :class:`drill.runner.scraper.MetricsScraper`:

- **live**, for stop conditions: every ``interval`` an instant query (``/api/v1/query``) of the series the run
  needs; :meth:`PrometheusMetrics.readings` gives each replica's latest two readings. A reading changes only
  when Prometheus has ingested a new scrape (its values changed), so a counter's rate is taken over
  Prometheus's own scrape interval rather than read as 0 between its scrapes.
- **at the end**, for reports: range queries (``/api/v1/query_range``) over the run's window with the
  interval as the step, written to ``metrics.jsonl`` in the scraper's shape (one line per replica per step,
  ``"collector": "prometheus"``), so :mod:`drill.report.quantities` reads it unchanged. A replica with no
  sample at a step, or whose scrape failed there (``up == 0``), gets an ``ok: false`` line: missing evidence is
  said, not skipped.

Series are told apart by ``replica_label`` (``instance``, ``pod``, ...) and named by the ``replicas`` mapping,
else by the target's metrics URL with that ``host:port``, else by the label's value. The query asks only for
the names the run can use: every metric :mod:`drill.serving_metrics` maps, the raw names of the drill's stop
conditions, and ``up``.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from drill.errors import DrillError
from drill.serving_metrics import Reading
from drill.spec.models import PrometheusSourceSpec

__all__ = ["PrometheusMetrics", "PrometheusQueryError", "promql"]

#: Prometheus refuses a range query of more than 11,000 points per series; a longer run is asked in parts.
_MAX_STEPS = 10_000


class PrometheusQueryError(DrillError):
    """Prometheus did not answer a query (unreachable, an HTTP error, or ``status: error``)."""


def promql(names: Iterable[str], selector: str) -> str:
    """One instant-vector selector for ``names`` within ``selector`` (``{job="vllm"}``)."""
    matchers = selector.strip().removeprefix("{").removesuffix("}").strip().rstrip(",")
    alternatives = "|".join(sorted(set(names)))
    return "{" + f'__name__=~"{alternatives}"' + (f",{matchers}" if matchers else "") + "}"


@dataclass(frozen=True)
class _RangeSeries:
    replica: str
    key: str  # name{labels}, as the scraper keys a sample
    name: str
    points: list[tuple[float, float]]


def _key(labels: Mapping[str, str]) -> str:
    name = labels.get("__name__", "")
    rest = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{rest}}}" if rest else name


class PrometheusMetrics:
    """Instant queries while the run goes, range queries into ``metrics.jsonl`` when it stops."""

    def __init__(
        self,
        spec: PrometheusSourceSpec,
        out_path: Path,
        interval_s: float,
        *,
        names: Iterable[str],
        metrics_urls: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.spec = spec
        self.out_path = out_path
        self.interval_s = interval_s
        self.query = promql([*names, "up"], spec.selector)
        self._by_address = {urlsplit(u).netloc: name for name, u in (metrics_urls or {}).items()}
        self._client = httpx.Client(
            base_url=spec.url.rstrip("/"),
            headers=spec.request_headers(),
            timeout=spec.timeout,
            trust_env=False,
            transport=transport,
        )
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._latest: dict[str, Reading] = {}
        self._thread = threading.Thread(target=self._loop, name="prometheus-metrics", daemon=True)
        self.started_ts: float | None = None
        self.live_errors = 0

    def start(self) -> PrometheusMetrics:
        self.started_ts = time.time()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops the live queries and writes the run's window to ``metrics.jsonl``; raises when Prometheus could
        not give it (the runner journals that)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.spec.timeout + 5)
        try:
            start = self.started_ts if self.started_ts is not None else time.time()
            self.write_window(start, time.time())
        finally:
            self._client.close()

    def readings(self) -> dict[str, Reading]:
        """Each replica Prometheus has a current sample of: its latest reading (and the one before)."""
        with self._lock:
            return dict(self._latest)

    # --- names --------------------------------------------------------------------------------------

    def replica_of(self, labels: Mapping[str, str]) -> str | None:
        value = labels.get(self.spec.replica_label)
        if value is None:
            return None
        return self.spec.replicas.get(value) or self._by_address.get(value) or value

    # --- live ---------------------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                self.poll()
            except PrometheusQueryError:
                self.live_errors += 1  # the stop conditions see no reading; the range query at the end says more
                with self._lock:
                    self._latest.clear()
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - t0)))

    def poll(self) -> None:
        """One instant query: each replica's totals now (a replica Prometheus could not scrape is left out)."""
        now = time.time()
        result = self._api("/api/v1/query", {"query": self.query, "time": f"{now:.3f}"}, "vector")
        totals: dict[str, dict[str, float]] = defaultdict(dict)
        down: set[str] = set()
        for item in result:
            labels = item.get("metric") or {}
            replica = self.replica_of(labels)
            value = float(item["value"][1])
            if replica is None or math.isnan(value):
                continue
            name = labels.get("__name__", "")
            if name == "up":
                if value == 0:
                    down.add(replica)
                continue
            totals[replica][name] = totals[replica].get(name, 0.0) + value
        with self._lock:
            self._latest = {r: self._next_reading(r, now, t) for r, t in totals.items() if r not in down}

    def _next_reading(self, replica: str, now: float, totals: dict[str, float]) -> Reading:
        current = self._latest.get(replica)
        if current is not None and dict(current.totals) == totals:
            return current  # Prometheus has not scraped it again since: the same reading
        previous = Reading(current.ts, current.totals) if current is not None else None
        return Reading(now, totals, previous)

    # --- the run's window ---------------------------------------------------------------------------

    def write_window(self, start: float, end: float) -> int:
        """Range queries over ``[start, end]`` into ``metrics.jsonl``, one line per replica per step; returns the
        number of lines written."""
        series: list[_RangeSeries] = []
        steps: list[float] = []
        for chunk in self._chunks(start, end):
            series += self._range(chunk[0], chunk[-1])
            steps += chunk
        lines = self._lines(series, steps)
        with self.out_path.open("a", encoding="utf-8") as out:
            for line in lines:
                out.write(json.dumps(line, separators=(",", ":")) + "\n")
        return len(lines)

    def _chunks(self, start: float, end: float) -> list[list[float]]:
        """The steps of ``[start, end]`` (in whole milliseconds, as Prometheus counts them), in parts it accepts."""
        step_ms = max(1, round(self.interval_s * 1000))
        first, last = round(start * 1000), round(end * 1000)
        steps = [ms / 1000 for ms in range(first, last + 1, step_ms)]
        return [steps[i : i + _MAX_STEPS] for i in range(0, len(steps), _MAX_STEPS)]

    def _range(self, start: float, end: float) -> list[_RangeSeries]:
        step = f"{max(1, round(self.interval_s * 1000)) / 1000:g}"
        params = {"query": self.query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": step}
        out = []
        for item in self._api("/api/v1/query_range", params, "matrix"):
            labels = item.get("metric") or {}
            replica = self.replica_of(labels)
            if replica is None:
                continue
            points = [(float(ts), float(v)) for ts, v in item.get("values") or []]
            out.append(_RangeSeries(replica, _key(labels), labels.get("__name__", ""), points))
        return out

    def _lines(self, series: list[_RangeSeries], steps: list[float]) -> list[dict]:
        replicas = sorted({s.replica for s in series} | set(self.spec.replicas.values()))
        at: dict[tuple[str, float], dict[str, float]] = defaultdict(dict)
        up: dict[tuple[str, float], float] = {}
        for s in series:
            for ts, value in s.points:
                slot = (s.replica, round(ts, 3))
                if s.name == "up":
                    up[slot] = min(value, up.get(slot, value))
                elif not math.isnan(value):
                    at[slot][s.key] = value
        lines = []
        for ts in steps:
            for replica in replicas:
                slot = (replica, round(ts, 3))
                line: dict = {"ts": round(ts, 3), "source": replica, "url": self.spec.url, "collector": "prometheus"}
                if up.get(slot) == 0:
                    line.update(ok=False, error="Prometheus could not scrape it at this time (up == 0)")
                elif not at.get(slot):
                    line.update(ok=False, error="Prometheus has no sample of it at this time")
                else:
                    line.update(ok=True, samples=at[slot])
                lines.append(line)
        return lines

    # --- HTTP ---------------------------------------------------------------------------------------

    def _api(self, path: str, params: dict[str, str], result_type: str) -> list[dict]:
        where = f"Prometheus at {self.spec.url}"
        try:
            response = self._client.get(path, params=params)
            body = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise PrometheusQueryError(f"{where}: {type(exc).__name__}: {exc}") from exc
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else None
            raise PrometheusQueryError(f"{where}: HTTP {response.status_code}: {error or response.text[:200]}")
        data = body.get("data") or {}
        if data.get("resultType") != result_type:
            raise PrometheusQueryError(f"{where}: expected a {result_type}, got {data.get('resultType')!r}")
        return list(data.get("result") or [])
