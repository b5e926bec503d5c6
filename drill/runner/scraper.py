"""Scrape the target's Prometheus ``/metrics`` endpoints into ``metrics.jsonl`` while a drill runs.

Every ``interval`` (1 s by default, on a fixed monotonic schedule that does not
drift) each endpoint is fetched with a timeout. One line per endpoint per
scrape::

    {"ts": 1764000000.1, "source": "replica-0", "url": "...", "ok": true, "scrape_ms": 3.1,
     "samples": {"vllm:num_requests_waiting{engine=\\"0\\",model_name=\\"llama-3-8b\\"}": 12.0, ...}}

A failed scrape is recorded (``ok: false`` with the error), never fatal: a dead
replica is evidence, not a harness failure. :meth:`readings` gives each endpoint's
latest two good scrapes (each metric summed over its label sets): what ``metric``
stop conditions read.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Self

import httpx
from prometheus_client.parser import text_string_to_metric_families

from drill.serving_metrics import Reading

__all__ = ["MetricsScraper", "parse_samples"]


def parse_samples(text: str) -> dict[str, float]:
    """Prometheus exposition text -> {"name{k=\\"v\\",...}": value}."""
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = float(sample.value)
    return samples


def _by_name(samples: dict[str, float]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for key, value in samples.items():
        name = key.split("{", 1)[0]
        totals[name] = totals.get(name, 0.0) + value
    return totals


class EndpointPoller:
    """A thread that polls ``endpoints`` (name -> URL) every ``interval_s`` into a JSON-lines file of the run.

    The lifecycle both pollers share (the metrics scraper, the health prober): one HTTP client with a timeout
    bounded by the interval, a stop event, a lock over the output file; a subclass writes ``_loop``.
    """

    thread_name = "endpoint-poller"

    def __init__(self, endpoints: dict[str, str], out_path: Path, interval_s: float) -> None:
        self.endpoints = dict(endpoints)
        self.interval_s = interval_s
        self._out = open(out_path, "a", encoding="utf-8")
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._client = httpx.Client(timeout=min(2.0, max(0.2, interval_s)), trust_env=False)
        self._thread = threading.Thread(target=self._loop, name=self.thread_name, daemon=True)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._client.close()
        with self._lock:
            self._out.close()

    def _loop(self) -> None:
        raise NotImplementedError


class MetricsScraper(EndpointPoller):
    thread_name = "metrics-scraper"

    def __init__(self, endpoints: dict[str, str], out_path: Path, interval_s: float = 1.0) -> None:
        self._latest: dict[str, Reading] = {}
        self.scrapes = 0
        super().__init__(endpoints, out_path, interval_s)

    def readings(self) -> dict[str, Reading]:
        """Each endpoint whose last scrape was good: its latest reading (and the one before)."""
        with self._lock:
            return dict(self._latest)

    def _loop(self) -> None:
        start = time.monotonic()
        tick = 0
        while not self._stop.is_set():
            for source, url in self.endpoints.items():
                self._scrape(source, url)
            tick += 1
            delay = start + tick * self.interval_s - time.monotonic()
            if delay < 0:  # fell behind (a slow endpoint): skip missed ticks rather than burst
                tick += int(-delay // self.interval_s) + 1
                delay = start + tick * self.interval_s - time.monotonic()
            self._stop.wait(max(0.0, delay))

    def _scrape(self, source: str, url: str) -> None:
        t0 = time.monotonic()
        line: dict = {"ts": time.time(), "source": source, "url": url}
        try:
            response = self._client.get(url)
            response.raise_for_status()
            samples = parse_samples(response.text)
            line.update(ok=True, samples=samples)
        except (httpx.HTTPError, ValueError) as exc:
            line.update(ok=False, error=f"{type(exc).__name__}: {exc}")
            samples = None
        line["scrape_ms"] = round((time.monotonic() - t0) * 1000, 2)
        with self._lock:
            if self._out.closed:
                return
            self._out.write(json.dumps(line, separators=(",", ":")) + "\n")
            self._out.flush()
            self.scrapes += 1
            if samples is not None:
                before = self._latest.get(source)
                previous = Reading(before.ts, before.totals) if before else None
                self._latest[source] = Reading(line["ts"], _by_name(samples), previous)
            else:
                self._latest.pop(source, None)
