"""Build the :class:`~drill.report.model.Report` of one run, section by section, from its run directory.

Every figure comes from a file of the run directory (named in each section's builder) or from a verdict in
``verdicts.json``; nothing is read from the clock or the host, and every collection is put in a fixed order,
so the same directory always builds the same report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from drill.api import Status, Verdict
from drill.checks.judging import meets_slo
from drill.checks.truth import MeasurementTruthSection, measurement_truth_by_phase
from drill.report import quantities as scraped_quantities
from drill.report.actions import action_items, coverage_gaps
from drill.report.detail import (
    CHART_FAILED,
    ReportRedactor,
    charts,
    decision_fields,
    detection,
    fault_sections,
    redactor_for,
    replay_section,
    runbook,
)
from drill.report.finding import headline
from drill.report.formatting import format_value, iso_utc, verdict_figures
from drill.report.model import (
    NOT_AVAILABLE,
    UNSET,
    CostFigures,
    Impact,
    ImpactRow,
    LatencyPercentiles,
    PhaseMetrics,
    Report,
    ReportHeader,
    SloBreach,
    TimelineEntry,
    VerdictLine,
)
from drill.report.prompt_tokens import prompt_tokens
from drill.report.serving import serving_side
from drill.rundir.evidence import RunEvidence
from drill.rundir.files import UnsafeFileError, read_json
from drill.rundir.journal import Event
from drill.rundir.records import ErrorClass, RequestRecord, latency_values
from drill.spec.scenario import parse_slo_key
from drill.stats import percentile
from drill.traces.run_traces import run_traces

__all__ = ["SECTIONS", "assemble", "build_report"]

#: The phases that carry load, in run order (the ones a metrics table and the impact are shown for).
LOADED_PHASES = ("warmup", "baseline", "fault", "recovery")
#: The report's sections in the order they are built (a progress display counts them).
SECTIONS = (
    "header",
    "verdicts",
    "impact",
    "timeline",
    "detection",
    "faults",
    "metrics",
    "replay",
    "runbook",
    "actions",
    "decision",
    "not_covered",
    "charts",
    "measurement_truth",
    "headline",
)
_STATUS_ORDER = (Status.ERROR.value, Status.FAIL.value, Status.INCONCLUSIVE.value, Status.PASS.value)


def assemble(evidence: RunEvidence, verdicts: list[Verdict], progress: Callable[[str], None]) -> Report:
    redactor = redactor_for(evidence)
    drill = redactor.data(evidence.resolved.get("drill") or {})  # every free-text field (description, ...) scrubbed
    sections: dict[str, Any] = {}
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("header", lambda: _header(evidence, verdicts, drill)),
        ("verdicts", lambda: tuple(_verdict_line(v, drill.get("predicts") or {}, redactor) for v in verdicts)),
        ("impact", lambda: _impact(evidence, verdicts)),
        ("timeline", lambda: _timeline(evidence, verdicts, redactor)),
        ("detection", lambda: detection(evidence, verdicts, redactor)),
        ("faults", lambda: fault_sections(evidence, redactor)),
        ("metrics", lambda: _metrics(evidence, drill)),
        ("prompt_tokens", lambda: prompt_tokens(evidence)),
        ("serving", lambda: serving_side(evidence, LOADED_PHASES)),
        ("replay", lambda: replay_section(evidence, verdicts, redactor)),
        ("runbook", lambda: runbook(evidence, redactor)),
        ("actions", lambda: action_items(verdicts)),
        ("decision", lambda: decision_fields(drill)),
        ("not_covered", lambda: coverage_gaps(evidence)),
        ("charts", lambda: charts(evidence)),
        ("measurement_truth", lambda: _measurement_truth(evidence)),
    ]
    for name, step in steps:
        progress(name)
        sections[name] = step()
    metrics, cost, notes = sections.pop("metrics")
    reads = tuple(r.describe() for _, r in sorted(evidence.reports.items()) if not r.clean)
    if sections["faults"] and not any(v.kind == "recovery_time" for v in verdicts):
        notes += ("the drill has no recovery_time check: the timeline shows no recovery point",)
    every_chart = (*sections["charts"], sections["detection"].waterfall)
    notes += tuple(c.note for c in every_chart if c.note.startswith(CHART_FAILED))
    progress("headline")
    found = headline(evidence, verdicts, sections["verdicts"], sections["header"].outcome, redactor.value)
    return Report(metrics=metrics, cost=cost, reads=reads, notes=notes, headline=found, **sections)


def _measurement_truth(evidence: RunEvidence) -> MeasurementTruthSection:
    try:
        return measurement_truth_by_phase(evidence)
    except Exception as exc:  # noqa: BLE001 - one broken figure source must not cost the whole report
        return MeasurementTruthSection("none", "", (), f"not computed: {type(exc).__name__}: {exc}")


# --- header and verdicts -----------------------------------------------------------------------------------


def _header(evidence: RunEvidence, verdicts: list[Verdict], drill: dict) -> ReportHeader:
    journal = evidence.journal
    started = next((e for e in journal if e.event == Event.RUN_STARTED.value), None)
    finished = [e for e in journal if e.event == Event.RUN_FINISHED.value]
    env = _read_json(evidence.run_dir / "env.json")
    target = env.get("target") or {}
    report_spec = drill.get("report") or {}
    return ReportHeader(
        drill=str(drill.get("name") or (started.get("drill") if started else None) or "?"),
        title=drill.get("title"),
        description=drill.get("description"),
        run_id=str(started.get("run_id")) if started else evidence.run_dir.name,
        run_status=str(finished[-1].get("status")) if finished else "unfinished",
        outcome=_outcome(verdicts),
        started_at=iso_utc(started.ts) if started else None,
        length_s=round(finished[-1].ts - started.ts, 3) if started and finished else None,
        time_scale=evidence.resolved.get("time_scale"),
        stopped_by=finished[-1].get("stopped_by") if finished else None,
        target_kind=(drill.get("target") or {}).get("kind"),
        model=target.get("model"),
        model_version=target.get("version"),
        hypothesis=drill.get("hypothesis"),
        owner=report_spec.get("owner"),
        drill_file=evidence.resolved.get("drill_file"),
    )


def _outcome(verdicts: list[Verdict]) -> str:
    if not verdicts:
        return "NOT JUDGED"
    statuses = {v.status.value for v in verdicts}
    return next(s for s in _STATUS_ORDER if s in statuses)


def _read_json(path: Path) -> dict:
    try:
        data = read_json(path, root=path.parent)
    except UnsafeFileError:
        raise
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _verdict_line(v: Verdict, predicts: dict[str, str], redactor: ReportRedactor) -> VerdictLine:
    predicted = predicts.get(v.name)
    figures = verdict_figures(v)
    evidence = tuple(
        f"{e.kind.value} {e.value}" + (f" ({redactor.value(e.note)})" if e.note else "") for e in v.evidence[:10]
    )
    return VerdictLine(
        name=v.name,
        kind=v.kind,
        status=v.status.value,
        message=redactor.value(v.message),
        window=v.window,
        predicted=predicted,
        as_predicted=None if predicted is None else predicted == v.status.value,
        figures=figures,
        notes=tuple(redactor.value(n) for n in v.notes),
        evidence=evidence,
    )


# --- impact on users ---------------------------------------------------------------------------------------


def _counted(records: list[RequestRecord]) -> list[RequestRecord]:
    """Attempts that count for users: the ones cancelled when the load stopped are left out."""
    return [r for r in records if r.error is not ErrorClass.CANCELLED]


def _impact(evidence: RunEvidence, verdicts: list[Verdict]) -> Impact:
    slo = evidence.slo_by_pool
    goodput = _verdict_goodput(verdicts)
    rows, breaches, notes = [], [], []
    pools = sorted({r.pool for r in evidence.requests} | set(slo))
    phases = [p for p in LOADED_PHASES if p in evidence.phases]
    baseline_share: dict[str, float | None] = {}
    if "baseline" in phases:  # the reference the other phases' goodput lost is measured against
        records = _counted(evidence.requests_in("baseline"))
        length = evidence.phases["baseline"].length_s
        for pool in pools:
            mine = [r for r in records if r.pool == pool]
            baseline_share[pool] = _impact_row(
                "baseline", pool, mine, slo.get(pool) or {}, length, goodput, {}
            ).goodput_share
    for phase in phases:
        records = _counted(evidence.requests_in(phase))
        length = evidence.phases[phase].length_s
        for pool in pools:
            mine = [r for r in records if r.pool == pool]
            rows.append(_impact_row(phase, pool, mine, slo.get(pool) or {}, length, goodput, baseline_share))
            breaches += _breaches(phase, pool, mine, slo.get(pool) or {})
    if not slo:
        notes.append("no pool has an SLO: every success counts as good, and no SLO can be breached")
    if "baseline" not in phases:
        notes.append("the run has no baseline phase: goodput lost cannot be measured")
    source = (
        "goodput from the slo verdict's observed figures (verdicts.json)"
        if goodput
        else "goodput computed from requests.jsonl with the pools' SLOs (no slo verdict carries it)"
    )
    return Impact(tuple(rows), tuple(breaches), source, tuple(notes))


def _verdict_goodput(verdicts: list[Verdict]) -> dict[str, Any]:
    for v in verdicts:
        if v.kind == "slo" and any(k.startswith("goodput.") for k in v.observed):
            return {k: val for k, val in v.observed.items() if k.startswith("goodput.")}
    return {}


def _impact_row(
    phase: str,
    pool: str,
    records: list[RequestRecord],
    slo: dict[str, float],
    length_s: float,
    goodput: dict[str, Any],
    baseline_share: dict[str, float | None],
) -> ImpactRow:
    failed = [r for r in records if not r.ok]
    good = [r for r in records if meets_slo(r, slo)]
    by_class = Counter(r.error.value if r.error else f"http_{r.status}" for r in failed)
    prefix = f"goodput.{phase}.{pool}"
    share = goodput.get(f"{prefix}.share", round(len(good) / len(records), 4) if records else None)
    rps = goodput.get(f"{prefix}.requests_per_s", round(len(good) / length_s, 4) if length_s > 0 else None)
    base = baseline_share.get(pool)
    lost = round(base - share, 4) if phase != "baseline" and base is not None and share is not None else None
    return ImpactRow(
        phase=phase,
        pool=pool,
        requests=len(records),
        failed=len(failed),
        failed_by_class=tuple(sorted(by_class.items())),
        slow=len(records) - len(failed) - len(good),
        good=len(good),
        goodput_share=share,
        goodput_rps=rps,
        share_lost=lost,
    )


def _breaches(phase: str, pool: str, records: list[RequestRecord], slo: dict[str, float]) -> list[SloBreach]:
    ok = [r for r in records if r.ok]
    out = []
    for key, bound_s in sorted(slo.items()):
        parsed = parse_slo_key(key)
        if parsed is None:
            continue
        metric, pct = parsed
        values = latency_values(ok, metric)
        value = percentile(values, pct)
        if value is not None and value > bound_s * 1000:
            out.append(SloBreach(phase, pool, key, round(value, 3), round(bound_s * 1000, 3), len(values)))
    return out


# --- timeline ---------------------------------------------------------------------------------------------

_JOURNAL_LINES: dict[str, Callable[[Any], str]] = {
    Event.RUN_STARTED.value: lambda e: "run started",
    Event.RUN_FINISHED.value: lambda e: f"run finished: {e.get('status')} (exit {e.get('exit_code')})",
    Event.TARGET_READY.value: lambda e: f"target ready (first good response after {e.get('first_good_response_s')}s)",
    Event.TARGET_STOPPED.value: lambda e: "target stopped",
    Event.PHASE_STARTED.value: lambda e: (
        f"phase {e.get('phase')} started"
        + (f" (planned {format_value(e.get('planned_s'))}s)" if e.get("planned_s") is not None else "")
    ),
    Event.PHASE_ENDED.value: lambda e: (
        f"phase {e.get('phase')} ended"
        + (f" early: stop condition {e.get('stopped_by')}" if e.get("stopped_by") else "")
    ),
    Event.FAULT_INJECTED.value: lambda e: f"fault {e.get('fault_id')} ({e.get('kind')}) injected",
    Event.FAULT_INJECT_FAILED.value: lambda e: f"fault {e.get('fault_id')} failed to inject: {e.get('error')}",
    Event.FAULT_VERIFIED.value: lambda e: f"fault {e.get('fault_id')} verified: {e.get('summary')}",
    Event.FAULT_NOT_LANDED.value: lambda e: f"fault {e.get('fault_id')} did not land: {e.get('error')}",
    Event.FAULT_REVERTED.value: lambda e: (
        f"fault {e.get('fault_id')} reverted" + (f" ({e.get('reason')})" if e.get("reason") else "")
    ),
    Event.REVERT_FAILED.value: lambda e: f"REVERT FAILED for {e.get('fault_id')}: {e.get('error')}",
    Event.STOP_CONDITION.value: lambda e: (
        f"stop condition {e.get('condition')} fired (observed {format_value(e.get('observed'))})"
    ),
    Event.SIGNAL.value: lambda e: f"signal {e.get('signal')} received",
}


def _timeline(evidence: RunEvidence, verdicts: list[Verdict], redactor: Any) -> tuple[TimelineEntry, ...]:
    journal = evidence.journal
    started = next((e for e in journal if e.event == Event.RUN_STARTED.value), None)
    origin = started.ts if started else (journal[0].ts if journal else 0.0)
    points: list[tuple[float, int, str, str]] = []
    for e in journal:
        line = _JOURNAL_LINES.get(e.event)
        if line is not None:
            points.append((e.ts, 0, line(e), f"journal #{e.seq}"))
    points += _derived_points(evidence, verdicts)
    points.sort(key=lambda p: (p[0], p[1], p[2]))
    return tuple(
        TimelineEntry(round(ts - origin, 3), iso_utc(ts) or "", redactor.value(what), source)
        for ts, _, what, source in points
    )


def _derived_points(evidence: RunEvidence, verdicts: list[Verdict]) -> list[tuple[float, int, str, str]]:
    out = []
    counted = sorted(_counted(evidence.requests), key=lambda r: (r.intended_ts, r.request_id))
    first_error = next((r for r in counted if not r.ok), None)
    if first_error is not None:
        out.append(
            (
                first_error.intended_ts,
                1,
                f"first failed request: {first_error.request_id} "
                f"({first_error.error.value if first_error.error else first_error.status}, pool "
                f"{first_error.pool}; intended start)",
                "requests.jsonl",
            )
        )
    breach = _first_slo_miss(evidence, counted)
    if breach is not None:
        out.append(breach)
    out += _span_point(evidence, verdicts)
    out += _recovery_point(evidence, verdicts)
    return out


def _first_slo_miss(evidence: RunEvidence, counted: list[RequestRecord]) -> tuple[float, int, str, str] | None:
    """The first request after the baseline began that succeeded but missed a bound of its pool's SLO."""
    baseline = evidence.phases.get("baseline")
    start = baseline.start_ts if baseline else None
    for r in counted:
        slo = evidence.slo_by_pool.get(r.pool)
        if slo and r.ok and (start is None or r.intended_ts >= start) and not meets_slo(r, slo):
            return (
                r.intended_ts,
                1,
                f"first request over its SLO: {r.request_id} (pool {r.pool}, TTFT "
                f"{format_value(r.ttft_ms)}ms, E2E {format_value(r.e2e_ms)}ms)",
                "requests.jsonl",
            )
    return None


def _span_point(evidence: RunEvidence, verdicts: list[Verdict]) -> list[tuple[float, int, str, str]]:
    v = next((v for v in verdicts if v.kind == "first_abnormal_span" and v.observed.get("span_id")), None)
    if v is None:
        return []
    table = run_traces(evidence).table
    rows = np.flatnonzero(table.span_id == v.observed["span_id"])
    if len(rows) == 0:
        return []
    ts = int(table.start_ns[rows[0]]) / 1e9
    what = (
        f"first abnormal span starts: {v.observed.get('service')}/{v.observed.get('name')} "
        f"({v.observed.get('deviation')})"
    )
    return [(ts, 1, what, f"verdict {v.name}, spans.jsonl")]


def _recovery_point(evidence: RunEvidence, verdicts: list[Verdict]) -> list[tuple[float, int, str, str]]:
    v = next((v for v in verdicts if v.kind == "recovery_time"), None)
    reverted = [f.reverted_ts for f in evidence.faults if f.reverted_ts is not None]
    if v is None or not reverted or v.observed.get("recovery_s") is None:
        return []
    seconds = float(v.observed["recovery_s"])
    return [
        (
            max(reverted) + seconds,
            1,
            f"recovered: back within the baseline band {format_value(seconds)}s after the last revert",
            f"verdict {v.name}",
        )
    ]


# --- per-phase metrics and cost ----------------------------------------------------------------------------


def _pcts(values: list[float]) -> LatencyPercentiles:
    if not values:
        return LatencyPercentiles(0, None, None, None)
    ordered = sorted(values)
    return LatencyPercentiles(len(ordered), *(round(percentile(ordered, p) or 0.0, 3) for p in (50, 95, 99)))


def _metrics(evidence: RunEvidence, drill: dict) -> tuple[tuple[PhaseMetrics, ...], CostFigures, tuple[str, ...]]:
    quantities, notes = _phase_quantities(evidence)
    cost = _cost(evidence, drill)
    rows = []
    for phase in LOADED_PHASES:
        window = evidence.phases.get(phase)
        if window is None:
            continue
        rows.append(_phase_row(evidence, phase, window.length_s, quantities.get(phase) or {}, cost))
    return tuple(rows), cost, notes


def _phase_row(
    evidence: RunEvidence, phase: str, length_s: float, q: dict[str, float | None], cost: CostFigures
) -> PhaseMetrics:
    records = _counted(evidence.requests_in(phase))
    ok = [r for r in records if r.ok]
    by_class = Counter(r.error.value if r.error else f"http_{r.status}" for r in records if not r.ok)
    n = len(records)
    tokens = sum(r.completion_tokens or 0 for r in ok)
    good = [r for r in records if meets_slo(r, evidence.slo_by_pool.get(r.pool) or {})]
    per_success, note = _phase_cost(cost, length_s, len(ok))
    return PhaseMetrics(
        phase=phase,
        length_s=round(length_s, 3),
        requests=n,
        successes=len(ok),
        ttft_ms=_pcts(latency_values(ok, "ttft")),
        tpot_ms=_pcts(latency_values(ok, "tpot")),
        itl_ms=_pcts(latency_values(ok, "itl")),
        e2e_ms=_pcts(latency_values(ok, "e2e")),
        output_tokens_per_s=round(tokens / length_s, 3) if length_s > 0 else None,
        error_rate=round((n - len(ok)) / n, 4) if n else None,
        errors_by_class=tuple((k, round(c / n, 4)) for k, c in sorted(by_class.items())),
        goodput_share=round(len(good) / n, 4) if n else None,
        prefix_cache_hit_rate=_quantity(q, "prefix_cache_hit_rate"),
        kv_cache_usage=_quantity(q, "kv_cache_usage"),
        queue_depth=_quantity(q, "queue_depth"),
        cost_per_success=per_success,
        cost_note=note,
    )


def _quantity(q: dict[str, float | None], name: str) -> float | None:
    value = q.get(name)
    return None if value is None else round(float(value), 4)


def _phase_quantities(evidence: RunEvidence) -> tuple[dict[str, dict[str, float | None]], tuple[str, ...]]:
    """The metric mapping's figures per phase; without ``metrics.jsonl``, or when it fails, every quantity is not
    available (and a note says why)."""
    if not (evidence.run_dir / "metrics.jsonl").exists():
        return {}, ("the run has no metrics.jsonl: scraped quantities not available",)
    try:
        return scraped_quantities.phase_quantities(evidence) or {}, ()
    except Exception as exc:  # noqa: BLE001 - one broken figure source must not cost the whole report
        return {}, (f"reading the scraped metrics failed ({type(exc).__name__}: {exc}): quantities not available",)


def _gpus(evidence: RunEvidence) -> tuple[int | None, str]:
    """replicas × tensor_parallel_size × pipeline_parallel_size of the resolved target config."""
    params = evidence.resolved.get("target_params") or {}
    replicas = params.get("replicas")
    if isinstance(replicas, list):
        replicas = len(replicas)
    engine = params.get("engine") if isinstance(params.get("engine"), dict) else None
    if not isinstance(replicas, int) or engine is None:
        return None, "the target config does not give replicas, tensor and pipeline parallel sizes"
    tp = int(engine.get("tensor_parallel_size") or 1)
    pp = int(engine.get("pipeline_parallel_size") or 1)
    topology = params.get("topology") if isinstance(params.get("topology"), dict) else None
    if topology is not None and (topology.get("prefill_engine") or topology.get("decode_engine")):
        return _pd_gpus(topology, tp, pp)
    return replicas * tp * pp, f"{replicas} replicas × TP {tp} × PP {pp} (resolved target config)"


def _pd_gpus(topology: dict, tp: int, pp: int) -> tuple[int, str]:
    """Each role's workers × its own TP × PP (``topology.<role>_engine`` over the engine's)."""
    total, parts = 0, []
    for role in ("prefill", "decode"):
        own = topology.get(f"{role}_engine") or {}
        role_tp = int(own.get("tensor_parallel_size") or tp)
        role_pp = int(own.get("pipeline_parallel_size") or pp)
        count = int(topology.get(role) or 1)
        total += count * role_tp * role_pp
        parts.append(f"{count} {role} × TP {role_tp} × PP {role_pp}")
    return total, " + ".join(parts) + " (resolved target config)"


def _cost(evidence: RunEvidence, drill: dict) -> CostFigures:
    spec = drill.get("report") or {}
    price, currency = spec.get("gpu_hour_price"), str(spec.get("currency") or "USD")
    gpus, gpus_from = _gpus(evidence)
    windows = [evidence.phases[p] for p in LOADED_PHASES if p in evidence.phases]
    run_s = round(sum(w.length_s for w in windows), 3) if windows else None
    successes = sum(1 for p in LOADED_PHASES for r in evidence.requests_in(p) if r.ok)
    if price is None:
        return CostFigures(
            None,
            currency,
            gpus,
            gpus_from,
            run_s,
            successes,
            None,
            None,
            "unset: the drill sets no report.gpu_hour_price",
        )
    if gpus is None or run_s is None or successes == 0:
        why = gpus_from if gpus is None else ("no loaded phase ran" if run_s is None else "no request succeeded")
        return CostFigures(
            float(price), currency, gpus, gpus_from, run_s, successes, None, None, f"not available: {why}"
        )
    total = float(price) * gpus * run_s / 3600.0
    return CostFigures(
        float(price),
        currency,
        gpus,
        gpus_from,
        run_s,
        successes,
        round(total, 6),
        round(total / successes, 8),
        "price × GPUs × loaded phases' length / successful requests",
    )


def _phase_cost(cost: CostFigures, length_s: float, successes: int) -> tuple[float | None, str]:
    if cost.gpu_hour_price is None:
        return None, UNSET
    if cost.gpus is None or successes == 0:
        return None, NOT_AVAILABLE
    return round(cost.gpu_hour_price * cost.gpus * length_s / 3600.0 / successes, 8), ""


def build_report(
    evidence: RunEvidence, verdicts: Iterable[Verdict], *, progress: Callable[[str], None] | None = None
) -> Report:
    """The report of one run: ``evidence`` (:class:`~drill.rundir.evidence.RunEvidence`) and its verdicts.

    ``progress`` is called with the name of each section as it is built (for a progress display).
    """
    return assemble(evidence, list(verdicts), progress or (lambda _name: None))
