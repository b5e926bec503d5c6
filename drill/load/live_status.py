"""The live status line while load runs (``LoadPlan.progress`` on a TTY, ``drill load``).

Runs on a thread of the harness process, started by :class:`LoadDriver` after
``start`` and stopped by ``stop``. Every half second it combines the child's
counters (target vs achieved rate, in flight, drops) with the records appended
to ``requests.jsonl`` during the last ``WINDOW_S`` seconds (exact p50/p95 TTFT
and TPOT, errors by class) and redraws one line on stderr with rich.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.live import Live

from drill.rundir.records import RecordTail, RequestRecord
from drill.stats import percentile

if TYPE_CHECKING:  # pragma: no cover
    from drill.load.driver import LoadDriver

__all__ = ["LiveProgress", "WindowStats", "format_status"]

WINDOW_S = 10.0
_REFRESH_S = 0.5


@dataclass(frozen=True)
class WindowStats:
    """What the status line shows; rates in requests/s, latencies in ms."""

    elapsed_s: float
    target_rate: float
    achieved_rate: float
    in_flight: int
    drops: int
    ttft_p50: float | None
    ttft_p95: float | None
    tpot_p50: float | None
    tpot_p95: float | None
    errors: dict[str, int]


def window_stats(
    records: list[RequestRecord], counters: dict, rates: tuple[float, float], elapsed_s: float
) -> WindowStats:
    """Exact percentiles over ``records`` (the window) and the child's latest ``counters``."""
    ttft = [r.ttft_ms for r in records if r.ok and r.ttft_ms is not None]
    tpot = [t for r in records if (t := r.tpot_ms) is not None]
    errors = Counter(r.error.value for r in records if r.error is not None)
    return WindowStats(
        elapsed_s,
        rates[0],
        rates[1],
        int(counters.get("in_flight", 0)),
        int(counters.get("dropped", 0)),
        percentile(ttft, 50),
        percentile(ttft, 95),
        percentile(tpot, 50),
        percentile(tpot, 95),
        dict(errors),
    )


def format_status(s: WindowStats) -> str:
    """``load 12s  rate 20.0/s → 19.8/s  in flight 34  TTFT p50 120ms p95 340ms  ...``"""
    ms = lambda v: "-" if v is None else f"{v:.0f}ms"  # noqa: E731
    errors = " ".join(f"{k} {v}" for k, v in sorted(s.errors.items())) or "none"
    return (
        f"load {s.elapsed_s:5.0f}s  rate {s.target_rate:.1f}/s → {s.achieved_rate:.1f}/s  "
        f"in flight {s.in_flight}  TTFT p50 {ms(s.ttft_p50)} p95 {ms(s.ttft_p95)}  "
        f"TPOT p50 {ms(s.tpot_p50)} p95 {ms(s.tpot_p95)}  drops {s.drops}  errors ({WINDOW_S:g}s): {errors}"
    )


class LiveProgress:
    """A rich ``Live`` line on stderr, refreshed every half second until :meth:`stop`."""

    def __init__(self, driver: LoadDriver, requests_path: Path) -> None:
        self.driver = driver
        self.tail = RecordTail(requests_path)
        self.window: deque[tuple[float, RequestRecord]] = deque()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drill-load-progress", daemon=True)
        self._history: deque[tuple[float, int, int]] = deque()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        with Live("", console=Console(stderr=True), transient=True, refresh_per_second=4) as live:
            while not self._stop.wait(_REFRESH_S):
                live.update(format_status(self.snapshot()))

    def snapshot(self) -> WindowStats:
        """The stats now (also used by tests without a terminal)."""
        now = time.time()
        for record in self.tail.read_new():
            self.window.append((now, record))
        while self.window and self.window[0][0] < now - WINDOW_S:
            self.window.popleft()
        status = self.driver.status()
        counters = status.get("counters") or {}
        self._history.append((now, int(counters.get("due", 0)), int(counters.get("sent", 0))))
        while len(self._history) > 2 and self._history[0][0] < now - WINDOW_S:
            self._history.popleft()
        first, last = self._history[0], self._history[-1]
        span = max(last[0] - first[0], 1e-9)
        rates = ((last[1] - first[1]) / span, (last[2] - first[2]) / span) if len(self._history) > 1 else (0.0, 0.0)
        return window_stats([r for _, r in self.window], counters, rates, float(status.get("offset_s", 0.0)))
