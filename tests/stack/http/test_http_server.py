"""drill.stack.http.server: keep-alive, pipelining, errors, chunked SSE streaming and disconnect detection."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from drill.stack.http.server import HttpError, HttpRequest, HttpResponse, HttpServer, ResponseStream, Router

pytestmark = [pytest.mark.anyio, pytest.mark.realtime]  # served in real time: see tests/conftest.py


def _router(events: dict) -> Router:
    router = Router()

    async def hello(request: HttpRequest, stream: ResponseStream) -> HttpResponse:
        return HttpResponse.json({"path": request.path, "q": request.query_params()})

    async def echo(request: HttpRequest, stream: ResponseStream) -> HttpResponse:
        return HttpResponse.json({"got": request.json(), "id": request.headers.get("x-request-id")})

    async def fail(request: HttpRequest, stream: ResponseStream) -> HttpResponse:
        raise HttpError(503, "busy", headers=(("Retry-After", "1"),))

    async def crash(request: HttpRequest, stream: ResponseStream) -> HttpResponse:
        raise RuntimeError("boom")

    async def sse(request: HttpRequest, stream: ResponseStream) -> None:
        count = int(request.query_params().get("n", "3"))
        done = asyncio.get_running_loop().create_future()
        stream.on_disconnect(lambda: (events.setdefault("disconnected", done), done.done() or done.set_result(1)))
        stream.start()
        for index in range(count):
            if not stream.write(b"data: %d\n\n" % index):
                events["write_refused"] = True
                break
            await asyncio.sleep(float(request.query_params().get("gap", "0")))
        else:
            stream.write(b"data: [DONE]\n\n")
        stream.end()

    router.add("GET", "/hello", hello)
    router.add("POST", "/echo", echo)
    router.add("GET", "/fail", fail)
    router.add("GET", "/crash", crash)
    router.add("GET", "/sse", sse)
    router.add("GET", "/admin/*", hello)
    return router


@pytest.fixture
async def server():
    events: dict = {}
    srv = HttpServer(_router(events))
    await srv.start()
    srv.events = events  # type: ignore[attr-defined]
    try:
        yield srv
    finally:
        await srv.close()


async def test_json_get_post_and_keep_alive(server: HttpServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        first = await client.get("/hello?a=1&b=2")
        second = await client.post("/echo", json={"x": [1, 2]}, headers={"X-Request-Id": "r1"})
        prefix = await client.get("/admin/state")
        assert len(server.connections) == 1  # one keep-alive connection served all three
    assert first.json() == {"path": "/hello", "q": {"a": "1", "b": "2"}}
    assert second.json() == {"got": {"x": [1, 2]}, "id": "r1"}
    assert prefix.json()["path"] == "/admin/state"


async def test_error_bodies_in_vllm_shape(server: HttpServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        missing = await client.get("/nope")
        wrong_method = await client.post("/hello")
        busy = await client.get("/fail")
        crashed = await client.get("/crash")
        bad_json = await client.post("/echo", content=b"{not json")
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "NotFoundError"
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "GET"
    assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
    assert busy.json() == {"error": {"message": "busy", "type": "Service Unavailable", "param": None, "code": 503}}
    assert crashed.status_code == 500 and crashed.json()["error"]["type"] == "InternalServerError"
    assert bad_json.status_code == 400 and "not valid JSON" in bad_json.json()["error"]["message"]


async def test_streaming_is_chunked_and_parsed_by_httpx(server: HttpServer) -> None:
    async with httpx.AsyncClient(base_url=server.url) as client:
        async with client.stream("GET", "/sse?n=5&gap=0.001") as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            assert response.headers["transfer-encoding"] == "chunked"
            lines = [line async for line in response.aiter_lines() if line]
        again = await client.get("/hello")  # the connection is reusable after a stream
    assert lines == ["data: 0", "data: 1", "data: 2", "data: 3", "data: 4", "data: [DONE]"]
    assert again.status_code == 200


async def _raw(server: HttpServer, payload: bytes, *, read_until: bytes, close: bool = True) -> bytes:
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(payload)
    data = b""
    while read_until not in data:
        chunk = await asyncio.wait_for(reader.read(65536), 5)
        if not chunk:
            break
        data += chunk
    if close:
        writer.close()
    return data


async def test_pipelined_requests_answered_in_order(server: HttpServer) -> None:
    body = json.dumps({"n": 1}).encode()
    payload = (
        b"GET /hello?i=1 HTTP/1.1\r\nHost: x\r\n\r\n"
        b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%b"
        b"GET /hello?i=3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    ) % (len(body), body)
    data = await _raw(server, payload, read_until=b'"i":"3"')
    assert data.count(b"HTTP/1.1 200 OK") == 3
    assert data.index(b'"i":"1"') < data.index(b'"got"') < data.index(b'"i":"3"')


async def test_expect_continue_and_protocol_errors(server: HttpServer) -> None:
    reader, writer = await asyncio.open_connection(server.host, server.port)
    writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 7\r\n\r\n")
    assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)).startswith(b"HTTP/1.1 100 Continue")
    writer.write(b'{"a":1}')
    assert b'"got":{"a":1}' in await asyncio.wait_for(reader.read(65536), 5)
    writer.close()
    chunked = await _raw(server, b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", read_until=b"}}")
    assert chunked.startswith(b"HTTP/1.1 411")
    garbage = await _raw(server, b"NONSENSE\r\n\r\n", read_until=b"}}")
    assert garbage.startswith(b"HTTP/1.1 400")


async def test_disconnect_mid_stream_fires_callback(server: HttpServer) -> None:
    await _raw(server, b"GET /sse?n=1000&gap=0.002 HTTP/1.1\r\nHost: x\r\n\r\n", read_until=b"data: 2")
    for _ in range(200):
        if "write_refused" in server.events:  # type: ignore[attr-defined]
            break
        await asyncio.sleep(0.01)
    assert "disconnected" in server.events  # type: ignore[attr-defined]
    assert server.events["write_refused"] is True  # type: ignore[attr-defined]


async def test_http10_stream_is_closed_not_chunked(server: HttpServer) -> None:
    data = await _raw(server, b"GET /sse?n=2 HTTP/1.0\r\n\r\n", read_until=b"[DONE]")
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"Transfer-Encoding" not in head and b"Connection: close" in head
    assert body == b"data: 0\n\ndata: 1\n\ndata: [DONE]\n\n"


async def test_close_waits_for_in_flight_stream_within_grace() -> None:
    events: dict = {}
    srv = HttpServer(_router(events))
    await srv.start()
    reader, writer = await asyncio.open_connection(srv.host, srv.port)
    writer.write(b"GET /sse?n=20&gap=0.005 HTTP/1.1\r\nHost: x\r\n\r\n")
    await reader.readuntil(b"data: 0")
    await srv.close(grace_s=2.0)
    rest = await reader.read()
    assert rest.endswith(b"0\r\n\r\n") and b"[DONE]" in rest
    writer.close()
