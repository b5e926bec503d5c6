"""The serving side of a run in the report: admission control's rejections by reason, and the router's overhead.

- **Admission rejections by reason**, per phase: the increments of ``vllm:admission_rejections_total{reason=...}``
  in the scraped ``metrics.jsonl`` (vLLM's counter, PR #55812, which the reference stack exports too), summed over
  the endpoints; a counter that went down was reset (a restarted replica) and its new value is the increment.
  "not available" when the target exports no such counter.
- **KV transfers**, per phase, for a disaggregated (P/D) target: mean transfer time, bytes moved, failed transfers
  and the most transfers pending, read through the metric map (``kv_transfer_*`` quantities: vLLM's
  ``NixlConnector`` names, docs/metrics-map.md); no rows when the target exports none of them.
- **Router overhead**, per phase: what the embedded router added to each request's TTFT and E2E, measured from its
  spans and the replica's ``llm_request`` (:mod:`drill.traces.overhead`), as p50 / p95 / p99, and the router's
  median share of the TTFT its client saw.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from drill.report.model import (
    NOT_AVAILABLE,
    AdmissionRejectionRow,
    KvTransferRow,
    LatencyPercentiles,
    RouterOverheadRow,
    ServingSide,
)
from drill.report.quantities import phase_quantities
from drill.rundir.evidence import PhaseWindow, RunEvidence
from drill.rundir.jsonl import ReadReport, read_jsonl
from drill.stats import percentiles
from drill.traces.overhead import RouterHop, router_hops
from drill.traces.run_traces import run_traces

__all__ = ["ADMISSION_REJECTIONS", "serving_side"]

ADMISSION_REJECTIONS = "vllm:admission_rejections_total"
_PREFIX = ADMISSION_REJECTIONS + "{"


def serving_side(evidence: RunEvidence, phases: tuple[str, ...]) -> ServingSide:
    """Both tables for the phases the run had, in ``phases`` order."""
    windows = [evidence.phases[p] for p in phases if p in evidence.phases]
    rejections, rejection_note = _admission_rejections(evidence.run_dir / "metrics.jsonl", windows)
    try:
        overhead, overhead_note = _router_overhead(evidence, windows)
    except Exception as exc:  # noqa: BLE001 - one broken figure source must not cost the whole report
        overhead, overhead_note = (), f"{NOT_AVAILABLE}: reading the spans failed ({type(exc).__name__}: {exc})"
    kv = _kv_transfers(evidence, windows) if (evidence.run_dir / "metrics.jsonl").exists() else ()
    return ServingSide(rejections, rejection_note, overhead, overhead_note, kv)


# --- KV transfers -----------------------------------------------------------------------------------------


def _kv_transfers(evidence: RunEvidence, windows: list[PhaseWindow]) -> tuple[KvTransferRow, ...]:
    by_phase = phase_quantities(evidence)
    rows = []
    for window in windows:
        q = by_phase.get(window.phase) or {}
        seconds = q.get("kv_transfer_seconds")
        row = KvTransferRow(
            phase=window.phase,
            mean_ms=None if seconds is None else round(seconds * 1000, 3),
            bytes=q.get("kv_transfer_bytes"),
            failures=q.get("kv_transfer_failures"),
            pending_max=q.get("kv_transfers_pending"),
        )
        if any(v is not None for v in (row.mean_ms, row.bytes, row.failures, row.pending_max)):
            rows.append(row)
    return tuple(rows)


# --- admission rejections ---------------------------------------------------------------------------------


def _admission_rejections(path: Path, windows: list[PhaseWindow]) -> tuple[tuple[AdmissionRejectionRow, ...], str]:
    if not path.exists():
        return (), f"{NOT_AVAILABLE}: the run has no metrics.jsonl"
    series: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for ts, source, values in read_jsonl(path, _rejection_line, ReadReport(path)):
        for reason, value in values.items():
            series[(source, reason)].append((ts, value))
    if not series:
        return (), f"{NOT_AVAILABLE}: the target exports no {ADMISSION_REJECTIONS}"
    counts: dict[tuple[str, str], float] = defaultdict(float)
    for (_, reason), points in series.items():
        points.sort()
        for (_, before), (ts, value) in zip(points, points[1:]):
            window = next((w for w in windows if w.start_ts < ts <= w.end_ts), None)  # an increase covers (t0, t]
            if window is not None:
                counts[(window.phase, reason)] += value - before if value >= before else value
    reasons = sorted({reason for _, reason in series})
    rows = tuple(
        AdmissionRejectionRow(window.phase, reason, int(round(counts.get((window.phase, reason), 0.0))))
        for window in windows
        for reason in reasons
    )
    return rows, ""


def _rejection_line(data: dict) -> tuple[float, str, dict[str, float]]:
    """(ts, endpoint, {reason: counter value}) of one scrape line (empty for a failed scrape)."""
    values: dict[str, float] = {}
    if data.get("ok"):
        for key, value in (data.get("samples") or {}).items():
            if key.startswith(_PREFIX):
                reason = _label(key, "reason") or "unknown"
                values[reason] = values.get(reason, 0.0) + float(value)
    return float(data["ts"]), str(data["source"]), values


def _label(key: str, name: str) -> str | None:
    marker = f'{name}="'
    start = key.find(marker)
    if start < 0:
        return None
    start += len(marker)
    return key[start : key.find('"', start)]


# --- router overhead --------------------------------------------------------------------------------------


def _router_overhead(evidence: RunEvidence, windows: list[PhaseWindow]) -> tuple[tuple[RouterOverheadRow, ...], str]:
    if not (evidence.run_dir / "spans.jsonl").exists():
        return (), f"{NOT_AVAILABLE}: the run has no spans.jsonl"
    hops = router_hops(run_traces(evidence).table)
    if not hops:
        return (), f"{NOT_AVAILABLE}: no request has both the router's span and a replica's llm_request"
    rows = []
    for window in windows:
        inside = [h for h in hops if window.contains(h.start_ns / 1e9)]
        if inside:
            rows.append(_overhead_row(window.phase, inside))
    return tuple(rows), ""


def _overhead_row(phase: str, hops: list[RouterHop]) -> RouterOverheadRow:
    shares = [h.ttft_share for h in hops if h.ttft_share is not None]
    share = percentiles(shares, (50.0,))["p50"] if shares else None
    return RouterOverheadRow(
        phase=phase,
        requests=len(hops),
        added_ttft_ms=_pcts([h.added_ttft_ms for h in hops if h.added_ttft_ms is not None]),
        added_e2e_ms=_pcts([h.added_e2e_ms for h in hops]),
        ttft_share_p50=None if share is None else round(share, 4),
    )


def _pcts(values: list[float]) -> LatencyPercentiles:
    p = percentiles(values, (50.0, 95.0, 99.0))
    p50, p95, p99 = (None if (v := p[k]) is None else round(float(v), 3) for k in ("p50", "p95", "p99"))
    return LatencyPercentiles(samples=len(values), p50=p50, p95=p95, p99=p99)
