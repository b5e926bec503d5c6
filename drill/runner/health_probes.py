"""Probe the target's health endpoints into ``health.jsonl`` while a drill runs (for ``health_truth``).

Every ``interval`` each component's health URL (the router's and each replica's ``GET /health``, vLLM's
endpoint, which answers 503 once its engine is dead: vLLM #24897) is fetched with a short timeout. One line per
component per probe::

    {"ts": 1764000000.1, "source": "replica-0", "url": "http://.../health", "status": 200, "healthy": true,
     "probe_ms": 1.2}

A refused connection or a timeout is ``"status": null, "healthy": false`` with the ``error``: a component that
does not answer says it is not healthy. The runner probes only when the drill names a ``health_truth`` check,
which reads the lines back (:func:`drill.checks.health.read_health`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx

from drill.runner.scraper import EndpointPoller

__all__ = ["HealthProber"]


class HealthProber(EndpointPoller):
    """Probes ``endpoints`` (component -> health URL) every ``interval_s`` on a fixed schedule, in a thread."""

    thread_name = "health-prober"

    def __init__(self, endpoints: dict[str, str], out_path: Path, interval_s: float = 0.5) -> None:
        super().__init__(endpoints, out_path, interval_s)

    def _loop(self) -> None:
        start = time.monotonic()
        tick = 0
        while not self._stop.is_set():
            for source, url in self.endpoints.items():
                self._probe(source, url)
            tick += 1
            delay = start + tick * self.interval_s - time.monotonic()
            if delay < 0:  # fell behind (a component that times out): skip missed ticks rather than burst
                tick += int(-delay // self.interval_s) + 1
                delay = start + tick * self.interval_s - time.monotonic()
            self._stop.wait(max(0.0, delay))

    def _probe(self, source: str, url: str) -> None:
        t0 = time.monotonic()
        line: dict = {"ts": time.time(), "source": source, "url": url}
        try:
            status = self._client.get(url).status_code
            line.update(status=status, healthy=status == 200)
        except httpx.HTTPError as exc:
            line.update(status=None, healthy=False, error=f"{type(exc).__name__}: {exc}"[:300])
        line["probe_ms"] = round((time.monotonic() - t0) * 1000, 2)
        with self._lock:
            if not self._out.closed:
                self._out.write(json.dumps(line, separators=(",", ":")) + "\n")
                self._out.flush()
