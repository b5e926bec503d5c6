"""The OTLP receiver: real OpenTelemetry exporters (protobuf, gzip) and OTLP/JSON with hex ids."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode

from drill.rundir.jsonl import ReadReport
from drill.traces.receiver import OtlpReceiver
from drill.traces.sources import _receiver_decoder, decode_json_lines


@pytest.fixture()
def receiver(tmp_path: Path):
    rx = OtlpReceiver(tmp_path / "spans.jsonl", port=0).start()
    yield rx
    rx.stop()


def _spans(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_real_exporter_spans_are_normalized(receiver: OtlpReceiver, compression) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "drill-replica-0"}))
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint, compression=compression))
    )
    tracer = provider.get_tracer("test.scope")
    with tracer.start_as_current_span("POST /v1/chat/completions", kind=SpanKind.SERVER) as parent:
        with tracer.start_as_current_span("llm_request", kind=SpanKind.SERVER) as span:
            span.set_attribute("gen_ai.latency.time_in_queue", 0.25)
            span.set_attribute("gen_ai.response.finish_reasons", '["stop"]')
            span.set_status(Status(StatusCode.ERROR, "engine dead"))
    provider.shutdown()
    spans = {s["name"]: s for s in _spans(receiver.spans_path)}
    llm, http = spans["llm_request"], spans["POST /v1/chat/completions"]
    assert llm["trace_id"] == format(parent.get_span_context().trace_id, "032x")
    assert llm["parent_span_id"] == format(parent.get_span_context().span_id, "016x")
    assert http["parent_span_id"] is None
    assert llm["service"] == "drill-replica-0" and llm["scope"] == "test.scope" and llm["kind"] == "SERVER"
    assert llm["attributes"]["gen_ai.latency.time_in_queue"] == 0.25
    assert llm["status"] == {"code": "ERROR", "message": "engine dead"}
    assert llm["end_ns"] >= llm["start_ns"] > 0
    decoder = _receiver_decoder()  # what the receiver wrote is read by the narrow decoder, its names as literals
    (block, _), *_ = decode_json_lines(receiver.spans_path, decoder, ReadReport(receiver.spans_path))
    assert len(block) == 2 and len(decoder.decoders) == 2 and block[0].kind is block[1].kind == "SERVER"


def test_otlp_json_hex_ids_are_not_misdecoded(receiver: OtlpReceiver) -> None:
    body = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "vllm"}}]},
                "scopeSpans": [
                    {
                        "scope": {"name": "s"},
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "parentSpanId": "eee19b7ec3c1b173",
                                "name": "llm_request",
                                "kind": 2,
                                "startTimeUnixNano": "1700000000000000000",
                                "endTimeUnixNano": "1700000000500000000",
                                "attributes": [{"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": "12"}}],
                            }
                        ],
                    }
                ],
            }
        ]
    }
    response = httpx.post(
        receiver.endpoint,
        content=gzip.compress(json.dumps(body).encode()),
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert response.status_code == 200 and response.json() == {}
    (span,) = _spans(receiver.spans_path)
    assert span["trace_id"] == "5b8efff798038103d269b633813fc60c"
    assert span["span_id"] == "eee19b7ec3c1b174" and span["parent_span_id"] == "eee19b7ec3c1b173"
    assert span["duration_ms"] == 500.0 and span["attributes"]["gen_ai.usage.prompt_tokens"] == 12


def test_garbage_is_rejected_with_400_and_metrics_are_accepted(receiver: OtlpReceiver) -> None:
    bad = httpx.post(receiver.endpoint, content=b"\xff\x00garbage", headers={"Content-Type": "application/x-protobuf"})
    assert bad.status_code == 400
    ok = httpx.post(receiver.endpoint.replace("traces", "metrics"), content=b"x")
    assert ok.status_code == 200
    assert receiver.spans_path.read_text() == ""


def test_trace_sources_read_the_receiver_file_and_collector_file_exports(
    receiver: OtlpReceiver, tmp_path: Path
) -> None:
    from drill import registry

    receiver.accept([{"trace_id": "a" * 32, "span_id": "b" * 16, "name": "x", "start_ns": 10, "end_ns": 20}])
    source = registry.traces.get("receiver")(registry.traces.get("receiver").Params(), str(tmp_path))
    assert [s["name"] for s in source.spans()] == ["x"]
    assert list(source.spans((30, 40))) == []
    export = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "name": "llm_request",
                                "startTimeUnixNano": "5",
                                "endTimeUnixNano": "9",
                            }
                        ]
                    }
                ]
            }
        ]
    }
    (tmp_path / "collector.json").write_text(json.dumps(export) + "\n")
    cls = registry.traces.get("otlp_file")
    spans = list(cls(cls.Params(path="collector.json"), str(tmp_path)).spans())
    assert spans[0]["trace_id"] == "5b8efff798038103d269b633813fc60c" and spans[0]["name"] == "llm_request"
