"""Spans (stack-contracts.md §7, docs/serving-facts.md §1.2) and the side-effect ledger (§6) of a replica."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from drill.stack.replica.request_spans import Tracing, parse_traceparent
from tests.stack.replica_kit import ADMIN_TOKEN

pytestmark = pytest.mark.anyio

TRACE_ID = "5b8efff798038103d269b633813fc60c"
TRACEPARENT = f"00-{TRACE_ID}-eee19b7ec3c1b174-01"

GEN_AI_KEYS = {
    "gen_ai.latency.time_to_first_token",
    "gen_ai.latency.e2e",
    "gen_ai.latency.time_in_queue",
    "gen_ai.usage.prompt_tokens",
    "gen_ai.usage.completion_tokens",
    "gen_ai.latency.time_in_model_prefill",
    "gen_ai.latency.time_in_model_decode",
    "gen_ai.latency.time_in_model_inference",
    "gen_ai.request.id",
    "gen_ai.response.finish_reasons",
    "gen_ai.request.max_tokens",
}


async def test_vllms_span_shape_is_one_llm_request_parented_from_traceparent(start_replica) -> None:
    """The default: what vLLM exports (``OutputProcessor.do_tracing``), the phases as attributes only."""
    exporter = InMemorySpanExporter()
    async with (
        start_replica(span_processor=SimpleSpanProcessor(exporter), engine={"max_num_queued_reqs": 1}) as replica,
        httpx.AsyncClient(base_url=replica.server.url) as client,
    ):
        headers = {"traceparent": TRACEPARENT, "X-Request-Id": "req-7"}
        response = await client.post("/v1/completions", headers=headers, json={"prompt": "a b", "max_tokens": 3})
        assert response.status_code == 200
    (llm,) = exporter.get_finished_spans()
    assert llm.name == "llm_request" and llm.kind is SpanKind.SERVER
    assert format(llm.context.trace_id, "032x") == TRACE_ID and format(llm.parent.span_id, "016x") == "eee19b7ec3c1b174"
    attrs = dict(llm.attributes)
    assert set(attrs) >= GEN_AI_KEYS and attrs["gen_ai.request.id"] == "req-7"
    phases = sum(
        attrs[f"gen_ai.latency.{k}"] for k in ("time_in_queue", "time_in_model_prefill", "time_in_model_decode")
    )
    assert phases <= attrs["gen_ai.latency.e2e"] + 1e-6


async def test_teaching_spans_parented_from_traceparent_with_vllm_attributes(start_replica) -> None:
    exporter = InMemorySpanExporter()
    headers = {"traceparent": TRACEPARENT, "X-Request-Id": "req-42", "Idempotency-Key": "idem-1"}
    async with (
        start_replica(span_processor=SimpleSpanProcessor(exporter), tracing={"span_shape": "teaching"}) as replica,
        httpx.AsyncClient(base_url=replica.server.url) as client,
    ):
        response = await client.post(
            "/v1/completions", headers=headers, json={"prompt": "a b c d", "max_tokens": 3, "temperature": 0.5}
        )
        assert response.json()["id"] == "cmpl-req-42"
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert set(spans) == {"POST /v1/completions", "llm_request", "queue", "prefill", "decode"}
    server, llm = spans["POST /v1/completions"], spans["llm_request"]
    assert all(format(s.context.trace_id, "032x") == TRACE_ID for s in spans.values())
    assert format(server.parent.span_id, "016x") == "eee19b7ec3c1b174" and server.kind is SpanKind.SERVER
    assert llm.parent.span_id == server.context.span_id and llm.kind is SpanKind.SERVER
    for child in ("queue", "prefill", "decode"):
        assert spans[child].parent.span_id == llm.context.span_id
    attrs = dict(llm.attributes)
    assert set(attrs) >= GEN_AI_KEYS
    assert attrs["gen_ai.response.finish_reasons"] == '["length"]'
    assert attrs["gen_ai.request.id"] == "req-42"
    assert attrs["gen_ai.usage.prompt_tokens"] == 4 and attrs["gen_ai.usage.completion_tokens"] == 3
    assert attrs["gen_ai.request.temperature"] == 0.5
    assert attrs["drill.idempotency_key"] == "idem-1" and attrs["drill.replica"] == "replica-0"
    assert attrs["drill.billed_tokens"] == 7 and attrs["drill.side_effect.seq"] == 1
    assert llm.start_time <= spans["queue"].start_time <= spans["prefill"].start_time <= spans["decode"].start_time
    assert spans["decode"].end_time <= llm.end_time
    e2e_ns = llm.end_time - llm.start_time
    assert e2e_ns == pytest.approx(attrs["gen_ai.latency.e2e"] * 1e9, rel=0.01, abs=1e5)
    assert server.attributes["http.response.status_code"] == 200


async def test_failed_request_span_has_error_status(start_replica) -> None:
    exporter = InMemorySpanExporter()
    async with (
        start_replica(
            span_processor=SimpleSpanProcessor(exporter), engine={"max_num_seqs": 1, "max_queue_wait": "100ms"}
        ) as replica,
        httpx.AsyncClient(base_url=replica.server.url, timeout=30) as client,
    ):
        hog = asyncio.create_task(
            client.post("/v1/completions", json={"prompt": "a", "max_tokens": 60, "ignore_eos": True})
        )
        while replica.scheduler.num_running < 1:
            await asyncio.sleep(0.005)
        refused = await client.post("/v1/completions", json={"prompt": "b", "max_tokens": 2})
        await hog
    assert refused.status_code == 503
    failed = [
        s
        for s in exporter.get_finished_spans()
        if s.name == "llm_request" and s.attributes["gen_ai.response.finish_reasons"] == '["abort"]'
    ]
    assert len(failed) == 1 and failed[0].status.status_code is StatusCode.ERROR
    assert "max_queue_wait" in failed[0].status.description


async def test_ledger_records_each_processed_request(start_replica) -> None:
    async with (
        start_replica(engine={"max_num_queued_reqs": 1}) as replica,
        httpx.AsyncClient(base_url=replica.server.url, timeout=30) as client,
    ):
        slow = asyncio.create_task(
            client.post(
                "/v1/completions",
                headers={"Idempotency-Key": "k1", "traceparent": TRACEPARENT},
                json={"prompt": "one two three", "max_tokens": 30, "ignore_eos": True},
            )
        )
        while replica.scheduler.num_running < 1:
            await asyncio.sleep(0.005)
        refused = await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 1})
        await slow
        ledger = (await client.get("/admin/ledger?since=0", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})).json()
        path = replica.launch.ledger_path
    assert refused.status_code == 503  # refused at admission: no side effect, no record
    assert ledger["last_seq"] == 1 and len(ledger["records"]) == 1
    record = ledger["records"][0]
    contract = {
        "seq",
        "ts",
        "replica",
        "request_id",
        "idempotency_key",
        "trace_id",
        "prompt_tokens",
        "completion_tokens",
        "billed_tokens",
        "finish_reason",
        "status",
        "arrival_ts",
        "first_token_ts",
        "finish_ts",
    }
    assert contract <= set(record)
    assert (record["idempotency_key"], record["trace_id"], record["status"]) == ("k1", TRACE_ID, "ok")
    assert (record["prompt_tokens"], record["completion_tokens"], record["billed_tokens"]) == (3, 30, 33)
    assert record["arrival_ts"] < record["first_token_ts"] < record["finish_ts"]
    assert json.loads(path.read_text().splitlines()[0]) == record


async def test_ledger_seq_continues_after_restart(start_replica, tmp_path) -> None:
    from drill.rundir.ledger import LedgerStatus
    from drill.stack.replica.ledger import Ledger

    path = tmp_path / "l.jsonl"
    fields = dict(
        request_id="r",
        idempotency_key=None,
        trace_id=None,
        prompt_tokens=1,
        completion_tokens=1,
        billed_tokens=2,
        finish_reason="stop",
        status=LedgerStatus.OK,
        arrival_ts=1.0,
        first_token_ts=2.0,
        finish_ts=3.0,
    )
    first = Ledger(path, "replica-0")
    first.append(**fields)
    first.append(**fields)
    first.close()
    second = Ledger(path, "replica-0")
    assert second.append(**fields).seq == 3
    assert [r["seq"] for r in second.since(1)] == [2, 3]
    second.close()


async def test_aborted_stream_is_ledgered_and_counted_as_abort(start_replica) -> None:
    async with start_replica() as replica:
        reader, writer = await asyncio.open_connection(replica.server.host, replica.server.port)
        body = json.dumps({"prompt": "a b", "max_tokens": 500, "ignore_eos": True, "stream": True}).encode()
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
        )
        await reader.readuntil(b'"text"')
        writer.close()
        for _ in range(200):
            if replica.ledger.last_seq:
                break
            await asyncio.sleep(0.01)
        record = replica.ledger.since(0)[0]
        metrics = replica.metrics.render().decode()
    assert record["status"] == "aborted" and record["finish_reason"] == "abort"
    assert 1 <= record["completion_tokens"] < 500
    assert 'vllm:request_success_total{engine="0",finished_reason="abort",model_name="llama-3-8b"} 1.0' in metrics
    assert replica.scheduler.kv_cache.num_used_blocks == 0


def test_tracing_off_creates_nothing_and_parses_traceparent() -> None:
    tracing = Tracing("svc", None)
    assert tracing.enabled is False
    assert tracing.start_http_span("POST", "/x", {"traceparent": TRACEPARENT}, 0.0) is None
    assert parse_traceparent(TRACEPARENT) == TRACE_ID
    assert parse_traceparent("00-" + "0" * 32 + "-eee19b7ec3c1b174-01") is None
    assert parse_traceparent("garbage") is None


async def test_loop_exporter_merges_chunks_and_survives_a_dead_sink() -> None:
    from opentelemetry.sdk.trace import TracerProvider

    from drill.stack.http.span_export import LoopSpanExporter
    from tests.stack.replica_kit import OtlpSink

    sink = OtlpSink()
    await sink.server.start()
    exporter = LoopSpanExporter(sink.server.url + "/v1/traces")
    provider = TracerProvider()
    provider.add_span_processor(exporter)
    tracer = provider.get_tracer("test")
    for index in range(5):  # 3 encode chunks of at most 2 spans, one POST
        tracer.start_span(f"span-{index}", attributes={"i": index}).end()
    await exporter.aclose()
    await sink.server.close()
    assert sorted(span["name"] for span in sink.spans) == [f"span-{i}" for i in range(5)]
    assert sink.posts == 1 and exporter.exported == 5

    dead = LoopSpanExporter(sink.server.url + "/v1/traces")  # the sink is gone now
    provider.add_span_processor(dead)
    tracer.start_span("lost").end()
    await dead.aclose()
    assert dead.dropped == 1 and dead.exported == 0
