"""The report leads with the finding: a headline derived from the verdicts and the evidence, then the latency chart,
then the verdict table, the details below; and measurement truth is its own section, per phase, with its hops."""

from __future__ import annotations

from pathlib import Path

import pytest

from drill.api import Status
from drill.report.render import LATENCY_CHART_FILE, render_html, render_markdown, report_for, write_reports
from tests.checks.test_measurement_truth import truth_run
from tests.report.report_kit import ReportKit


def flood_run(tmp_path: Path, *, timeouts: int = 6, refused: int = 0) -> ReportKit:
    """Baseline 0-10 s, fault 10-20 s (flood 11-18 s), recovery 20-30 s; in the flood ``timeouts`` batch requests
    time out at 30 s (a gateway's 504) and ``refused`` interactive ones are refused at once."""
    kit = ReportKit(tmp_path / "run")
    kit.run_bounds(-5, 40)
    kit.phases(baseline=(0, 10), fault=(10, 20), recovery=(20, 30))
    kit.pool("interactive", slo={"ttft_p95": 1.0})
    kit.pool("batch", slo={"e2e_p95": 60.0})
    kit.planned_fault("flood", "queue_flood", {"rate_multiplier": 12.0})
    kit.fault("flood", injected=11, reverted=18)
    for i in range(10):
        kit.request(1 + i * 0.5, ttft_ms=100)
        kit.request(21 + i * 0.5, ttft_ms=120)
    for i in range(timeouts):
        kit.request(12 + i * 0.5, pool="batch", status=504, headers_ms=30_000, e2e_ms=30_000)
    for i in range(refused):
        kit.request(12 + i * 0.5, status=503, error="refused", headers_ms=15)
    return kit


def _fast_failure(kit: ReportKit, status: Status, *, refused: int, late: int, waited: float, **more: float) -> None:
    kit.verdict(
        "fast_failure",
        status,
        "the shares — counts",
        window="fault",
        observed={"refused": refused, "not_on_time": late, "waited_share": waited, "timeout_share": waited, **more},
        expected={"waited_share": "<= 0.15", "timeout_share": "<= 0.01"},
    )


def test_the_headline_says_overload_was_left_to_wait_from_the_verdict_and_the_timeouts(tmp_path: Path) -> None:
    kit = flood_run(tmp_path)
    _fast_failure(kit, Status.FAIL, refused=0, late=3415, waited=1.0)
    kit.verdict("error_rate", Status.PASS, "error rate 0.00% in recovery", name="recovered", window="recovery")
    kit.drill["predicts"] = {"fast_failure": "FAIL", "recovered": "FAIL"}
    headline = report_for(kit.write()).headline
    assert headline.outcome == "FAIL"
    assert headline.sentence == (
        "Overload was left to wait: 0 of 3,415 late attempts refused; 6 batch requests timed out at 30 s."
    )
    assert headline.from_checks == ("fast_failure",)
    assert headline.predictions == (
        "1 of 2 predicted verdicts as predicted; not as predicted: recovered PASS (predicted FAIL)."
    )


def test_the_headline_follows_the_verdicts_not_the_drill(tmp_path: Path) -> None:
    """The same run judged otherwise gives another headline: refused fast, or an SLO missed."""
    refused = flood_run(tmp_path, timeouts=0, refused=8)
    _fast_failure(refused, Status.PASS, refused=8, late=8, waited=0.0, refusal_ttf_p99_ms=15.0)
    headline = report_for(refused.write()).headline
    assert headline.outcome == "PASS"
    assert headline.sentence == "Overload was refused fast: 8 of 8 late attempts refused, within 15 ms at p99."
    assert headline.predictions == "The drill predicts no verdict."

    slow = flood_run(tmp_path / "slo")
    slow.verdict(
        "slo",
        Status.FAIL,
        "interactive ttft_p95 = 3200ms > 1000ms",
        name="baseline-slo",
        window="baseline",
        observed={"interactive.ttft_p95": 3200.0},
        expected={"interactive.ttft_p95": "<= 1000"},
    )
    slow.verdict(
        "first_abnormal_span",
        Status.PASS,
        "first abnormal span",
        observed={"service": "drill-replica-0", "name": "queue", "deviation": "147x baseline p99 (19 s vs 131 ms)"},
    )
    sentence = report_for(slow.write()).headline.sentence
    assert sentence == (
        "The SLO was missed in baseline: interactive ttft_p95 3.2 s (limit 1.0 s); "
        "it showed first in drill-replica-0/queue (147x baseline p99)."
    )


@pytest.mark.parametrize(
    ("status", "observed", "expected"),
    [
        (
            Status.FAIL,
            {"refused": 80, "not_on_time": 90, "waited_share": 0.1, "timeout_share": 0.0, "refusal_ttf_p99_ms": 4200},
            "Overload was refused, but slowly: 80 of 90 late attempts refused, taking 4.2 s at p99.",
        ),
        (
            Status.FAIL,
            {
                "refused": 567,
                "not_on_time": 789,
                "left_to_wait": 222,
                "waited_share": 0.28,
                "timeout_share": 0.0,
                "refusal_ttf_p99_ms": 13800,
            },
            "Overload was partly refused, partly left to wait: 567 of 789 late attempts refused, 222 left to wait; "
            "refusals took 14 s at p99.",
        ),
        (
            Status.INCONCLUSIVE,
            {"refused": 0, "not_on_time": 3},
            "The fault did not overload the stack enough to judge fast failure: 3 attempts late or failed.",
        ),
    ],
    ids=["slow-refusals", "bounded-queue-waits", "not-overloaded"],
)
def test_fast_failure_says_how_overload_was_met(tmp_path: Path, status, observed, expected) -> None:
    kit = flood_run(tmp_path, timeouts=0)
    kit.verdict(
        "fast_failure",
        status,
        "message",
        window="fault",
        observed=observed,
        expected={"waited_share": "<= 0.15", "timeout_share": "<= 0.01", "refusal_ttf_p99_ms": "<= 2000"},
    )
    assert report_for(kit.write()).headline.sentence == expected


def test_error_rates_read_in_the_checks_words(tmp_path: Path) -> None:
    kit = flood_run(tmp_path)
    figures = {"observed": {"error_rate": 0.219, "requests": 1234}, "expected": {"error_rate": "<= 0.01"}}
    kit.verdict("error_rate", Status.FAIL, "error rate 21.9%", name="recovered", window="recovery", **figures)
    kit.verdict("error_rate", Status.PASS, "error rate 0%", name="not-broken", window="fault",
                observed={"error_rate": 0.0, "requests": 700}, expected={"error_rate": "<= 0.01"})  # fmt: skip
    assert report_for(kit.write()).headline.sentence == (
        "recovered FAIL: 21.9% of 1,234 requests in recovery failed (max 1.0%)."
    )
    passed = flood_run(tmp_path / "pass")
    passed.verdict("error_rate", Status.PASS, "error rate 0%", window="recovery",
                   observed={"error_rate": 0.0, "requests": 12}, expected={"error_rate": "<= 0.01"})  # fmt: skip
    passed.verdict("error_rate", Status.PASS, "error rate 0%", name="recovered", window="recovery",
                   observed={"error_rate": 0.0, "requests": 12}, expected={"error_rate": "<= 0.01"})  # fmt: skip
    assert report_for(passed.write()).headline.sentence == (
        "Every check passed — 0.0% of 12 requests in recovery failed (max 1.0%); "
        "recovered: 0.0% of 12 requests in recovery failed (max 1.0%)."
    )


def test_a_check_without_its_own_clause_speaks_through_its_message(tmp_path: Path) -> None:
    kit = flood_run(tmp_path)
    kit.verdict("recovery_replay", Status.FAIL, "3/200 original(s) still fail — details", window="replay")
    kit.verdict("duplicate_side_effects", Status.ERROR, "check raised KeyError: 'x'")
    sentence = report_for(kit.write()).headline.sentence
    assert sentence == "duplicate_side_effects ERROR: check raised KeyError: 'x'."


def test_an_unjudged_run_says_so_in_its_headline(tmp_path: Path) -> None:
    kit = flood_run(tmp_path)
    path = kit.write()
    (path / "verdicts.json").unlink()
    headline = report_for(path).headline
    assert headline.outcome == "NOT JUDGED" and "not judged" in headline.sentence


def test_markdown_leads_with_the_headline_then_the_chart_then_the_verdict_table(tmp_path: Path) -> None:
    kit = flood_run(tmp_path)
    _fast_failure(kit, Status.FAIL, refused=0, late=3415, waited=1.0)
    kit.drill["hypothesis"] = "an unbounded queue leaves overload to wait"
    run_dir = kit.write()
    md = render_markdown(report_for(run_dir))
    order = [
        "# Drill report",
        "**FAIL** — Overload was left to wait: 0 of 3,415 late attempts refused",
        f"]({LATENCY_CHART_FILE})",
        "## 1. Verdict summary",
        "| fast_failure | fast_failure | **FAIL** |",
        "## About this run",
        "| outcome | **FAIL** |",
        "**Hypothesis:** an unbounded queue leaves overload to wait",
        "## Verdict details",
        "## 2. Impact on users",
    ]
    positions = [md.index(text) for text in order]
    assert positions == sorted(positions), list(zip(order, positions))
    written = write_reports(run_dir)
    assert [p.name for p in written] == ["report.md", "report.html"]
    svg = (run_dir / LATENCY_CHART_FILE).read_text()
    assert svg.startswith("<?xml") and 'id="latency-over-time"' in svg and "fault-window" in svg


def test_html_leads_with_the_headline_then_the_chart_then_the_verdict_table(tmp_path: Path) -> None:
    kit = flood_run(tmp_path)
    _fast_failure(kit, Status.FAIL, refused=0, late=3415, waited=1.0)
    html = render_html(report_for(kit.write()))
    order = [
        'id="headline"',
        "Overload was left to wait: 0 of 3,415 late attempts refused",
        'id="chart-latency_over_time"',
        "<svg",
        'id="verdicts"',
        'id="run-details"',
        "<th>outcome</th>",
        "<nav>",
        'id="verdict-details"',
        'id="impact"',
    ]
    positions = [html.index(text) for text in order]
    assert positions == sorted(positions), list(zip(order, positions))
    assert html.count('id="chart-latency_over_time"') == 1  # shown first, not again under the impact


# --- measurement truth ------------------------------------------------------------------------------------------


def test_the_report_has_measurement_truth_as_its_own_section(tmp_path: Path) -> None:
    report = report_for(truth_run(ReportKit(tmp_path / "run")).write())
    md = render_markdown(report)
    section = md[md.index("## 11. Measurement truth") :]
    assert "| baseline | load client → drill-router → drill-replica | 20 | 20 | 30.0 / 30.0 / 30.0 |" in section
    assert "| fault | load client → drill-router → drill-replica | 20 | 20 | 400.0 / 400.0 / 400.0 |" in section
    html = render_html(report)
    assert '<section id="measurement-truth">' in html and "load client → drill-router → drill-replica" in html


def test_without_spans_or_timings_the_section_says_why(tmp_path: Path) -> None:
    kit = flood_run(tmp_path)
    report = report_for(kit.write())
    assert report.measurement_truth.phases == ()
    assert "no client record was joined" in report.measurement_truth.note
    assert "no client record was joined" in render_markdown(report).split("## 11. Measurement truth")[1]
