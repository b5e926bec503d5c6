"""vLLM's ``llm_request`` phase attributes read as ``queue``/``prefill``/``decode`` child spans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drill.traces.request_phases import NEVER_SCHEDULED, PHASE_FROM, with_phase_spans
from drill.traces.sources import OtlpFileParams, OtlpFileSource, ReceiverParams, ReceiverSource
from drill.traces.table import SpanTable
from tests.traces.spankit import T0, drill_request, span, vllm_request, write_spans


def _by_name(table: SpanTable) -> dict[str, int]:
    return {table.names[table.name[row]]: row for row in range(len(table))}


def _ms(table: SpanTable, row: int) -> tuple[float, float]:
    return (int(table.start_ns[row]) - T0) / 1e6, (int(table.end_ns[row]) - T0) / 1e6


def test_the_attributes_become_children_placed_from_the_first_token() -> None:
    spans = vllm_request(1, start_ms=10.0, queue_ms=400.0, prefill_ms=5.0, decode_ms=20.0)
    table, added = with_phase_spans(SpanTable.from_spans(spans))
    assert added == 3 and len(table) == 6
    rows = _by_name(table)
    llm = rows["llm_request"]
    for name in ("queue", "prefill", "decode"):
        row = rows[name]
        assert table.parent_row[row] == llm and table.trace_id[row] == table.trace_id[llm]
        assert table.services[table.service[row]] == "vllm-0" and table.kind[row] == 1  # INTERNAL
        assert table.attributes[row][PHASE_FROM].startswith("gen_ai.latency.time_in")
    # llm_request starts at 10.7 ms; TTFT 405.1 ms -> first token at 415.8 ms; prefill 5 ms, queue 400 ms before it
    assert _ms(table, rows["queue"]) == pytest.approx((10.8, 410.8), abs=1e-3)
    assert _ms(table, rows["prefill"]) == pytest.approx((410.8, 415.8), abs=1e-3)
    assert _ms(table, rows["decode"]) == pytest.approx((415.8, 435.8), abs=1e-3)
    again, _ = with_phase_spans(SpanTable.from_spans(spans))
    assert sorted(again.span_id.tolist()) == sorted(table.span_id.tolist())  # stable ids on every read


def test_spans_that_have_phase_children_get_none_derived() -> None:
    table = SpanTable.from_spans(drill_request(1))
    assert with_phase_spans(table) == (table, 0)


def test_without_ttft_the_phases_start_at_the_span_and_stay_inside_it() -> None:
    llm = span(
        1,
        "llm_request",
        start_ms=0.0,
        end_ms=50.0,
        attributes={"gen_ai.latency.time_in_queue": 0.030, "gen_ai.latency.time_in_model_prefill": 0.040},
    )
    table, added = with_phase_spans(SpanTable.from_spans([llm]))
    rows = _by_name(table)
    assert added == 2 and "decode" not in rows
    assert _ms(table, rows["queue"]) == pytest.approx((0.0, 30.0))
    assert _ms(table, rows["prefill"]) == pytest.approx((30.0, 50.0))  # clipped at the span's end


def test_a_request_aborted_in_the_queue_spent_the_whole_span_there() -> None:
    aborted = span(
        1, "llm_request", start_ms=0.0, end_ms=900.0, attributes={"gen_ai.response.finish_reasons": '["abort"]'}
    )
    table, added = with_phase_spans(SpanTable.from_spans([aborted]))
    queue = _by_name(table)["queue"]
    assert added == 1 and _ms(table, queue) == (0.0, 900.0)
    assert table.attributes[queue][PHASE_FROM] == NEVER_SCHEDULED


@pytest.mark.parametrize("value", [-0.1, "0.2", float("nan"), True, None])
def test_values_that_are_not_seconds_are_ignored(value: object) -> None:
    llm = span(1, "llm_request", attributes={"gen_ai.latency.time_in_queue": value})
    assert with_phase_spans(SpanTable.from_spans([llm]))[1] == 0


def test_every_source_derives_them_and_says_so(tmp_path: Path) -> None:
    spans = vllm_request(1) + vllm_request(2)
    source = ReceiverSource(ReceiverParams(file="spans.jsonl"), str(tmp_path))
    write_spans(tmp_path / "spans.jsonl", spans)
    table = source.table()
    assert len(table) == 12 and source.report.spans == 6
    assert source.report.notes == [
        "6 phase span(s) (queue/prefill/decode) derived from llm_request's gen_ai.latency.* attributes"
    ]
    otlp = _otlp_json(spans)
    (tmp_path / "otlp.jsonl").write_text(json.dumps(otlp) + "\n")
    other = OtlpFileSource(OtlpFileParams(path="otlp.jsonl"), str(tmp_path))
    assert sorted(other.table().names[c] for c in set(other.table().name.tolist())) == sorted(
        {"POST /v1/chat/completions", "POST", "llm_request", "queue", "prefill", "decode"}
    )


def _otlp_json(spans: list[dict]) -> dict:
    def value(v: object) -> dict:
        if isinstance(v, bool):
            return {"boolValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}
        if isinstance(v, float):
            return {"doubleValue": v}
        return {"stringValue": str(v)}

    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": s["service"]}}]},
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": s["trace_id"],
                                "spanId": s["span_id"],
                                "parentSpanId": s["parent_span_id"] or "",
                                "name": s["name"],
                                "kind": 2 if s["kind"] == "SERVER" else 3 if s["kind"] == "CLIENT" else 1,
                                "startTimeUnixNano": str(s["start_ns"]),
                                "endTimeUnixNano": str(s["end_ns"]),
                                "attributes": [{"key": k, "value": value(v)} for k, v in s["attributes"].items()],
                            }
                        ]
                    }
                ],
            }
            for s in spans
        ]
    }
