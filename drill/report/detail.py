"""The report's sections that read more than client records: detection (spans), the injected fault (the fault
catalogue), the recovery replay, the runbook, the decision record and the charts.
"""

from __future__ import annotations

import base64
import json
import re
import types
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from drill import registry
from drill.api import Realism, Verdict
from drill.report import charts as chart_module
from drill.report.formatting import format_value, iso_utc, verdict_figures
from drill.report.model import (
    NOT_AVAILABLE,
    UNSET,
    Chart,
    DecisionField,
    Detection,
    FaultSection,
    ReplayRow,
    ReplaySection,
    Runbook,
    RunbookSection,
)
from drill.rundir.evidence import FaultOutcome, RunEvidence
from drill.rundir.files import MAX_INPUT_BYTES, loads_json, read_bytes
from drill.rundir.redact import Redactor, is_secret_name
from drill.spec.models import DecisionSpec
from drill.units import parse_duration

if TYPE_CHECKING:
    from drill.rundir.records import RequestRecord
    from drill.rundir.replay_results import ReplayResult
    from drill.rundir.samples import FailingSample
from drill.traces.run_traces import run_traces

__all__ = [
    "CHART_FAILED",
    "charts",
    "decision_fields",
    "detection",
    "fault_sections",
    "redactor_for",
    "replay_section",
    "runbook",
    "MAX_REPLAY_ROWS",
    "RUNBOOK_COPY",
]

#: How many replayed requests the before/after table lists (the counts cover all of them).
MAX_REPLAY_ROWS = 25
#: The runbook as the run used it, copied into the run directory by the runner (read before the drill's path).
RUNBOOK_COPY = "runbook.md"
#: How the note of a chart whose module raised begins.
CHART_FAILED = "chart failed"


# --- redaction ---------------------------------------------------------------------------------------------


class ReportRedactor(Protocol):
    """What the report asks of a redactor: drill.rundir.redact's ``Redactor``."""

    def text(self, s: str) -> str: ...
    def value(self, s: str) -> str: ...
    def data(self, obj: Any) -> Any: ...


def redactor_for(evidence: RunEvidence) -> ReportRedactor:
    """The drill's redactor (``report.include_text``), told the secret values of the target config."""
    include = bool(((evidence.resolved.get("drill") or {}).get("report") or {}).get("include_text", False))
    secrets = sorted(_secret_values(evidence.resolved.get("target_params"), is_secret_name))
    return Redactor(include_text=include, secrets=secrets)


def _secret_values(data: Any, is_secret: Callable[[str], bool], under_secret: bool = False) -> set[str]:
    if isinstance(data, dict):
        return (
            set().union(*(_secret_values(v, is_secret, under_secret or is_secret(str(k))) for k, v in data.items()))
            if data
            else set()
        )
    if isinstance(data, list):
        return set().union(*(_secret_values(v, is_secret, under_secret) for v in data)) if data else set()
    return {data} if under_secret and isinstance(data, str) else set()


# --- detection ---------------------------------------------------------------------------------------------


def detection(evidence: RunEvidence, verdicts: list[Verdict], redactor: Any) -> Detection:
    """The first abnormal span (the ``first_abnormal_span`` verdict) and a waterfall of its trace."""
    v = next((v for v in verdicts if v.kind == "first_abnormal_span"), None)
    if v is None:
        return _no_detection("the drill has no first_abnormal_span check")
    o = v.observed
    trace_id = o.get("trace_id")
    if not trace_id:
        return replace(_no_detection(v.message, status=v.status.value), suspects=_suspects(o))
    baseline_id = _baseline_trace(evidence, trace_id)
    pairs = tuple(
        (
            f"{p.get('service')}/{p.get('name')}",
            f"{p.get('flagged')} of {p.get('spans')}",
            str(p.get("deviation") or ""),
        )
        for p in o.get("pairs") or ()
    )
    attributes = tuple(
        sorted((str(k), _attribute(str(k), val, redactor)) for k, val in (o.get("attributes") or {}).items())
    )
    return Detection(
        status=v.status.value,
        message=v.message,
        service=o.get("service"),
        name=o.get("name"),
        kind=o.get("kind"),
        deviation=o.get("deviation"),
        trace_id=trace_id,
        span_id=o.get("span_id"),
        duration_ms=o.get("duration_ms"),
        onset_s=o.get("onset_s"),
        impact=o.get("impact"),
        link=o.get("link"),
        chain=tuple(o.get("chain") or ()),
        attributes=attributes,
        pairs=pairs,
        baseline_trace_id=baseline_id,
        waterfall=_waterfall(evidence, trace_id, baseline_id),
        suspects=_suspects(o),
    )


#: Suspects the report shows.
_SUSPECTS_SHOWN = 5


def _suspects(observed: dict) -> tuple[tuple[str, str, str, str], ...]:
    """The verdict's ranked suspects: rank, service, score, and why with the strongest evidence."""
    return tuple(
        (
            str(s.get("rank", "")),
            str(s.get("service", "")),
            f"{s.get('score', 0):.2f}" if isinstance(s.get("score"), (int, float)) else "",
            "; ".join([str(s.get("why") or ""), *(str(e) for e in (s.get("evidence") or ())[:2])]),
        )
        for s in (observed.get("suspects") or ())[:_SUSPECTS_SHOWN]
        if isinstance(s, dict)
    )


def _no_detection(message: str, status: str = NOT_AVAILABLE) -> Detection:
    return Detection(
        status,
        message,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        (),
        (),
        (),
        None,
        Chart("trace_waterfall", "Affected trace beside a baseline trace", None, message),
    )


#: Span attribute names whose values are prompt or completion text (OpenTelemetry GenAI conventions and the like).
_TEXT_ATTRIBUTE = re.compile(r"(prompt|completion|content|message|input|output)s?(\.|$)", re.IGNORECASE)


def _attribute(name: str, value: Any, redactor: Any) -> str:
    """A span attribute as a report shows it: text attributes as digests, every value scrubbed of secrets."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if isinstance(value, str) and _TEXT_ATTRIBUTE.search(name.rsplit(".", 1)[-1] + "."):
        return str(redactor.text(text))
    return str(redactor.value(text))


def _baseline_trace(evidence: RunEvidence, trace_id: str) -> str | None:
    """A baseline-phase trace shaped like ``trace_id`` (the chart module's pick; None without a baseline)."""
    baseline = evidence.phases.get("baseline")
    table = run_traces(evidence).table
    if baseline is None or len(table) == 0:
        return None
    mask = (table.start_ns >= int(baseline.start_ts * 1e9)) & (table.start_ns < int(baseline.end_ts * 1e9))
    return chart_module.pick_baseline_trace(table, trace_id, mask)


def _waterfall(evidence: RunEvidence, trace_id: str, baseline_id: str | None) -> Chart:
    title = "Affected trace beside a baseline trace of the same shape"
    try:
        svg = chart_module.trace_waterfall(run_traces(evidence).table, trace_id, baseline_id)
    except Exception as exc:  # noqa: BLE001 - a broken chart must not cost the whole report
        return Chart("trace_waterfall", title, None, _failed(exc))
    note = "" if svg else "no spans for this trace"
    if svg and baseline_id is None:
        note = "no baseline trace of the same shape: the affected trace alone"
    return Chart("trace_waterfall", title, svg, note)


# --- the injected fault --------------------------------------------------------------------------------------


def fault_sections(evidence: RunEvidence, redactor: ReportRedactor) -> tuple[FaultSection, ...]:
    """Each planned fault: its catalogue entry (summary, method, realism, revert) and what the journal says."""
    drill = evidence.resolved.get("drill") or {}
    dumps = evidence.resolved.get("fault_params") or []
    outcomes = {f.fault_id: f for f in evidence.faults}
    out = []
    for i, spec in enumerate(drill.get("faults") or ()):
        name = spec.get("name") or f"{spec.get('kind')}-{i}"
        params = dumps[i] if i < len(dumps) and isinstance(dumps[i], dict) else dict(spec.get("params") or {})
        out.append(_fault_section(registry, name, spec, params, outcomes.get(name), redactor))
    return tuple(out)


def _fault_section(
    registry: types.ModuleType,
    name: str,
    spec: dict,
    params: dict,
    outcome: FaultOutcome | None,
    redactor: ReportRedactor,
) -> FaultSection:
    kind = str(spec.get("kind"))
    summary, method, mechanism, realism, scope, revert = "", None, None, NOT_AVAILABLE, None, ""
    try:
        cls = registry.faults.get(kind)
    except Exception as exc:  # noqa: BLE001 - a fault plugin that is gone: say so, show the rest
        summary = f"not in the installed fault catalogue ({exc})"
    else:
        summary, scope, revert = cls.summary, cls.scope, cls.revert_semantics
        method = params.get("method")
        chosen = next((m for m in cls.mechanisms if m.name == method), None)
        mechanism = chosen.summary if chosen else None
        value: Realism = chosen.realism if chosen else cls.realism
        realism = "simulated" if value is Realism.SIMULATED else value.value
    shown = tuple((str(k), redactor.value(json.dumps(v, sort_keys=True))) for k, v in sorted(params.items()))
    selector = (
        ", ".join(
            f"{k}: {json.dumps(v, sort_keys=True)}"
            for k, v in sorted((spec.get("selector") or {}).items())
            if v not in (None, False)
        )
        or "default"
    )
    return FaultSection(
        name=name,
        kind=kind,
        summary=summary,
        method=str(method) if method is not None else None,
        mechanism=mechanism,
        realism=realism,
        params=shown,
        start_s=parse_duration(spec["start"]) if spec.get("start") is not None else None,
        duration_s=parse_duration(spec["duration"]) if spec.get("duration") is not None else None,
        selector=selector,
        scope=scope,
        revert_semantics=revert,
        injected_at=iso_utc(outcome.injected_ts) if outcome else None,
        landed=_landed(outcome),
        landing_proof=redactor.value(outcome.landing_proof) if outcome and outcome.landing_proof else None,
        reverted_at=iso_utc(outcome.reverted_ts) if outcome else None,
    )


def _landed(outcome: FaultOutcome | None) -> str:
    if outcome is None or not (outcome.injected or outcome.error):
        return "never injected"
    if outcome.landed:
        return "landed"
    if outcome.landed is None:
        return "never verified"
    return f"did not land: {outcome.error}"


# --- recovery replay -----------------------------------------------------------------------------------------


def replay_section(evidence: RunEvidence, verdicts: list[Verdict], redactor: ReportRedactor) -> ReplaySection:
    """The ``recovery_replay`` verdict's figures and each replayed request before and after (replay.jsonl)."""
    v = next((v for v in verdicts if v.kind == "recovery_replay"), None)
    replay = evidence.replay
    status = v.status.value if v else NOT_AVAILABLE
    message = v.message if v else "the drill has no recovery_replay check"
    if not replay.ran:
        message = message if v else "the replay phase did not run"
    samples = {s.request_id: s for s in replay.samples}
    records = {r.request_id: r for r in evidence.requests}
    results = sorted(replay.results, key=lambda r: (r.set.value != "original", r.original_request_id, r.repetition))
    rows = tuple(
        _replay_row(r, samples.get(r.original_request_id), records.get(r.original_request_id), redactor)
        for r in results[:MAX_REPLAY_ROWS]
    )
    return ReplaySection(
        ran=replay.ran,
        status=status,
        message=redactor.value(message),
        figures=verdict_figures(v) if v else (),
        originals=len(replay.originals),
        controls=len(replay.controls),
        rows=rows,
        rows_left_out=max(0, len(results) - MAX_REPLAY_ROWS),
    )


def _outcome_text(status: int | None, error: str | None, e2e_ms: float | None = None) -> str:
    what = error or (f"HTTP {status}" if status is not None else "no response")
    return what + (f", E2E {format_value(e2e_ms)}ms" if e2e_ms is not None else "")


def _replay_row(
    r: ReplayResult, sample: FailingSample | None, record: RequestRecord | None, redactor: ReportRedactor
) -> ReplayRow:
    before_e2e = record.e2e_ms if record is not None else None
    before = _outcome_text(r.original_status, r.original_error, before_e2e)
    if r.set.value == "control" and record is not None:
        before = _outcome_text(record.status, record.error.value if record.error else None, record.e2e_ms)
    return ReplayRow(
        set=r.set.value,
        original_request_id=r.original_request_id,
        pool=r.pool,
        repetition=r.repetition,
        before=before,
        after=_outcome_text(r.status, r.error),
        ttft_ms=r.ttft_ms,
        e2e_ms=r.e2e_ms,
        payload=_payload(sample, redactor),
    )


def _payload(sample: FailingSample | None, redactor: ReportRedactor) -> str:
    """The original request's prompt, as the redactor shows it (its digest unless the drill opts in)."""
    if sample is None:
        return NOT_AVAILABLE
    try:
        body = loads_json(base64.b64decode(sample.body_b64) or b"{}")
    except (ValueError, TypeError):
        return redactor.text(sample.body_b64)
    messages = body.get("messages") if isinstance(body, dict) else None
    text = (
        " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        if messages
        else str(body.get("prompt", ""))
        if isinstance(body, dict)
        else ""
    )
    return redactor.text(text)


# --- runbook -----------------------------------------------------------------------------------------------


def _runbook_path(evidence: RunEvidence) -> tuple[Path | None, str | None]:
    """The run directory's copy of the runbook; never a file outside the run directory (it may come from
    another machine, and its ``resolved.json`` names paths there)."""
    declared = (evidence.resolved.get("drill") or {}).get("runbook")
    copy = evidence.run_dir / RUNBOOK_COPY
    if copy.is_file() or copy.is_symlink():
        return copy, declared
    return None, declared


def runbook(evidence: RunEvidence, redactor: ReportRedactor) -> Runbook:
    """The drill's runbook, cut into its ``##`` sections (the copy ``drill run`` put in the run directory)."""
    path, declared = _runbook_path(evidence)
    if path is None:
        note = (
            f"the runbook {declared} was not found in the run directory (runs copy it to {RUNBOOK_COPY})"
            if declared
            else "the drill names no runbook"
        )
        return Runbook(declared, False, None, (), note)
    data = read_bytes(path, limit=MAX_INPUT_BYTES, what="runbook", root=evidence.run_dir)
    text = redactor.value(data.decode("utf-8", "replace"))
    title, sections = _split_sections(text)
    return Runbook(declared or path.name, True, title, sections, "")


def _split_sections(text: str) -> tuple[str | None, tuple[RunbookSection, ...]]:
    title: str | None = None
    sections: list[RunbookSection] = []
    current: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("# ") and title is None and current is None:
            title = line[2:].strip()
        elif line.startswith("## "):
            if current is not None:
                sections.append(RunbookSection(current, "\n".join(lines).strip()))
            current, lines = line[3:].strip(), []
        else:
            lines.append(_demote(line))
    if current is not None:
        sections.append(RunbookSection(current, "\n".join(lines).strip()))
    elif lines:
        sections.append(RunbookSection("Runbook", "\n".join(lines).strip()))
    return title, tuple(sections)


def _demote(line: str) -> str:
    """A heading below ``##`` inside a section becomes bold text (the report's own headings stay in order)."""
    match = re.match(r"^#{3,6} (.*)$", line)
    return f"**{match.group(1).strip()}**" if match else line


# --- decision record -----------------------------------------------------------------------------------------


def decision_fields(drill: dict) -> tuple[DecisionField, ...]:
    """Every field of the drill's ``decision:`` in the spec's order; a field left unset shows "unset"."""
    given = drill.get("decision") or {}
    template = DecisionSpec().model_dump(mode="json")
    merged = _merge(template, given)
    return tuple(DecisionField(k, _shown(v)) for k, v in _flatten(merged))


def _merge(template: dict, given: dict) -> dict:
    out = {}
    for key in [*template, *(k for k in given if k not in template)]:
        t, g = template.get(key), given.get(key)
        out[key] = _merge(t, g or {}) if isinstance(t, dict) else g
    return out


def _flatten(data: dict, prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for key, value in data.items():
        if isinstance(value, dict):
            out += _flatten(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out


def _shown(value: Any) -> str:
    if value is None:
        return UNSET
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


# --- charts --------------------------------------------------------------------------------------------------

_CHARTS = (
    ("latency_over_time", "Latency over time per pool (fault window shaded, SLO line)"),
    ("errors_over_time", "Error rate and refusals over time"),
    ("queue_and_kv", "Queue depth and KV-cache use"),
    ("latency_distributions", "TTFT and TPOT distribution per phase"),
)


def _failed(exc: Exception) -> str:
    """The note of a chart whose module raised (the report's notes repeat it)."""
    return f"{CHART_FAILED}: {type(exc).__name__}: {exc}"


def charts(evidence: RunEvidence) -> tuple[Chart, ...]:
    """R5's charts as inline SVG; "chart not available" when the data is missing."""
    out = []
    for key, title in _CHARTS:
        try:
            svg = getattr(chart_module, key)(evidence)
        except Exception as exc:  # noqa: BLE001 - a broken chart must not cost the whole report
            out.append(Chart(key, title, None, _failed(exc)))
            continue
        out.append(Chart(key, title, svg, "" if svg else "chart not available: the run has no data for it"))
    return tuple(out)
