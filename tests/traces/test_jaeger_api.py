"""The jaeger_api source against a real Jaeger server: spans sent over OTLP by the OpenTelemetry SDK,
read back through Jaeger's HTTP query API for a time window."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

from drill import registry
from drill.errors import TargetError
from drill.traces.completeness import measure_completeness
from drill.traces.detect import open_span_file
from drill.traces.table import KIND_NAMES, STATUS_NAMES
from tests.traces.jaeger_server import BUILD_WAIT_S, JaegerServer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory: pytest.TempPathFactory):
    server = JaegerServer(tmp_path_factory.mktemp("jaeger")).start()
    try:
        yield server
    finally:
        server.stop()


def _provider(service: str, endpoint: str) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider


def _send_requests(endpoint: str, count: int) -> list:
    """``count`` router -> replica requests; the replica's llm_request errs on the last one."""
    router, replica = _provider("drill-router", endpoint), _provider("drill-replica-0", endpoint)
    r_tracer, s_tracer = router.get_tracer("drill.router"), replica.get_tracer("drill.stack")
    finished = []
    for i in range(count):
        with r_tracer.start_as_current_span("POST /v1/chat/completions", kind=SpanKind.SERVER) as top:
            with r_tracer.start_as_current_span(
                "POST", kind=SpanKind.CLIENT, attributes={"drill.upstream": "replica-0"}
            ) as client:
                context = set_span_in_context(client)
                with s_tracer.start_as_current_span(
                    "llm_request",
                    context=context,
                    kind=SpanKind.SERVER,
                    attributes={"gen_ai.usage.prompt_tokens": 10 + i, "gen_ai.latency.time_to_first_token": 0.015},
                ) as llm:
                    time.sleep(0.002)
                    if i == count - 1:
                        llm.set_status(Status(StatusCode.ERROR, "engine dead"))
        finished.append((top, client, llm))
    router.shutdown()
    replica.shutdown()
    return finished


def _source(jaeger: JaegerServer, **params):
    cls = registry.traces.get("jaeger_api")
    return cls(cls.Params(url=jaeger.query_url, **params), ".")


def _wait_for(source, window, spans: int, timeout_s: float = 20.0):
    deadline = time.monotonic() + timeout_s
    while True:
        table = source.table(window)
        if len(table) >= spans or time.monotonic() > deadline:
            return table
        time.sleep(0.2)


# the first to start Jaeger: it may wait for ./dev test's background build
@pytest.mark.timeout(BUILD_WAIT_S + 120)
def test_spans_sent_over_otlp_come_back_as_the_span_table(jaeger: JaegerServer) -> None:
    started_ns = time.time_ns()
    sent = _send_requests(jaeger.otlp_endpoint, count=4)
    window = (started_ns - 1_000_000, time.time_ns() + 1_000_000)
    source = _source(jaeger)
    table = _wait_for(source, window, spans=12)
    assert len(table) == 12 and source.report.unreadable == 0
    assert set(table.services) == {"drill-router", "drill-replica-0"}
    by_id = {table.span_id[row]: row for row in range(len(table))}
    top, client, llm = sent[-1]
    hexid = lambda span: format(span.get_span_context().span_id, "016x")  # noqa: E731
    row = by_id[hexid(llm)]
    span = table.span(row)
    assert span.trace_id == format(llm.get_span_context().trace_id, "032x")
    assert span.parent_id == hexid(client) and span.service == "drill-replica-0" and span.kind == "SERVER"
    assert span.status == "ERROR" and span.status_message == "engine dead"
    assert span.attributes["gen_ai.usage.prompt_tokens"] == 13
    assert span.attributes["gen_ai.latency.time_to_first_token"] == 0.015
    assert span.start_ns == llm.start_time // 1000 * 1000  # Jaeger keeps µs
    assert 0 <= llm.end_time - span.end_ns < 2000  # start and duration each cut to µs
    assert KIND_NAMES[table.kind[by_id[hexid(client)]]] == "CLIENT"
    assert STATUS_NAMES[table.status[by_id[hexid(top)]]] == "UNSET" and table.parent_id[by_id[hexid(top)]] == ""
    assert table.parent_row[row] == by_id[hexid(client)]
    completeness = measure_completeness(table)
    assert (completeness.traces, completeness.orphans, completeness.traces_without_root) == (4, 0, 0)


def test_one_service_a_window_before_the_spans_and_the_query_limit(jaeger: JaegerServer) -> None:
    started_ns = time.time_ns()
    _send_requests(jaeger.otlp_endpoint, count=3)
    window = (started_ns - 1_000_000, time.time_ns() + 1_000_000)
    replica_only = _source(jaeger, services=["drill-replica-0"])
    table = _wait_for(replica_only, window, spans=9)
    assert len(table) == 9  # Jaeger answers with whole traces, router spans included
    assert len(_source(jaeger).table((started_ns - 10**12, started_ns - 10**11))) == 0
    limited = _source(jaeger, services=["drill-router"], limit=2)
    assert len(set(limited.table(window).trace_id.tolist())) == 2
    assert limited.report.notes and "the query limit" in limited.report.notes[0]


def test_a_trace_saved_from_jaegers_api_v3_is_read_as_otlp(jaeger: JaegerServer, tmp_path: Path) -> None:
    """Jaeger v2's OTLP query API (``/api/v3/traces/{id}``) answers ``{"result": TracesData}`` (grpc-gateway's
    envelope); a user who saves that answer hands it to ``drill traces analyze`` as it is."""
    started_ns = time.time_ns()
    top, client, llm = _send_requests(jaeger.otlp_endpoint, count=1)[0]
    _wait_for(_source(jaeger), (started_ns - 1_000_000, time.time_ns() + 1_000_000), spans=3)
    trace = format(llm.get_span_context().trace_id, "032x")
    answer = httpx.get(f"{jaeger.query_url}/api/v3/traces/{trace}", timeout=10)
    assert answer.status_code == 200 and answer.content.lstrip().startswith(b'{"result"'), answer.text[:200]
    path = tmp_path / "trace.json"
    path.write_bytes(answer.content)
    kind, source = open_span_file(path)
    table = source.table()
    assert kind == "otlp_file" and source.report.unreadable == 0 and len(table) == 3
    assert set(table.trace_id.tolist()) == {trace} and set(table.services) == {"drill-router", "drill-replica-0"}
    hexid = lambda span: format(span.get_span_context().span_id, "016x")  # noqa: E731
    row = table.span_id.tolist().index(hexid(llm))
    assert table.span(row).status == "ERROR" and table.parent_id[row] == hexid(client)


def test_no_jaeger_there_is_a_target_error() -> None:
    cls = registry.traces.get("jaeger_api")
    source = cls(cls.Params(url="http://127.0.0.1:9", timeout_s=2), ".")
    with pytest.raises(TargetError, match="cannot list Jaeger's services"):
        source.table()
