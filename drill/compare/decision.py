"""The judged comparison and its decision record, in the method's shape.

:func:`judge_comparison` reads both finished run directories and returns a :class:`ComparisonOutcome`: the
verdicts side by side, the headline figures with their deltas, the request-set check, the acceptance items and
the :class:`DecisionRecord` (topic, baseline, candidate and the change, acceptance, observed result, first
deviation, recovery replay result, rollback trigger and owner). Fields the drill's ``decision`` block leaves
unset are ``unset``; the change itself is what the diff found, next to what the drill declares.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drill.compare.acceptance import AcceptanceItem, accepted, judge_acceptance
from drill.compare.diff import Difference
from drill.compare.figures import HeadlineTable, VerdictChange, headline_table, verdict_changes
from drill.compare.requestset import RequestSetCheck, compare_request_sets
from drill.report.model import UNSET, Report
from drill.report.render import report_for
from drill.rundir.evidence import RunEvidence

__all__ = ["ComparisonOutcome", "DecisionRecord", "SideFacts", "judge_comparison"]


@dataclass(frozen=True)
class SideFacts:
    """What the decision record says about one side."""

    label: str  # baseline | candidate
    run_dir: str
    version: str  # the drill's decision.<side>.version, or unset
    outcome: str  # PASS, or the worst verdict
    first_abnormal_span: str
    first_failing_check: str
    recovery_replay: str


@dataclass(frozen=True)
class DecisionRecord:
    topic: str
    baseline: SideFacts
    candidate: SideFacts
    dataset: str  # decision.baseline.dataset, or unset
    change: str  # the one difference the diff found
    declared_change: str  # decision.candidate.change, or unset
    observed: str
    rollback_trigger: str
    owner: str


@dataclass(frozen=True)
class ComparisonOutcome:
    change: Difference
    verdicts: tuple[VerdictChange, ...]
    headline: HeadlineTable
    requests: RequestSetCheck
    acceptance: tuple[AcceptanceItem, ...]
    accepted: bool  # every acceptance item the drill sets is met
    candidate_passed: bool  # every check of the candidate PASSed
    record: DecisionRecord

    @property
    def exit_code(self) -> int:
        """0: the candidate passed every check and met every acceptance item the drill sets; else 1."""
        return 0 if self.accepted and self.candidate_passed else 1


def _text(value: Any) -> str:
    return UNSET if value in (None, "") else str(value)


def _first_failing(report: Report) -> str:
    bad = next((v for v in report.verdicts if v.status != "PASS"), None)
    return "none: every check passed" if bad is None else f"{bad.name} {bad.status}: {bad.message}"


def _first_span(report: Report) -> str:
    d = report.detection
    if d.service and d.name:
        onset = f" at +{d.onset_s:.1f}s" if d.onset_s is not None else ""
        return f"{d.service} / {d.name}{onset} (first_abnormal_span {d.status})"
    return f"{d.status}: {d.message}"


def _side(label: str, run_dir: Path, report: Report, decision: dict[str, Any]) -> SideFacts:
    replay = report.replay
    return SideFacts(
        label=label,
        run_dir=str(run_dir),
        version=_text((decision.get(label) or {}).get("version")),
        outcome=report.header.outcome,
        first_abnormal_span=_first_span(report),
        first_failing_check=_first_failing(report),
        recovery_replay=f"{replay.status}: {replay.message}" if replay.ran else f"not run ({replay.status})",
    )


def _observed(verdicts: tuple[VerdictChange, ...], accepted_: bool, passed: bool, any_set: bool) -> str:
    changed = [f"{v.name} {v.baseline} -> {v.candidate}" for v in verdicts if v.changed]
    moves = "; ".join(changed) if changed else "no verdict changed"
    verdict = "every candidate check PASS" if passed else "a candidate check did not PASS"
    if not any_set:
        acceptance = "no acceptance item set"
    else:
        acceptance = "acceptance met" if accepted_ else "acceptance NOT met"
    return f"{moves}; {verdict}; {acceptance}"


def judge_comparison(change: Difference, baseline_dir: Path, candidate_dir: Path) -> ComparisonOutcome:
    """The comparison of two finished run directories (both judged: ``verdicts.json`` written)."""
    a_report, b_report = report_for(baseline_dir), report_for(candidate_dir)
    a_evidence, b_evidence = RunEvidence(baseline_dir), RunEvidence(candidate_dir)
    decision = a_evidence.resolved.get("drill", {}).get("decision") or {}  # the baseline's: registered first
    items = judge_acceptance(decision.get("acceptance") or {}, a_evidence, b_evidence, b_report)
    verdicts = verdict_changes(a_report, b_report)
    is_accepted = accepted(items)
    passed = bool(b_report.verdicts) and all(v.status == "PASS" for v in b_report.verdicts)
    record = DecisionRecord(
        topic=_text(decision.get("topic")),
        baseline=_side("baseline", baseline_dir, a_report, decision),
        candidate=_side("candidate", candidate_dir, b_report, decision),
        dataset=_text((decision.get("baseline") or {}).get("dataset")),
        change=change.describe(),
        declared_change=_text((decision.get("candidate") or {}).get("change")),
        observed=_observed(verdicts, is_accepted, passed, any(i.required != UNSET for i in items)),
        rollback_trigger=_text(decision.get("rollback_trigger")),
        owner=_text(decision.get("owner")),
    )
    return ComparisonOutcome(
        change=change,
        verdicts=verdicts,
        headline=headline_table(a_report, b_report),
        requests=compare_request_sets(baseline_dir, candidate_dir),
        acceptance=items,
        accepted=is_accepted,
        candidate_passed=passed,
        record=record,
    )
