"""The postmortem report on hand-built run directories: every section, "not available" without spans and
metrics, cost, realism, redaction, the replay's before/after, determinism, the CLI and the runner's guard."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from drill.api import EvidenceKind, EvidenceRef, Status
from drill.cli.main import cli
from drill.report.model import NOT_AVAILABLE, UNSET
from drill.report.render import render_html, render_json, render_markdown, report_for, write_reports
from drill.rundir.evidence import RunEvidence
from tests.report.report_kit import ReportKit

RUNBOOK = """# Runbook: the queue grows

## Symptoms
TTFT climbs.

### Deep heading
detail

## Mitigation
1. Bound admission.
"""

SECTIONS = (
    "## 1. Verdict summary",
    "## 2. Impact on users",
    "## 3. Timeline",
    "## 4. Detection",
    "## 5. The injected fault",
    "## 6. Metrics per phase",
    "## 7. Recovery replay",
    "## 8. Runbook and action items",
    "## 9. Decision record",
    "## 10. What this drill did not cover",
)


def _flood_run(tmp_path: Path) -> ReportKit:
    """A queue flood: baseline fine, the fault phase slow and failing, a fast_failure FAIL."""
    kit = ReportKit(tmp_path / "run")
    kit.run_bounds(-5, 40)
    kit.phases(baseline=(0, 10), fault=(10, 20), recovery=(20, 30))
    kit.pool("interactive", slo={"ttft_p95": 1.0})
    kit.embedded(replicas=2, tp=2)
    kit.planned_fault("flood", "queue_flood", {"rate_multiplier": 4.0}, pools=["interactive"])
    kit.fault("flood", injected=11, reverted=18)
    for i in range(10):
        kit.request(1 + i * 0.5, ttft_ms=100)  # baseline: good
        kit.request(12 + i * 0.5, ttft_ms=3000, e2e_ms=4000)  # fault: slow
        kit.request(21 + i * 0.5, ttft_ms=120)  # recovery: good
    for i in range(5):
        kit.request(13 + i, status=None, error="timeout", e2e_ms=60000, request_id=f"late-{i}-1")
    kit.verdict(
        "fast_failure",
        Status.FAIL,
        "0 refused, 5 timed out",
        window="fault",
        observed={"timeout_share": 1.0, "refused": 0},
        expected={"timeout_share": "<= 0.01"},
        units={"timeout_share": "ratio", "refused": "requests"},
        evidence=(EvidenceRef(EvidenceKind.REQUEST, "late-0-1", "timeout after 60000ms"),),
    )
    kit.verdict("error_rate", Status.PASS, "error rate 0.00% in recovery", name="recovered", window="recovery")
    kit.drill["predicts"] = {"fast_failure": "FAIL", "recovered": "FAIL"}
    kit.drill["hypothesis"] = "an unbounded queue leaves overload to time out"
    kit.drill["runbook"] = "runbooks/kit.md"
    kit.drill["decision"] = {"topic": "admission control", "candidate": {"change": "max_num_queued_reqs=128"}}
    kit.runbook_text = RUNBOOK
    return kit


def test_every_section_is_rendered_with_its_figures(tmp_path):
    kit = _flood_run(tmp_path)
    kit.write()
    md = render_markdown(report_for(kit.run_dir))
    positions = [md.index(s) for s in SECTIONS]
    assert positions == sorted(positions)
    assert "| outcome | **FAIL** |" in md
    assert "**Hypothesis:** an unbounded queue leaves overload to time out" in md
    # verdicts: status, predicted, observed vs expected with units
    assert "| fast_failure | fast_failure | **FAIL** | FAIL (as predicted) |" in md
    assert "| recovered | error_rate | **PASS** | FAIL (**not as predicted**) |" in md
    assert "| timeout_share | 100.00% | <= 0.01 | ratio |" in md
    assert "`request_id late-0-1 (timeout after 60000ms)`" in md


def test_impact_counts_failed_slow_and_good_requests_per_pool_and_phase(tmp_path):
    kit = _flood_run(tmp_path)
    report = report_for(kit.write())
    rows = {(r.phase, r.pool): r for r in report.impact.rows}
    fault = rows[("fault", "interactive")]
    assert (fault.requests, fault.failed, fault.slow, fault.good) == (15, 5, 10, 0)
    assert fault.failed_by_class == (("timeout", 5),)
    assert fault.goodput_share == 0.0 and fault.share_lost == 1.0
    assert rows[("baseline", "interactive")].goodput_share == 1.0
    assert rows[("baseline", "interactive")].share_lost is None
    [breach] = report.impact.breaches
    assert (breach.phase, breach.bound, breach.observed_ms, breach.limit_ms) == ("fault", "ttft_p95", 3000.0, 1000.0)


def test_timeline_orders_journal_events_and_derived_points(tmp_path):
    kit = _flood_run(tmp_path)
    report = report_for(kit.write())
    lines = [(e.offset_s, e.what) for e in report.timeline]
    whats = [w for _, w in lines]
    assert [o for o, _ in lines] == sorted(o for o, _ in lines)
    assert lines[0] == (0.0, "run started")
    injected = whats.index("fault flood (queue_flood) injected")
    assert whats[injected + 1] == "fault flood verified: landed"
    first_slo = next(i for i, w in enumerate(whats) if w.startswith("first request over its SLO"))
    first_error = next(i for i, w in enumerate(whats) if w.startswith("first failed request: late-0-1"))
    reverted = whats.index("fault flood reverted")
    assert injected < first_slo < first_error < reverted
    assert (15.0, "phase fault started (planned 10s)") in lines  # the run started 5 s before the baseline
    assert whats[-1] == "run finished: completed (exit 1)"
    assert "the drill has no recovery_time check: the timeline shows no recovery point" in report.notes
    assert not any(w.startswith("recovered:") for w in whats)


def test_the_timeline_marks_the_recovery_point_of_the_recovery_time_verdict(tmp_path):
    kit = _flood_run(tmp_path)
    kit.verdict("recovery_time", Status.PASS, "back", observed={"recovery_s": 2.5}, window="recovery")
    report = report_for(kit.write())
    [point] = [e for e in report.timeline if e.what.startswith("recovered:")]
    assert point.offset_s == 25.5  # the revert at kit time 18 (run start -5) + 2.5 s
    assert point.source == "verdict recovery_time"


def test_fault_section_shows_params_outcome_and_the_catalogues_realism(tmp_path):
    kit = _flood_run(tmp_path)
    kit.planned_fault("oom", "gpu_oom", {"method": "stack_admin"})
    report = report_for(kit.write())
    flood, oom = report.faults
    assert flood.realism == "real mechanism here" and flood.landed == "landed"
    assert flood.params == (("rate_multiplier", "4.0"),) and flood.selector == 'pools: ["interactive"]'
    assert flood.start_s == 1.0 and flood.duration_s == 5.0 and flood.reverted_at is not None
    assert oom.realism == "simulated" and oom.method == "stack_admin" and oom.landed == "never injected"


def test_runbook_sections_action_items_and_decision_record(tmp_path):
    kit = _flood_run(tmp_path)
    report = report_for(kit.write())
    assert report.runbook.found and report.runbook.title == "Runbook: the queue grows"
    assert [s.title for s in report.runbook.sections] == ["Symptoms", "Mitigation"]
    assert "**Deep heading**" in report.runbook.sections[0].body
    actions = [a.action for a in report.actions if a.check == "fast_failure"]
    assert any("max_num_queued_reqs" in a for a in actions)
    assert any("Retry-After" in a and "gateway" in a for a in actions)
    decision = dict((f.name, f.value) for f in report.decision)
    assert decision["topic"] == "admission control"
    assert decision["candidate.change"] == "max_num_queued_reqs=128"
    assert decision["baseline.version"] == UNSET and decision["rollback_trigger"] == UNSET
    assert decision["owner"] == UNSET and decision["acceptance.cost_per_success_max"] == UNSET


def test_what_the_drill_did_not_cover(tmp_path):
    kit = _flood_run(tmp_path)
    report = report_for(kit.write())
    gaps = {g.area: g.what for g in report.not_covered}
    assert set(gaps) == {"inputs", "capacity", "faults", "permissions", "external dependencies"}
    assert "not in this drill:" in gaps["faults"] and "replica_crash" in gaps["faults"]
    assert "on 2 replica(s)" in gaps["capacity"]
    assert "no request carried credentials" in gaps["permissions"]
    assert "embedded reference stack" in gaps["external dependencies"]


def test_a_target_without_spans_or_metrics_shows_not_available_never_zero(tmp_path):
    kit = _flood_run(tmp_path)
    kit.verdict("first_abnormal_span", Status.INCONCLUSIVE, "the target exported no spans", window="fault")
    report = report_for(kit.write())
    for m in report.metrics:
        assert (m.prefix_cache_hit_rate, m.kv_cache_usage, m.queue_depth) == (None, None, None)
    assert report.detection.status == "INCONCLUSIVE" and report.detection.trace_id is None
    assert report.detection.waterfall.svg is None
    md = render_markdown(report)
    fault_row = next(line for line in md.splitlines() if line.startswith("| fault | 10 |"))
    # prefix-cache hit rate, KV-cache use, queue depth, then the cost (no price: unset)
    assert fault_row.endswith(f"| {NOT_AVAILABLE} | {NOT_AVAILABLE} | {NOT_AVAILABLE} | {UNSET} |")
    assert "**INCONCLUSIVE** — the target exported no spans" in md


def test_cost_per_successful_request_from_the_gpu_hour_price(tmp_path):
    kit = _flood_run(tmp_path)
    unset = report_for(kit.write())
    assert unset.cost.cost_per_success is None and unset.cost.note.startswith("unset")
    assert all(m.cost_note == UNSET for m in unset.metrics)
    kit.drill["report"] = {"gpu_hour_price": 3.6, "currency": "EUR"}
    priced = report_for(kit.write())
    assert priced.cost.gpus == 4  # 2 replicas x TP 2 x PP 1
    successes = 10 + 10 + 10  # the failed ones do not count
    assert priced.cost.successes == successes and priced.cost.run_s == 30.0
    assert priced.cost.cost_per_success == pytest.approx(3.6 * 4 * 30 / 3600 / successes)
    baseline = next(m for m in priced.metrics if m.phase == "baseline")
    assert baseline.cost_per_success == pytest.approx(3.6 * 4 * 10 / 3600 / 10)
    assert "EUR per successful request" in render_markdown(priced)


def test_replay_lists_originals_then_controls_before_and_after(tmp_path):
    kit = _flood_run(tmp_path)
    kit.phase("replay", 31, 35)
    kit.sample("late-0-1", "what is the capital of France?")
    kit.replayed("late-0-1", at=32)
    control = kit.records[0].request_id
    kit.replayed(control, set="control", at=33, original_error=None)
    kit.replayed(control, set="control", at=33, original_error=None, repetition=2)
    report = report_for(kit.write())
    rows = report.replay.rows
    assert [r.set for r in rows] == ["original", "control", "control"]
    assert rows[0].before.startswith("timeout") and rows[0].after == "HTTP 200"
    assert rows[0].payload.startswith("sha256:") and "France" not in rows[0].payload
    assert rows[1].before == "HTTP 200, E2E 500ms"
    assert report.replay.ran and report.replay.originals == 1 and report.replay.controls == 2


def test_secrets_and_prompt_text_never_reach_a_report(tmp_path):
    kit = _flood_run(tmp_path)
    kit.phase("replay", 31, 35)
    kit.sample("late-0-1", "PLANTED-PROMPT-TEXT", headers={"Authorization": "Bearer planted-token-123456"})
    kit.replayed("late-0-1", at=32)
    kit.verdict("slo", Status.FAIL, "upstream said Authorization: Bearer planted-token-123456", window="fault")
    kit.runbook_text = RUNBOOK + "\nexport OPENAI_API_KEY=sk-plantedplantedplanted\n"
    kit.verdict(
        "first_abnormal_span",
        Status.PASS,
        "first abnormal span",
        observed={
            "trace_id": "a" * 32,
            "span_id": "b" * 16,
            "service": "s",
            "name": "n",
            "attributes": {"gen_ai.prompt": "PLANTED-PROMPT-TEXT", "note": "Bearer planted-token-123456"},
        },
    )
    kit.write()
    outputs = [
        render_markdown(report_for(kit.run_dir)),
        render_html(report_for(kit.run_dir)),
        render_json(report_for(kit.run_dir)),
    ]
    assert json.loads(outputs[2])["schema"] == "llm-drill/report/v1"
    for text in outputs:
        for secret in ("planted-token-123456", "sk-plantedplantedplanted", "PLANTED-PROMPT-TEXT"):
            assert secret not in text


def test_rendering_is_deterministic_and_a_copy_renders_the_same_bytes(tmp_path):
    kit = _flood_run(tmp_path)
    kit.write()
    first = [p.read_bytes() for p in write_reports(kit.run_dir)]
    second = [p.read_bytes() for p in write_reports(kit.run_dir)]
    assert first == second
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(kit.run_dir, copy)
    assert [p.read_bytes() for p in write_reports(copy)][0] == first[0]
    assert render_json(report_for(copy)) == render_json(report_for(kit.run_dir))


def test_html_is_self_contained(tmp_path):
    kit = _flood_run(tmp_path)
    html = render_html(report_for(kit.write()))
    assert "<style>" in html and "http://" not in html.replace("http://www.w3.org", "")
    assert "https://" not in html and "<script" not in html and "<link" not in html
    for section in (
        "verdicts",
        "impact",
        "timeline",
        "detection",
        "fault",
        "metrics",
        "replay",
        "runbook",
        "decision",
        "not-covered",
    ):
        assert f'<section id="{section}">' in html


def test_cli_renders_json_writes_files_and_refuses_a_non_run_directory(tmp_path):
    kit = _flood_run(tmp_path)
    run_dir = kit.write()
    runner = CliRunner()
    as_json = runner.invoke(cli, ["report", str(run_dir), "--format", "json", "--no-progress"])
    assert as_json.exit_code == 0, as_json.output
    model = json.loads(as_json.output)
    assert model["header"]["outcome"] == "FAIL" and len(model["verdicts"]) == 2
    written = runner.invoke(cli, ["report", str(run_dir), "--no-progress"])
    assert written.exit_code == 0
    assert f"report: {run_dir / 'report.md'}" in written.output and (run_dir / "report.html").is_file()
    md = runner.invoke(cli, ["report", str(run_dir), "--format", "md", "--no-progress"])
    assert md.output == (run_dir / "report.md").read_text()
    bad = runner.invoke(cli, ["report", str(tmp_path / "nothing"), "--no-progress"])
    assert bad.exit_code == 2 and "not a run directory" in bad.output


def test_an_unjudged_run_still_renders(tmp_path):
    kit = ReportKit(tmp_path / "run")
    kit.run_bounds(0, 5)
    kit.phases(baseline=(0, 5))
    kit.write()
    (kit.run_dir / "verdicts.json").unlink()
    report = report_for(kit.run_dir)
    assert report.header.outcome == "NOT JUDGED" and report.verdicts == ()
    assert "No verdicts: the run was not judged" in render_markdown(report)
    assert report.runbook.note == "the drill names no runbook"


def test_the_runner_journals_a_broken_report_and_goes_on(tmp_path, monkeypatch):
    from drill.report import render
    from drill.rundir.directory import RunDir
    from drill.rundir.journal import Journal, read_journal
    from drill.runner import run as runner_module

    def broken(run_dir):
        raise RuntimeError("template exploded")

    monkeypatch.setattr(render, "write_reports", broken)
    run = runner_module.Runner.__new__(runner_module.Runner)
    run.rundir = RunDir(tmp_path, "r")
    run.journal = Journal(tmp_path / "journal.jsonl")
    run.result = runner_module.RunResult(tmp_path)
    run._render_reports()
    run.journal.close()
    [note] = list(read_journal(tmp_path / "journal.jsonl"))
    assert "report not rendered: RuntimeError: template exploded" in note.get("message")
    assert run.result.reports == []


def test_report_from_the_evidence_object_matches_the_directory(tmp_path):
    from drill.report import build_report
    from drill.report.render import load_verdicts

    kit = _flood_run(tmp_path)
    run_dir = kit.write()
    direct = build_report(RunEvidence(run_dir), load_verdicts(run_dir))
    assert render_markdown(direct) == render_markdown(report_for(run_dir))


def test_detection_and_timeline_follow_the_first_abnormal_span_into_the_spans(tmp_path):
    kit = _flood_run(tmp_path)
    for n, (start, end) in enumerate([(2.0, 2.1), (2.5, 2.6), (12.0, 15.0)]):
        trace, root = f"{n + 1:032x}", f"{n + 1:016x}"
        kit.span(
            trace_id=trace,
            span_id=root,
            name="POST /v1/chat/completions",
            service="drill-router",
            kind="SERVER",
            start=start,
            end=end,
        )
        kit.span(
            trace_id=trace,
            span_id=f"{n + 1:015x}f",
            parent_id=root,
            name="queue",
            service="drill-replica-0",
            start=start,
            end=end - 0.05,
        )
    kit.verdict(
        "first_abnormal_span",
        Status.PASS,
        "first abnormal span: drill-replica-0/queue",
        observed={
            "trace_id": f"{3:032x}",
            "span_id": f"{3:015x}f",
            "service": "drill-replica-0",
            "name": "queue",
            "deviation": "30x baseline p99",
            "chain": ["drill-replica-0/queue"],
        },
    )
    report = report_for(kit.write())
    d = report.detection
    assert (d.service, d.name, d.deviation, d.chain) == (
        "drill-replica-0",
        "queue",
        "30x baseline p99",
        ("drill-replica-0/queue",),
    )
    assert d.baseline_trace_id in (f"{1:032x}", f"{2:032x}")  # a baseline trace of the same shape
    assert d.waterfall.svg is not None and d.waterfall.svg.lstrip().startswith("<svg")
    [point] = [e for e in report.timeline if e.what.startswith("first abnormal span starts")]
    assert point.offset_s == 17.0 and "drill-replica-0/queue (30x baseline p99)" in point.what


def test_a_chart_or_metric_mapping_that_raises_costs_only_its_own_figure(tmp_path, monkeypatch):
    from drill.report import charts, quantities

    def raises(*args, **kwargs):
        raise ValueError("planted failure")

    monkeypatch.setattr(charts, "latency_over_time", raises)
    monkeypatch.setattr(quantities, "phase_quantities", raises)
    kit = _flood_run(tmp_path)
    run_dir = kit.write()
    (run_dir / "metrics.jsonl").write_text("")
    report = report_for(run_dir)
    chart = next(c for c in report.charts if c.key == "latency_over_time")
    assert chart.svg is None and chart.note == "chart failed: ValueError: planted failure"
    assert all(m.queue_depth is None for m in report.metrics)
    assert any("reading the scraped metrics failed (ValueError: planted failure)" in n for n in report.notes)
    md = render_markdown(report)
    assert "## Notes on this report" in md and "chart failed: ValueError: planted failure" in md
