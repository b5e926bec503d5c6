"""The report's serving side: admission rejections by reason (scraped counters) and the router's overhead (spans)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drill.report.model import NOT_AVAILABLE
from drill.report.render import render_html, render_markdown, report_for
from drill.traces.overhead import FIRST_CHUNK_ATTRIBUTE, router_hops
from drill.traces.table import SpanTable
from tests.report.report_kit import ReportKit
from tests.traces.spankit import T0, vllm_request

REJECTIONS = 'vllm:admission_rejections_total{{model_name="m",reason="{}"}}'


def _kit(tmp_path: Path) -> ReportKit:
    kit = ReportKit(tmp_path / "run")
    kit.run_bounds(-5, 40)
    kit.phases(baseline=(0, 10), fault=(10, 20), recovery=(20, 30))
    kit.pool("interactive", slo={"ttft_p95": 1.0})
    for i in range(10):
        kit.request(1 + i, ttft_ms=100)
    return kit


def _scrape(kit: ReportKit, t: float, source: str, reqs: float, tokens: float) -> None:
    samples = {REJECTIONS.format("max_num_queued_reqs"): reqs, REJECTIONS.format("max_num_queued_tokens"): tokens}
    line = {"ts": kit.ts(t), "source": source, "url": f"http://{source}/metrics", "ok": True, "samples": samples}
    kit.raw_line("metrics.jsonl", json.dumps(line) + "\n")


def test_admission_rejections_are_counted_by_reason_per_phase_across_replicas(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    replica_0 = {11: 6, 13: 12, 15: 18, 17: 24, 19: 30}  # refusals only in the fault window (10-20 s)
    replica_1 = {11: 6, 13: 12, 15: 18, 17: 2, 19: 8}  # restarted between 15 s and 17 s: its counter reset
    for t in range(1, 30, 2):
        _scrape(kit, t, "replica-0", replica_0.get(t, 0 if t < 10 else 30), 1 if t >= 13 else 0)
        _scrape(kit, t, "replica-1", replica_1.get(t, 0 if t < 10 else 8), 0)
    report = report_for(kit.write())
    rows = {(a.phase, a.reason): a.count for a in report.serving.admission_rejections}
    assert rows[("baseline", "max_num_queued_reqs")] == 0 and rows[("recovery", "max_num_queued_reqs")] == 0
    assert rows[("fault", "max_num_queued_reqs")] == 30 + (18 + 2 + 6)
    assert rows[("fault", "max_num_queued_tokens")] == 1
    md = render_markdown(report)
    assert "Admission rejections by reason (`vllm:admission_rejections_total`): baseline max_num_queued_reqs 0" in md
    assert "fault max_num_queued_reqs 56" in md and 'id="admission-rejections"' in render_html(report)


def test_without_the_counter_or_spans_both_are_not_available(tmp_path: Path) -> None:
    report = report_for(_kit(tmp_path).write())
    assert report.serving.admission_rejections == () and report.serving.router_overhead == ()
    assert report.serving.admission_note.startswith(NOT_AVAILABLE)
    assert report.serving.router_note.startswith(NOT_AVAILABLE)


def _with_first_chunk(spans: list[dict], after_token_ms: float) -> list[dict]:
    """The router's CLIENT span says when it wrote the first chunk: ``after_token_ms`` after vLLM's first token."""
    router, client, llm = spans
    first_token = llm["start_ns"] + int(llm["attributes"]["gen_ai.latency.time_to_first_token"] * 1e9)
    client["attributes"][FIRST_CHUNK_ATTRIBUTE] = first_token + int(after_token_ms * 1e6)
    return spans


def test_router_hops_split_ttft_and_e2e() -> None:
    spans = _with_first_chunk(vllm_request(1, start_ms=0.0, queue_ms=10.0, prefill_ms=5.0, decode_ms=20.0), 4.0)
    (hop,) = router_hops(SpanTable.from_spans(spans))
    # forwarding: llm_request starts 0.7 ms after the router's span; the first chunk left 4 ms after the token
    assert hop.added_ttft_ms == pytest.approx(4.7, abs=1e-3)
    # router span 37 ms (35 + 2), llm_request 35.3 ms
    assert hop.added_e2e_ms == pytest.approx(1.7, abs=1e-3)
    assert hop.ttft_share == pytest.approx(4.7 / (0.7 + 15.1 + 4.0), abs=1e-3)


def test_the_report_shows_the_routers_share_per_phase(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    base_ms = (kit.ts(0) * 1e9 - T0) / 1e6
    for i in range(20):
        at_s = 1 + i * 0.4 if i < 10 else 11 + (i - 10) * 0.4  # ten in the baseline, ten in the fault window
        spans = vllm_request(100 + i, start_ms=base_ms + at_s * 1000, queue_ms=5.0, prefill_ms=5.0, decode_ms=20.0)
        kit.spans.extend(_with_first_chunk(spans, 2.0 if i < 10 else 50.0))
    report = report_for(kit.write())
    rows = {o.phase: o for o in report.serving.router_overhead}
    assert set(rows) == {"baseline", "fault"} and rows["fault"].requests == 10
    assert rows["baseline"].added_ttft_ms.p50 == pytest.approx(2.7, abs=0.01)
    assert rows["fault"].added_ttft_ms.p95 == pytest.approx(50.7, abs=0.01)
    assert rows["fault"].ttft_share_p50 > 0.7 > rows["baseline"].ttft_share_p50
    md = render_markdown(report)
    assert "| phase | requests | router-added TTFT | router-added E2E | router's share of TTFT (median) |" in md
    assert "| fault | 10 | 50.70 / 50.70 / 50.70 | 1.70 / 1.70 / 1.70 | 83.39% |" in md
    assert "router-added TTFT" in render_html(report)
