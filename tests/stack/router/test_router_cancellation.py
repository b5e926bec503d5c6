"""The router closes the upstream request of a client that went away (``abort_abandoned``, vLLM's
``with_cancellation``), so the replica can abort it; with the switch off it keeps waiting for nobody.
Real HTTP on ephemeral ports against scriptable upstreams, all in one event loop."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from drill.stack.config import RetryConfig, RouterConfig
from drill.stack.launch import RouterLaunch, UpstreamLaunch
from drill.stack.router.gateway import Gateway
from tests.stack.router.fake_upstreams import FakeReplica

pytestmark = [pytest.mark.anyio, pytest.mark.realtime]  # served in real time: see tests/conftest.py
TOKEN = "admin-token-for-tests"
WITHIN_S = 0.1


@asynccontextmanager
async def router_over_a_slow_replica(**launch: object) -> AsyncIterator[tuple[Gateway, FakeReplica]]:
    replica = await FakeReplica("r0", mode="slow", delay_s=5.0).start()
    gateway = Gateway(
        RouterLaunch(
            replicas=(UpstreamLaunch(name="r0", index=0, url=replica.url),),
            router=launch.pop("router", RouterConfig(health_check_interval="100ms")),
            admin_token=TOKEN,
            **launch,
        )
    )
    await gateway.start()
    try:
        yield gateway, replica
    finally:
        await gateway.close()
        await replica.close()


async def _send_and_close(gateway: Gateway, replica: FakeReplica, body: dict) -> float:
    """Send ``body`` on a socket of our own, close it once the replica has the request; the close's time."""
    _, writer = await asyncio.open_connection(gateway.server.host, gateway.server.port)
    payload = json.dumps(body).encode()
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%b" % (len(payload), payload))
    await writer.drain()
    while not replica.ledger:
        await asyncio.sleep(0.002)
    closed_at = time.monotonic()
    writer.close()
    return closed_at


async def _wait_for(condition, limit_s: float = 2.0) -> None:
    deadline = time.monotonic() + limit_s
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.002)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_a_client_that_goes_away_closes_the_upstream_request(stream: bool) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with router_over_a_slow_replica() as (gateway, replica):
        gateway.tracer = provider.get_tracer("test")
        closed_at = await _send_and_close(gateway, replica, {"prompt": "hi", "max_tokens": 4, "stream": stream})
        await _wait_for(lambda: bool(replica.disconnects))
        await asyncio.sleep(0.05)
        metrics = (await httpx.AsyncClient().get(gateway.server.url + "/metrics")).text
    assert replica.disconnects, "the router kept the upstream request open after its client left"
    assert replica.disconnects[0] - closed_at < WITHIN_S
    assert re.search(r"drill_router_cancelled_total 1\.0", metrics)
    assert re.search(r'drill_router_requests_total\{route="/v1/completions",status="499"\} 1\.0', metrics)
    (server,) = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.SERVER]
    assert server.attributes["drill.client_gone"] is True and server.status.status_code is StatusCode.ERROR


async def test_with_abort_abandoned_off_the_router_waits_for_nobody() -> None:
    async with router_over_a_slow_replica(abort_abandoned=False) as (gateway, replica):
        await _send_and_close(gateway, replica, {"prompt": "hi", "max_tokens": 4})
        await asyncio.sleep(0.3)
        seen = list(replica.disconnects)
    assert seen == []


async def test_the_upstream_timeout_closes_the_upstream_request() -> None:
    """A router that gives up (504) closes its connection: the replica sees its client go, as vLLM behind a proxy."""
    config = RouterConfig(health_check_interval="100ms", retries=RetryConfig(timeout="200ms"))
    async with router_over_a_slow_replica(router=config) as (gateway, replica):
        async with httpx.AsyncClient(base_url=gateway.server.url, timeout=10) as client:
            started = time.monotonic()
            response = await client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 4})
        await _wait_for(lambda: bool(replica.disconnects))
    assert response.status_code == 504
    assert replica.disconnects and replica.disconnects[0] - started < 0.2 + 1.0


async def test_a_client_that_leaves_mid_stream_ends_it_quietly(caplog: pytest.LogCaptureFixture) -> None:
    """Its head (200) went out: the router ends the stream and closes the upstream, without an answer to nobody."""
    replica = await FakeReplica("r0", chunks=500, chunk_gap_s=0.02).start()
    gateway = Gateway(
        RouterLaunch(
            replicas=(UpstreamLaunch(name="r0", index=0, url=replica.url),),
            router=RouterConfig(health_check_interval="100ms"),
            admin_token=TOKEN,
        )
    )
    await gateway.start()
    try:
        reader, writer = await asyncio.open_connection(gateway.server.host, gateway.server.port)
        payload = json.dumps({"prompt": "hi", "max_tokens": 4, "stream": True}).encode()
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%b" % (len(payload), payload)
        )
        await asyncio.wait_for(reader.readuntil(b"t1"), 5)
        closed_at = time.monotonic()
        writer.close()
        await _wait_for(lambda: bool(replica.disconnects))
        await asyncio.sleep(0.05)
    finally:
        await gateway.close()
        await replica.close()
    assert replica.disconnects and replica.disconnects[0] - closed_at < WITHIN_S
    assert not [r for r in caplog.records if "after streaming" in r.getMessage()]
