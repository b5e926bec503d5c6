"""``first_abnormal_span``: where the fault first showed in the target's traces.

The analysis is :func:`drill.traces.analysis.find_abnormal`; this check feeds it the run's spans with
the baseline phase as the baseline and the fault window (first injection to last revert) as the
selection, and turns its report into a verdict. The rule and params are in :class:`FirstAbnormalSpanCheck`.
"""

from __future__ import annotations

import re
from dataclasses import replace

from pydantic import Field, field_validator

from drill.api import Check, CheckParams, EvidenceKind, EvidenceRef, Status, Verdict
from drill.rundir.evidence import RunEvidence
from drill.traces.analysis import AbnormalPair, AbnormalReport, AbnormalSpan, AnalysisOptions, find_abnormal
from drill.traces.run_traces import RunTraces, run_traces
from drill.traces.suspects import Suspect
from drill.units import Duration

__all__ = ["FirstAbnormalSpanCheck", "FirstAbnormalSpanParams", "SpanExpectation"]


class SpanExpectation(CheckParams):
    """Where the first abnormal span is expected: regexes matched in full (``re.fullmatch``); with
    ``within: k``, a ranked suspect among the first k whose service matches ``service`` instead."""

    service: str | None = None
    name: str | None = None
    attributes: dict[str, str] = Field(default_factory=dict)  # key -> regex of the value (span or same-service parent)
    within: int | None = Field(None, ge=1)  # the service is among the first k suspects

    @field_validator("service", "name")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            _compile(value)
        return value

    @field_validator("attributes")
    @classmethod
    def _values_compile(cls, value: dict[str, str]) -> dict[str, str]:
        for pattern in value.values():
            _compile(pattern)
        return value

    def matches(self, span: AbnormalSpan) -> bool:
        attributes = {**span.context_attributes, **span.attributes}
        return (
            _full(self.service, span.service)
            and _full(self.name, span.name)
            and all(key in attributes and re.fullmatch(rx, str(attributes[key])) for key, rx in self.attributes.items())
        )

    def matches_suspects(self, suspects: tuple[Suspect, ...]) -> bool:
        """Whether a suspect among the first ``within`` has a matching service."""
        return any(_full(self.service, s.service) for s in suspects[: self.within or 1])

    def describe(self) -> str:
        if self.within is not None:
            return f"a suspect service ~ {self.service or '.*'} within the first {self.within}"
        parts = [f"service ~ {self.service}"] if self.service else []
        parts += [f"name ~ {self.name}"] if self.name else []
        parts += [f"{k} ~ {v}" for k, v in self.attributes.items()]
        return ", ".join(parts) or "any span"


def _compile(pattern: str) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"not a regular expression: {pattern!r} ({exc})") from None


def _full(pattern: str | None, value: str) -> bool:
    return pattern is None or re.fullmatch(pattern, value) is not None


class FirstAbnormalSpanParams(CheckParams):
    expect: SpanExpectation | list[SpanExpectation] | None = None  # one of these must match the first span
    require: bool = False  # nothing abnormal in the fault window is a FAIL
    min_spans: int = Field(50, ge=1)  # fewer spans in the run: INCONCLUSIVE
    min_baseline_spans: int = Field(10, ge=2)  # per (service, name) before its latency is judged
    max_orphan_share: float = Field(0.25, ge=0, le=1)  # more spans with a lost parent: INCONCLUSIVE
    latency_mads: float = Field(5.0, gt=0)
    min_excess: Duration = 0.001  # a slow span is at least this far above its baseline median
    child_presence: float = Field(0.95, gt=0, le=1)
    alpha: float = Field(0.01, gt=0, lt=1)
    explain_share: float = Field(0.5, gt=0)
    onset_tolerance: Duration = 0.010  # onsets this close are simultaneous (clock skew); the deeper wins
    min_impact: float = Field(0.5, ge=0)  # a slow cause matters when it adds this share of the user-facing span
    min_judged_spans: int = Field(3, ge=1)  # baseline spans a pair needs to be judged at all; fewer: not judged
    min_ratio: float = Field(1.15, ge=1)  # a suspect's pair deviates when its self-time median grew this much
    exact_names: bool = False  # judge every span name apart, even thin names that differ only in ids
    recorded_kinds: bool = False  # no SERVER/CLIENT inferred for services whose spans record no kind
    material: bool = True  # with expect/require: an immaterial first span is no PASS
    top: int = Field(5, ge=1)  # abnormal (service, name) pairs and suspects listed in observed

    def options(self) -> AnalysisOptions:
        return AnalysisOptions(
            latency_mads=self.latency_mads,
            min_excess_ms=self.min_excess * 1e3,
            min_baseline_spans=self.min_baseline_spans,
            child_presence=self.child_presence,
            alpha=self.alpha,
            explain_share=self.explain_share,
            onset_tolerance_ms=self.onset_tolerance * 1e3,
            min_impact=self.min_impact,
            min_judged_spans=self.min_judged_spans,
            min_ratio=self.min_ratio,
            name_templates=not self.exact_names,
            infer_kinds=not self.recorded_kinds,
        )

    def expectations(self) -> list[SpanExpectation]:
        if self.expect is None:
            return []
        return self.expect if isinstance(self.expect, list) else [self.expect]


class FirstAbnormalSpanCheck(Check):
    """The first abnormal span of the fault window, found by comparing it with the baseline phase's spans.

    Per (service, span name) the baseline phase gives the duration's median, MAD and p99, the error rate
    and the usual children. In the fault window (first fault injection to last revert) a span is
    abnormal when it is slower than ``max(p99, median + latency_mads·1.4826·MAD, median + min_excess)``,
    carries ERROR status, or lacks a child its pair has under ``child_presence`` of the baseline's
    spans — each only where the pair's rate of it is significantly above the baseline's (``alpha``); an
    error in a pair that never erred in ``min_baseline_spans`` or more baseline spans, and the absence
    of a child that was under every one of ``min_baseline_spans`` or more baseline parents, always count.
    Under a span missing a child, the call that ended far earlier than usual just before failed fast; so did
    a span at a quarter of its usual time that made fewer calls, where its pair has significantly many.
    A slow parent whose slow children cover ``explain_share`` of its excess, and an erring parent (or one
    missing a child) with an abnormal child, are explained by the child; a slow CLIENT span over a normal
    SERVER span names the link. A slow cause is *material* when its excess is at least ``min_impact`` of
    the user-facing span's baseline median (errors, missing children and fast failures always are). The
    first abnormal span is the material unexplained span (any unexplained span when none is material)
    with the earliest onset — when a slow span passed its threshold (a material one: when its excess
    reached ``min_impact``), an error, missing child or fast failure at the span's end; onsets within
    ``onset_tolerance`` count as simultaneous and the deepest wins.

    Params (defaults): ``expect`` (none) — ``{service, name, attributes}`` regexes, or a list of them, one
    of which the first abnormal span must match (attributes are looked up on the span, then its
    same-service ancestors); ``require`` (false) — FAIL when nothing is abnormal; ``min_spans`` (50);
    ``min_baseline_spans`` (10); ``max_orphan_share`` (0.25); ``latency_mads`` (5); ``min_excess``
    (1ms); ``child_presence`` (0.95); ``alpha`` (0.01); ``explain_share`` (0.5); ``min_impact`` (0.5);
    ``onset_tolerance`` (10ms); ``top`` (5); for the ranked suspects (``drill.traces.suspects``,
    ``docs/trace-analysis.md``): ``min_judged_spans`` (3) — baseline spans a pair needs to be judged at
    all, ``min_ratio`` (1.15) — a deviating pair's self-time median ratio, ``exact_names`` (false) — judge
    every span name apart (by default thin names that differ only in ids, ``GET /orders/8812`` and
    ``/orders/9107``, are one operation, ``drill.traces.names``), ``recorded_kinds`` (false) — use span kinds
    as recorded (by default a service whose spans record no kind gets SERVER and CLIENT from the traces' shape,
    ``drill.traces.kinds``); ``material`` (true) — with
    ``expect``/``require``, a first span below ``min_impact`` is no PASS ("nothing material deviated").
    ``expect: {service, within: k}`` asks for a suspect whose service matches among the first k.

    PASS: a first abnormal span was found (and matches ``expect`` when given), or nothing is abnormal
    and neither ``require`` nor ``expect`` asks for a span. FAIL: the span does not match ``expect``,
    or nothing is abnormal while ``require``/``expect`` is set. INCONCLUSIVE: the target exported no
    spans, the spans are too thin (fewer than ``min_spans``, more than ``max_orphan_share`` orphans,
    no baseline or fault-window spans, no pair with ``min_judged_spans`` baseline spans), most of the
    fault window could not be judged and nothing was found (the reason with its counts), or the run has
    no baseline phase or fault window.
    """

    kind = "first_abnormal_span"
    Params = FirstAbnormalSpanParams
    params: FirstAbnormalSpanParams
    reads = ("journal.jsonl", "spans.jsonl")

    def evaluate(self, evidence: RunEvidence) -> Verdict:
        p: FirstAbnormalSpanParams = self.params
        traces = run_traces(evidence)
        notes = traces.completeness.notes()
        reason = _thin_traces(traces, p)
        if reason is not None:
            return self.verdict(Status.INCONCLUSIVE, reason, window="fault", notes=notes)
        baseline, window = evidence.phases.get("baseline"), evidence.fault_window
        if baseline is None or window is None:
            missing = "baseline phase" if baseline is None else "fault window"
            return self.verdict(Status.INCONCLUSIVE, f"the run has no {missing} to compare", window="fault")
        report = find_abnormal(
            traces.table,
            baseline_from_ns=_ns(baseline.start_ts),
            baseline_until_ns=_ns(baseline.end_ts),
            fault_start_ns=_ns(window[0]),
            fault_end_ns=_ns(window[1]),
            top=p.top,
            options=p.options(),
        )
        notes = notes + _report_notes(report)
        thin = _thin(report, p)
        if thin is not None:
            return self.verdict(Status.INCONCLUSIVE, thin, observed=_counts(report), window="fault", notes=notes)
        return self._judge(report, p, notes)

    def _judge(self, report: AbnormalReport, p: FirstAbnormalSpanParams, notes: tuple[str, ...]) -> Verdict:
        expectations = p.expectations()
        expected = (
            {"first_abnormal_span": " or ".join(e.describe() for e in expectations)}
            if expectations
            else {"first_abnormal_span": "found" if p.require else "found, or nothing abnormal"}
        )
        first, unjudged = report.first, report.inconclusive_reason
        ranked = {"suspects": _suspects_json(report, p.top), **_counts(report)}
        if first is None and not report.suspects:
            if unjudged is not None:
                return self.verdict(
                    Status.INCONCLUSIVE,
                    f"most of the fault window could not be judged: {unjudged}",
                    observed=ranked,
                    window="fault",
                    notes=notes,
                )
            status = Status.FAIL if (p.require or expectations) else Status.PASS
            return self.verdict(
                status, _no_deviation(report), observed=ranked, expected=expected, window="fault", notes=notes
            )
        observed = {**(_observed(first) if first else {}), "pairs": [_pair_json(x) for x in report.pairs], **ranked}
        units = {"onset_s": "s", "duration_ms": "ms", "impact": "share of the user-facing span's baseline median"}
        where = _where(report)
        if expectations and not any(_met(e, report) for e in expectations):
            status = Status.INCONCLUSIVE if unjudged is not None else Status.FAIL
            return self.verdict(
                status,
                f"{where}; expected {expected['first_abnormal_span']}",
                observed=observed,
                expected=expected,
                units=units,
                evidence=_refs(first) if first else [],
                window="fault",
                notes=notes,
            )
        weak = first is not None and not first.material
        if weak and p.material and (p.require or expectations) and not any(e.within for e in expectations):
            return self.verdict(
                Status.FAIL,
                f"nothing material deviated; weakest signals: {where}",
                observed=observed,
                expected=expected,
                units=units,
                evidence=_refs(first) if first else [],
                window="fault",
                notes=notes,
            )
        if weak:
            notes = notes + (
                f"no abnormal span adds {p.min_impact:.0%} of its user-facing span's usual duration; "
                "the earliest unexplained one is reported",
            )
        onset = (
            "" if first is None or first.onset_s is None else f", {first.onset_s:+.3f}s after the {report.reference}"
        )
        return self.verdict(
            Status.PASS,
            f"{where}{onset}",
            observed=observed,
            expected=expected,
            units=units,
            evidence=_refs(first) if first else [],
            window="fault",
            notes=notes,
        )


def _met(expectation: SpanExpectation, report: AbnormalReport) -> bool:
    if expectation.within is not None:
        return expectation.matches_suspects(report.suspects)
    return report.first is not None and expectation.matches(report.first)


def _where(report: AbnormalReport) -> str:
    parts = []
    first = report.first
    if first is not None:
        parts.append(
            f"first abnormal span: {first.service}/{first.name} (trace {first.trace_id}, span {first.span_id}): "
            f"{first.deviation}"
        )
    if report.suspects:
        parts.append("suspects: " + ", ".join(s.service for s in report.suspects[:_SHOWN]))
    return "; ".join(parts)


def _no_deviation(report: AbnormalReport) -> str:
    ranking = report.ranking
    if ranking is None:
        return "no span of the fault window deviates from the baseline"
    text = f"no span of the fault window deviates from the baseline ({ranking.judged} of {ranking.pairs} pairs judged"
    return text + (f"; {ranking.unjudged_reason})" if ranking.not_judged else ")")


#: Suspects in the verdict's text and observed (the report shows as many).
_SHOWN = 5


def _suspects_json(report: AbnormalReport, top: int) -> list[dict]:
    return [
        {
            "rank": rank,
            "service": s.service,
            "score": s.score,
            "why": s.why,
            "evidence": [e.text for e in s.evidence[:3]],
        }
        for rank, s in enumerate(report.suspects[: max(top, _SHOWN)], 1)
    ]


def _ns(ts: float) -> int:
    return int(round(ts * 1e9))


def _thin_traces(traces: RunTraces, p: FirstAbnormalSpanParams) -> str | None:
    """Why the run's spans are too thin to look at, or None."""
    # the client join does not matter here: spans whose traceparent the client did not set still count
    c = traces.completeness
    reason = traces.no_spans_reason or replace(c, requests=0).thin_reason(p.min_spans)
    if reason is None and c.orphan_share > p.max_orphan_share:
        reason = (
            f"{c.orphans} of {c.spans} spans have a parent that was never exported (more than {p.max_orphan_share:.0%})"
        )
    return reason


def _thin(report: AbnormalReport, p: FirstAbnormalSpanParams) -> str | None:
    if report.baseline_spans == 0:
        return "no span started in the baseline phase"
    if report.fault_spans == 0:
        return "no span started in the fault window"
    ranking = report.ranking
    if ranking is not None and ranking.judged == 0 and report.first is None:
        return f"no (service, span name) of the fault window could be judged: {ranking.unjudged_reason}"
    if ranking is None and report.judged_pairs == 0:
        return (
            f"no (service, span name) of the fault window has {p.min_baseline_spans} or more baseline spans "
            f"({len(report.thin_pairs)} with fewer, {len(report.new_pairs)} absent from the baseline)"
        )
    return None


def _counts(report: AbnormalReport) -> dict:
    return {
        "spans": report.spans,
        "baseline_spans": report.baseline_spans,
        "fault_spans": report.fault_spans,
        "judged_pairs": report.judged_pairs,
        "candidates": report.candidates,
        "orphans": report.orphans,
    }


def _observed(first: AbnormalSpan) -> dict:
    return {
        "service": first.service,
        "name": first.name,
        "kind": first.kind,
        "trace_id": first.trace_id,
        "span_id": first.span_id,
        "deviation": first.deviation,
        "onset_s": first.onset_s,
        "impact": first.impact,
        "material": first.material,
        "duration_ms": first.duration_ms,
        "attributes": {**first.context_attributes, **first.attributes},
        "link": None if first.link is None else first.link.text,
        "chain": [f"{c.service}/{c.name}" for c in first.chain],
    }


def _pair_json(pair: AbnormalPair) -> dict:
    return {
        "service": pair.service,
        "name": pair.name,
        "flagged": pair.flagged,
        "spans": pair.spans,
        "share": pair.share,
        "root_causes": pair.root_causes,
        "material": pair.material,
        "median_ratio": pair.median_ratio,
        "deviation": pair.deviation,
        "attributes": [a.text for a in pair.attributes],
    }


def _refs(first: AbnormalSpan) -> list[EvidenceRef]:
    refs = [
        EvidenceRef(EvidenceKind.TRACE, first.trace_id, "trace of the first abnormal span"),
        EvidenceRef(
            EvidenceKind.SPAN, first.span_id, f"first abnormal: {first.service}/{first.name}: {first.deviation}"
        ),
    ]
    for link in first.chain[1:]:
        state = link.deviation or "normal"
        refs.append(EvidenceRef(EvidenceKind.SPAN, link.span_id, f"chain: {link.service}/{link.name} ({state})"))
    if first.link is not None and first.link.server_span_id:
        refs.append(
            EvidenceRef(
                EvidenceKind.SPAN,
                first.link.server_span_id,
                f"the SERVER span under the slow link ({first.link.server_service}, normal)",
            )
        )
    return refs


def _report_notes(report: AbnormalReport) -> tuple[str, ...]:
    notes = [
        f"baseline: {report.baseline_rule} ({report.baseline_spans} spans); fault window: {report.fault_spans} spans"
    ]
    if report.thin_pairs:
        notes.append(
            f"{len(report.thin_pairs)} pair(s) with too few baseline spans to judge latency: "
            + ", ".join(report.thin_pairs[:5])
        )
    if report.new_pairs:
        notes.append(f"{len(report.new_pairs)} pair(s) absent from the baseline: " + ", ".join(report.new_pairs[:5]))
    if report.merged_names_text is not None:
        notes.append(report.merged_names_text)
    if report.inferred_kinds is not None:
        notes.append(report.inferred_kinds)
    return tuple(notes)
