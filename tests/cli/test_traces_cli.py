"""``drill traces analyze`` on span files of every format it detects, written by the tests."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from drill.cli.main import cli
from drill.cli.traces import parse_time_ns
from drill.traces.detect import detect_source
from drill.traces.table import KIND_NAMES, STATUS_NAMES
from tests.checks.rundir_kit import RunKit
from tests.traces.spankit import write_spans
from tests.traces.test_analysis import FAULT_START, SPACING_MS, drill_spans

FAULT_START_S = FAULT_START / 1e9


@pytest.fixture(scope="module")
def spans() -> list[dict]:
    """180 requests; from the 121st on, replica 0's queue takes 400 ms."""
    return drill_spans(lambda i: {"queue_ms": 400.0} if i % 2 == 0 else {})


def invoke(*args: str):
    return CliRunner().invoke(cli, ["traces", "analyze", *args], catch_exceptions=False)


def analysed(*args: str) -> dict:
    result = invoke(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


# --- writers of the other formats -----------------------------------------------------------------


def _any(value):
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": str(value)}


def _id(hex_id: str | None, b64: bool) -> str:
    if not hex_id:
        return ""
    return base64.b64encode(bytes.fromhex(hex_id)).decode() if b64 else hex_id


def otlp_traces_data(spans: list[dict], *, b64: bool = False, key: str = "resourceSpans") -> dict:
    by_service: dict[str, list[dict]] = {}
    for s in spans:
        by_service.setdefault(s["service"], []).append(
            {
                "traceId": _id(s["trace_id"], b64),
                "spanId": _id(s["span_id"], b64),
                "parentSpanId": _id(s["parent_span_id"], b64),
                "name": s["name"],
                "kind": KIND_NAMES.index(s["kind"]),
                "startTimeUnixNano": str(s["start_ns"]),
                "endTimeUnixNano": str(s["end_ns"]),
                "attributes": [{"key": k, "value": _any(v)} for k, v in s["attributes"].items()],
                "status": {"code": STATUS_NAMES.index(s["status"]["code"]), "message": s["status"]["message"] or ""},
            }
        )
    return {
        key: [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": service}}]},
                "scopeSpans": [{"scope": {"name": "test"}, "spans": items}],
            }
            for service, items in by_service.items()
        ]
    }


def write_otlp_json(path: Path, spans: list[dict], **kw) -> Path:
    """One TracesData per line, 70 spans a line (the Collector file exporter's shape)."""
    lines = [json.dumps(otlp_traces_data(spans[i : i + 70], **kw)) for i in range(0, len(spans), 70)]
    path.write_text("".join(line + "\n" for line in lines))
    return path


def write_otlp_proto(path: Path, spans: list[dict]) -> Path:
    message = json_format.ParseDict(otlp_traces_data(spans, b64=True), ExportTraceServiceRequest())
    path.write_bytes(message.SerializeToString())
    return path


def jaeger_json(spans: list[dict]) -> dict:
    traces: dict[str, list[dict]] = {}
    for s in spans:
        refs = (
            [{"refType": "CHILD_OF", "traceID": s["trace_id"], "spanID": s["parent_span_id"]}]
            if s["parent_span_id"]
            else []
        )
        traces.setdefault(s["trace_id"], []).append(
            {
                "traceID": s["trace_id"],
                "spanID": s["span_id"],
                "operationName": s["name"],
                "references": refs,
                "startTime": s["start_ns"] // 1000,
                "duration": (s["end_ns"] - s["start_ns"]) // 1000,
                "tags": [{"key": "span.kind", "type": "string", "value": s["kind"].lower()}],
                "logs": [],
                "processID": s["service"],
            }
        )
    return {
        "data": [
            {
                "traceID": t,
                "spans": items,
                "processes": {x["processID"]: {"serviceName": x["processID"], "tags": []} for x in items},
            }
            for t, items in traces.items()
        ]
    }


# --- format detection -------------------------------------------------------------------------------


def test_detect_source_by_content(tmp_path, spans):
    assert detect_source(write_spans(tmp_path / "a.log", spans[:20])) == "receiver"
    assert detect_source(write_otlp_json(tmp_path / "b.txt", spans[:20])) == "otlp_file"
    assert detect_source(write_otlp_json(tmp_path / "c", spans[:20], b64=True, key="batches")) == "otlp_file"
    assert detect_source(write_otlp_proto(tmp_path / "d.json", spans[:20])) == "otlp_proto_file"
    (tmp_path / "e.json").write_text(json.dumps(jaeger_json(spans[:20]), indent=2))
    assert detect_source(tmp_path / "e.json") == "jaeger_file"
    (tmp_path / "empty").write_text("")
    assert detect_source(tmp_path / "empty") == "receiver"


# --- analysis ---------------------------------------------------------------------------------------


def test_receiver_file_human_output(tmp_path, spans):
    path = write_spans(tmp_path / "spans.jsonl", spans)
    result = invoke(str(path), "--baseline-until", f"{FAULT_START_S}", "--fault-start", "2023-11-14T22:13:26Z")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "first abnormal span: drill-replica-0 / queue" in out
    assert "x baseline p99" in out and "after the fault injection" in out
    assert "chain, from the user-facing span down to it:" in out
    assert "drill-router / POST /v1/chat/completions" in out and "abnormal (service, span name) pairs" in out
    assert "traces starting before the baseline's end: 840 spans" in out


def test_json_output(tmp_path, spans):
    path = write_spans(tmp_path / "spans.jsonl", spans)
    data = analysed(
        str(path), "--baseline-until", f"{FAULT_START_S}", "--fault-start", f"{FAULT_START_S}", "--top", "2"
    )
    assert data["files"] == [
        {"path": str(path), "format": "receiver", "compression": None, "spans": 1260, "unreadable": 0, "where": []}
        | {"notes": []}
    ]
    first = data["analysis"]["first"]
    assert (first["service"], first["name"]) == ("drill-replica-0", "queue")
    assert 0 <= first["onset_s"] < 0.05 and len(first["chain"]) == 5
    assert len(data["analysis"]["pairs"]) == 2 and data["analysis"]["pairs"][0]["name"] == "queue"
    assert data["completeness"]["spans"] == 1260


@pytest.mark.parametrize("writer", ["otlp_hex", "otlp_base64_batches", "otlp_proto"])
def test_other_formats_give_the_same_answer(tmp_path, spans, writer):
    path = tmp_path / "export"
    if writer == "otlp_hex":
        write_otlp_json(path, spans)
    elif writer == "otlp_base64_batches":
        write_otlp_json(path, spans, b64=True, key="batches")
    else:
        write_otlp_proto(path, spans)
    data = analysed(str(path), "--baseline-until", f"{FAULT_START_S}", "--fault-start", f"{FAULT_START_S}")
    first = data["analysis"]["first"]
    assert data["files"][0]["spans"] == 1260
    assert (first["service"], first["name"]) == ("drill-replica-0", "queue")
    assert [c["name"] for c in first["chain"]][-1] == "POST /v1/chat/completions"


def test_fault_end_leaves_the_recovery_out_of_the_fault_window(tmp_path):
    """The fault lasts 30 of the 60 fault-window requests; the 30 after its revert are normal again."""
    spans = drill_spans(lambda i: {"queue_ms": 400.0} if i % 2 == 0 and i < 30 else {})
    path = write_spans(tmp_path / "spans.jsonl", spans)
    revert_s = FAULT_START_S + 30 * SPACING_MS / 1e3 - 0.001  # just before the 31st fault-window request
    whole = analysed(str(path), "--baseline-until", f"{FAULT_START_S}")
    cut = analysed(str(path), "--baseline-until", f"{FAULT_START_S}", "--fault-end", f"{revert_s}")
    assert (whole["analysis"]["fault_spans"], cut["analysis"]["fault_spans"]) == (60 * 7, 30 * 7)
    assert cut["analysis"]["first"]["name"] == "queue"
    flagged = {p["name"]: p["share"] for p in cut["analysis"]["pairs"]}
    assert flagged["queue"] > {p["name"]: p["share"] for p in whole["analysis"]["pairs"]}["queue"]


def test_an_epoch_time_in_s_ms_us_or_ns_is_told_by_its_size(tmp_path, spans):
    """A benchmark that records its injection in ms (or µs, ns) splits the spans where one in seconds does."""
    path = write_spans(tmp_path / "spans.jsonl", spans)
    ns = round(FAULT_START_S * 10**9)
    split = []
    for until in (f"{FAULT_START_S}", f"{ns // 10**6}", f"{ns // 10**3}", f"{ns}"):
        result = invoke(str(path), "--baseline-until", until)
        assert result.exit_code == 0, result.output
        split.append(next(line for line in result.output.splitlines() if line.startswith("baseline:")))
    assert len(set(split)) == 1 and "fault window: 0 spans" not in split[0], split
    assert parse_time_ns("1700000000123456789", "--x") == 1_700_000_000_123_456_789  # exact, no float rounding
    assert parse_time_ns("1700000000.5", "--x") == 1_700_000_000_500_000_000


def test_default_baseline_is_the_first_third_and_says_so(tmp_path, spans):
    path = write_spans(tmp_path / "spans.jsonl", spans)
    result = invoke(str(path))
    assert result.exit_code == 0, result.output
    assert "the first third of the time range (no baseline given)" in result.output
    assert "first abnormal span: drill-replica-0 / queue" in result.output


def test_baseline_files(tmp_path, spans):
    normal = [s for s in spans if s["start_ns"] < FAULT_START]
    trace_ids = {s["trace_id"] for s in normal}
    fault = [s for s in spans if s["trace_id"] not in trace_ids]
    base = write_spans(tmp_path / "normal.jsonl", normal)
    drill = write_otlp_json(tmp_path / "fault.otlp", fault)
    data = analysed(str(drill), "--baseline", str(base))
    assert data["analysis"]["baseline_rule"] == "the given baseline spans"
    assert data["analysis"]["baseline_spans"] == len(normal) and data["analysis"]["first"]["name"] == "queue"
    assert [f["format"] for f in data["files"]] == ["receiver", "otlp_file"]


def test_unreadable_lines_are_counted_not_dropped(tmp_path, spans):
    path = write_spans(tmp_path / "spans.jsonl", spans)
    with path.open("a") as fh:
        fh.write("{broken\n")
    data = analysed(str(path))
    assert data["files"][0]["unreadable"] == 1 and "spans.jsonl:1261" in data["files"][0]["where"][0]
    result = invoke(str(path))
    assert "1 unreadable" in result.output


def test_records_are_joined(tmp_path, spans):
    kit = RunKit(tmp_path)
    for trace in sorted({s["trace_id"] for s in spans})[:10]:
        kit.request(at=1.0, trace_id=trace)
    kit.request(at=2.0, trace_id="f" * 32)
    kit.write()
    path = write_spans(tmp_path / "spans.jsonl", spans)
    data = analysed(str(path), "--records", str(tmp_path / "requests.jsonl"))
    assert data["completeness"]["requests"] == 11 and data["completeness"]["requests_with_spans"] == 10
    assert data["records"]["lines_read"] == 11 and data["records"]["bad_count"] == 0
    result = invoke(str(path), "--records", str(tmp_path / "requests.jsonl"))
    assert "client records: 11 requests, 10 with spans of their trace id (p50 7 spans per request)" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--baseline-until", "1700000000", "--baseline", "{spans}"], "not both"),
        (["--fault-start", "yesterday"], "neither an epoch time nor an RFC 3339 time"),
        (["--fault-start", "inf"], "neither an epoch time nor an RFC 3339 time"),
        (["--baseline-until", "2023-11-14T22:13:26"], "no UTC offset"),
        (["--top", "0"], "--top"),
        (["--fault-start", "1700000100", "--fault-end", "1700000100"], "is not after --fault-start '1700000100'"),
        (["--baseline-until", "1700000100", "--fault-end", "1700000099.5"], "is not after --baseline-until"),
    ],
)
def test_bad_options_exit_2(tmp_path, spans, args, message):
    path = write_spans(tmp_path / "spans.jsonl", spans[:50])
    result = invoke(str(path), *[a.format(spans=path) for a in args])
    assert result.exit_code == 2 and message in result.output


def test_bad_files_exit_2_with_the_path(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    result = CliRunner().invoke(cli, ["traces", "analyze", str(text)])
    assert result.exit_code == 2 and "notes.txt" in result.output and "not a span file" in result.output
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}\n')
    result = CliRunner().invoke(cli, ["traces", "analyze", str(other)])
    assert result.exit_code == 2 and "other.json" in result.output
    zipkin = tmp_path / "zipkin.json"
    zipkin.write_text('[{"traceId": "ab", "id": "cd"}]')  # v2, never finished: no timestamp, no duration
    result = CliRunner().invoke(cli, ["traces", "analyze", str(zipkin)])
    assert result.exit_code == 2 and "no span could be read" in result.output
    assert "first: " in result.output and "[0]: ValueError: no timestamp or no duration" in result.output
    v1 = tmp_path / "v1.json"
    v1.write_text('[{"traceId": "ab", "id": "cd", "annotations": [{"value": "sr", "endpoint": {}}]}]')
    result = CliRunner().invoke(cli, ["traces", "analyze", str(v1)])
    assert result.exit_code == 2 and "Zipkin's v1 model" in result.output
    result = CliRunner().invoke(cli, ["traces", "analyze", str(tmp_path / "missing.jsonl")])
    assert result.exit_code == 2


def test_a_broken_first_line_does_not_hide_the_format(tmp_path, spans):
    path = tmp_path / "spans.jsonl"
    path.write_text("{broken\n" + json.dumps(spans[0]) + "\n")
    assert detect_source(path) == "receiver"
    data = analysed(str(path))
    assert data["files"][0]["unreadable"] == 1 and data["files"][0]["spans"] == 1


def test_no_readable_span_exits_2(tmp_path):
    path = tmp_path / "spans.jsonl"
    path.write_text('{"trace_id": "ab", "span_id": "cd"}\n')
    result = CliRunner().invoke(cli, ["traces", "analyze", str(path)])
    assert result.exit_code == 2 and "no span could be read" in result.output


def test_listed_in_the_cli():
    result = CliRunner().invoke(cli, ["traces", "--help"])
    assert result.exit_code == 0 and "analyze" in result.output


def test_jaeger_json_download(tmp_path, spans):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(jaeger_json(spans)))
    data = analysed(str(path), "--baseline-until", f"{FAULT_START_S}", "--fault-start", f"{FAULT_START_S}")
    assert data["files"][0]["format"] == "jaeger_file" and data["files"][0]["spans"] == 1260
    first = data["analysis"]["first"]
    assert (first["service"], first["name"], first["kind"]) == ("drill-replica-0", "queue", "INTERNAL")
    assert [c["name"] for c in first["chain"]] == [
        "queue",
        "llm_request",
        "POST /v1/chat/completions",
        "POST",
        "POST /v1/chat/completions",
    ]


def test_an_empty_fault_window_is_said(tmp_path, spans):
    path = write_spans(tmp_path / "spans.jsonl", spans)
    result = CliRunner().invoke(cli, ["traces", "analyze", str(path), "--baseline-until", "2030-01-01T00:00:00+00:00"])
    assert result.exit_code == 0
    assert "the fault window holds no span" in result.stderr and "no abnormal span" in result.stdout
