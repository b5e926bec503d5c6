"""A minimal, fast HTTP/1.1 server on asyncio, shared by the replica and the router.

What it does: keep-alive (and pipelined requests, answered in order), ``Content-Length`` request
bodies (``Expect: 100-continue`` answered), fixed-length responses, chunked streaming responses
(``text/event-stream``) written chunk by chunk straight to the socket, a tiny router by
``(method, path)``, and client-disconnect detection so a request can be aborted wherever it is (vLLM
counts it as ``abort``, docs/serving-facts.md §3.2; the stack's cancellation: stack-contracts.md §4).
Chunked *request* bodies are refused with 411.

Why not a framework: one SSE chunk costs one ``transport.write`` here (a few µs); the engine
writes tokens from its step loop without a task switch per token.

Errors are answered in vLLM's current shape (docs/serving-facts.md §3.2):
``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from http import HTTPStatus

from drill.stack.http.messages import Handler, HttpError, HttpRequest, HttpResponse, Router, error_body

__all__ = [
    "Handler",
    "HttpError",
    "HttpRequest",
    "HttpResponse",
    "HttpServer",
    "ResponseStream",
    "Router",
    "error_body",
]

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 32 * 1024 * 1024
_PAUSE_READING_BYTES = 4 * 1024 * 1024
_REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}


class ResponseStream:
    """The response side of one exchange, for handlers that stream (SSE) instead of returning a response.

    A handler calls :meth:`start` once, :meth:`write` per chunk (synchronously, from any callback on
    the loop, e.g. the engine's step loop), then :meth:`end`. Writes after a disconnect are dropped
    and return ``False``. :meth:`on_disconnect` registers a callback run once when the client goes away
    before :meth:`end`.
    """

    __slots__ = ("_conn", "_chunked", "started", "ended", "_on_disconnect")

    def __init__(self, conn: _Connection) -> None:
        self._conn = conn
        self._chunked = True
        self.started = False
        self.ended = False
        self._on_disconnect: list[Callable[[], None]] = []

    @property
    def disconnected(self) -> bool:
        """True once the client closed the connection."""
        return self._conn.closed

    def start(
        self,
        status: int = 200,
        content_type: str = "text/event-stream; charset=utf-8",
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        """Send the status line and headers of a chunked response (raises RuntimeError if already started)."""
        if self.started:
            raise RuntimeError("response already started")
        self.started = True
        self._chunked = self._conn.http11
        extra = [("Content-Type", content_type), ("Cache-Control", "no-cache"), *headers]
        extra.append(("Transfer-Encoding", "chunked") if self._chunked else ("Connection", "close"))
        self._conn.write(_head(status, extra))

    def write(self, data: bytes) -> bool:
        """Send one chunk now (empty data is skipped). Returns False when the client is gone."""
        conn = self._conn
        if conn.closed or self.ended:
            return False
        if data:
            conn.transport.write(b"%x\r\n%b\r\n" % (len(data), data) if self._chunked else data)
        return True

    def end(self) -> None:
        """Finish the response (the terminating chunk); the connection goes on to the next request."""
        if self.ended:
            return
        self.ended = True
        if not self._conn.closed and self._chunked:
            self._conn.transport.write(b"0\r\n\r\n")
        self._conn.response_done(keep_alive=self._chunked)

    def on_disconnect(self, callback: Callable[[], None]) -> None:
        """Run ``callback()`` once if the client disconnects before :meth:`end` (at once if it already has)."""
        if self._conn.closed:
            callback()
        else:
            self._on_disconnect.append(callback)

    def _fire_disconnect(self) -> None:
        callbacks, self._on_disconnect = self._on_disconnect, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # one bad callback must not hide the others
                log.exception("disconnect callback failed")


def _head(status: int, headers: Iterable[tuple[str, str]]) -> bytes:
    lines = [b"HTTP/1.1 %d %b" % (status, _REASONS.get(status, b"Unknown"))]
    lines.extend(f"{name}: {value}".encode("latin-1") for name, value in headers)
    lines.append(b"\r\n")
    return b"\r\n".join(lines)


class _ParseError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    """Parse a request head; returns (method, target, version, headers). Raises _ParseError."""
    try:
        text = head.decode("latin-1")
        request_line, *header_lines = text.split("\r\n")
        method, target, version = request_line.split(" ")
    except ValueError as exc:
        raise _ParseError(400, "malformed request line") from exc
    if not version.startswith("HTTP/1."):
        raise _ParseError(505, f"unsupported protocol version {version!r}")
    headers: dict[str, str] = {}
    for line in header_lines:
        name, sep, value = line.partition(":")
        if not sep or not name or name[-1] in " \t":
            raise _ParseError(400, f"malformed header line {line[:80]!r}")
        key = name.lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return method, target, version[5:], headers


class _Connection(asyncio.Protocol):
    """One client connection: parses requests, runs handlers one at a time, writes responses."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.buffer = bytearray()
        self.closed = False
        self.busy = False
        self.http11 = True
        self.keep_alive = True
        self.stream: ResponseStream | None = None
        self.peer_host: str | None = None
        self.reading_paused = False
        self.sent_continue = False

    # asyncio.Protocol callbacks -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer_host = peer[0] if peer else None
        self.server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > _PAUSE_READING_BYTES and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()
        if not self.busy:
            self._next_request()

    def eof_received(self) -> bool:
        if not self.busy or not self.server.half_close:
            return False  # idle, or the client is gone: the transport closes and connection_lost fires
        self.keep_alive = False  # half-closed while a request runs: answer it, then close
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        if self.stream is not None and not self.stream.ended:
            self.stream._fire_disconnect()

    # request cycle --------------------------------------------------------------------------
    def _next_request(self) -> None:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEAD_BYTES:
                self._fail(431, "request head too large")
            return
        try:
            method, target, version, headers = _parse_head(bytes(self.buffer[:end]))
            length = self._body_length(headers)
        except _ParseError as exc:
            self._fail(exc.status, str(exc))
            return
        if len(self.buffer) < end + 4 + length:
            self._maybe_continue(headers)
            return
        body = bytes(self.buffer[end + 4 : end + 4 + length])
        del self.buffer[: end + 4 + length]
        self._dispatch(method, target, version, headers, body)

    def _body_length(self, headers: dict[str, str]) -> int:
        if "transfer-encoding" in headers:
            raise _ParseError(411, "chunked request bodies are not supported; send Content-Length")
        raw = headers.get("content-length", "0")
        if not raw.isdigit():
            raise _ParseError(400, f"invalid Content-Length {raw!r}")
        length = int(raw)
        if length > MAX_BODY_BYTES:
            raise _ParseError(413, f"request body of {length} bytes exceeds {MAX_BODY_BYTES} bytes")
        return length

    def _maybe_continue(self, headers: dict[str, str]) -> None:
        if not self.sent_continue and headers.get("expect", "").lower() == "100-continue":
            self.sent_continue = True
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _dispatch(self, method: str, target: str, version: str, headers: dict[str, str], body: bytes) -> None:
        self.busy = True
        self.sent_continue = False
        self.http11 = version == "1.1"
        connection = headers.get("connection", "").lower()
        self.keep_alive = "close" not in connection if self.http11 else "keep-alive" in connection
        path, _, query = target.partition("?")
        request = HttpRequest(method, path, query, headers, body, self.peer_host, version)
        self.stream = ResponseStream(self)
        self.server.spawn(self._handle(request, self.stream))

    async def _handle(self, request: HttpRequest, stream: ResponseStream) -> None:
        try:
            handler = self.server.router.resolve(request.method, request.path)
            response = await handler(request, stream)
        except HttpError as exc:
            response = exc.response()
        except Exception:
            log.exception("handler for %s %s failed", request.method, request.path)
            response = HttpError(500, "Internal Server Error").response()
        if stream.started:
            if response is not None:
                log.error("handler for %s returned a response after streaming; ignored", request.path)
            if not stream.ended:
                stream.end()
        elif response is None:
            log.error("handler for %s returned no response", request.path)
            self._send(HttpError(500, "handler returned no response").response())
        else:
            self._send(response)

    def _send(self, response: HttpResponse) -> None:
        if self.stream is not None:
            self.stream.started = self.stream.ended = True
        headers = [
            ("Content-Type", response.content_type),
            ("Content-Length", str(len(response.body))),
            *response.headers,
        ]
        if not self.keep_alive:
            headers.append(("Connection", "close"))
        self.write(_head(response.status, headers) + response.body)
        self.response_done(keep_alive=True)

    def write(self, data: bytes) -> None:
        if not self.closed:
            self.transport.write(data)

    def response_done(self, keep_alive: bool) -> None:
        """Called when a response is complete: go on to the next request, or close."""
        self.busy = False
        self.stream = None
        if self.closed:
            return
        if not (keep_alive and self.keep_alive) or self.server.closing:
            self.transport.close()
            return
        if self.reading_paused and len(self.buffer) < _PAUSE_READING_BYTES:
            self.reading_paused = False
            self.transport.resume_reading()
        if self.buffer:
            self._next_request()

    def _fail(self, status: int, message: str) -> None:
        self.keep_alive = False
        self.busy = True
        self._send(HttpError(status, message).response())


class HttpServer:
    """Serves a :class:`Router` on ``host:port`` (port 0 picks a free one; read :attr:`port` after start).

    A client that closes its side (EOF) while its request runs is gone, as uvicorn (vLLM's server) treats
    it: the connection closes and the stream's disconnect callbacks run at once, so a handler can abort
    its work. ``half_close=True`` instead answers such a request and then closes (the stack's
    ``abort_abandoned: false``): a handler then learns of the client only when a write fails.
    """

    def __init__(
        self,
        router: Router,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        backlog: int = 2048,
        half_close: bool = False,
    ) -> None:
        self.router = router
        self.host = host
        self.port = port
        self.backlog = backlog
        self.half_close = half_close
        self.connections: set[_Connection] = set()
        self.closing = False
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    @property
    def url(self) -> str:
        """``http://host:port`` of the bound socket."""
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        """Bind and listen. Raises OSError when the address is taken."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self), self.host, self.port, backlog=self.backlog, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]

    def spawn(self, coro: Awaitable[None]) -> None:
        """Run a handler coroutine as a task that :meth:`close` can wait for."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def in_flight(self) -> int:
        """Number of requests whose handler or stream has not finished."""
        return sum(1 for conn in self.connections if conn.busy)

    async def stop_listening(self) -> None:
        """Stop accepting connections; idle keep-alive connections are closed, busy ones finish."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            if not conn.busy:
                conn.transport.close()

    async def close(self, grace_s: float = 0.0) -> None:
        """Stop listening, wait up to ``grace_s`` seconds for busy connections, then abort the rest."""
        await self.stop_listening()
        deadline = asyncio.get_running_loop().time() + grace_s
        while self.in_flight and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self.connections):
            conn.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
