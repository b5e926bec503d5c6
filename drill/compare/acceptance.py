"""The pre-registered acceptance (the drill's ``decision.acceptance``), judged on the candidate.

Each item the drill sets is *met*, *not met* or *not available* (the evidence cannot say; counted as not met,
as ``drill run`` counts an INCONCLUSIVE verdict); an item it leaves unset stays *unset* and is never judged
or filled in. Normal operation is the baseline phase (the drill's checks judge the fault phase):

- ``quality_not_lower``: the candidate answers the control requests (the baseline-phase requests whose
  generated text the load driver digests) exactly as the baseline did — same ``output_digest`` for every
  control both runs answered. There is no quality score in a run; identical answers to identical requests
  are quality not lower, and a different answer cannot be shown not to be lower.
- ``p95_latency_within_slo``: in the candidate's baseline phase, each pool's p95 of every metric its SLO bounds
  at p95 (``ttft_p95``, ``tpot_p95``, ...) is within the bound.
- ``cost_per_success_max``: the candidate's cost per successful request (whole run) is at most this.
- ``error_rate_max``: the candidate's error rate in the baseline phase is at most this.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from drill.report.model import Report
from drill.rundir.evidence import RunEvidence
from drill.rundir.records import latency_values
from drill.spec.scenario import parse_slo_key
from drill.stats import percentile

__all__ = ["AcceptanceItem", "Met", "judge_acceptance", "accepted"]

NORMAL_PHASE = "baseline"


class Met(str, enum.Enum):
    MET = "met"
    NOT_MET = "not met"
    NOT_AVAILABLE = "not available"
    UNSET = "unset"


@dataclass(frozen=True)
class AcceptanceItem:
    name: str  # the key of decision.acceptance
    required: str  # what the drill asks, or "unset"
    observed: str
    met: Met

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "required": self.required, "observed": self.observed, "met": self.met.value}


def accepted(items: tuple[AcceptanceItem, ...]) -> bool:
    """Every item the drill sets is met (no item set: nothing to fail)."""
    return all(i.met in (Met.MET, Met.UNSET) for i in items)


def judge_acceptance(
    acceptance: dict[str, Any],
    baseline: RunEvidence,
    candidate: RunEvidence,
    candidate_report: Report,
) -> tuple[AcceptanceItem, ...]:
    """Each acceptance item (``acceptance``: the drill's ``decision.acceptance`` as resolved.json has it)."""
    return (
        _quality(acceptance.get("quality_not_lower"), baseline, candidate),
        _latency(acceptance.get("p95_latency_within_slo"), candidate),
        _cost(acceptance.get("cost_per_success_max"), candidate_report),
        _error_rate(acceptance.get("error_rate_max"), candidate_report),
    )


def _unset(name: str) -> AcceptanceItem:
    return AcceptanceItem(name, "unset", "not judged", Met.UNSET)


def _quality(wanted: bool | None, baseline: RunEvidence, candidate: RunEvidence) -> AcceptanceItem:
    name = "quality_not_lower"
    if not wanted:
        return _unset(name)
    required = "the same answers to the same control requests"
    a, b = _control_outputs(baseline), _control_outputs(candidate)
    both = sorted(a.keys() & b.keys())
    if not both:
        return AcceptanceItem(name, required, "no control request answered by both runs", Met.NOT_AVAILABLE)
    same = sum(a[k] == b[k] for k in both)
    observed = f"{same}/{len(both)} control answers identical (output digest)"
    return AcceptanceItem(name, required, observed, Met.MET if same == len(both) else Met.NOT_MET)


def _control_outputs(evidence: RunEvidence) -> dict[str, str]:
    return {r.logical_id: r.output_digest for r in evidence.requests if r.ok and r.output_digest}


def _latency(wanted: bool | None, candidate: RunEvidence) -> AcceptanceItem:
    name = "p95_latency_within_slo"
    if not wanted:
        return _unset(name)
    required = f"every pool's p95 bounds of its SLO, in the {NORMAL_PHASE} phase"
    records = [r for r in candidate.requests_in(NORMAL_PHASE) if r.ok]
    parts, met = [], True
    for pool, slo in sorted(candidate.slo_by_pool.items()):
        for key, bound_s in sorted(slo.items()):
            parsed = parse_slo_key(key)
            if parsed is None or parsed[1] != 95.0:
                continue
            value = percentile(latency_values([r for r in records if r.pool == pool], parsed[0]), 95)
            if value is None:
                parts.append(f"{pool} {key}: no sample")
                met = False
                continue
            within = value <= bound_s * 1000.0
            met &= within
            parts.append(f"{pool} {key} {value:.0f} ms {'<=' if within else '>'} {bound_s * 1000.0:.0f} ms")
    if not parts:
        return AcceptanceItem(name, required, "the SLO sets no p95 bound", Met.NOT_AVAILABLE)
    if any(p.endswith("no sample") for p in parts):
        return AcceptanceItem(name, required, "; ".join(parts), Met.NOT_AVAILABLE)
    return AcceptanceItem(name, required, "; ".join(parts), Met.MET if met else Met.NOT_MET)


def _cost(limit: float | None, report: Report) -> AcceptanceItem:
    name = "cost_per_success_max"
    if limit is None:
        return _unset(name)
    cost = report.cost
    required = f"<= {limit:g} {cost.currency} per successful request"
    if cost.cost_per_success is None:
        return AcceptanceItem(name, required, cost.note, Met.NOT_AVAILABLE)
    observed = f"{cost.cost_per_success:.8g} {cost.currency}"
    return AcceptanceItem(name, required, observed, Met.MET if cost.cost_per_success <= limit else Met.NOT_MET)


def _error_rate(limit: float | None, report: Report) -> AcceptanceItem:
    name = "error_rate_max"
    if limit is None:
        return _unset(name)
    required = f"<= {limit:.2%} in the {NORMAL_PHASE} phase"
    phase = next((m for m in report.metrics if m.phase == NORMAL_PHASE), None)
    if phase is None or phase.error_rate is None:
        return AcceptanceItem(name, required, f"no request in the {NORMAL_PHASE} phase", Met.NOT_AVAILABLE)
    observed = f"{phase.error_rate:.2%} of {phase.requests}"
    return AcceptanceItem(name, required, observed, Met.MET if phase.error_rate <= limit else Met.NOT_MET)
