"""Observed recovery before the replay: the replay phase starts when the target is back inside its baseline band.

Called by the runner (:meth:`drill.runner.run.Runner._replay_phase`) after the recovery phase and the load
have ended. A replay proves a fix only on a recovered stack: replayed at a fixed time into a backlog that is still
draining, the original failing requests fail again for the backlog's sake (issue 22: at the flagship's default
scale the replay went out while ~1,500 abandoned requests were still queued, up to 36 s late).

"Recovered" is the ``recovery_time`` check's rule (:mod:`drill.checks.recovery`) with the queue in place of the
latency, which the replay is about to measure:

- **queue depth** (the target's waiting requests, ``vllm:num_requests_waiting`` summed over its replicas, through
  :data:`drill.serving_metrics.QUANTITIES`) within ``max(baseline x (1 + tolerance), baseline + 1)``, the
  baseline being the largest depth scraped in the baseline phase; read live, it must hold for ``hold_s``;
- **error rate** of the requests intended in the recovery phase's last ``window_s`` (attempts cancelled when the
  load stopped not counted) within the baseline's error rate + ``error_margin``. No load runs any more, so this
  one is decided once, at the end of the recovery phase.

:func:`wait_for_recovery` polls until both hold, or gives up after ``max_wait_s``. Its :class:`RecoveryWait` says
when the replay started and why, and is journaled with the replay phase; the ``recovery_replay`` check reads it: a
replay that started on a stack not seen to recover cannot show that a fix works, so originals that fail then make
the verdict INCONCLUSIVE, not FAIL. A target that exports no queue depth is judged on its error rate alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass

from drill.checks.recovery import error_rate
from drill.report.quantities import phase_quantities
from drill.rundir.evidence import RunEvidence
from drill.serving_metrics import Reading, live_value, resolve

__all__ = [
    "RecoveryBand",
    "RecoveryWait",
    "live_queue_depth",
    "recent_error_rate",
    "recovery_band",
    "wait_for_recovery",
]

QUEUE_SLACK = 1.0  # requests: an empty baseline queue still allows one waiting request


@dataclass(frozen=True)
class RecoveryBand:
    """What "back to normal" is, from the baseline phase (None: the target exports no queue depth)."""

    queue_depth: float | None
    baseline_queue_depth: float | None
    error_rate: float
    baseline_error_rate: float

    def queue_ok(self, depth: float | None) -> bool:
        return self.queue_depth is None or (depth is not None and depth <= self.queue_depth)


@dataclass(frozen=True)
class RecoveryWait:
    """How the wait before the replay ended: ``observed`` (both in band) or given up after ``max_wait_s``."""

    observed: bool
    queue_held: bool  # the queue was back in band (False: the wait gave up after max_wait_s)
    waited_s: float
    max_wait_s: float
    queue_depth: float | None  # the last live reading
    error_rate: float | None  # the recovery phase's last window; None: no request in it
    band: RecoveryBand
    reason: str

    def summary(self) -> dict:
        """The journal's and ``recovery_replay``'s form."""
        return {**asdict(self), "band": asdict(self.band)}


def recovery_band(evidence: RunEvidence, *, tolerance: float = 0.5, error_margin: float = 0.01) -> RecoveryBand:
    """The band from the run directory's baseline phase: its largest queue depth and its error rate."""
    baseline_depth = phase_quantities(evidence).get("baseline", {}).get("queue_depth")
    queue = None if baseline_depth is None else max(baseline_depth * (1 + tolerance), baseline_depth + QUEUE_SLACK)
    errors = error_rate(evidence.requests_in("baseline")) or 0.0
    return RecoveryBand(queue, baseline_depth, min(1.0, errors + error_margin), errors)


def recent_error_rate(evidence: RunEvidence, window_s: float) -> float | None:
    """The error rate of the requests intended in the recovery phase's last ``window_s`` seconds."""
    recovery = evidence.phases.get("recovery")
    if recovery is None:
        return None
    start = max(recovery.start_ts, recovery.end_ts - window_s)
    return error_rate([r for r in evidence.requests if start <= r.intended_ts < recovery.end_ts])


def live_queue_depth(readings: Mapping[str, Reading]) -> float | None:
    """The target's waiting requests now (summed over its endpoints), None when it exports no queue depth."""
    resolved = resolve({name for reading in readings.values() for name in reading.totals}, "queue_depth")
    return None if resolved is None else live_value(readings, resolved)


def wait_for_recovery(
    band: RecoveryBand,
    recent_errors: float | None,
    queue_now: Callable[[], float | None],
    *,
    max_wait_s: float,
    hold_s: float,
    poll_s: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> RecoveryWait:
    """Poll ``queue_now`` until the queue has been in band for ``hold_s`` (and the errors were), or ``max_wait_s``."""
    start = clock()
    errors_ok = recent_errors is None or recent_errors <= band.error_rate  # decided: no load runs any more
    in_band_since: float | None = None
    while True:
        now = clock()
        depth = queue_now()
        if not band.queue_ok(depth):
            in_band_since = None
        elif in_band_since is None:
            in_band_since = now
        held = in_band_since is not None and now - in_band_since >= hold_s
        if held or now - start >= max_wait_s:
            break
        sleep(poll_s)
    reason = _reason(band, depth, recent_errors, held, errors_ok)
    return RecoveryWait(held and errors_ok, held, clock() - start, max_wait_s, depth, recent_errors, band, reason)


def _reason(band: RecoveryBand, depth: float | None, errors: float | None, held: bool, errors_ok: bool) -> str:
    queue = (
        "the target exports no queue depth"
        if band.queue_depth is None
        else f"queue depth {_n(depth)} {'<=' if held else '>'} {band.queue_depth:g} "
        f"(baseline max {_n(band.baseline_queue_depth)})"
    )
    rate = (
        "no request in the recovery phase's last window"
        if errors is None
        else f"error rate {errors:.1%} {'<=' if errors_ok else '>'} {band.error_rate:.1%} at the recovery phase's end"
    )
    return f"{queue}; {rate}"


def _n(value: float | None) -> str:
    return "n/a" if value is None else f"{value:g}"
