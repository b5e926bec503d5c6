"""Figures shared by the checks that judge from client records: windows, pool settings, SLO tests,
and the guarded access to a run's spans (and the measurement truth they give).

Nothing here decides a verdict; the checks (:mod:`drill.checks.failures`, :mod:`drill.checks.retries`,
:mod:`drill.checks.recovery`, the ``slo`` check) do.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from drill.rundir.records import ErrorClass, RequestRecord, latency_values
from drill.spec.scenario import parse_slo_key
from drill.stats import percentile
from drill.traces.run_traces import RunTraces, run_traces
from drill.units import parse_duration

if TYPE_CHECKING:
    from drill.rundir.evidence import RunEvidence
    from drill.traces.run_traces import RunTraces

__all__ = [
    "HARNESS_LAG_MS",
    "harness_late",
    "PoolSettings",
    "breach_from_send",
    "is_counted",
    "meets_slo",
    "pool_settings",
    "record_metric_ms",
    "records_in",
    "usable_traces",
    "time_to_failure_ms",
    "wait_limit_ms",
    "window_of",
]


@dataclass(frozen=True)
class PoolSettings:
    """What the scenario promised a pool's clients: their deadline and retries."""

    name: str
    timeout_s: float | None  # the client's deadline for one attempt
    retry_attempts: int | None  # extra tries after the first


def pool_settings(evidence: RunEvidence) -> dict[str, PoolSettings]:
    """Each pool of ``resolved.json``'s scenario (durations are written with units there)."""
    out = {}
    for raw in (evidence.resolved.get("scenario") or {}).get("pools") or []:
        name = raw.get("name")
        if not isinstance(name, str):
            continue
        out[name] = PoolSettings(name, _duration(raw.get("timeout")), (raw.get("retry") or {}).get("attempts"))
    return out


def _duration(value: object) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration(value) if isinstance(value, str) else float(value)  # type: ignore[arg-type]  # refused below
    except (TypeError, ValueError):
        return None


def window_of(evidence: RunEvidence, phase: str) -> tuple[float, float] | None:
    """The judged window (UNIX s): the fault window (injection to revert) for ``fault``, else the phase."""
    if phase == "fault" and evidence.fault_window is not None:
        return evidence.fault_window
    window = evidence.phases.get(phase)
    return (window.start_ts, window.end_ts) if window else None


def records_in(
    evidence: RunEvidence,
    window: tuple[float, float],
    pools: Iterable[str] | None = None,
) -> list[RequestRecord]:
    """Attempts whose intended start falls in ``window`` (and in ``pools``, when given)."""
    wanted = None if pools is None else set(pools)
    start, end = window
    return [r for r in evidence.requests if start <= r.intended_ts < end and (wanted is None or r.pool in wanted)]


def time_to_failure_ms(record: RequestRecord) -> float | None:
    """How long the client waited for a failed attempt's answer, from its intended start (ms).

    The status line (``headers_ms``) is when a refusal arrived; a stream that broke later, or a timeout,
    ends at ``e2e_ms``. The later of the two is the time the client spent before it knew.
    """
    values = [v for v in (record.headers_ms, record.e2e_ms) if v is not None]
    return max(values) if values else None


def record_metric_ms(record: RequestRecord, metric: str) -> float | None:
    """One attempt's value of an SLO metric (ms), None when it has none; ITL is its largest gap."""
    if metric == "ttft":
        return record.ttft_ms if record.ttft_ms is not None else record.e2e_ms
    if metric == "e2e":
        return record.e2e_ms
    if metric == "tpot":
        return record.tpot_ms
    gaps = record.itl_ms()
    return max(gaps) if gaps else None


#: The load generator's own lateness (ms) past which a figure measured the harness machine too: a capacity point
#: whose arrivals went out this late (p95), or an SLO percentile that lateness moved by this much.
HARNESS_LAG_MS = 50.0


def harness_late(finding: str, lateness: str) -> str:
    """The message of a verdict made INCONCLUSIVE because the load generator's own lateness made its FAIL (``slo``,
    ``fast_failure``): what was found, and how late the generator was (``lateness``, e.g. "its attempts went out
    1600 ms late at p99, more than 50 ms": past :data:`HARNESS_LAG_MS`)."""
    return f"the load generator sent late, not the target: {finding} ({lateness}: a busy or stalled harness machine)"


def breach_from_send(
    records: list[RequestRecord], metric: str, pct: float, bound_ms: float, from_intended: float
) -> float | None:
    """When the load generator's own lateness made an SLO breach (``from_intended``, the percentile the check found
    over ``records``, is over ``bound_ms``): the percentile measured from each attempt's send (its
    ``schedule_lag_ms``, the time from its intended start until the generator began sending it, taken off), which
    is within ``bound_ms`` while the lateness moved it by more than :data:`HARNESS_LAG_MS`. None when the breach is
    the target's (it holds from the send too), when the lateness is too small to matter, or for a metric the send
    time does not hold (TPOT, ITL).

    Latency is measured from the intended start so that a target that makes its clients wait is charged for it; the
    schedule lag ends where the generator starts the request (before it connects), so it is the generator's alone —
    a stalled or overloaded harness machine, not the target."""
    if metric not in ("ttft", "e2e"):
        return None
    from_send = percentile(latency_values(records, metric, from_send=True), pct)
    if from_send is None or from_send > bound_ms:
        return None
    return from_send if from_intended - from_send > HARNESS_LAG_MS else None


def meets_slo(record: RequestRecord, slo: dict[str, float]) -> bool:
    """True when the attempt succeeded and each of its latencies is within every bound of ``slo``.

    A per-request SLO (DistServe's goodput): each bound applies to each request. ITL is judged on the
    attempt's own gaps at the key's percentile; a metric the attempt has no value for (TPOT of a
    one-token answer) does not count against it.
    """
    if not record.ok:
        return False
    for key, bound_s in slo.items():
        parsed = parse_slo_key(key)
        if parsed is None:
            continue
        metric, pct = parsed
        value = percentile(record.itl_ms(), pct) if metric == "itl" else record_metric_ms(record, metric)
        if value is not None and value > bound_s * 1000.0:
            return False
    return True


def wait_limit_ms(slo: dict[str, float]) -> tuple[str, float] | None:
    """The longest a success may take before it counts as "left to wait": (metric, ms).

    The pool's most lenient TTFT bound (of its ``ttft_p*`` keys), else its most lenient E2E bound (a
    non-streaming pool has no first token before the whole answer); None without either.
    """
    for metric in ("ttft", "e2e"):
        bounds = [bound for key, bound in slo.items() if (p := parse_slo_key(key)) and p[0] == metric]
        if bounds:
            return metric, max(bounds) * 1000.0
    return None


def is_counted(record: RequestRecord) -> bool:
    """False for attempts the client never sent (its own in-flight cap) — the server had no say."""
    return record.error is not ErrorClass.CLIENT_DROP


def usable_traces(evidence: RunEvidence) -> tuple[RunTraces | None, str | None]:
    """The run's spans, or why there are none to use ("the target exported no spans", or the error)."""
    try:
        traces = run_traces(evidence)
    except Exception as exc:  # noqa: BLE001 - unreadable lines are counted, not raised; this is anything else:
        # the checks that use spans as extra evidence still judge from the client records, saying why
        return None, f"the spans could not be loaded: {type(exc).__name__}: {exc}"
    if traces.no_spans_reason:
        return None, traces.no_spans_reason
    return traces, None
