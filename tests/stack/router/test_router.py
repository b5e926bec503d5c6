"""The router over scriptable upstreams: policies, health, streaming, retries, idempotency, admin,
metrics and tracing. Real HTTP on ephemeral ports, all in one event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from drill.stack.config import RetryConfig, RouterConfig, RouterPolicy
from drill.stack.launch import RouterLaunch, UpstreamLaunch
from drill.stack.router.gateway import Gateway
from tests.stack.router.fake_upstreams import FakeReplica

pytestmark = [pytest.mark.anyio, pytest.mark.realtime]  # served in real time: see tests/conftest.py
TOKEN = "admin-token-for-tests"
COMPLETION = {"model": "fake", "prompt": "hello", "max_tokens": 4}


@asynccontextmanager
async def stack(*modes: str, **router: object) -> AsyncIterator[tuple[Gateway, list[FakeReplica], httpx.AsyncClient]]:
    replicas = [await FakeReplica(f"r{i}", mode=mode).start() for i, mode in enumerate(modes)]
    launch = RouterLaunch(
        replicas=tuple(UpstreamLaunch(name=r.name, index=i, url=r.url) for i, r in enumerate(replicas)),
        router=RouterConfig(**{"health_check_interval": "100ms", **router}),
        admin_token=TOKEN,
    )
    gateway = Gateway(launch)
    await gateway.start()
    client = httpx.AsyncClient(base_url=gateway.server.url, timeout=10)
    try:
        yield gateway, replicas, client
    finally:
        await client.aclose()
        await gateway.close()
        for replica in replicas:
            await replica.close()


async def test_least_outstanding_spreads_and_prefers_the_idle_replica() -> None:
    async with stack("ok", "ok") as (gateway, (r0, r1), client):
        for _ in range(6):
            assert (await client.post("/v1/completions", json=COMPLETION)).status_code == 200
        assert len(r0.ledger) == len(r1.ledger) == 3
        r0.delay_s = 0.5  # r0 busy with one slow request: the next ones go to r1
        slow = asyncio.create_task(client.post("/v1/completions", json=COMPLETION))
        await asyncio.sleep(0.1)
        busy_before = len(r0.ledger)
        for _ in range(4):
            await client.post("/v1/completions", json=COMPLETION)
        assert len(r0.ledger) == busy_before and len(r1.ledger) == 7
        assert (await slow).status_code == 200


async def test_round_robin_alternates() -> None:
    async with stack("ok", "ok", policy=RouterPolicy.ROUND_ROBIN) as (_, (r0, r1), client):
        for _ in range(4):
            await client.post("/v1/completions", json=COMPLETION)
        assert [e["replica"] for e in r0.ledger + r1.ledger].count("r0") == 2


async def test_streams_pass_through_chunk_by_chunk() -> None:
    async with stack("ok") as (_, (r0,), client):
        r0.chunk_gap_s, r0.chunks = 0.3, 3
        started = time.monotonic()
        arrivals = []
        async with client.stream("POST", "/v1/completions", json={**COMPLETION, "stream": True}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    arrivals.append(time.monotonic() - started)
        assert len(arrivals) == 3
        assert arrivals[0] < 0.25 and arrivals[1] - arrivals[0] > 0.2  # not buffered


async def test_unhealthy_replica_leaves_rotation_and_returns() -> None:
    async with stack("ok", "ok") as (gateway, (r0, r1), client):
        r0.health = 503
        await asyncio.sleep(0.3)
        for _ in range(4):
            await client.post("/v1/completions", json=COMPLETION)
        assert len(r0.ledger) == 0 and len(r1.ledger) == 4
        state = (await client.get("/admin/state", headers={"Authorization": f"Bearer {TOKEN}"})).json()
        assert [r["healthy"] for r in state["replicas"]] == [False, True]
        r0.health = 200
        await asyncio.sleep(0.3)
        for _ in range(4):
            await client.post("/v1/completions", json=COMPLETION)
        assert len(r0.ledger) == 2


async def test_no_healthy_replica_is_503_and_router_health_says_so() -> None:
    async with stack("ok") as (gateway, (r0,), client):
        r0.health = 503
        await asyncio.sleep(0.3)
        response = await client.post("/v1/completions", json=COMPLETION)
        assert response.status_code == 503 and response.json()["error"]["code"] == 503
        assert (await client.get("/health")).status_code == 503


async def test_without_retries_a_5xx_passes_through() -> None:
    async with stack("fail", "ok", policy=RouterPolicy.ROUND_ROBIN) as (_, (r0, r1), client):
        statuses = [(await client.post("/v1/completions", json=COMPLETION)).status_code for _ in range(2)]
        assert sorted(statuses) == [200, 500]
        assert len(r0.ledger) == 1 and len(r1.ledger) == 1


async def test_retry_on_error_resends_to_another_replica() -> None:
    retries = RetryConfig(attempts=1)
    async with stack("fail", "ok", policy=RouterPolicy.ROUND_ROBIN, retries=retries) as (_, (r0, r1), client):
        statuses = [
            (await client.post("/v1/completions", json=COMPLETION, headers={"X-Request-Id": f"req-{i}"})).status_code
            for i in range(2)
        ]
        assert statuses == [200, 200]
        assert len(r0.ledger) == 2 and len(r1.ledger) == 2  # round robin lands on r0 first each time
        ids = [h["x-request-id"] for h in r0.headers_seen]
        assert ids == [h["x-request-id"] for h in r1.headers_seen] == ["req-0", "req-1"]  # re-sent as is


async def test_retry_on_timeout_duplicates_the_side_effect() -> None:
    retries = RetryConfig(attempts=1, timeout="300ms")
    async with stack("slow", "ok", policy=RouterPolicy.ROUND_ROBIN, retries=retries) as (_, (r0, r1), client):
        r0.delay_s = 1.0
        response = await client.post("/v1/completions", json=COMPLETION, headers={"Idempotency-Key": "k1"})
        assert response.status_code == 200 and response.json()["replica"] == "r1"
        processed = [e for e in r0.ledger + r1.ledger]
        assert len(processed) == 2  # processed twice: the duplicate a naive retry causes


async def test_timeout_not_retried_when_only_errors_are() -> None:
    retries = RetryConfig(attempts=2, timeout="200ms", on=("error",))
    async with stack("slow", policy=RouterPolicy.ROUND_ROBIN, retries=retries) as (_, (r0,), client):
        r0.delay_s = 1.0
        response = await client.post("/v1/completions", json=COMPLETION)
        assert response.status_code == 504 and len(r0.ledger) == 1


async def test_a_refusal_reaches_the_client_with_its_retry_after() -> None:
    async with stack("busy") as (_, _replicas, client):
        response = await client.post("/v1/completions", json=COMPLETION)
        assert response.status_code == 503 and response.headers["retry-after"] == "1"


async def test_stream_is_retried_only_before_its_first_byte() -> None:
    retries = RetryConfig(attempts=1)
    async with stack("cut", "ok", policy=RouterPolicy.ROUND_ROBIN, retries=retries) as (_, (r0, r1), client):
        body = (await client.post("/v1/completions", json={**COMPLETION, "stream": True})).text
        assert body.count("data: {") == 3 and body.endswith("data: [DONE]\n\n")
        assert len(r0.ledger) == 1 and len(r1.ledger) == 1
    async with stack("cut_mid", "ok", policy=RouterPolicy.ROUND_ROBIN, retries=retries) as (_, (r0, r1), client):
        body = (await client.post("/v1/completions", json={**COMPLETION, "stream": True})).text
        assert '"text":"t0"' in body and '"error"' in body and body.endswith("data: [DONE]\n\n")
        assert len(r1.ledger) == 0  # the first byte had gone out: no retry


async def test_connection_failure_takes_the_replica_out_at_once() -> None:
    async with stack("cut", "ok", policy=RouterPolicy.ROUND_ROBIN, health_check_interval="30s") as (
        gw,
        (r0, r1),
        client,
    ):
        assert (await client.post("/v1/completions", json=COMPLETION)).status_code == 502
        assert not gw.pool.replicas[0].healthy
        for _ in range(3):
            assert (await client.post("/v1/completions", json=COMPLETION)).status_code == 200
        assert len(r1.ledger) == 3


async def test_idempotency_on_processes_a_key_once() -> None:
    async with stack("slow", "slow", idempotency=True) as (_, replicas, client):
        for replica in replicas:
            replica.delay_s = 0.3
        headers = {"Idempotency-Key": "order-1"}
        answers = await asyncio.gather(
            *(client.post("/v1/completions", json=COMPLETION, headers=headers) for _ in range(3))
        )
        assert {a.status_code for a in answers} == {200} and len({a.content for a in answers}) == 1
        assert sum(len(r.ledger) for r in replicas) == 1
        again = await client.post("/v1/completions", json=COMPLETION, headers=headers)
        assert again.content == answers[0].content
        conflict = await client.post("/v1/completions", json={**COMPLETION, "prompt": "other"}, headers=headers)
        assert conflict.status_code == 422
        assert conflict.json()["error"]["type"] == "UnprocessableEntityError"


async def test_idempotency_replays_a_whole_stream() -> None:
    async with stack("ok", idempotency=True) as (_, (r0,), client):
        headers = {"Idempotency-Key": "s-1"}
        first = await client.post("/v1/completions", json={**COMPLETION, "stream": True}, headers=headers)
        second = await client.post("/v1/completions", json={**COMPLETION, "stream": True}, headers=headers)
        assert first.text == second.text and first.text.endswith("data: [DONE]\n\n")
        assert len(r0.ledger) == 1


async def test_idempotency_off_processes_duplicates() -> None:
    async with stack("ok") as (_, (r0,), client):
        for _ in range(2):
            await client.post("/v1/completions", json=COMPLETION, headers={"Idempotency-Key": "dup"})
        assert len(r0.ledger) == 2
        assert r0.headers_seen[0]["idempotency-key"] == "dup"  # passed upstream for the ledger


async def test_admin_api_auth_state_and_patch() -> None:
    async with stack("ok") as (gateway, _, client):
        assert (await client.get("/admin/state")).status_code == 401
        auth = {"Authorization": f"Bearer {TOKEN}"}
        patched = await client.patch(
            "/admin/config", headers=auth, json={"retries": {"attempts": 3}, "idempotency": True}
        )
        assert patched.status_code == 200
        assert patched.json()["previous"]["retries"]["attempts"] == 0
        assert patched.json()["config"]["retries"] == {"attempts": 3, "on": ["error", "timeout"], "timeout": "30s"}
        assert gateway.config.idempotency
        restored = await client.patch("/admin/config", headers=auth, json=patched.json()["previous"])
        assert restored.json()["config"] == patched.json()["previous"]
        bad = await client.patch("/admin/config", headers=auth, json={"policy": "random"})
        assert bad.status_code == 400 and "policy" in bad.json()["error"]["message"]
        assert (await client.get("/admin/config", headers=auth)).json()["policy"] == "least_outstanding"


async def test_metrics_count_requests_retries_and_health() -> None:
    async with stack("fail", "ok", policy=RouterPolicy.ROUND_ROBIN, retries=RetryConfig(attempts=1)) as (_, _, client):
        for _ in range(2):
            await client.post("/v1/completions", json=COMPLETION)
        text = (await client.get("/metrics")).text
        assert 'drill_router_requests_total{route="/v1/completions",status="200"} 2.0' in text
        assert 'drill_router_retries_total{reason="error"} 2.0' in text  # round robin hits r0 first twice
        assert 'drill_router_upstream_errors_total{kind="status_5xx",replica="r0"} 2.0' in text
        assert 'drill_router_replica_healthy{replica="r1"} 1.0' in text


async def test_passthrough_endpoints() -> None:
    async with stack("ok") as (_, _, client):
        assert (await client.get("/v1/models")).json()["data"][0]["id"] == "fake"


async def test_spans_and_traceparent_propagation() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    retries = RetryConfig(attempts=1)
    async with stack("fail", "ok", policy=RouterPolicy.ROUND_ROBIN, retries=retries) as (gateway, (r0, r1), client):
        gateway.tracer = provider.get_tracer("test")
        trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
        await client.post(
            "/v1/completions", json=COMPLETION, headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}
        )
    spans = exporter.get_finished_spans()
    server = [s for s in spans if s.kind is SpanKind.SERVER]
    clients = sorted((s for s in spans if s.kind is SpanKind.CLIENT), key=lambda s: s.attributes["drill.attempt"])
    assert len(server) == 1 and format(server[0].context.trace_id, "032x") == trace_id
    assert [(c.attributes["drill.attempt"], c.attributes["drill.upstream"]) for c in clients] == [(1, "r0"), (2, "r1")]
    assert [c.attributes["peer.service"] for c in clients] == ["r0", "r1"]  # the name trace readers know
    assert all(c.parent.span_id == server[0].context.span_id for c in clients)
    upstream_parent = r1.headers_seen[0]["traceparent"].split("-")
    assert upstream_parent[1] == trace_id and upstream_parent[2] == format(clients[1].context.span_id, "016x")


async def test_traceparent_passes_through_without_a_collector() -> None:
    async with stack("ok") as (_, (r0,), client):
        parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        await client.post("/v1/completions", json=COMPLETION, headers={"traceparent": parent})
        assert r0.headers_seen[0]["traceparent"] == parent
