"""Client records joined to server spans by trace id, and client-vs-server TTFT/E2E (measurement truth)."""

from __future__ import annotations

import pytest

from drill.rundir.records import RequestRecord
from drill.traces.join import JoinedRequests, percentiles
from drill.traces.table import SpanTable
from tests.traces.spankit import drill_request, span, trace_id, vllm_request


def _record(n: int, trace: int, *, ttft_ms: float | None, e2e_ms: float | None, lag_ms: float = 0.0) -> RequestRecord:
    return RequestRecord(
        request_id=f"r{n}",
        logical_id=f"l{n}",
        pool="p",
        attempt=1,
        intended_ts=1.0,
        sent_ts=1.0,
        schedule_lag_ms=lag_ms,
        status=200,
        ttft_ms=ttft_ms,
        e2e_ms=e2e_ms,
        trace_id=trace_id(trace),
    )


def test_rows_by_trace_and_server_spans_in_start_order() -> None:
    spans = drill_request(2, start_ms=50) + drill_request(1)
    table = SpanTable.from_spans(list(reversed(spans)))
    joined = JoinedRequests(
        table,
        [_record(1, 1, ttft_ms=1, e2e_ms=2), _record(2, 2, ttft_ms=1, e2e_ms=2), _record(3, 3, ttft_ms=1, e2e_ms=2)],
    )
    assert set(joined.rows_by_trace) == {trace_id(1), trace_id(2)}
    rows = joined.server_spans("r1")
    assert len(rows) == 7 and [table.start_ns[r] for r in rows] == sorted(table.start_ns[r] for r in rows)
    assert table.span(rows[0]).name == "POST /v1/chat/completions" and table.span(rows[0]).service == "drill-router"
    assert joined.server_spans("r3") == [] and joined.server_spans("nope") == []
    assert [r.request_id for r in joined.joined] == ["r1", "r2"]


def test_measurement_truth_client_minus_server_per_request() -> None:
    # server: TTFT attribute = queue + prefill = 6 ms; replica SERVER span = 26 + 1 = 27 ms long
    spans = drill_request(1, queue_ms=1, prefill_ms=5, decode_ms=20)
    spans += drill_request(2, queue_ms=4, prefill_ms=6, decode_ms=20)  # TTFT 10 ms, E2E 31 ms
    records = [_record(1, 1, ttft_ms=9.0, e2e_ms=30.0), _record(2, 2, ttft_ms=20.0, e2e_ms=41.0, lag_ms=5.0)]
    truth = JoinedRequests(SpanTable.from_spans(spans), records).measurement_truth()
    assert truth.joined == 2
    first, second = truth.rows
    assert first.server_ttft_ms == pytest.approx(6.0) and first.server_e2e_ms == pytest.approx(27.0)
    assert first.ttft_diff_ms == pytest.approx(3.0) and first.e2e_diff_ms == pytest.approx(3.0)
    assert second.client_ttft_ms == pytest.approx(15.0)  # from the send: minus the lag
    assert second.ttft_diff_ms == pytest.approx(5.0) and second.e2e_diff_ms == pytest.approx(5.0)
    assert truth.ttft_diff_ms == {"p50": pytest.approx(4.0), "p95": pytest.approx(4.9), "p99": pytest.approx(4.98)}
    assert truth.to_json()["with_server_ttft"] == 2


def test_vllms_spans_give_server_e2e_from_llm_request_itself() -> None:
    """vLLM exports no HTTP span: llm_request's parent is the router's CLIENT span, not the server's own."""
    spans = vllm_request(1, queue_ms=4, prefill_ms=6, decode_ms=20)  # llm_request: 30.3 ms, TTFT 10.1 ms
    truth = JoinedRequests(SpanTable.from_spans(spans), [_record(1, 1, ttft_ms=12.0, e2e_ms=33.0)]).measurement_truth()
    (row,) = truth.rows
    assert row.server_e2e_ms == pytest.approx(30.3, abs=1e-3) and row.server_ttft_ms == pytest.approx(10.1)


def test_server_ttft_from_the_prefill_span_without_the_vllm_attribute() -> None:
    spans = drill_request(1, queue_ms=2, prefill_ms=8, decode_ms=10)
    del spans[3]["attributes"]["gen_ai.latency.time_to_first_token"]
    truth = JoinedRequests(SpanTable.from_spans(spans), [_record(1, 1, ttft_ms=12.0, e2e_ms=25.0)]).measurement_truth()
    (row,) = truth.rows
    # prefill ends at 0.7 + 2 + 8 = 10.7 ms; the replica SERVER span starts at 0.5 ms
    assert row.server_ttft_ms == pytest.approx(10.2) and row.ttft_diff_ms == pytest.approx(1.8)


def test_requests_without_llm_spans_or_client_values_give_no_difference() -> None:
    plain = [span(1, "GET /health", kind="SERVER")]
    records = [_record(1, 1, ttft_ms=None, e2e_ms=None)]
    truth = JoinedRequests(
        SpanTable.from_spans(plain + drill_request(2)), records + [_record(2, 2, ttft_ms=None, e2e_ms=None)]
    ).measurement_truth()
    assert truth.joined == 2 and truth.ttft_diff_ms is None and truth.e2e_diff_ms is None
    assert truth.rows[0].server_ttft_ms is None and truth.rows[1].server_ttft_ms is not None


def test_percentiles_of_nothing_is_none() -> None:
    assert percentiles([]) is None
    assert percentiles([1.0]) == {"p50": 1.0, "p95": 1.0, "p99": 1.0}
