"""drill.stack.http.client against the stack's own HTTP server on loopback (and, for answers that server never
gives, a raw socket server): bodies, SSE relay, keep-alive reuse, and the failures the router's retry rules tell
apart (connect, read, timeout)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from drill.stack.http.client import (
    ConnectTimeout,
    HttpClient,
    PoolTimeout,
    ReadTimeout,
    Timeouts,
    UpstreamConnectError,
    UpstreamReadError,
)
from drill.stack.http.server import HttpError, HttpRequest, HttpResponse, HttpServer, ResponseStream, Router

pytestmark = [pytest.mark.anyio, pytest.mark.realtime]  # served in real time: see tests/conftest.py

FAST = Timeouts(connect=2.0, read=2.0)


@pytest.fixture(
    params=[pytest.param(("asyncio", {}), id="asyncio"), pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop")]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict]:
    """Both loops the router runs on: asyncio's own, and uvloop (which raises on a write to a closed transport)."""
    return request.param


class Upstream:
    """The stack's server with handlers that record what they saw and when the client went away."""

    def __init__(self) -> None:
        self.seen: list[HttpRequest] = []
        self.disconnected = asyncio.Event()
        self.slow_started = asyncio.Event()  # /slow's handler runs: its disconnect is watched from here on
        # /held's handler runs; it answers once ``release`` is set, however slow the machine
        self.held = asyncio.Event()
        self.release = asyncio.Event()
        self.server = HttpServer(self._router())

    def _router(self) -> Router:
        router = Router()
        router.add("POST", "/echo", self.echo)
        router.add("GET", "/sse", self.sse)
        router.add("GET", "/slow", self.slow)
        router.add("GET", "/held", self.hold)
        router.add("GET", "/busy", self.busy)
        router.add("GET", "/cut", self.cut)
        return router

    async def echo(self, request: HttpRequest, stream: ResponseStream) -> HttpResponse:
        self.seen.append(request)
        return HttpResponse.json({"got": request.json(), "query": request.query, "host": request.headers["host"]})

    async def sse(self, request: HttpRequest, stream: ResponseStream) -> None:
        params = request.query_params()
        stream.on_disconnect(self.disconnected.set)
        stream.start(200, "text/event-stream; charset=utf-8", (("X-Request-Id", "r-1"),))
        for index in range(int(params.get("n", "3"))):
            if not stream.write(b"data: %d\n\n" % index):
                return
            await asyncio.sleep(float(params.get("gap", "0.01")))
        stream.write(b"data: [DONE]\n\n")
        stream.end()

    async def slow(self, request: HttpRequest, stream: ResponseStream) -> HttpResponse:
        stream.on_disconnect(self.disconnected.set)
        self.slow_started.set()
        await asyncio.sleep(float(request.query_params().get("s", "1")))
        return HttpResponse(200, b"late", "text/plain")

    async def hold(self, request: HttpRequest, stream: ResponseStream) -> HttpResponse:
        self.held.set()
        await self.release.wait()
        return HttpResponse(200, b"late", "text/plain")

    async def busy(self, request: HttpRequest, stream: ResponseStream) -> HttpResponse:
        raise HttpError(503, "queue full", headers=(("Retry-After", "1"),))

    async def cut(self, request: HttpRequest, stream: ResponseStream) -> None:
        stream.start()
        stream.write(b"data: 0\n\n")
        await asyncio.sleep(0.05)
        stream._conn.transport.abort()  # the replica dies mid-stream


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    up = Upstream()
    await up.server.start()
    try:
        yield up
    finally:
        await up.server.close()


@pytest.fixture
async def client() -> AsyncIterator[HttpClient]:
    http = HttpClient()
    try:
        yield http
    finally:
        await http.close()


async def raw_server(answer: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]) -> asyncio.Server:
    """A socket server that answers every connection with ``answer`` (bytes the stack's server never sends)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await answer(reader, writer)
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def url_of(server: asyncio.Server) -> str:
    return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_a_content_length_body_round_trips_and_the_connection_is_reused(upstream, client) -> None:
    body = json.dumps({"prompt": "hi"}).encode()
    for _ in range(3):
        response, content = await client.fetch(
            "POST", upstream.server.url + "/echo?x=1", headers={"x-request-id": "a"}, body=body, timeout=FAST
        )
        assert response.status == 200 and response.headers["content-type"] == "application/json"
        assert json.loads(content) == {"got": {"prompt": "hi"}, "query": "x=1", "host": upstream.server.url[7:]}
    assert [r.headers["x-request-id"] for r in upstream.seen] == ["a", "a", "a"]
    assert len(upstream.server.connections) == 1  # one keep-alive connection served all three


async def test_a_stream_arrives_chunk_by_chunk_and_relays_whole(upstream, client) -> None:
    response = await client.request("GET", upstream.server.url + "/sse?n=4&gap=0.05", timeout=FAST)
    try:
        assert response.status == 200 and response.headers["x-request-id"] == "r-1"
        assert await response.next_chunk() == b"data: 0\n\n"  # the first event alone: nothing batched it
        relayed: list[bytes] = []
        assert await response.relay(lambda data: relayed.append(data) is None) is True
    finally:
        response.close()
    assert len(relayed) >= 3  # one piece per event as it came, not one at the end
    assert b"".join(relayed) == b"data: 1\n\ndata: 2\n\ndata: 3\n\ndata: [DONE]\n\n"
    _, content = await client.fetch("POST", upstream.server.url + "/echo", body=b"{}", timeout=FAST)
    assert len(upstream.server.connections) == 1 and json.loads(content)["got"] == {}


async def test_a_relay_whose_reader_left_closes_the_upstream_request(upstream, client) -> None:
    response = await client.request("GET", upstream.server.url + "/sse?n=50&gap=0.02", timeout=FAST)
    writes: list[bytes] = []

    def write(data: bytes) -> bool:
        writes.append(data)
        return len(writes) < 2  # the client went away after the second piece

    try:
        assert await response.relay(write) is False
    finally:
        response.close()
    await asyncio.wait_for(upstream.disconnected.wait(), 2.0)
    assert len(writes) == 2


async def test_closing_a_response_before_its_end_aborts_the_request_there(upstream, client) -> None:
    task = asyncio.ensure_future(client.fetch("GET", upstream.server.url + "/slow?s=5", timeout=FAST))
    await asyncio.wait_for(upstream.slow_started.wait(), 5.0)  # not a fixed 0.2 s: a loaded machine can be later
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(upstream.disconnected.wait(), 2.0)


async def test_a_refusal_keeps_its_status_body_and_headers(upstream, client) -> None:
    response, content = await client.fetch("GET", upstream.server.url + "/busy", timeout=FAST)
    assert response.status == 503 and response.headers["retry-after"] == "1"
    assert json.loads(content)["error"]["message"] == "queue full"


async def test_a_refused_connection_is_a_connect_error(client) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(UpstreamConnectError) as caught:
        await client.request("GET", f"http://127.0.0.1:{port}/health", timeout=FAST)
    assert caught.value.kind == "connect"


async def test_a_connection_not_accepted_in_time_is_a_connect_timeout(client) -> None:
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)  # never accepts: once its backlog is full the kernel drops further SYNs
        port = full.getsockname()[1]
        fillers = [socket.create_connection(("127.0.0.1", port), timeout=1.0)]  # fills Linux's backlog of 0 + 1
        try:
            with pytest.raises(ConnectTimeout) as caught:
                await client.request("GET", f"http://127.0.0.1:{port}/health", timeout=Timeouts(connect=0.3, read=1.0))
        finally:
            for filler in fillers:
                filler.close()
    assert caught.value.kind == "timeout"


async def test_no_answer_within_the_read_timeout_is_a_read_timeout(upstream, client) -> None:
    with pytest.raises(ReadTimeout) as caught:
        await client.request("GET", upstream.server.url + "/slow?s=5", timeout=Timeouts(connect=1.0, read=0.3))
    assert caught.value.kind == "timeout"
    await asyncio.wait_for(upstream.disconnected.wait(), 2.0)  # the timed-out request is closed upstream


async def test_a_stream_silent_past_the_read_timeout_fails_the_relay(upstream, client) -> None:
    response = await client.request("GET", upstream.server.url + "/sse?n=3&gap=1.0", timeout=Timeouts(1.0, 0.3))
    try:
        assert await response.next_chunk() == b"data: 0\n\n"
        with pytest.raises(ReadTimeout):
            await response.relay(lambda data: True)
    finally:
        response.close()


async def test_a_replica_dying_mid_stream_is_a_read_error(upstream, client) -> None:
    response = await client.request("GET", upstream.server.url + "/cut", timeout=FAST)
    try:
        assert await response.next_chunk() == b"data: 0\n\n"
        with pytest.raises(UpstreamReadError) as caught:
            await response.relay(lambda data: True)
    finally:
        response.close()
    assert caught.value.kind == "read"


async def test_a_connection_closed_before_any_answer_is_a_read_error(client) -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        return None

    server = await raw_server(hang_up)
    async with server:
        with pytest.raises(UpstreamReadError):
            await client.request("GET", url_of(server) + "/", timeout=FAST)


async def test_a_truncated_content_length_body_is_a_read_error(client) -> None:
    async def short(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        await writer.drain()

    server = await raw_server(short)
    async with server:
        with pytest.raises(UpstreamReadError):
            await client.fetch("GET", url_of(server) + "/", timeout=FAST)


async def test_a_body_until_close_an_interim_answer_and_chunk_extensions(client) -> None:
    async def old_style(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil ")
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.write(b"the end")

    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        writer.write(b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n")
        await writer.drain()

    for answer, expected in ((old_style, b"until the end"), (chunked, b"abcde")):
        server = await raw_server(answer)
        async with server:
            response, content = await client.fetch("GET", url_of(server) + "/", timeout=FAST)
        assert response.status == 200 and content == expected
    assert not client._open  # neither answer allows keep-alive: both connections closed


@pytest.mark.parametrize("settle_s", [0.05, 0.0])
async def test_a_pooled_connection_the_server_closed_is_replaced(upstream, client, settle_s: float) -> None:
    await client.fetch("POST", upstream.server.url + "/echo", body=b"{}", timeout=FAST)
    for conn in list(upstream.server.connections):
        conn.transport.close()  # the replica restarted: its idle connections are gone
    await asyncio.sleep(settle_s)  # 0: the client may learn of it only when it writes (closed, or still closing)
    try:
        response, _ = await client.fetch("POST", upstream.server.url + "/echo", body=b"{}", timeout=FAST)
    except UpstreamReadError:  # it went out on the old connection just before the close reached the client
        response, _ = await client.fetch("POST", upstream.server.url + "/echo", body=b"{}", timeout=FAST)
    assert response.status == 200


async def test_past_max_connections_a_request_waits_for_a_free_one(upstream) -> None:
    http = HttpClient(max_connections=1)
    try:
        # the only connection is held by a request the server answers when the test says so: no race with the clock
        first = asyncio.ensure_future(
            http.fetch("GET", upstream.server.url + "/held", timeout=Timeouts(connect=2.0, read=60.0))
        )
        await asyncio.wait_for(upstream.held.wait(), 30)
        with pytest.raises(PoolTimeout):  # the only connection stays busy past the timeout
            await http.request("GET", upstream.server.url + "/busy", timeout=Timeouts(connect=1.0, read=0.1))
        waiting = asyncio.ensure_future(
            http.fetch("GET", upstream.server.url + "/busy", timeout=Timeouts(connect=2.0, read=30.0))
        )
        await asyncio.sleep(0.05)
        assert not waiting.done()  # it waits for the connection ...
        upstream.release.set()
        response, _ = await waiting  # ... and reuses it once free
        assert response.status == 503 and (await first)[1] == b"late"
        assert len(upstream.server.connections) == 1
    finally:
        await http.close()


class ClosesIdleConnections:
    """A server that answers each connection's first request (keep-alive) and closes the connection, unanswered,
    when a second request arrives on it: the race of a server closing an idle kept-alive connection (uvicorn after
    5 s) with its close still on the way, as through a proxy that delays it, while the client sends on it."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        answered = False
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                self.requests.append(head.split(b"\r\n", 1)[0])
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                await reader.readexactly(length)
                if answered:
                    break  # the idle close meets this request: no answer
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
                answered = True
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


@pytest.mark.parametrize(
    ("method", "headers"),
    [("GET", {}), ("POST", {"Idempotency-Key": "run-7-chat-12"}), ("POST", {"x-idempotency-key": "k"})],
    ids=["idempotent method", "Idempotency-Key", "X-Idempotency-Key"],
)
async def test_a_request_the_server_closed_its_idle_connection_on_goes_again_on_a_new_one(
    client, method: str, headers: dict[str, str]
) -> None:
    upstream = ClosesIdleConnections()
    server = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
    async with server:
        first, _ = await client.fetch(method, url_of(server) + "/a", headers=headers, body=b"{}", timeout=FAST)
        second, content = await client.fetch(method, url_of(server) + "/b", headers=headers, body=b"{}", timeout=FAST)
    assert first.status == second.status == 200 and content == b"ok"
    assert upstream.connections == 2 and [line.split(b" ")[1] for line in upstream.requests] == [b"/a", b"/b", b"/b"]


async def test_a_post_without_an_idempotency_key_is_not_sent_twice(client) -> None:
    upstream = ClosesIdleConnections()
    server = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
    async with server:
        await client.fetch("POST", url_of(server) + "/a", body=b"{}", timeout=FAST)
        with pytest.raises(UpstreamReadError) as caught:  # the server may have taken it: the caller decides
            await client.fetch("POST", url_of(server) + "/b", body=b"{}", timeout=FAST)
    assert caught.value.before_answer and upstream.connections == 1 and len(upstream.requests) == 2


async def test_a_new_connection_closed_before_answering_is_not_retried(client) -> None:
    seen = []

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(1)

    server = await raw_server(hang_up)
    async with server:
        with pytest.raises(UpstreamReadError):
            await client.request("GET", url_of(server) + "/", timeout=FAST)
    assert seen == [1]  # a server that dies on a request gets it once, whatever its method
