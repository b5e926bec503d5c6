"""Span tables in CSV (drill.traces.csvfile): the column layouts trace stores and public benchmarks export."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from drill.cli.main import cli
from drill.errors import InputError
from drill.rundir.jsonl import ReadReport
from drill.traces.csvfile import CsvFileSource, read_csv_file
from drill.traces.detect import detect_source
from drill.traces.table import KIND_NAMES, STATUS_NAMES, SpanTable
from tests.traces.spankit import span
from tests.traces.test_suspects import Fault, analyze_cli, shop


def _pod(service: str) -> str:
    return f"{service}-579b9bff58-t2dbm"


def _nezha(s: dict) -> list:
    """Nezha's trace CSVs: pods for services, ``root`` for no parent, ns times, a µs duration, no kind or status."""
    duration_us = (s["end_ns"] - s["start_ns"]) // 1000
    return [s["trace_id"], s["span_id"], s["parent_span_id"] or "root", _pod(s["service"]), s["name"]]  + [
        s["start_ns"], s["end_ns"], duration_us,
    ]  # fmt: skip


def _rcaeval(s: dict) -> list:
    """A benchmark's traces.csv: µs start and duration, an HTTP status code, no kind."""
    http = 500 if s["status"]["code"] == "ERROR" else 200
    start_us, end_us = s["start_ns"] // 1000, s["end_ns"] // 1000
    return [s["trace_id"], s["span_id"], s["parent_span_id"] or "", s["service"], s["name"], "handle"] + [
        start_us, end_us - start_us, http,
    ]  # fmt: skip


def _jaeger_es(s: dict) -> list:
    """Jaeger's spans as stored in Elasticsearch, flattened: ``startTimeMillis`` (for range queries) before
    ``startTime`` in µs, a µs ``duration``."""
    start_us, end_us = s["start_ns"] // 1000, s["end_ns"] // 1000
    return [s["trace_id"], s["span_id"], s["parent_span_id"] or "", s["service"], s["name"]] + [
        start_us // 1000, start_us, end_us - start_us,
    ]  # fmt: skip


def _logged(s: dict) -> list:
    """Nezha's layout behind a ``timestamp`` column: when the row was logged, to the second (not the span's start)."""
    logged = datetime.fromtimestamp(s["start_ns"] // 10**9 + 1, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    return [logged, *_nezha(s)]


def _short_names(s: dict) -> list:
    """A table that names the span ``id`` and its parent ``pid``, says ``success`` for the status, ms times."""
    start_ms, end_ms = s["start_ns"] / 1e6, s["end_ns"] / 1e6
    success = "False" if s["status"]["code"] == "ERROR" else "True"
    return ["RemoteProcess", f"{start_ms:.3f}", f"{end_ms - start_ms:.3f}", success, s["trace_id"], s["span_id"]] + [
        s["parent_span_id"] or "None", f"docker_00{len(s['service'])}", s["service"], s["name"],
    ]  # fmt: skip


def _clickhouse(s: dict) -> list:
    """The OpenTelemetry Collector's ClickHouse exporter, as a TSV export: a date-time start, a ns duration."""
    start = datetime.fromtimestamp(s["start_ns"] // 10**9, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    return [f"{start}.{s['start_ns'] % 10**9:09d}", s["trace_id"].upper(), s["span_id"], s["parent_span_id"] or ""] + [
        s["name"], f"SPAN_KIND_{s['kind']}", s["service"], s["end_ns"] - s["start_ns"],
        f"STATUS_CODE_{s['status']['code']}", s["status"]["message"] or "", "{'http.route': '/x'}",
    ]  # fmt: skip


SHAPES = {
    "nezha": (",", "TraceID,SpanID,ParentID,PodName,OperationName,StartTimeUnixNano,EndTimeUnixNano,Duration", _nezha),
    "rcaeval": (
        ",",
        "traceID,spanID,parentSpanID,serviceName,operationName,methodName,startTime,duration,statusCode",
        _rcaeval,
    ),
    "jaeger-es": (
        ",",
        "traceID,spanID,parentSpanID,serviceName,operationName,startTimeMillis,startTime,duration",
        _jaeger_es,
    ),
    "logged": (
        ",",
        "timestamp,TraceID,SpanID,ParentID,PodName,OperationName,StartTimeUnixNano,EndTimeUnixNano,Duration",
        _logged,
    ),
    "short-names": (
        ",",
        "callType,startTime,elapsedTime,success,traceId,id,pid,cmdb_id,serviceName,operationName",
        _short_names,
    ),
    "clickhouse": (
        "\t",
        "Timestamp\tTraceId\tSpanId\tParentSpanId\tSpanName\tSpanKind\tServiceName\tDuration\tStatusCode\t"
        "StatusMessage\tSpanAttributes",
        _clickhouse,
    ),
}


def write_csv(path: Path, spans: list[dict], shape: str) -> Path:
    delimiter, header, row = SHAPES[shape]
    with path.open("w", newline="") as fh:
        fh.write(header + "\n")
        out = csv.writer(fh, delimiter=delimiter, lineterminator="\n")
        for s in spans:
            out.writerow(row(s))
    return path


def _spans() -> list[dict]:
    entry = span(1, "GET /checkout", service="gateway", kind="SERVER", start_ms=0, end_ms=10)
    call = span(1, "POST /verify", service="gateway", kind="CLIENT", parent=entry, start_ms=1, end_ms=9)
    serve = span(1, "POST /verify", service="auth", kind="SERVER", parent=call, start_ms=2.5, end_ms=8, status="ERROR")
    return [entry, call, serve]


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_layout_is_read_into_the_same_spans(tmp_path, shape: str) -> None:
    spans = _spans()
    path = write_csv(tmp_path / f"{shape}.csv", spans, shape)
    assert detect_source(path) == "csv_file"
    report = ReadReport(path)
    table = read_csv_file(path, report)
    expected = SpanTable.from_spans(spans)
    assert report.lines_read == 3 and report.bad_count == 0
    assert table.trace_id.tolist() == expected.trace_id.tolist()
    assert table.parent_id.tolist() == expected.parent_id.tolist()  # "root" and "" are no parent
    assert table.parent_row.tolist() == [-1, 0, 1]
    assert [table.services[s] for s in table.service] == ["gateway", "gateway", "auth"]  # a pod's suffix taken off
    assert [table.names[n] for n in table.name] == ["GET /checkout", "POST /verify", "POST /verify"]
    assert table.start_ns.tolist() == expected.start_ns.tolist()  # ns, µs and date-times alike
    assert table.end_ns.tolist() == expected.end_ns.tolist()
    kinds = [KIND_NAMES[k] for k in table.kind]
    statuses = [STATUS_NAMES[s] for s in table.status]
    if shape == "clickhouse":
        assert kinds == ["SERVER", "CLIENT", "SERVER"] and statuses == ["UNSET", "UNSET", "ERROR"]
        assert table.attributes[0] == {"SpanAttributes": "{'http.route': '/x'}"}
    else:
        assert kinds == ["UNSPECIFIED"] * 3
    if shape == "rcaeval":
        assert statuses == ["UNSET", "UNSET", "ERROR"] and table.attributes[2]["http.response.status_code"] == 500
        assert table.attributes[0]["methodName"] == "handle"
    if shape == "nezha":
        assert table.attributes[2] == {"k8s.pod.name": "auth-579b9bff58-t2dbm"}  # Duration is not kept: the end is
    if shape == "jaeger-es":  # the µs start, not the ms one (whose unit the µs duration would have taken)
        assert table.attributes[2] == {"startTimeMillis": spans[2]["start_ns"] // 10**6}
    if shape == "short-names":  # success=False is the error; the rest are attributes
        assert statuses == ["UNSET", "UNSET", "ERROR"] and set(table.attributes[0]) == {"callType", "cmdb_id"}
    if shape == "logged":  # a row's timestamp is kept, not taken for the span's start
        assert set(table.attributes[2]) == {"timestamp", "k8s.pod.name"}


@pytest.mark.parametrize(
    "shape, read",
    [
        ("jaeger-es", "start startTime (µs, by its size), duration duration (µs, by the start's)"),
        ("logged", "start StartTimeUnixNano (ns, by its name), end EndTimeUnixNano (ns, by its name)"),
        ("clickhouse", "start Timestamp (date-time), duration Duration (ns, by being beside a date-time)"),
    ],
)
def test_the_source_says_which_column_it_read_as_what_and_in_which_unit(tmp_path, shape: str, read: str) -> None:
    path = write_csv(tmp_path / "spans.csv", _spans(), shape)
    source = CsvFileSource(CsvFileSource.Params(path=str(path)), str(tmp_path))
    source.table()
    assert len(source.report.notes) == 1 and read in source.report.notes[0], source.report.notes
    result = CliRunner().invoke(cli, ["traces", "analyze", str(path), "--json"])
    assert read in json.loads(result.output)["files"][0]["notes"][0]


def test_rows_that_cannot_be_read_are_counted_with_their_line_and_the_rest_is_read(tmp_path) -> None:
    path = tmp_path / "bad.csv"
    good = "a1,01,,svc,op,1700000000000000,5\n"
    path.write_bytes(
        b"traceId,spanId,parentId,serviceName,operationName,startTime,duration\n"
        + good.encode()
        + b"a1,02,01,svc,op,1700000000000000\n"  # line 3: a cell short
        + b"a1,03,01,svc,op,yesterday,5\n"  # line 4: not a time
        + b"a1,,01,svc,op,1700000000000000,5\n"  # line 5: no span id
        + b"a1,05,01,svc\xff,op,1700000000000000,5\n"  # line 6: not UTF-8
        + b'a1,06,01,svc,"'
        + b"x" * 200_000
        + b'",1700000000000000,5\n'  # line 7: a cell over the reader's limit
        + b"a1,07,01,svc,op,1700000000000001,5\n"
        + "a1,08,01,svc,op \ufffd,1700000000000001,5\n".encode()  # U+FFFD itself is text
    )
    report = ReadReport(path)
    table = read_csv_file(path, report)
    assert len(table) == 3 and report.lines_read == 3 and report.bad_count == 5
    assert table.names[table.name[2]] == "op \ufffd"
    lines = {bad.line: bad.reason for bad in report.bad_lines}
    assert sorted(lines) == [3, 4, 5, 6, 7], lines
    assert "6 cells where the header has 7" in lines[3] and "not a number or a date-time" in lines[4]
    assert "no span id" in lines[5] and "not UTF-8" in lines[6] and "csv.Error" in lines[7]
    assert table.end_ns.tolist()[0] - table.start_ns.tolist()[0] == 5_000  # µs, the start time's unit


def test_a_line_over_the_cap_is_skipped_whole_and_counted_and_the_lines_after_it_keep_their_numbers(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr("drill.traces.csvfile.MAX_LINE_BYTES", 1000)
    path = tmp_path / "long.csv"
    row = "a1,{},,svc,op,1700000000000000,5\n"
    path.write_text(
        "traceId,spanId,parentId,serviceName,operationName,startTime,duration\n"
        + row.format("01")
        + "a1,02,,"
        + "," * 5000
        + "\n"  # line 3: 5,008 characters
        + row.format("03")
        + 'a1,04,,svc,"two\nlines",1700000000000000\n'  # lines 5-6: a cell short
        + row.format("05")
    )
    report = ReadReport(path)
    table = read_csv_file(path, report)
    assert table.span_id.tolist() == ["01", "03", "05"] and report.bad_count == 2
    assert [(bad.line, bad.reason.split(":")[0]) for bad in report.bad_lines] == [
        (3, "line of 5008 characters skipped"),
        (5, "ValueError"),
    ]


def test_a_header_without_a_required_column_is_a_located_error_that_names_it(tmp_path) -> None:
    path = tmp_path / "spans.csv"
    path.write_text("\ntraceId,spanId,serviceName,operationName,duration\nab,cd,svc,op,5\n")
    with pytest.raises(InputError) as raised:
        read_csv_file(path, ReadReport(path))
    message = str(raised.value)
    assert message.startswith(f"{path}:2:1: the CSV header lacks a start time")
    assert "its columns: traceId, spanId, serviceName, operationName, duration" in message
    result = CliRunner().invoke(cli, ["traces", "analyze", str(path)])
    assert result.exit_code == 2 and "lacks a start time" in result.output
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"traceId,spanId,serviceName,operationName,startTime,dur\xe9e\n")
    with pytest.raises(InputError, match=r"latin.csv:1:1: the CSV header is not UTF-8 text"):
        read_csv_file(latin, ReadReport(latin))
    endless = tmp_path / "endless.csv"
    endless.write_text("traceId,spanId," + "x" * 100_000 + "\n")
    with pytest.raises(InputError, match=r"endless.csv:1:1: not a CSV span table: its first line is longer than"):
        read_csv_file(endless, ReadReport(endless))


def test_a_table_written_by_pandas_with_gaps_reads_the_same(tmp_path) -> None:
    path = tmp_path / "pandas.csv"
    path.write_text(
        ",traceID,spanID,parentSpanID,serviceName,operationName,startTime,duration,statusCode,spanKind\n"
        "0,ab,01,nan,gateway,GET /,1700000000000000.0,10.0,200.0,\n"  # an integer column with gaps: floats
        "1,ab,02,01,auth,POST /verify,1700000000000002.0,5.0,500.0,2.0\n"
        "2,ab,03,02,auth,check,1700000000000003.0,1.0,,\n"
    )
    report = ReadReport(path)
    table = read_csv_file(path, report)
    assert report.bad_count == 0 and table.parent_row.tolist() == [-1, 0, 1]
    assert [STATUS_NAMES[s] for s in table.status] == ["UNSET", "ERROR", "UNSET"]
    assert [KIND_NAMES[k] for k in table.kind] == ["UNSPECIFIED", "SERVER", "UNSPECIFIED"]
    assert (
        table.start_ns.tolist()[1] == 1_700_000_000_000_002_000 and table.end_ns.tolist()[1] == table.start_ns[1] + 5000
    )
    assert table.attributes[1] == {"http.response.status_code": 500}  # the unnamed index column is not kept


def test_relative_times_take_the_sources_time_unit(tmp_path) -> None:
    path = tmp_path / "spans.csv"
    path.write_text("trace_id;span_id;service;name;start;end\nab;cd;svc;op;1500;4000\n")
    source = CsvFileSource(CsvFileSource.Params(path=str(path), time_unit="us"), str(tmp_path))
    table = source.table()
    assert table.start_ns.tolist() == [1_500_000] and table.end_ns.tolist() == [4_000_000]
    assert "start start (µs, by the source's time_unit)" in source.report.notes[0]
    by_size = CsvFileSource(CsvFileSource.Params(path=str(path)), str(tmp_path)).table()
    assert by_size.start_ns.tolist() == [1_500 * 10**9]  # no unit anywhere: seconds, by their size


def test_other_formats_are_not_taken_for_csv(tmp_path) -> None:
    receiver = tmp_path / "spans.jsonl"
    receiver.write_text(json.dumps({"trace_id": "ab", "span_id": "cd", "start_ns": 1, "end_ns": 2}) + "\n")
    assert detect_source(receiver) == "receiver"
    other = tmp_path / "metrics.csv"
    other.write_text("time,cpu,memory\n1,2,3\n")
    with pytest.raises(InputError, match="not a span file"):
        detect_source(other)


def test_a_benchmarks_csv_without_kinds_ranks_the_callee_of_a_slow_link_first(tmp_path) -> None:
    path = write_csv(tmp_path / "traces.csv", shop(Fault(ingress_ms={"auth": 40.0})), "rcaeval")
    result = analyze_cli(path, "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["analysis"]["ranking"]["suspects"][0]["service"] == "auth"
    assert document["analysis"]["inferred_kinds"].startswith("span kinds inferred")
    assert [f["format"] for f in document["files"]] == ["csv_file"]
