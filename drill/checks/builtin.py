"""Built-in checks over client records and the journal: ``fault_landed``, ``slo``, ``error_rate``.

Each is registered through the ``drill.checks`` entry point like any plugin.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import Field

from drill.api import Check, CheckParams, EvidenceKind, EvidenceRef, Status, Verdict
from drill.checks.judging import HARNESS_LAG_MS, breach_from_send, harness_late, meets_slo, record_metric_ms
from drill.checks.truth import measurement_truth_figures, measurement_truth_units
from drill.rundir.evidence import FaultOutcome, RunEvidence
from drill.rundir.journal import Event
from drill.rundir.records import ErrorClass, RequestRecord, latency_values
from drill.spec.scenario import Slo, parse_slo_key
from drill.stats import percentile

__all__ = ["ErrorRateCheck", "FaultLandedCheck", "SloCheck"]

PhaseName = Literal["warmup", "baseline", "fault", "recovery"]


class FaultLandedCheck(Check):
    """Every planned fault of the drill was injected and ``verify`` proved it took effect.

    The planned faults are the drill's (``resolved.json``: ``drill.faults``, named ``<kind>-<index>``
    unless they have a ``name``); the journal says which were injected and verified. A drill whose
    fault did not land — or never started, because a stop condition or ``max_duration`` ended the fault
    phase first — tested nothing: that is a FAIL, never a pass. Evidence: the journal seqs of each
    fault's inject and verify events.
    """

    kind = "fault_landed"
    Params = CheckParams
    params: CheckParams

    def evaluate(self, evidence: RunEvidence) -> Verdict:
        planned = _planned_faults(evidence)
        faults = {f.fault_id: f for f in evidence.faults}
        if not planned and not faults:
            return self.verdict(Status.INCONCLUSIVE, "the drill planned no fault and the run injected none")
        ids = list(dict.fromkeys([*planned, *faults]))
        never = [fid for fid in ids if fid not in faults or not (faults[fid].injected or faults[fid].error)]
        missing = [fid for fid in ids if fid not in never and not faults[fid].landed]
        observed: dict[str, Any] = {fid: _fault_state(faults.get(fid)) for fid in ids}
        observed.update(
            planned=len(planned),
            injected=sum(f.injected for f in faults.values()),
            landed=sum(bool(f.landed) for f in faults.values()),
        )
        units = {"planned": "faults", "injected": "faults", "landed": "faults"}
        common: dict[str, Any] = dict(
            observed=observed,
            expected={"all": "injected and landed"},
            units=units,
            window="fault",
            evidence=_fault_refs(evidence, ids, never),
        )
        notes = (
            ()
            if planned
            else ("the planned faults are unknown (resolved.json has none): judged the journal's faults only",)
        )
        problems = []
        if never:
            problems.append(f"fault(s) never injected: {', '.join(never)}{_cut_short(evidence)}")
        if missing:
            problems.append(f"fault(s) did not land: {', '.join(missing)}")
        if problems:
            return self.verdict(Status.FAIL, "; ".join(problems), notes=notes, **common)
        return self.verdict(
            Status.PASS, f"all {len(ids)} fault(s) were injected, landed and were verified", notes=notes, **common
        )


def _planned_faults(evidence: RunEvidence) -> list[str]:
    """The drill's fault ids as the runner forms them (``FaultSpec.name`` or ``<kind>-<index>``)."""
    faults = (evidence.resolved.get("drill") or {}).get("faults") or []
    return [f.get("name") or f"{f.get('kind')}-{i}" for i, f in enumerate(faults) if isinstance(f, dict)]


def _fault_state(fault: FaultOutcome | None) -> str:
    if fault is None or not (fault.injected or fault.error):
        return "never injected"
    if fault.landed:
        return "landed"
    return f"not landed: {fault.error or 'never verified'}"


_FAULT_EVENTS = {
    Event.FAULT_INJECTED.value,
    Event.FAULT_INJECT_FAILED.value,
    Event.FAULT_VERIFIED.value,
    Event.FAULT_NOT_LANDED.value,
}


def _fault_refs(evidence: RunEvidence, ids: list[str], never: list[str]) -> list[EvidenceRef]:
    refs = [
        EvidenceRef(EvidenceKind.JOURNAL, str(e.seq), f"{e.event} {e.get('fault_id')}")
        for e in evidence.journal
        if e.event in _FAULT_EVENTS and e.get("fault_id") in ids
    ]
    fault = evidence.phases.get("fault")
    if never and fault is not None:
        refs.extend(
            EvidenceRef(EvidenceKind.JOURNAL, str(e.seq), f"{e.event} fault")
            for e in evidence.journal
            if e.event in (Event.PHASE_STARTED.value, Event.PHASE_ENDED.value) and e.get("phase") == "fault"
        )
    return refs


def _cut_short(evidence: RunEvidence) -> str:
    """Why the fault phase ended before a fault's start, when the journal says."""
    fault = evidence.phases.get("fault")
    if fault is not None and fault.stopped_by:
        return f" (the fault phase was ended early by {fault.stopped_by})"
    stops = [e.get("condition") for e in evidence.journal if e.event == Event.STOP_CONDITION.value]
    if stops:
        return f" (the run was stopped by {stops[-1]})"
    return " (the fault phase did not run)" if fault is None else ""


class SloParams(CheckParams):
    phase: PhaseName = "baseline"
    pools: list[str] | None = None  # default: every pool with an SLO
    slo: Slo = Field(default_factory=dict)  # overrides the pools' and the drill's SLO
    min_requests: int = Field(20, ge=1)
    min_goodput: float | None = Field(None, ge=0, le=1)  # also FAIL when a pool's goodput in phase is lower


#: The phases goodput is reported for (when the run has them).
GOODPUT_PHASES = ("warmup", "baseline", "fault", "recovery")


class SloCheck(Check):
    """Client-side latency percentiles of each pool in one phase are within its SLO; goodput per phase and pool.

    Percentiles are exact, over successful requests, measured from the intended
    start (queueing in the client counts). Too few requests is INCONCLUSIVE.

    **Goodput** (DistServe, OSDI'24: the rate of requests that meet their SLO) is reported for every
    phase and pool in ``observed``: ``goodput.<phase>.<pool>.share`` (attempts that succeeded within
    every bound of their pool's SLO, each bound applied per request — see
    :func:`drill.checks.judging.meets_slo`; attempts cancelled when the load stopped are left out),
    ``.requests_per_s`` and ``.tokens_per_s`` (their completion tokens) over the phase's length. With
    ``min_goodput`` set, a pool whose goodput share in ``phase`` is lower also FAILs. When the run's
    spans join the client records, the client-vs-server TTFT/E2E differences (measurement truth) of the
    judged phase's requests are added to ``observed`` and the notes (every phase's: ``verdicts.json``'s
    ``measurement_truth``, :mod:`drill.checks.truth`).
    """

    kind = "slo"
    Params = SloParams
    params: SloParams

    def evaluate(self, evidence: RunEvidence) -> Verdict:
        p: SloParams = self.params
        records = evidence.requests_in(p.phase)
        targets: dict[str, dict[str, float]] = {
            pool: chosen
            for pool, slo in evidence.slo_by_pool.items()
            if (p.pools is None or pool in p.pools) and (chosen := p.slo or slo)
        }
        if not targets:
            return self.verdict(Status.INCONCLUSIVE, "no pool has an SLO to check", window=p.phase)
        observed: dict[str, Any] = {}
        expected: dict[str, Any] = {}
        units: dict[str, str] = {}
        breaches: list[str] = []
        late: list[str] = []  # breaches the load generator's own lateness made
        thin: list[str] = []
        refs: list[EvidenceRef] = []
        for pool, slo in targets.items():
            mine = [r for r in records if r.pool == pool and r.ok]
            for key, bound_s in slo.items():
                parsed = parse_slo_key(key)
                if parsed is None:  # the Slo type admits SLO keys only
                    raise ValueError(f"{key!r} is not an SLO key (e.g. ttft_p95)")
                metric, pct = parsed
                values = latency_values(mine, metric)
                expected[f"{pool}.{key}"] = f"<= {bound_s * 1000:g}"
                units[f"{pool}.{key}"] = "ms"
                if len(values) < p.min_requests:
                    thin.append(f"{pool}.{key} ({len(values)} samples)")
                    continue
                value = percentile(values, pct)
                if value is None:  # no samples at all (min_requests 0)
                    thin.append(f"{pool}.{key} (0 samples)")
                    continue
                observed[f"{pool}.{key}"] = round(value, 3)
                if value <= bound_s * 1000:
                    continue
                refs += _slowest(mine, metric, key)
                from_send = breach_from_send(mine, metric, pct, bound_s * 1000, value)
                if from_send is None:
                    breaches.append(f"{pool} {key} = {value:.0f}ms > {bound_s * 1000:.0f}ms")
                    continue
                observed[f"{pool}.{key}.from_send"] = round(from_send, 3)
                units[f"{pool}.{key}.from_send"] = "ms"
                late.append(f"{pool} {key} = {value:.0f}ms > {bound_s * 1000:.0f}ms, {from_send:.0f}ms from the send")
        goodput = _goodput(evidence, targets)
        observed.update(goodput)
        units.update({k: _GOODPUT_UNITS[k.rsplit(".", 1)[1]] for k in goodput})
        breaches += self._goodput_breaches(goodput, targets, expected)
        phase = evidence.phases.get(p.phase)
        truth, notes, truth_refs = (
            measurement_truth_figures(evidence, (phase.start_ts, phase.end_ts)) if phase else ({}, [], [])
        )
        observed.update(truth)
        units.update(measurement_truth_units(truth))
        notes += [f"not the target's: {x}" for x in late] if breaches else []
        extra: dict[str, Any] = {"units": units, "evidence": refs + truth_refs, "notes": tuple(notes)}
        if late and not breaches:
            detail = harness_late(
                "; ".join(late), f"its own lateness moved the percentile by more than {HARNESS_LAG_MS:g} ms"
            )
            return self.verdict(
                Status.INCONCLUSIVE, detail, observed=observed, expected=expected, window=p.phase, **extra
            )
        return self._judge(breaches, thin, observed, expected, p.phase, **extra)

    def _goodput_breaches(self, goodput: dict, targets: dict, expected: dict) -> list[str]:
        p: SloParams = self.params
        if p.min_goodput is None:
            return []
        out = []
        for pool in targets:
            key = f"goodput.{p.phase}.{pool}.share"
            expected[key] = f">= {p.min_goodput:g}"
            share = goodput.get(key)
            if share is not None and share < p.min_goodput:
                out.append(f"{pool} goodput in {p.phase} = {share:.1%} < {p.min_goodput:.0%}")
        return out

    def _judge(
        self, breaches: list[str], thin: list[str], observed: dict, expected: dict, phase: str | None, **extra: Any
    ) -> Verdict:
        if breaches:
            return self.verdict(
                Status.FAIL, "; ".join(breaches), observed=observed, expected=expected, window=phase, **extra
            )
        if thin:
            return self.verdict(
                Status.INCONCLUSIVE,
                f"too few samples for {', '.join(thin)}",
                observed=observed,
                expected=expected,
                window=phase,
                **extra,
            )
        return self.verdict(
            Status.PASS, f"every SLO held in {phase}", observed=observed, expected=expected, window=phase, **extra
        )


_GOODPUT_UNITS = {"share": "ratio", "requests_per_s": "requests/s", "tokens_per_s": "tokens/s", "requests": "requests"}


def _goodput(evidence: RunEvidence, targets: dict[str, dict[str, float]]) -> dict[str, float | int | None]:
    """``goodput.<phase>.<pool>.{requests,share,requests_per_s,tokens_per_s}`` for every phase the run has."""
    out: dict[str, float | int | None] = {}
    for phase in GOODPUT_PHASES:
        window = evidence.phases.get(phase)
        if window is None:
            continue
        records = [r for r in evidence.requests_in(phase) if r.error is not ErrorClass.CANCELLED]
        length = window.length_s
        for pool, slo in targets.items():
            mine = [r for r in records if r.pool == pool]
            good = [r for r in mine if meets_slo(r, slo)]
            prefix = f"goodput.{phase}.{pool}"
            out[f"{prefix}.requests"] = len(mine)
            out[f"{prefix}.share"] = round(len(good) / len(mine), 4) if mine else None
            out[f"{prefix}.requests_per_s"] = round(len(good) / length, 4) if length > 0 else None
            tokens = sum(r.completion_tokens or 0 for r in good)
            out[f"{prefix}.tokens_per_s"] = round(tokens / length, 3) if length > 0 else None
    return out


def _slowest(records: Iterable[RequestRecord], metric: str, key: str, count: int = 3) -> list[EvidenceRef]:
    """The requests with the largest value of ``metric`` (evidence for a breached bound)."""
    valued = [(v, r) for r in records if (v := record_metric_ms(r, metric)) is not None]
    valued.sort(key=lambda pair: -pair[0])
    refs = []
    for value, record in valued[:count]:
        refs.append(EvidenceRef(EvidenceKind.REQUEST, record.request_id, f"{key}: {metric} {value:.0f}ms"))
        if record.trace_id:
            refs.append(EvidenceRef(EvidenceKind.TRACE, record.trace_id, record.request_id))
    return refs


class ErrorRateParams(CheckParams):
    phase: PhaseName = "fault"
    max: float = Field(0.01, ge=0, le=1)
    pools: list[str] | None = None
    classes: list[ErrorClass] | None = None  # default: every error class
    min_requests: int = Field(20, ge=1)


class ErrorRateCheck(Check):
    """The share of failed requests in a phase stays at or below ``max``."""

    kind = "error_rate"
    Params = ErrorRateParams
    params: ErrorRateParams

    def evaluate(self, evidence: RunEvidence) -> Verdict:
        p: ErrorRateParams = self.params
        records = [r for r in evidence.requests_in(p.phase) if p.pools is None or r.pool in p.pools]
        if len(records) < p.min_requests:
            return self.verdict(Status.INCONCLUSIVE, f"only {len(records)} requests in {p.phase}", window=p.phase)
        counted = [r for r in records if r.error is not None and (p.classes is None or r.error in p.classes)]
        by_class: dict[str, int] = {}
        for error in (r.error for r in counted if r.error is not None):
            by_class[error.value] = by_class.get(error.value, 0) + 1
        share = len(counted) / len(records)
        observed = {"error_rate": round(share, 4), "requests": len(records), **by_class}
        expected = {"error_rate": f"<= {p.max:g}"}
        status = Status.PASS if share <= p.max else Status.FAIL
        message = f"error rate {share:.2%} in {p.phase} ({len(counted)}/{len(records)})"
        return self.verdict(status, message, observed=observed, expected=expected, window=p.phase)
