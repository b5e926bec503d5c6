"""Judging a finished pair from hand-built run directories: verdicts side by side, deltas, acceptance, request set,
and the documents (decision record, comparison.json, Markdown, HTML). No stack: the runs are written by the kit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from drill.api import Status
from drill.compare.acceptance import Met
from drill.compare.comparison import ComparisonPlan, ComparisonResult, SideRun
from drill.compare.decision import judge_comparison
from drill.compare.diff import Difference
from drill.compare.documents import write_documents
from drill.rundir.journal import RunStatus
from drill.runner.run import RunResult
from drill.spec.loader import load_drill
from tests.report.report_kit import ReportKit

REPO = Path(__file__).resolve().parents[2]
CHANGE = Difference("target.config.engine.max_num_queued_reqs", None, 128)
DECISION: dict[str, Any] = {
    "topic": "admission control for the flood",
    "baseline": {"version": "v1", "dataset": "mixed-interactive-batch"},
    "candidate": {"version": "v1+queue-cap", "change": "max_num_queued_reqs=128"},
    "acceptance": {"quality_not_lower": True, "p95_latency_within_slo": True, "error_rate_max": 0.01},
    "rollback_trigger": "refusals above 5% at normal load",
    "owner": "serving on-call",
}


def _run(
    folder: Path,
    *,
    refused: bool,
    baseline_ttft_ms: float = 100.0,
    answers: str = "same",
    digest: str = "same",
    decision: dict[str, Any] | None = None,
    price: float | None = 2.0,
) -> Path:
    kit = ReportKit(folder)
    kit.drill.update(decision=decision or DECISION, report={"gpu_hour_price": price, "currency": "USD"})
    kit.embedded(replicas=2)
    kit.pool("interactive", slo={"ttft_p95": 1.0})
    kit.run_bounds(0, 30)
    kit.phases(baseline=(0, 10), fault=(10, 20))
    for i in range(10):
        output = f"sha256:out-{i}" if answers == "same" or i else "sha256:changed"
        payload = f"sha256:body-{i}" if digest == "same" or i else "sha256:other"
        kit.request(
            1 + i * 0.5,
            logical_id=f"interactive-{i}",
            ttft_ms=baseline_ttft_ms,
            payload_digest=payload,
            output_digest=output if i < 4 else None,
        )
    for i in range(10, 20):
        if refused:
            kit.request(
                11 + (i - 10) * 0.5,
                logical_id=f"interactive-{i}",
                status=503,
                error="refused",
                payload_digest=f"sha256:body-{i}",
                e2e_ms=20.0,
            )
        else:
            kit.request(
                11 + (i - 10) * 0.5,
                logical_id=f"interactive-{i}",
                ttft_ms=4000.0,
                e2e_ms=9000.0,
                payload_digest=f"sha256:body-{i}",
            )
    kit.verdict("fault_landed", Status.PASS)
    kit.verdict("fast_failure", Status.PASS if refused else Status.FAIL)
    kit.verdict("recovery_replay", Status.PASS, "3/3 original(s) now pass")
    return kit.write()


def test_the_pair_side_by_side_with_deltas_and_the_acceptance_met(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", refused=False)
    b = _run(tmp_path / "b", refused=True)
    outcome = judge_comparison(CHANGE, a, b)
    changes = {v.name: (v.baseline, v.candidate, v.changed) for v in outcome.verdicts}
    assert changes == {
        "fault_landed": ("PASS", "PASS", False),
        "fast_failure": ("FAIL", "PASS", True),
        "recovery_replay": ("PASS", "PASS", False),
    }
    error_rate = outcome.headline.row("fault", "error_rate")
    assert (error_rate.baseline, error_rate.candidate, error_rate.delta) == (0.0, 1.0, 1.0)
    refused = outcome.headline.row("fault", "refused")
    assert (refused.baseline, refused.candidate) == (0.0, 1.0)
    ttft = outcome.headline.row("baseline", "ttft_p95")
    assert ttft.baseline == ttft.candidate == 100.0 and ttft.delta == 0.0
    goodput = outcome.headline.row("fault", "goodput")
    assert goodput.baseline == 0.0 and goodput.candidate == 0.0  # 4 s TTFT misses the SLO; a refusal is no goodput
    cost = outcome.headline.row("run", "cost_per_success")
    assert cost is not None and cost.unit == "USD" and cost.candidate > cost.baseline  # 10 successes, not 20
    assert outcome.headline.cost_note == ""
    met = {i.name: i.met for i in outcome.acceptance}
    assert met == {
        "quality_not_lower": Met.MET,
        "p95_latency_within_slo": Met.MET,
        "cost_per_success_max": Met.UNSET,
        "error_rate_max": Met.MET,
    }
    assert outcome.requests.identical and outcome.requests.scheduled.both == 20
    assert outcome.accepted and outcome.candidate_passed and outcome.exit_code == 0
    record = outcome.record
    assert record.topic == "admission control for the flood" and record.owner == "serving on-call"
    assert record.baseline.version == "v1" and record.candidate.version == "v1+queue-cap"
    assert record.change == "target.config.engine.max_num_queued_reqs: null -> 128"
    assert record.baseline.first_failing_check.startswith("fast_failure FAIL")
    assert record.candidate.first_failing_check == "none: every check passed"
    assert "fast_failure FAIL -> PASS" in record.observed


def test_a_changed_answer_a_slow_baseline_phase_and_an_unpriced_budget_are_not_accepted(tmp_path: Path) -> None:
    decision = {**DECISION, "acceptance": {**DECISION["acceptance"], "cost_per_success_max": 0.01}}
    a = _run(tmp_path / "a", refused=False, decision=decision)
    b = _run(tmp_path / "b", refused=True, baseline_ttft_ms=1500.0, answers="changed", price=None, decision=decision)
    outcome = judge_comparison(CHANGE, a, b)
    items = {i.name: i for i in outcome.acceptance}
    assert items["quality_not_lower"].met is Met.NOT_MET
    assert items["quality_not_lower"].observed == "3/4 control answers identical (output digest)"
    assert items["p95_latency_within_slo"].met is Met.NOT_MET
    assert "interactive ttft_p95 1500 ms > 1000 ms" in items["p95_latency_within_slo"].observed
    assert items["cost_per_success_max"].met is Met.NOT_AVAILABLE  # no price: never a made-up cost
    assert outcome.headline.row("run", "cost_per_success") is None
    assert outcome.headline.cost_note.startswith("cost per success: unset")
    assert not outcome.accepted and outcome.candidate_passed and outcome.exit_code == 1


def test_no_acceptance_set_is_shown_unset_and_judged_on_the_verdicts_alone(tmp_path: Path) -> None:
    bare: dict[str, Any] = {"acceptance": {}}
    a = _run(tmp_path / "a", refused=True, decision=bare)
    b = _run(tmp_path / "b", refused=False, decision=bare)  # the candidate regresses
    outcome = judge_comparison(CHANGE, a, b)
    assert {i.met for i in outcome.acceptance} == {Met.UNSET}
    assert outcome.record.topic == "unset" and outcome.record.rollback_trigger == "unset"
    assert outcome.record.owner == "unset" and outcome.record.declared_change == "unset"
    assert outcome.accepted and not outcome.candidate_passed and outcome.exit_code == 1
    assert outcome.record.observed.endswith("no acceptance item set")


def test_a_request_body_that_differs_is_counted_and_the_set_is_not_identical(tmp_path: Path) -> None:
    outcome = judge_comparison(
        CHANGE, _run(tmp_path / "a", refused=False), _run(tmp_path / "b", refused=True, digest="other")
    )
    scheduled = outcome.requests.scheduled
    assert (scheduled.both, scheduled.identical, scheduled.differing) == (20, 19, 1)
    assert not outcome.requests.identical and "NOT identical" in outcome.requests.describe()


@pytest.fixture()
def written(tmp_path: Path) -> tuple[Path, list[Path]]:
    a = _run(tmp_path / "a", refused=False)
    b = _run(tmp_path / "b", refused=True)
    loaded = load_drill(REPO / "drills" / "unbounded-queue.yaml")
    folder = tmp_path / "comparison"
    folder.mkdir()
    result = ComparisonResult(folder, ComparisonPlan(loaded, loaded, CHANGE))
    result.sides = [
        SideRun("baseline", RunResult(a, RunStatus.COMPLETED, 1)),
        SideRun("candidate", RunResult(b, RunStatus.COMPLETED, 0)),
    ]
    result.outcome = judge_comparison(CHANGE, a, b)
    return folder, write_documents(result)


def test_the_documents_carry_the_decision_record_and_the_figures(written: tuple[Path, list[Path]]) -> None:
    folder, files = written
    assert [p.name for p in files] == ["comparison.json", "decision.md", "comparison.md", "comparison.html"]
    document = json.loads((folder / "comparison.json").read_text())
    assert document["schema"] == "llm-drill/comparison/v1" and document["exit_code"] == 0
    assert document["change"] == {"path": CHANGE.path, "baseline": None, "candidate": 128}
    assert {"name": "fast_failure", "baseline": "FAIL", "candidate": "PASS"} in document["verdicts"]
    assert document["request_set"]["identical"] is True
    assert document["labels_differing"] == []
    decision = (folder / "decision.md").read_text()
    for field in (
        "topic",
        "baseline",
        "candidate",
        "the change (diffed)",
        "acceptance",
        "observed result",
        "first deviation (baseline)",
        "recovery replay (candidate)",
        "rollback trigger",
        "owner",
    ):
        assert f"| {field} |" in decision, field
    assert "refusals above 5% at normal load" in decision and "serving on-call" in decision
    markdown = (folder / "comparison.md").read_text()
    assert "| fast_failure | FAIL | PASS | **changed** |" in markdown
    assert "| fault | error_rate | 0.00% | 100.00% | +100.00% |" in markdown
    html = (folder / "comparison.html").read_text()
    assert "<h2>1. Verdicts</h2>" in html and "null -&gt; 128" in html


def test_a_comparison_whose_baseline_did_not_complete_writes_only_its_json(tmp_path: Path) -> None:
    loaded = load_drill(REPO / "drills" / "unbounded-queue.yaml")
    result = ComparisonResult(tmp_path, ComparisonPlan(loaded, loaded, CHANGE), message="the baseline run did not")
    result.sides = [SideRun("baseline", RunResult(tmp_path / "x", RunStatus.ERROR, 3, message="boom"))]
    files = write_documents(result)
    assert [p.name for p in files] == ["comparison.json"] and result.exit_code == 3
    document = json.loads(files[0].read_text())
    assert document["judged"] is False and document["runs"][0]["message"] == "boom"
