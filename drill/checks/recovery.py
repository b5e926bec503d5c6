"""``recovery_time``: how long after the fault's revert until latency and errors are back to normal.

The rule, its sources and its params are in :class:`RecoveryTimeCheck`.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from drill.api import Check, CheckParams, EvidenceKind, EvidenceRef, Status, Verdict
from drill.checks.judging import record_metric_ms
from drill.rundir.evidence import RunEvidence
from drill.rundir.records import ErrorClass, RequestRecord
from drill.stats import percentile
from drill.units import Duration, format_duration

if TYPE_CHECKING:
    from drill.spec.diagnostics import KeyPath
    from drill.spec.models import Phases

__all__ = ["MAX_WINDOWS", "RecoveryTimeCheck", "RecoveryTimeParams", "error_rate"]

#: The most windows one pool's recovery is judged on (a finer step over a long phase is refused by validation;
#: a run directory that asks for more has its search cut there).
MAX_WINDOWS = 10_000


class RecoveryTimeParams(CheckParams):
    metric: str = Field("ttft", pattern="^(ttft|e2e|tpot)$")
    percentile: float = Field(95.0, gt=0, le=100)
    tolerance: float = Field(0.5, ge=0)  # the band: baseline percentile x (1 + tolerance) ...
    min_slack: Duration = 0.05  # ... and at least baseline + min_slack
    error_margin: float = Field(0.01, ge=0, le=1)  # error rate <= baseline error rate + margin
    window: Duration = Field(10.0, gt=0)  # the rolling window
    step: Duration = Field(1.0, gt=0)  # how far apart the windows start (at most MAX_WINDOWS of them)
    hold: Duration = 10.0  # the band must keep holding this long
    max: Duration = 60.0  # recovered within this long after the revert: PASS
    pools: list[str] | None = None  # default: every pool
    min_requests: int = Field(5, ge=1)  # a window with fewer samples cannot show recovery
    min_baseline: int = Field(20, ge=1)  # a pool with fewer baseline samples is not judged


@dataclass(frozen=True)
class _Band:
    """What "normal" is for one pool: from the baseline phase."""

    pool: str
    baseline_ms: float
    limit_ms: float
    baseline_errors: float
    limit_errors: float


@dataclass(frozen=True)
class _PoolRecovery:
    band: _Band
    recovered_s: float | None  # after the revert; None: not seen
    searched_s: float  # how long after the revert the recovery phase let us look
    last_bad: str  # what the last window out of band showed


class RecoveryTimeCheck(Check):
    """After the revert, the rolling p95 TTFT and the error rate are back within the baseline's band in time.

    Sources: the Google SRE book (ch. 22 "Addressing Cascading Failures") — a system that stays
    overloaded after its trigger is gone (queues full of dead requests, retries, cold caches) is in a
    cascading failure; recovery is measured, not assumed. AWS Builders' Library ("Avoiding
    insurmountable queue backlogs") — a backlog built during the incident keeps latency high long
    after its cause, so a drill must time the way back.

    The revert is the last ``fault_reverted`` of the journal, else the end of the fault phase. The band
    of each pool comes from the baseline phase: ``percentile`` of ``metric`` (successful requests, ms
    from the intended start) within ``max(baseline x (1 + tolerance), baseline + min_slack)``, and the
    error rate (every failure except attempts cancelled when the load stopped) within ``baseline +
    error_margin``. Windows of ``window`` start every ``step`` after the revert, each judged on the
    requests intended in it; a window with fewer than ``min_requests`` successes is not in band. A
    pool has recovered at the first window start from which every window for ``hold`` is in band;
    the recovery time is the slowest pool's.

    PASS when that is within ``max``; FAIL when it is later, or when the recovery phase showed no
    recovery for longer than ``max``; INCONCLUSIVE when the recovery phase ended before ``max`` had
    passed without recovery (the drill cannot tell), without a baseline or recovery phase, or with too
    few baseline samples.
    """

    kind = "recovery_time"
    Params = RecoveryTimeParams
    params: RecoveryTimeParams
    reads = ("journal.jsonl", "requests.jsonl")

    @classmethod
    def plan_problems(cls, params: BaseModel, phases: Phases) -> list[tuple[KeyPath, str, str | None]]:
        """A ``step`` that would judge more than :data:`MAX_WINDOWS` windows over the fault and recovery phases
        (the revert is in the first, the windows end with the second)."""
        assert isinstance(params, RecoveryTimeParams)
        span = phases.fault + phases.recovery
        windows = span / params.step
        if windows <= MAX_WINDOWS:
            return []
        return [
            (
                ("step",),
                f"step {format_duration(params.step)} makes {windows:,.0f} windows over the fault and recovery "
                f"phases ({format_duration(span)}); at most {MAX_WINDOWS:,} are judged",
                f"use a step of at least {format_duration(span / MAX_WINDOWS)} (the default is 1s)",
            )
        ]

    def evaluate(self, evidence: RunEvidence) -> Verdict:
        revert, revert_ref = _revert(evidence)
        recovery = evidence.phases.get("recovery")
        baseline = evidence.phases.get("baseline")
        missing = [
            name for name, value in (("baseline", baseline), ("recovery", recovery), ("fault", revert)) if value is None
        ]
        if missing:
            return self.verdict(
                Status.INCONCLUSIVE,
                f"the run has no {' and no '.join(missing)} phase to time the recovery with",
                window="recovery",
            )
        assert revert is not None and recovery is not None  # both are in missing otherwise
        bands, thin = self._bands(evidence)
        if not bands:
            return self.verdict(
                Status.INCONCLUSIVE,
                "no pool has enough baseline samples for a band" + (f" ({', '.join(thin)})" if thin else ""),
                window="recovery",
            )
        after = [r for r in evidence.requests if revert <= r.intended_ts < recovery.end_ts]
        results = [
            self._recover(band, [r for r in after if r.pool == band.pool], revert, recovery.end_ts) for band in bands
        ]
        return self._judge(results, thin, [revert_ref] if revert_ref else [])

    def _bands(self, evidence: RunEvidence) -> tuple[list[_Band], list[str]]:
        p: RecoveryTimeParams = self.params
        records = evidence.requests_in("baseline")
        pools = p.pools if p.pools is not None else sorted({r.pool for r in records})
        bands, thin = [], []
        for pool in pools:
            mine = [r for r in records if r.pool == pool]
            values = _values(mine, p.metric)
            if len(values) < p.min_baseline:
                thin.append(f"{pool}: {len(values)} baseline samples")
                continue
            base = percentile(values, p.percentile)
            if base is None:  # no sample at all (min_baseline 0)
                thin.append(f"{pool}: no baseline sample")
                continue
            errors = error_rate(mine) or 0.0
            bands.append(
                _Band(
                    pool,
                    base,
                    max(base * (1 + p.tolerance), base + p.min_slack * 1000),
                    errors,
                    min(1.0, errors + p.error_margin),
                )
            )
        return bands, thin

    def _recover(self, band: _Band, records: list[RequestRecord], revert: float, end: float) -> _PoolRecovery:
        p: RecoveryTimeParams = self.params
        last_start = end - p.window  # the last window that fits in the recovery phase
        count = min(MAX_WINDOWS, max(0, math.floor((last_start - revert) / p.step + 1e-9) + 1))
        starts = [revert + i * p.step for i in range(count)]
        records = sorted(records, key=lambda r: r.intended_ts)
        times = [r.intended_ts for r in records]
        verdicts = [
            self._in_band(band, records[bisect_left(times, s) : bisect_left(times, s + p.window)]) for s in starts
        ]
        need = max(1, math.floor(p.hold / p.step + 1e-9) + 1) if p.hold > 0 else 1
        last_bad = "no window fits in the recovery phase"
        run = 0
        for i, (ok, why) in enumerate(verdicts):
            run = run + 1 if ok else 0
            if not ok:
                last_bad = why
            if run >= need:
                return _PoolRecovery(band, starts[i - need + 1] - revert, last_start - revert, last_bad)
        searched = max(0.0, last_start - revert - (need - 1) * p.step)
        return _PoolRecovery(band, None, searched, last_bad)

    def _in_band(self, band: _Band, mine: list[RequestRecord]) -> tuple[bool, str]:
        """Whether the requests of one window (intended in it) are within the band."""
        p: RecoveryTimeParams = self.params
        values = _values(mine, p.metric)
        if len(values) < p.min_requests:
            return False, f"{len(values)} successful sample(s) in the window"
        value = percentile(values, p.percentile)
        if value is None:  # no sample at all (min_requests 0)
            return False, "no successful sample in the window"
        errors = error_rate(mine) or 0.0
        if value > band.limit_ms:
            return False, f"p{p.percentile:g} {p.metric} {value:.0f}ms > {band.limit_ms:.0f}ms"
        if errors > band.limit_errors:
            return False, f"error rate {errors:.1%} > {band.limit_errors:.1%}"
        return True, ""

    def _judge(self, results: list[_PoolRecovery], thin: list[str], refs: list[EvidenceRef]) -> Verdict:
        p: RecoveryTimeParams = self.params
        observed: dict = {}
        units: dict = {}
        for r in results:
            pool = r.band.pool
            observed.update(
                {
                    f"{pool}.recovery_s": None if r.recovered_s is None else round(r.recovered_s, 3),
                    f"{pool}.baseline_{p.metric}_p{p.percentile:g}_ms": round(r.band.baseline_ms, 3),
                    f"{pool}.band_{p.metric}_ms": round(r.band.limit_ms, 3),
                    f"{pool}.baseline_error_rate": round(r.band.baseline_errors, 4),
                    f"{pool}.band_error_rate": round(r.band.limit_errors, 4),
                    f"{pool}.searched_s": round(r.searched_s, 3),
                }
            )
            units.update(
                {
                    f"{pool}.recovery_s": "s",
                    f"{pool}.searched_s": "s",
                    f"{pool}.band_{p.metric}_ms": "ms",
                    f"{pool}.baseline_{p.metric}_p{p.percentile:g}_ms": "ms",
                    f"{pool}.baseline_error_rate": "ratio",
                    f"{pool}.band_error_rate": "ratio",
                }
            )
        recovered = [r.recovered_s for r in results if r.recovered_s is not None]
        observed["recovery_s"] = round(max(recovered), 3) if len(recovered) == len(results) else None
        units["recovery_s"] = "s"
        expected = {"recovery_s": f"<= {p.max:g}"}
        notes = tuple(f"not judged (too few baseline samples): {t}" for t in thin)
        status, message = self._status(results)
        return self.verdict(
            status,
            message,
            observed=observed,
            expected=expected,
            units=units,
            evidence=refs,
            window="recovery",
            notes=notes,
        )

    def _status(self, results: list[_PoolRecovery]) -> tuple[Status, str]:
        p: RecoveryTimeParams = self.params
        late = [r for r in results if r.recovered_s is not None and r.recovered_s > p.max]
        never = [r for r in results if r.recovered_s is None]
        long_never = [r for r in never if r.searched_s > p.max]
        if late or long_never:
            parts = [f"{r.band.pool} back in band {r.recovered_s:.1f}s after the revert" for r in late]
            parts += [
                f"{r.band.pool} not back in band {r.searched_s:.1f}s after the revert ({r.last_bad})"
                for r in long_never
            ]
            return Status.FAIL, "; ".join(parts) + f" (max {p.max:g}s)"
        if never:
            parts = [
                f"{r.band.pool} not back in band when the recovery phase ended, {r.searched_s:.1f}s after "
                f"the revert ({r.last_bad})"
                for r in never
            ]
            return Status.INCONCLUSIVE, "; ".join(parts) + f": the recovery phase ended before {p.max:g}s had passed"
        slowest = max(results, key=lambda r: r.recovered_s or 0.0)  # every one recovered (none in never)
        return Status.PASS, (
            f"back within the baseline band {slowest.recovered_s:.1f}s after the revert "
            f"(slowest pool {slowest.band.pool}; max {p.max:g}s)"
        )


def _revert(evidence: RunEvidence) -> tuple[float | None, EvidenceRef | None]:
    """When the fault ended: the last revert in the journal, else the fault phase's end."""
    reverted = [f.reverted_ts for f in evidence.faults if f.reverted_ts is not None]
    if reverted:
        ts = max(reverted)
        seq = next((e.seq for e in evidence.journal if e.event == "fault_reverted" and e.ts == ts), None)
        return ts, EvidenceRef(EvidenceKind.JOURNAL, str(seq), "the revert the recovery is timed from") if seq else None
    fault = evidence.phases.get("fault")
    return (fault.end_ts, None) if fault else (None, None)


def _values(records: list[RequestRecord], metric: str) -> list[float]:
    return [v for r in records if r.ok and (v := record_metric_ms(r, metric)) is not None]


def error_rate(records: list[RequestRecord]) -> float | None:
    """Failed share of ``records``, not counting attempts cancelled when the load stopped; None with none."""
    counted = [r for r in records if r.error is not ErrorClass.CANCELLED]
    if not counted:
        return None
    return sum(1 for r in counted if not r.ok) / len(counted)
