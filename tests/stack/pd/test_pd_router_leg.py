"""The P/D router's legs (what it sends each worker) and its kv_transfer span, without processes."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from drill.stack.router.pd_forward import decode_body, prefill_body, record_kv_span


def test_the_prefill_leg_asks_one_token_without_a_stream_and_the_decode_leg_carries_the_transfer() -> None:
    body = {"prompt": "hi", "max_tokens": 64, "stream": True, "stream_options": {"include_usage": True}, "seed": 3}
    leg = prefill_body(body)
    assert leg == {
        "prompt": "hi",
        "max_tokens": 1,
        "stream": False,
        "seed": 3,
        "kv_transfer_params": {"do_remote_decode": True},
    }
    assert prefill_body({"messages": [], "max_completion_tokens": 9})["max_completion_tokens"] == 1
    announced = {"transfer_id": "r-1", "version": 4}
    assert decode_body(body, announced) == {**body, "kv_transfer_params": announced}
    assert body["max_tokens"] == 64  # the client's request is left as it was


def test_the_decode_answers_header_becomes_the_routers_kv_transfer_span() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    record_kv_span(tracer, "state=consumed;seconds=0.250000")
    record_kv_span(tracer, "state=failed;seconds=1.000000")
    record_kv_span(tracer, "garbage")
    ok, failed, unknown = exporter.get_finished_spans()
    assert ok.name == "kv_transfer" and ok.attributes["drill.kv.state"] == "consumed"
    assert abs((ok.end_time - ok.start_time) / 1e9 - 0.25) < 1e-3 and ok.status.status_code is StatusCode.UNSET
    assert failed.status.status_code is StatusCode.ERROR and (failed.end_time - failed.start_time) == 1_000_000_000
    assert unknown.attributes["drill.kv.state"] == "unknown" and unknown.end_time == unknown.start_time
