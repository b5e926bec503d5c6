"""Completeness of hand-built traces: roots, orphans, remote parents, clock skew, ties, error-only spans."""

from __future__ import annotations

import pytest

from drill.rundir.records import RequestRecord
from drill.traces.completeness import NO_SPANS, measure_completeness, root_mask
from drill.traces.table import SpanTable
from tests.traces.spankit import drill_request, span, trace_id


def _measure(spans: list[dict], **kw):
    return measure_completeness(SpanTable.from_spans(spans), **kw)


def test_drill_requests_have_remote_parented_roots_and_no_orphans() -> None:
    c = _measure(drill_request(1) + drill_request(2))
    assert (c.spans, c.traces, c.orphans, c.traces_without_root, c.remote_roots) == (14, 2, 0, 0, 2)
    assert c.spans_per_trace_p50 == 7.0 and c.clock_skew_ms == 0.0 and c.skew_by_service_pair == {}
    assert c.thin_reason(10) is None and c.notes() == ()


def test_a_lost_router_span_makes_orphans_and_a_trace_without_root() -> None:
    spans = drill_request(1)
    del spans[1]  # the router's CLIENT span was never exported
    spans += [span(2, "work", kind="INTERNAL", parent="00000000000000aa")]  # a non-SERVER top: no root
    c = _measure(spans)
    # trace 1: the router SERVER span is still the root; the replica SERVER span lost its parent
    assert c.orphans == 2 and c.traces_without_root == 1 and c.remote_roots == 1
    assert "2 orphan span(s) (parent not exported)" in c.notes()


def test_true_roots_and_a_trace_of_only_orphans() -> None:
    root = span(1, "root", kind="SERVER")
    spans = [
        root,
        span(1, "child", parent=root),
        span(2, "a", parent="00000000000000bb"),
        span(2, "b", parent="00000000000000cc", start_ms=0.5),
    ]
    table = SpanTable.from_spans(spans)
    c = measure_completeness(table)
    assert c.orphans == 2 and c.traces_without_root == 1 and c.remote_roots == 0
    assert root_mask(table).tolist() == [True, False, False, False]


def test_ties_pick_one_root_per_trace() -> None:
    # two SERVER spans with missing parents starting at the same ns: one is the root, the other an orphan
    spans = [
        span(1, "a", kind="SERVER", parent="00000000000000a1", start_ms=0),
        span(1, "b", kind="SERVER", parent="00000000000000a2", start_ms=0),
    ]
    c = _measure(spans)
    assert (c.remote_roots, c.orphans, c.traces_without_root) == (1, 1, 0)


def test_a_few_ms_of_clock_skew_between_processes_is_measured_and_tolerated() -> None:
    client = span(1, "POST", service="router", kind="CLIENT", start_ms=10, end_ms=50)
    server = span(1, "handle", service="replica", kind="SERVER", parent=client, start_ms=8.5, end_ms=49)
    same_service_child = span(1, "inner", service="router", parent=client, start_ms=5, end_ms=60)  # not skew
    c = _measure([client, server, same_service_child])
    assert c.clock_skew_ms == pytest.approx(1.5)
    assert c.skew_by_service_pair == {"router -> replica": pytest.approx(1.5)}
    assert c.skewed_spans == 0
    assert c.notes()[0] == "clock skew up to 1.500 ms (router -> replica); tolerated"


def test_skew_beyond_the_tolerance_is_counted() -> None:
    client = span(1, "POST", service="router", kind="CLIENT", start_ms=10, end_ms=50)
    ahead = span(1, "handle", service="replica", kind="SERVER", parent=client, start_ms=-2, end_ms=38)
    other = span(2, "POST", service="router", kind="CLIENT", start_ms=10, end_ms=50)
    behind = span(2, "handle", service="gateway", kind="SERVER", parent=other, start_ms=7, end_ms=40)
    c = _measure([client, ahead, other, behind])
    assert c.clock_skew_ms == pytest.approx(12.0) and c.skewed_spans == 1
    assert c.skew_by_service_pair == {"router -> replica": pytest.approx(12.0), "router -> gateway": pytest.approx(3.0)}
    assert "1 span(s) beyond 5 ms" in c.notes()[0]


def test_a_child_that_outlives_its_parent_is_an_overrun_not_skew() -> None:
    # the router timed out after 50 ms; the replica kept working until 2 s
    client = span(1, "POST", service="router", kind="CLIENT", start_ms=10, end_ms=50)
    server = span(1, "handle", service="replica", kind="SERVER", parent=client, start_ms=10.4, end_ms=2000)
    c = _measure([client, server])
    assert c.clock_skew_ms == 0.0 and c.skewed_spans == 0
    assert c.overrun_spans == 1 and c.overrun_ms == pytest.approx(1950.0)
    assert c.notes() == (
        "1 span(s) ended after their parent (up to 1950.000 ms): work the caller no longer waited for",
    )


def test_error_only_spans_are_complete_traces() -> None:
    spans = [span(i, "POST /v1/chat/completions", kind="SERVER", status="ERROR", message="503") for i in range(1, 6)]
    c = _measure(spans)
    assert (c.spans, c.traces, c.orphans, c.traces_without_root) == (5, 5, 0, 0)
    assert c.thin_reason(5) is None and c.thin_reason(6) == "only 5 span(s), fewer than the 6 needed"


def _record(n: int, trace: int) -> RequestRecord:
    return RequestRecord(
        request_id=f"r{n}",
        logical_id=f"l{n}",
        pool="p",
        attempt=1,
        intended_ts=1.0,
        sent_ts=1.0,
        schedule_lag_ms=0.0,
        trace_id=trace_id(trace),
    )


def test_spans_per_request_and_requests_without_spans() -> None:
    spans = drill_request(1) + drill_request(2)[:3]
    c = _measure(spans, records=[_record(1, 1), _record(2, 2), _record(3, 3)])
    assert (c.requests, c.requests_with_spans, c.spans_per_request_p50) == (3, 2, 3.0)
    none_joined = _measure(spans, records=[_record(9, 9)])
    assert none_joined.thin_reason(1).startswith("none of the 1 client requests has a span of its trace id")


def test_thin_reasons_for_no_spans_unreadable_and_mostly_orphans() -> None:
    empty = measure_completeness(SpanTable.empty(), records=[_record(1, 1)])
    assert empty.thin_reason(1) == NO_SPANS and empty.spans_per_request_p50 == 0.0 and empty.requests == 1
    unreadable = measure_completeness(SpanTable.empty(), unreadable=3, where=("spans.jsonl:1: bad",))
    assert unreadable.thin_reason(1) == "no span could be read (3 unreadable record(s))"
    assert unreadable.to_json()["unreadable_where"] == ["spans.jsonl:1: bad"]
    orphans = _measure(
        [
            span(1, "a", parent="00000000000000a1"),
            span(1, "b", parent="00000000000000a2"),
            span(1, "c", parent="00000000000000a3"),
        ]
    )
    assert orphans.thin_reason(1) == "3 of 3 spans have a parent that was never exported"


def test_to_json_round_trips_through_json() -> None:
    import json

    c = _measure(drill_request(1), records=[_record(1, 1)], unreadable=1, where=("x:1: y",))
    data = json.loads(json.dumps(c.to_json()))
    assert data["spans"] == 7 and data["unreadable"] == 1 and data["requests_with_spans"] == 1
