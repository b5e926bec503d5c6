"""RunTraces of a run directory: the receiver's spans.jsonl, its ReadReport, the join, no spans."""

from __future__ import annotations

import json
from pathlib import Path

from drill.rundir.evidence import RunEvidence
from drill.rundir.records import RequestRecord
from drill.traces.run_traces import NO_SPANS, run_traces
from tests.traces.spankit import drill_request, trace_id, write_spans


def _record(n: int, trace: int, **kw) -> RequestRecord:
    values = dict(
        request_id=f"r{n}",
        logical_id=f"l{n}",
        pool="p",
        attempt=1,
        intended_ts=1.0,
        sent_ts=1.0,
        schedule_lag_ms=0.0,
        status=200,
        ttft_ms=10.0,
        e2e_ms=30.0,
        trace_id=trace_id(trace),
    )
    values.update(kw)
    return RequestRecord(**values)


def _run(tmp_path: Path, spans: list[dict] | None, records: list[RequestRecord]) -> RunEvidence:
    if spans is not None:
        write_spans(tmp_path / "spans.jsonl", spans)
    (tmp_path / "requests.jsonl").write_text("".join(r.to_json() + "\n" for r in records))
    return RunEvidence(tmp_path)


def test_run_spans_are_read_joined_and_measured(tmp_path: Path) -> None:
    evidence = _run(tmp_path, drill_request(1) + drill_request(2), [_record(1, 1), _record(2, 2), _record(3, 9)])
    traces = run_traces(evidence)
    assert len(traces.table) == 14 and traces.no_spans_reason is None
    assert traces.source == "receiver: spans.jsonl"
    assert evidence.reports["spans.jsonl"].lines_read == 14 and evidence.reports["spans.jsonl"].clean
    c = traces.completeness
    assert (c.spans, c.traces, c.orphans, c.traces_without_root, c.remote_roots) == (14, 2, 0, 0, 2)
    assert (c.requests, c.requests_with_spans, c.spans_per_request_p50) == (3, 2, 7.0)
    assert len(traces.joined.server_spans("r1")) == 7 and traces.joined.server_spans("r3") == []
    assert traces.thin_reason(min_spans=10) is None
    assert traces.thin_reason(min_spans=100) == "only 14 span(s), fewer than the 100 needed"


def test_bad_and_torn_lines_are_counted_in_the_run_report(tmp_path: Path) -> None:
    spans = drill_request(1)
    text = "".join(json.dumps(s) + "\n" for s in spans[:3]) + "not json\n" + json.dumps(spans[3]) + "\n"
    text += '{"trace_id": 5}\n' + json.dumps(spans[4])[:40]  # wrong type, then torn last line
    (tmp_path / "spans.jsonl").write_text(text)
    (tmp_path / "requests.jsonl").write_text("")
    evidence = RunEvidence(tmp_path)
    traces = run_traces(evidence)
    report = evidence.reports["spans.jsonl"]
    assert len(traces.table) == 4 and report.lines_read == 4
    assert report.bad_count == 2 and [b.line for b in report.bad_lines] == [4, 6]
    assert report.torn_last_line is not None and report.torn_last_line.line == 7
    assert traces.completeness.unreadable == 3
    assert "spans.jsonl:4: " in traces.completeness.unreadable_where[0]


def test_no_spans_file_or_an_empty_one_says_the_target_exported_none(tmp_path: Path) -> None:
    missing = run_traces(_run(tmp_path, None, [_record(1, 1)]))
    assert missing.no_spans_reason == NO_SPANS == "the target exported no spans"
    assert missing.thin_reason(1) == NO_SPANS and len(missing.table) == 0
    assert missing.completeness.requests == 1 and missing.completeness.requests_with_spans == 0
    assert missing.joined.measurement_truth().joined == 0
    empty = run_traces(_run(tmp_path, [], []))
    assert empty.no_spans_reason == NO_SPANS
    assert empty.completeness.thin_reason(1) == NO_SPANS
