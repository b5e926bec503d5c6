"""``fast_failure``: under overload, are requests refused quickly, or left to wait until they time out?

The rule, its sources and its params are in :class:`FastFailureCheck`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import Field

from drill.api import Check, CheckParams, EvidenceKind, EvidenceRef, Status, Verdict
from drill.checks.builtin import PhaseName
from drill.checks.judging import (
    HARNESS_LAG_MS,
    harness_late,
    is_counted,
    pool_settings,
    records_in,
    time_to_failure_ms,
    wait_limit_ms,
    window_of,
)
from drill.checks.truth import measurement_truth_figures, measurement_truth_units
from drill.rundir.evidence import RunEvidence
from drill.rundir.records import ErrorClass, RequestRecord
from drill.stats import percentile, percentiles
from drill.units import Duration

__all__ = ["FastFailureCheck", "FastFailureParams"]

#: How many of the worst slow outcomes a verdict names.
WORST = 10

OUTCOMES = ("on_time", "left_to_wait", "refused", "timeout", "slow_failure", "other_error")
#: HTTP statuses that say a deadline expired on the way (a gateway's or the server's): timeouts by another name.
GATEWAY_TIMEOUTS = (408, 504)
#: The outcomes that mean "the client was made to wait instead of being told no".
WAITED = ("left_to_wait", "timeout", "slow_failure")


class FastFailureParams(CheckParams):
    phase: PhaseName = "fault"
    refusal_p99: Duration = 0.5  # refusals must arrive this fast (p99 of time-to-failure)
    max_timeout_share: float = Field(0.05, ge=0, le=1)  # of the failures, at most this share timed out or was slow
    max_wait_share: float = Field(0.05, ge=0, le=1)  # of the attempts not on time, at most this share waited
    slow_fraction: float = Field(0.9, gt=0, le=1)  # a failure after this share of the deadline is slow
    min_failures: int = Field(20, ge=1)  # fewer failed or late attempts: INCONCLUSIVE
    pools: list[str] | None = None  # default: every pool
    wait_limit: Duration | None = None  # overrides each pool's SLO-derived wait limit


@dataclass
class _OutcomeTally:
    """The attempts of one window sorted into outcomes, with each outcome's time-to-failure."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    refusal_ms: list[float] = field(default_factory=list)
    failure_ms: list[float] = field(default_factory=list)
    waited: list[tuple[float, RequestRecord, str]] = field(default_factory=list)  # (ms, record, outcome)
    with_retry_after: int = 0
    in_stream: int = 0  # refusals that came as HTTP 200 + an error event with a 429/503 code (vLLM's late check)
    client_drops: int = 0
    cancelled: int = 0
    pools_without_limit: set[str] = field(default_factory=set)
    pools_without_deadline: set[str] = field(default_factory=set)

    @property
    def not_on_time(self) -> int:
        return sum(n for name, n in self.counts.items() if name != "on_time")

    @property
    def failures(self) -> int:
        """Attempts that failed (a cancelled one never got an answer: it waited, it did not fail)."""
        return self.not_on_time - self.counts["left_to_wait"]

    @property
    def waited_count(self) -> int:
        return sum(self.counts[name] for name in WAITED)


class FastFailureCheck(Check):
    """In the fault window, failures are explicit refusals that arrive fast, not waits that time out.

    Where the rule comes from:

    - Google SRE book, ch. 22 "Addressing Cascading Failures": keep queues short relative to the workers
      ("50% or less") so the server rejects early; shed load with HTTP 503 when too much is in flight;
      a request that waited for its whole deadline was work worth nothing. Ch. 21 "Handling Overload":
      an overloaded server answers "overloaded; don't retry" rather than letting clients time out.
    - Envoy (adaptive concurrency, overload manager) and Netflix concurrency-limits reject at the limit
      at once with 503 / 429; Envoy's ``stop_accepting_requests`` is an immediate 503.
    - So a failure should be an explicit refusal (429/503; ``Retry-After`` is counted, not required:
      vLLM sends none) that arrives fast; a failure at 90% or more of the client's deadline is a slow
      failure, i.e. a timeout in all but name, and a success that came only after the pool's SLO had
      passed is the same failure mode — the client was **left to wait** (queueing without admission control).

    What it reads: ``requests.jsonl`` and ``journal.jsonl`` (the window), ``resolved.json`` (each pool's
    client deadline), the pools' SLOs. The window is the fault window (first injection to last revert)
    for ``phase: fault``, else the named phase; requests count by their intended start.

    Each attempt in the window is one of: on time (succeeded within the pool's wait limit — its most
    lenient TTFT bound, else its E2E bound), **left to wait** (succeeded later; or still in flight when
    the load stopped: ``cancelled``), **refused** (429/503 — as the status, or as the ``code`` of an error
    event in a stream whose status was 200, which is how vLLM refuses a streamed request its late admission
    check turns away: ``refusals_in_stream``), **timeout** (the client's deadline expired,
    or a gateway's: HTTP 504/408),
    a **slow failure** (any other failure after ``slow_fraction`` of the deadline) or another explicit
    error (5xx, reset, mid-stream error). The attempts the client never sent (``client_drop``, its own
    in-flight cap) are counted but not judged.

    Two shares are judged. ``timeout_share`` = (timeouts + slow failures) / failures: how many of the
    failures were waits that ran out rather than explicit answers (the rules' "at most 5% of the failed
    requests may end as timeouts"). ``waited_share`` = (left to wait + timeouts + slow failures) /
    every attempt not served on time: of the excess load, how much the stack queued instead of
    refusing — successes past the SLO count here, as the same failure mode.

    - FAIL when ``timeout_share`` exceeds ``max_timeout_share``, ``waited_share`` exceeds
      ``max_wait_share``, or the refusals' time-to-failure p99 exceeds ``refusal_p99``.
    - PASS when the overload was refused, quickly: both shares within bounds, refusals fast.
    - INCONCLUSIVE when fewer than ``min_failures`` attempts failed or were late: the window was not
      overloaded enough to show how the stack fails. A stack that kept every request on time while
      nothing was refused was not shown to refuse fast, so it is not a PASS either — the fault did not
      produce the overload this check is about (raise the fault's intensity).

    Time-to-failure is from the intended start (queueing in the client counts, as in every record):
    the later of the status line and the last byte.
    """

    kind = "fast_failure"
    Params = FastFailureParams
    params: FastFailureParams
    reads = ("journal.jsonl", "requests.jsonl")

    def evaluate(self, evidence: RunEvidence) -> Verdict:
        p: FastFailureParams = self.params
        window = window_of(evidence, p.phase)
        if window is None:
            return self.verdict(Status.INCONCLUSIVE, f"the run has no {p.phase} phase to judge", window=p.phase)
        records = records_in(evidence, window, p.pools)
        tally = self._tally(evidence, records)
        observed, units = self._observed(tally, records)
        truth, truth_notes, truth_refs = measurement_truth_figures(evidence, window)
        observed.update(truth)
        units.update(measurement_truth_units(truth))
        expected = {
            "timeout_share": f"<= {p.max_timeout_share:g}",
            "waited_share": f"<= {p.max_wait_share:g}",
            "refusal_ttf_p99_ms": f"<= {p.refusal_p99 * 1000:g}",
            "not_on_time": f">= {p.min_failures} (enough overload to judge)",
        }
        notes = self._notes(tally) + truth_notes
        refs = _evidence_refs(tally) + truth_refs
        status, message = self._judge(tally, observed)
        if (
            status is Status.FAIL
            and (late := self._harness_late(evidence, records, observed, units, message)) is not None
        ):
            status, message = Status.INCONCLUSIVE, late
        return self.verdict(
            status,
            message,
            observed=observed,
            expected=expected,
            units=units,
            evidence=refs,
            window=p.phase,
            notes=tuple(notes),
        )

    def _harness_late(
        self, evidence: RunEvidence, records: list[RequestRecord], observed: dict, units: dict, failed: str
    ) -> str | None:
        """When the load generator's own lateness made the FAIL: the attempts went out more than
        :data:`~drill.checks.judging.HARNESS_LAG_MS` late at p99, and judged from their sends (the lateness
        taken off every latency) the window passes. Says so, after ``failed`` (the FAIL's message), and adds the
        ``from_send.*`` figures to ``observed``; None when the FAIL is the target's. Time-to-failure counts from
        the intended start so that a target that makes its clients wait is charged for it; the schedule lag ends
        where the generator starts the request, before it connects, so it is the harness's alone."""
        lags = [r.schedule_lag_ms for r in records if is_counted(r) and r.schedule_lag_ms is not None]
        lag_p99 = percentile(lags, 99.0)
        if lag_p99 is None or lag_p99 <= HARNESS_LAG_MS:
            return None
        sent = [r.measured_from_send() for r in records]
        tally = self._tally(evidence, sent)
        from_send, _ = self._observed(tally, sent)
        status, message = self._judge(tally, from_send)
        if status is not Status.PASS:
            return None
        observed["schedule_lag_p99_ms"] = round(lag_p99, 3)
        units["schedule_lag_p99_ms"] = "ms"
        for name in ("timeout_share", "waited_share", "refusal_ttf_p99_ms"):
            observed[f"from_send.{name}"] = from_send[name]
            units[f"from_send.{name}"] = units[name]
        return harness_late(
            f"{failed}; measured from the sends, {message}",
            f"its attempts went out {lag_p99:.0f} ms late at p99, more than {HARNESS_LAG_MS:g} ms",
        )

    # --- sorting the attempts -------------------------------------------------------------------------

    def _tally(self, evidence: RunEvidence, records: list[RequestRecord]) -> _OutcomeTally:
        p: FastFailureParams = self.params
        settings = pool_settings(evidence)
        tally = _OutcomeTally()
        for record in records:
            if not is_counted(record):
                tally.client_drops += 1
                continue
            limit = (
                ("ttft", p.wait_limit * 1000)
                if p.wait_limit is not None
                else wait_limit_ms(evidence.slo_by_pool.get(record.pool) or {})
            )
            pool = settings.get(record.pool)
            deadline_ms = pool.timeout_s * 1000 if pool and pool.timeout_s else None
            if limit is None:
                tally.pools_without_limit.add(record.pool)
            if deadline_ms is None:
                tally.pools_without_deadline.add(record.pool)
            self._sort(tally, record, limit, deadline_ms)
        return tally

    def _sort(
        self, tally: _OutcomeTally, record: RequestRecord, limit: tuple[str, float] | None, deadline_ms: float | None
    ) -> None:
        if record.ok:
            waited = _success_wait_ms(record, limit[0]) if limit else None
            if limit is not None and waited is not None and waited > limit[1]:
                tally.counts["left_to_wait"] += 1
                tally.waited.append((waited, record, "left_to_wait"))
            else:
                tally.counts["on_time"] += 1
            return
        ttf = time_to_failure_ms(record)
        if ttf is not None:
            tally.failure_ms.append(ttf)
        outcome = self._failure_outcome(record, ttf, deadline_ms)
        if record.error is ErrorClass.CANCELLED:
            tally.cancelled += 1
        tally.counts[outcome] += 1
        if outcome == "refused":
            tally.with_retry_after += record.retry_after_s is not None
            tally.in_stream += record.stream_error_code is not None
            if ttf is not None:
                tally.refusal_ms.append(ttf)
        if outcome in WAITED or outcome == "refused":
            tally.waited.append((ttf if ttf is not None else float("inf"), record, outcome))

    def _failure_outcome(self, record: RequestRecord, ttf: float | None, deadline_ms: float | None) -> str:
        slow = ttf is not None and deadline_ms is not None and ttf >= self.params.slow_fraction * deadline_ms
        if record.error is ErrorClass.TIMEOUT or record.status in GATEWAY_TIMEOUTS:
            return "timeout"
        if record.error is ErrorClass.CANCELLED:
            return "left_to_wait"  # still waiting when the load stopped
        if record.error is ErrorClass.REFUSED:
            return "slow_failure" if slow else "refused"
        return "slow_failure" if slow else "other_error"

    # --- figures and the verdict ------------------------------------------------------------------------

    def _observed(self, tally: _OutcomeTally, records: list[RequestRecord]) -> tuple[dict, dict]:
        observed: dict = {
            "attempts": len(records),
            "client_drops": tally.client_drops,
            **tally.counts,
            "cancelled": tally.cancelled,
            "not_on_time": tally.not_on_time,
            "failures": tally.failures,
            "timeout_share": _share(tally.counts["timeout"] + tally.counts["slow_failure"], tally.failures),
            "waited_share": _share(tally.waited_count, tally.not_on_time),
            "refused_share": (round(tally.counts["refused"] / tally.not_on_time, 4) if tally.not_on_time else None),
            "refusals_with_retry_after": tally.with_retry_after,
            "refusals_in_stream": tally.in_stream,
        }
        units = {
            name: "requests"
            for name in (
                "attempts",
                "client_drops",
                "cancelled",
                "not_on_time",
                "failures",
                "refusals_with_retry_after",
                "refusals_in_stream",
                *OUTCOMES,
            )
        }
        units.update(timeout_share="ratio", waited_share="ratio", refused_share="ratio")
        for name, values in (("refusal_ttf", tally.refusal_ms), ("failure_ttf", tally.failure_ms)):
            for pct, value in percentiles(values, (50.0, 95.0, 99.0)).items():
                observed[f"{name}_{pct}_ms"] = None if value is None else round(value, 3)
                units[f"{name}_{pct}_ms"] = "ms"
        return observed, units

    def _judge(self, tally: _OutcomeTally, observed: dict) -> tuple[Status, str]:
        p: FastFailureParams = self.params
        summary = (
            f"{tally.counts['refused']} refused, {tally.counts['timeout']} timed out, "
            f"{tally.counts['slow_failure']} failed slowly, {tally.counts['left_to_wait']} left to wait, "
            f"{tally.counts['other_error']} other errors, {tally.counts['on_time']} on time"
        )
        if tally.not_on_time < p.min_failures:
            return Status.INCONCLUSIVE, (
                f"only {tally.not_on_time} attempt(s) in the {p.phase} window failed or "
                f"were late (< {p.min_failures}): not overloaded enough to show how the "
                f"stack fails ({summary})"
            )
        problems = []
        timeouts = observed["timeout_share"]
        if timeouts is not None and timeouts > p.max_timeout_share:
            problems.append(f"{timeouts:.1%} of the failures were timeouts or slow (max {p.max_timeout_share:.1%})")
        share = observed["waited_share"]
        if share > p.max_wait_share:
            problems.append(
                f"{share:.1%} of the attempts not served on time waited instead of being refused "
                f"(max {p.max_wait_share:.1%})"
            )
        refusal_p99 = observed["refusal_ttf_p99_ms"]
        if refusal_p99 is not None and refusal_p99 > p.refusal_p99 * 1000:
            problems.append(f"refusals took {refusal_p99:.0f}ms at p99 (budget {p.refusal_p99 * 1000:.0f}ms)")
        if problems:
            return Status.FAIL, "; ".join(problems) + f" — {summary}"
        fast = f", p99 {refusal_p99:.0f}ms" if refusal_p99 is not None else ""
        return Status.PASS, f"overload was refused quickly{fast} — {summary}"

    def _notes(self, tally: _OutcomeTally) -> list[str]:
        notes = []
        if tally.pools_without_limit:
            notes.append(
                f"pools without a TTFT or E2E SLO (their successes are never 'left to wait'): "
                f"{', '.join(sorted(tally.pools_without_limit))}"
            )
        if tally.pools_without_deadline:
            notes.append(
                f"pools without a known client deadline (only timeouts count as slow): "
                f"{', '.join(sorted(tally.pools_without_deadline))}"
            )
        if tally.cancelled:
            notes.append(
                f"{tally.cancelled} attempt(s) were still in flight when the load stopped (cancelled): "
                "counted as left to wait"
            )
        if tally.counts["refused"]:
            notes.append(f"{tally.with_retry_after} of {tally.counts['refused']} refusal(s) carried Retry-After")
        if tally.in_stream:
            notes.append(
                f"{tally.in_stream} of {tally.counts['refused']} refusal(s) came as HTTP 200 followed by an error "
                "event with a 429/503 code (a refusal after the stream had started)"
            )
        return notes


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _success_wait_ms(record: RequestRecord, metric: str) -> float | None:
    if metric == "ttft":
        return record.ttft_ms if record.ttft_ms is not None else record.e2e_ms
    return record.e2e_ms


def _evidence_refs(tally: _OutcomeTally) -> list[EvidenceRef]:
    """The worst waits first (request and trace ids), then the slowest refusals."""
    waited = sorted((w for w in tally.waited if w[2] in WAITED), key=lambda w: -w[0])[:WORST]
    refused = sorted((w for w in tally.waited if w[2] == "refused"), key=lambda w: -w[0])[: WORST // 2]
    refs = []
    for ms, record, outcome in waited + refused:
        note = f"{outcome} after {ms:.0f}ms" if ms != float("inf") else outcome
        refs.append(EvidenceRef(EvidenceKind.REQUEST, record.request_id, note))
        if record.trace_id:
            refs.append(EvidenceRef(EvidenceKind.TRACE, record.trace_id, record.request_id))
    return refs
