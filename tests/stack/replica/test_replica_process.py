"""The replica as a process: engine death (simulated CUDA OOM, XID), SIGTERM, stall, weight loading.

Contracts: stack-contracts.md §3 and §5; vLLM behaviour: docs/serving-facts.md §4 ("Engine death").
"""

from __future__ import annotations

import asyncio
import json
import signal
import time

import httpx
import pytest

from tests.stack.replica_kit import OtlpSink

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

LONG = {"prompt": "tell me a long story", "max_tokens": 2000, "ignore_eos": True}


async def _stream_events(client: httpx.AsyncClient, url: str, started: asyncio.Event) -> list[str]:
    events = []
    async with client.stream("POST", url + "/v1/completions", json={**LONG, "stream": True}) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
                started.set()
    return events


async def _wait_exit(replica, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while replica.proc.poll() is None and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return replica.proc.poll()


async def test_memory_hog_kills_engine_like_cuda_oom(spawn_replica) -> None:
    replica = spawn_replica()
    async with httpx.AsyncClient(timeout=30) as client:
        started = [asyncio.Event() for _ in range(3)]
        streams = [asyncio.create_task(_stream_events(client, replica.url, event)) for event in started]
        plain = asyncio.create_task(client.post(replica.url + "/v1/completions", json=LONG))
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in started)), 10)
        hog = await client.put(replica.url + "/admin/gpu/memory-hog", json={"gib": 79}, headers=replica.admin_headers)
        assert hog.status_code == 200
        t0 = time.monotonic()
        results = await asyncio.wait_for(asyncio.gather(*streams), 5)
        failed_fast = time.monotonic() - t0
        health = await client.get(replica.url + "/health")
        response = await plain
    for events in results:
        assert events[-1] == "[DONE]"
        error = json.loads(events[-2])["error"]
        assert error["code"] == 500 and error["type"] == "InternalServerError"
        assert error["message"].startswith("EngineCore encountered an issue")
    assert failed_fast < 1.0
    assert response.status_code == 500 and response.json()["error"]["type"] == "InternalServerError"
    assert health.status_code == 503
    code = await _wait_exit(replica, 5)
    assert code == 1
    log = replica.log_path.read_text()
    assert "torch.OutOfMemoryError: CUDA out of memory" in log
    records = [json.loads(line) for line in replica.launch.ledger_path.read_text().splitlines()]
    assert len(records) == 4 and {r["status"] for r in records} == {"error"}


async def test_partial_memory_hog_shrinks_kv_and_is_reverted(spawn_replica) -> None:
    replica = spawn_replica()
    async with httpx.AsyncClient(base_url=replica.url, headers=replica.admin_headers, timeout=30) as client:
        before = (await client.get("/admin/state")).json()["gpu"]
        shrunk = (await client.put("/admin/gpu/memory-hog", json={"gib": 20})).json()
        during = (await client.get("/admin/state")).json()
        ok = await client.post("/v1/completions", json={"prompt": "a b", "max_tokens": 3})
        released = await client.delete("/admin/gpu/memory-hog")
        again = await client.delete("/admin/gpu/memory-hog")
        after = (await client.get("/admin/state")).json()["gpu"]
        bad = await client.put("/admin/gpu/memory-hog", json={"gib": "lots"})
    lost_gib = 20 - 8  # the first 8 GiB come from the 10 % vLLM leaves free
    assert before["kv_blocks_total"] - shrunk["kv_blocks_usable"] == pytest.approx(lost_gib * 1024 / 2, abs=1)
    assert during["engine_alive"] and during["gpu"]["memory_hog_gib"] == 20
    assert ok.status_code == 200
    assert released.json()["previous_gib"] == 20 and again.status_code == 200
    assert after["memory_hog_gib"] == 0 and after["kv_blocks_usable"] == before["kv_blocks_total"]
    assert bad.status_code == 400
    replica.proc.send_signal(signal.SIGTERM)
    assert await _wait_exit(replica, 10) == 0


async def test_xid_error_kills_engine(spawn_replica) -> None:
    replica = spawn_replica()
    async with httpx.AsyncClient(timeout=30) as client:
        started = asyncio.Event()
        stream = asyncio.create_task(_stream_events(client, replica.url, started))
        await asyncio.wait_for(started.wait(), 10)
        xid = await client.post(replica.url + "/admin/gpu/xid", json={"code": 79}, headers=replica.admin_headers)
        events = await asyncio.wait_for(stream, 5)
    assert xid.json() == {"xid": 79, "engine_alive": False}
    assert events[-1] == "[DONE]" and json.loads(events[-2])["error"]["code"] == 500
    assert await _wait_exit(replica, 5) == 1
    assert "NVIDIA XID 79: GPU has fallen off the bus" in replica.log_path.read_text()


async def test_sigterm_finishes_in_flight_flushes_spans_and_exits_zero(spawn_replica) -> None:
    sink = OtlpSink()
    await sink.server.start()
    try:
        replica = spawn_replica(otlp_endpoint=sink.server.url + "/v1/traces")
        trace_id = "0af7651916cd43dd8448eb211c80319c"
        async with httpx.AsyncClient(timeout=30) as client:
            pending = asyncio.create_task(
                client.post(
                    replica.url + "/v1/completions",
                    json={"prompt": "a", "max_tokens": 30, "ignore_eos": True},
                    headers={"traceparent": f"00-{trace_id}-b7ad6b7169203331-01"},
                )
            )
            await asyncio.sleep(0.1)
            replica.proc.send_signal(signal.SIGTERM)
            response = await pending
            code = await _wait_exit(replica, 10)
    finally:
        await sink.server.close()
    assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] == 30
    assert code == 0
    names = sorted(span["name"] for span in sink.spans if span["trace_id"] == trace_id)
    assert names == ["llm_request"]  # vLLM's span shape (the default): its phases are attributes
    assert {span["service"] for span in sink.spans} == {"drill-replica-0"}


async def test_stall_stops_steps_while_http_answers(spawn_replica) -> None:
    replica = spawn_replica()
    arrivals: list[float] = []
    async with httpx.AsyncClient(timeout=30) as client:

        async def stream() -> None:
            body = {"prompt": "a", "max_tokens": 150, "ignore_eos": True, "stream": True}
            async with client.stream("POST", replica.url + "/v1/completions", json=body) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        arrivals.append(time.monotonic())

        task = asyncio.create_task(stream())
        while len(arrivals) < 5:
            await asyncio.sleep(0.005)
        stall = await client.put(
            replica.url + "/admin/engine/stall", json={"seconds": 0.6}, headers=replica.admin_headers
        )
        health = await client.get(replica.url + "/health")
        state = (await client.get(replica.url + "/admin/state", headers=replica.admin_headers)).json()
        await task
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    assert stall.status_code == 200 and health.status_code == 200 and state["stall_until"] is not None
    assert 0.5 < max(gaps) < 1.2
    assert sorted(gaps)[len(gaps) // 2] < 0.03  # otherwise ~7 ms steps


async def test_weights_load_before_the_port_binds(spawn_replica) -> None:
    t0 = time.monotonic()
    replica = spawn_replica({"weight_load_time": "1.2s"})
    assert time.monotonic() - t0 >= 1.2
    async with httpx.AsyncClient() as client:
        assert (await client.get(replica.url + "/health")).status_code == 200
    assert "loading weights: 1.20 s (modelled)" in replica.log_path.read_text()
