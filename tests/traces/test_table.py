"""The columnar span model: construction, codes, take/concat, one row, parents."""

from __future__ import annotations

import numpy as np

from drill.traces.table import KIND_NAMES, STATUS_NAMES, Span, SpanTable
from tests.traces.spankit import T0, drill_request, span


def test_from_spans_columns_and_codes() -> None:
    spans = drill_request(1) + drill_request(2, replica=1, error=True)
    table = SpanTable.from_spans(spans)
    assert len(table) == 14
    assert table.trace_id.dtype == object and table.trace_id[0] == f"{1:032x}"
    assert table.service.dtype == np.int32 and table.kind.dtype == np.int8 and table.start_ns.dtype == np.int64
    assert set(table.services) == {"drill-router", "drill-replica-0", "drill-replica-1"}
    assert table.services[table.service[2]] == "drill-replica-0"
    assert table.parent_id[0] == "c0ffee00c0ffee00" and table.parent_id[1] == spans[0]["span_id"]
    assert KIND_NAMES[table.kind[1]] == "CLIENT" and KIND_NAMES[table.kind[4]] == "INTERNAL"
    assert STATUS_NAMES[table.status[7]] == "ERROR" and table.status[0] == 0
    assert table.name_code("llm_request") is not None and table.service_code("nope") is None
    assert (table.duration_ns >= 0).all()


def test_span_row_is_plain_python() -> None:
    spans = [
        span(
            1, "root", start_ms=0, end_ms=12.5, kind="SERVER", status="ERROR", message="boom", attributes={"k": [1, 2]}
        )
    ]
    row = SpanTable.from_spans(spans).span(0)
    assert row == Span(
        trace_id=f"{1:032x}",
        span_id=spans[0]["span_id"],
        parent_id="",
        service="svc",
        name="root",
        kind="SERVER",
        start_ns=T0,
        end_ns=T0 + 12_500_000,
        status="ERROR",
        status_message="boom",
        attributes={"k": [1, 2]},
    )
    assert row.duration_ms == 12.5
    assert isinstance(row.start_ns, int)


def test_empty_take_and_concat_merge_codes() -> None:
    empty = SpanTable.empty()
    assert len(empty) == 0 and empty.services == () and len(empty.duration_ns) == 0
    a = SpanTable.from_spans([span(1, "x", service="a"), span(1, "y", service="b")])
    b = SpanTable.from_spans([span(2, "y", service="b"), span(2, "z", service="c")])
    both = SpanTable.concat([a, empty, b])
    assert len(both) == 4
    assert [both.services[c] for c in both.service] == ["a", "b", "b", "c"]
    assert [both.names[c] for c in both.name] == ["x", "y", "y", "z"]
    picked = both.take(np.array([3, 0]))
    assert [picked.span(i).name for i in range(2)] == ["z", "x"]
    masked = both.take(both.service == both.service_code("b"))
    assert len(masked) == 2 and {masked.span(i).name for i in range(2)} == {"y"}
    assert len(SpanTable.concat([])) == 0


def test_kinds_and_statuses_as_codes_or_names() -> None:
    spans = [span(1, "a"), span(1, "b")]
    spans[0]["kind"], spans[0]["status"] = 3, {"code": 2, "message": ""}
    spans[1]["kind"], spans[1]["status"] = "SPAN_KIND_SERVER", "STATUS_CODE_OK"
    table = SpanTable.from_spans(spans)
    assert table.kind.tolist() == [3, 2] and table.status.tolist() == [2, 1]
    assert table.status_message.tolist() == [None, None]


def test_parent_rows_within_the_trace_even_with_reused_span_ids() -> None:
    # two traces that reuse the same span ids (hand-written data does that): parents stay in their trace
    spans = []
    for trace in (1, 2):
        root = span(trace, "root", span_id="0000000000000001")
        spans += [root, span(trace, "child", parent=root, span_id="0000000000000002")]
    spans.append(span(3, "orphan", parent="00000000000000ff"))
    table = SpanTable.from_spans(spans)
    assert table.parent_row.tolist() == [-1, 0, -1, 2, -1]
    assert table.children_count().tolist() == [1, 0, 1, 0, 0]
    assert table.trace_code.tolist() == [0, 0, 1, 1, 2] and len(table.trace_ids) == 3


def test_parent_in_another_trace_is_not_a_parent() -> None:
    root = span(1, "root")
    stray = span(2, "stray", parent=root)  # same span id space, other trace
    table = SpanTable.from_spans([root, stray])
    assert table.parent_row.tolist() == [-1, -1]


def test_in_window_keeps_overlapping_spans() -> None:
    table = SpanTable.from_spans([span(1, "early", start_ms=0, end_ms=1), span(1, "late", start_ms=10, end_ms=11)])
    kept = table.in_window((T0 + 5_000_000, T0 + 20_000_000))
    assert [kept.span(i).name for i in range(len(kept))] == ["late"]
    assert table.in_window(None) is table


def test_parent_rows_by_value_and_by_key_agree() -> None:
    spans = drill_request(1) + drill_request(2) + [span(3, "lost", parent="00000000deadbeef")]
    spans[3]["span_id"] = spans[3]["span_id"].upper()  # hex is case-insensitive on input
    table = SpanTable.from_spans(spans)
    by_value = table.parent_row
    assert by_value.tolist() == table._parent_rows_by_key().tolist()
    assert by_value[1] == 0 and by_value[0] == -1 and by_value[-1] == -1 and by_value[4] == 3


def test_hex_u64_flags_ids_that_are_not_16_hex() -> None:
    from drill.traces.table import hex_u64

    values, ok, empty = hex_u64(
        np.array(["00000000000000ff", "ABCDEF0123456789", "xyz", "", "00000000000000001"], dtype=object)
    )
    assert ok.tolist() == [True, True, False, False, False]
    assert empty.tolist() == [False, False, False, True, False]
    assert values[:2].tolist() == [255, 0xABCDEF0123456789]


def test_odd_span_ids_still_find_their_parents() -> None:
    root = span(1, "root", span_id="root")  # not hex: the dict path
    table = SpanTable.from_spans([root, span(1, "child", parent="root", span_id="child")])
    assert table.parent_row.tolist() == [-1, 0]


def test_unique_ints_is_np_unique() -> None:
    from drill.traces.table import unique_ints

    rng = np.random.default_rng(3)
    for values in (np.zeros(0, dtype=np.int64), np.array([7]), rng.integers(-50, 50, 1000), rng.integers(0, 2**40, 99)):
        assert unique_ints(values).tolist() == np.unique(values).tolist()
