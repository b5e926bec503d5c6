"""Zipkin v2 JSON files (drill.traces.zipkin): as OpenTelemetry's Zipkin exporter writes them, as Zipkin's API
serves them, with shared span ids and with spans that cannot be read."""

from __future__ import annotations

import json
from pathlib import Path

from opentelemetry.exporter.zipkin.json.v2 import JsonV2Encoder
from opentelemetry.exporter.zipkin.node_endpoint import NodeEndpoint
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

from drill.rundir.jsonl import ReadReport
from drill.traces.detect import detect_source
from drill.traces.sources import SourceReport
from drill.traces.table import KIND_NAMES, STATUS_NAMES, SpanTable
from drill.traces.zipkin import ZipkinFileSource, read_zipkin_file
from tests.traces.spankit import zipkin_span
from tests.traces.test_suspects import Fault, analyze_cli, shop


def _provider(service: str) -> tuple[TracerProvider, InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(spans))
    return provider, spans


def _exported(service: str, spans: InMemorySpanExporter) -> list[dict]:
    """What OpenTelemetry's Zipkin exporter posts for ``service`` (its local endpoint named as the exporter does)."""
    endpoint = NodeEndpoint()
    endpoint.service_name = service
    return json.loads(JsonV2Encoder().serialize(spans.get_finished_spans(), endpoint))


def _sdk_checkout() -> list[list[dict]]:
    """A checkout traced by the real SDK in two services: gateway's SERVER span, its failed CLIENT call to auth and
    a local span; auth's SERVER span under the call. One export per service."""
    gateway, gateway_spans = _provider("gateway")
    auth, auth_spans = _provider("auth")
    outer = gateway.get_tracer("shop")
    with outer.start_as_current_span("GET /checkout", kind=SpanKind.SERVER):
        with outer.start_as_current_span(
            "POST /verify", kind=SpanKind.CLIENT, attributes={"peer.service": "auth"}
        ) as c:
            with auth.get_tracer("auth").start_as_current_span(
                "POST /verify", kind=SpanKind.SERVER, context=set_span_in_context(c)
            ):
                pass
            c.set_status(Status(StatusCode.ERROR, "token expired"))
        with outer.start_as_current_span("render"):
            pass
    return [_exported("gateway", gateway_spans), _exported("auth", auth_spans)]


def _read(path: Path) -> tuple[SpanTable, SourceReport]:
    source = ZipkinFileSource(ZipkinFileSource.Params(path=str(path)), str(path.parent))
    return source.table(), source.report


def _by_name(table: SpanTable) -> dict[tuple[str, str], int]:
    return {(table.services[table.service[r]], table.names[table.name[r]]): r for r in range(len(table))}


def test_the_sdks_zipkin_export_reads_with_services_parents_kinds_and_status(tmp_path) -> None:
    exports = _sdk_checkout()
    path = tmp_path / "zipkin.jsonl"
    path.write_text("".join(json.dumps(export) + "\n" for export in exports))  # one report per line
    assert detect_source(path) == "zipkin_file"
    table, report = _read(path)
    assert report.unreadable == 0 and len(table) == 4
    rows = _by_name(table)
    entry, call, served, local = (
        rows[key]
        for key in [
            ("gateway", "GET /checkout"),
            ("gateway", "POST /verify"),
            ("auth", "POST /verify"),
            ("gateway", "render"),
        ]
    )
    assert table.parent_row[[entry, call, served, local]].tolist() == [-1, entry, call, entry]
    kinds = [KIND_NAMES[k] for k in table.kind[[entry, call, served, local]]]
    assert kinds == ["SERVER", "CLIENT", "SERVER", "UNSPECIFIED"]  # a local span has no kind in Zipkin
    assert STATUS_NAMES[table.status[call]] == "ERROR" and table.status_message[call] == "token expired"
    assert "otel.status_code" not in table.attributes[call] and "error" not in table.attributes[call]
    assert table.attributes[call]["peer.service"] == "auth"
    assert STATUS_NAMES[table.status[entry]] == "UNSET"
    durations = (table.end_ns - table.start_ns)[[entry, call]]
    assert durations[0] >= durations[1] > 0 and table.start_ns[call] % 1000 == 0  # µs, as Zipkin keeps them


def test_a_list_of_spans_a_list_of_traces_and_span_lines_read_the_same(tmp_path) -> None:
    spans = [s for export in _sdk_checkout() for s in export]
    forms = {
        "spans.json": json.dumps(spans, indent=2),  # POST /api/v2/spans, pretty-printed
        "traces.json": json.dumps([spans[:2], spans[2:]]),  # GET /api/v2/traces: a list of lists
        "lines.jsonl": "".join(json.dumps(s) + "\n" for s in spans),
        "a-span-a-line.json": "[\n" + ",\n".join(json.dumps(s) for s in spans) + "\n]\n",  # its last line reads alone
    }
    read = {}
    for name, text in forms.items():
        path = tmp_path / name
        path.write_text(text)
        assert detect_source(path) == "zipkin_file", name
        table, report = _read(path)
        assert report.unreadable == 0, (name, report.where)
        read[name] = sorted(zip(table.span_id.tolist(), table.parent_id.tolist(), table.start_ns.tolist()))
    assert read["spans.json"] == read["traces.json"] == read["lines.jsonl"] == read["a-span-a-line.json"]
    assert len(read["spans.json"]) == 4


def _zipkin(trace: str, span_id: str, service: str, *, parent: str | None = None, **fields) -> dict:
    span = {"traceId": trace, "id": span_id, "name": "op", "timestamp": 1_700_000_000_000_000, "duration": 1000}
    span |= {"localEndpoint": {"serviceName": service}, **fields}
    return span | ({"parentId": parent} if parent else {})


def test_a_shared_span_id_is_split_into_the_client_and_the_server_span_with_the_callees_work_under_it(tmp_path) -> None:
    trace = "463ac35c9f6413ad"  # 64-bit, as B3 clients send it
    spans = [
        _zipkin(trace, "a" * 16, "gateway", kind="SERVER"),
        _zipkin(trace, "b" * 16, "gateway", parent="a" * 16, kind="CLIENT", remoteEndpoint={"serviceName": "auth"}),
        _zipkin(trace, "b" * 16, "auth", parent="a" * 16, kind="SERVER", shared=True),
        _zipkin(
            trace, "c" * 16, "auth", parent="b" * 16, kind="CLIENT", remoteEndpoint={"ipv4": "10.0.0.7", "port": 5432}
        ),
    ]
    path = tmp_path / "shared.json"
    path.write_text(json.dumps(spans))
    table, report = _read(path)
    assert report.unreadable == 0
    assert set(table.trace_id.tolist()) == {trace.zfill(32)}
    client, server, query = 1, 2, 3
    assert table.span_id[client] == "b" * 16 and table.span_id[server] != "b" * 16  # an id of its own
    assert table.parent_row.tolist() == [-1, 0, client, server]  # auth's query under auth's span, not the call
    assert table.attributes[client] == {"peer.service": "auth"}
    assert table.attributes[query] == {"network.peer.address": "10.0.0.7", "network.peer.port": 5432}
    assert _read(path)[0].span_id[server] == table.span_id[server]  # derived alike on every read
    spans[2].pop("shared")  # as a conversion from v1 may leave it: one id on two sides of a call all the same
    path.write_text(json.dumps(spans))
    unflagged, _ = _read(path)
    assert (
        unflagged.parent_row.tolist() == [-1, 0, client, server] and unflagged.span_id[server] == table.span_id[server]
    )


def test_spans_that_cannot_be_read_are_counted_and_located_and_the_rest_is_read(tmp_path) -> None:
    trace = "1" * 32
    lines = [
        json.dumps(_zipkin(trace, "a" * 16, "gateway")),
        json.dumps([_zipkin(trace, "b" * 16, "gateway", parent="a" * 16), _zipkin(trace, "zz", "gateway")]),
        "{not json",
        json.dumps({k: v for k, v in _zipkin(trace, "c" * 16, "gateway").items() if k != "duration"}),
    ]
    path = tmp_path / "zipkin.jsonl"
    path.write_text("\n".join(lines) + "\n")
    table, report = _read(path)
    assert sorted(table.span_id.tolist()) == ["a" * 16, "b" * 16]
    assert report.unreadable == 3
    where = "\n".join(report.where)
    assert f"{path}:3: DecodeError" in where  # the line that is not JSON
    assert f"{path}:2: [1]: ValueError: id 'zz' is not 1 to 16 hex characters" in where  # the line's second span
    assert f"{path}:4: ValueError: no timestamp or no duration" in where


def test_the_reader_counts_a_missing_file_and_reads_an_empty_one(tmp_path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    assert detect_source(empty) == "zipkin_file"
    table, report = _read(empty)
    assert len(table) == 0 and report.unreadable == 0
    missing = ReadReport(tmp_path / "gone.json")
    assert len(read_zipkin_file(tmp_path / "gone.json", missing, SourceReport("zipkin_file"))) == 0
    assert not missing.exists


def test_a_slow_database_named_only_in_the_remote_endpoint_ranks_first(tmp_path) -> None:
    path = tmp_path / "shop.json"
    path.write_text(json.dumps([zipkin_span(s, remote_from_address=True) for s in shop(Fault(pg_factor=5.0))]))
    result = analyze_cli(path, "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert [f["format"] for f in document["files"]] == ["zipkin_file"]
    assert document["analysis"]["ranking"]["suspects"][0]["service"] == "pg"


WRONG = [None, True, -1, 2**63, 2**64 + 1, 1e308, "fast", "", [], [1, [2]], {}, {"a": {"b": None}}, "9" * 5000, 2**70]
FIELDS = [
    "traceId",
    "id",
    "parentId",
    "timestamp",
    "duration",
    "name",
    "kind",
    "localEndpoint",
    "remoteEndpoint",
    "tags",
]


def test_any_wrong_value_of_any_field_is_at_most_one_unreadable_span_and_deep_json_one_record(tmp_path) -> None:
    good = _zipkin("ab", "cd", "svc")
    path = tmp_path / "hostile.json"
    for field in FIELDS:
        for wrong in WRONG:
            path.write_text(json.dumps([good | {field: wrong}, good]))
            table, report = _read(path)
            assert len(table) + report.unreadable == 2 and len(table) >= 1, (field, wrong, report.where)
    path.write_text("[" * 100_000 + "]" * 100_000)
    table, report = _read(path)
    assert len(table) == 0 and report.unreadable == 1 and "RecursionError" in report.where[0]
