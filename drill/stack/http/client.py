"""A lean HTTP/1.1 client on asyncio for the router's upstream calls, beside the stack's server.

What it does: keep-alive connection pools per origin (``http://host:port``; at most ``max_connections`` open in all,
``max_idle`` kept idle, as the httpx limits the router had), a request with a ``Content-Length`` body, and a response
whose body is ``Content-Length``, chunked (an SSE stream) or read until the server closes. A body is read whole
(:meth:`UpstreamResponse.read`), chunk by chunk (:meth:`UpstreamResponse.next_chunk`), or relayed: each piece the
socket delivers goes straight to a callback from the protocol's ``data_received``, with no task switch per chunk
(:meth:`UpstreamResponse.relay`) — the path of a streamed completion through the router.

Failures are :class:`UpstreamError`\\ s, by what the router's retry rules need to tell apart (stack-contracts.md §1
``router.retries``): :class:`UpstreamConnectError` (no connection), :class:`UpstreamReadError` (the connection failed
or closed before the answer ended), :class:`UpstreamTimeout` (no connection, no free connection, or no next byte
within the timeout: a read timeout bounds each wait for data, as httpx's does). A response closed before its end
closes its connection, so the server sees the client go away and aborts the request (vLLM's ``with_cancellation``);
a response read to its end returns its connection to the pool.

A kept-alive connection can be closed by the server while it sits idle (uvicorn, which vLLM serves with, closes
after 5 s) with the close still on its way, above all through a proxy that delays it (Toxiproxy's latency toxic):
the request goes out and the connection closes with no answer begun. Such a request is sent once more, on a new
connection, when that is safe: it never went out, or it may be repeated — an idempotent method, or an
``Idempotency-Key`` header (RFC 9112 §9.3.1 "Retrying Requests"; Go's ``net/http`` transport resends on the same
terms). A new connection that closes before answering is not retried: that server may have taken the request.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from drill.errors import StackError

__all__ = [
    "ConnectTimeout",
    "HttpClient",
    "PoolTimeout",
    "ReadTimeout",
    "Timeouts",
    "UpstreamConnectError",
    "UpstreamError",
    "UpstreamReadError",
    "UpstreamResponse",
    "UpstreamTimeout",
]

MAX_HEAD_BYTES = 64 * 1024
_PAUSE_READING_BYTES = 1024 * 1024
_NO_BODY_STATUSES = frozenset({204, 304})


class UpstreamError(StackError):
    """An upstream request failed; :attr:`kind` is ``connect``, ``read`` or ``timeout``."""

    kind = "read"


class UpstreamConnectError(UpstreamError):
    """No connection could be made (refused, unreachable)."""

    kind = "connect"


class UpstreamReadError(UpstreamError):
    """The connection failed, or the server closed it, before the answer ended; or the answer was not HTTP/1.x."""

    kind = "read"
    before_answer = False  # no byte of the answer had arrived
    unsent = False  # the request could not be written at all


class UpstreamTimeout(UpstreamError):
    """No connection, no free connection, or no next byte of the answer within the timeout."""

    kind = "timeout"


class ConnectTimeout(UpstreamTimeout):
    """No connection within the connect timeout."""


class PoolTimeout(UpstreamTimeout):
    """No free connection (all ``max_connections`` busy) within the read timeout."""


class ReadTimeout(UpstreamTimeout):
    """No (next) byte of the answer within the read timeout."""


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds to connect, and to wait for each next piece of the answer (and for a free connection)."""

    connect: float
    read: float

    @classmethod
    def of(cls, limit: float) -> Timeouts:
        """The router's rule: ``limit`` for every wait, connecting at most 5 s."""
        return cls(connect=min(5.0, limit), read=limit)


@dataclass(frozen=True, slots=True)
class _Origin:
    key: str
    host: str
    port: int


def _origin(url: str) -> tuple[str, str]:
    """``(origin, target)`` of an ``http://host[:port]/path?query`` URL."""
    if not url.startswith("http://"):
        raise UpstreamConnectError(f"only http:// upstreams are supported, not {url!r}")
    slash = url.find("/", 7)
    return (url, "/") if slash < 0 else (url[:slash], url[slash:])


# -- the response parser and the connection ---------------------------------------------------------------------
_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILER, _UNTIL_CLOSE, _DONE = range(8)


class _UpstreamConnection(asyncio.Protocol):
    """One upstream connection: at most one exchange at a time; parses the answer as it arrives."""

    def __init__(self, client: HttpClient, origin: _Origin) -> None:
        self.client, self.origin = client, origin
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.response: UpstreamResponse | None = None
        self.buffer = bytearray()
        self.state = _DONE
        self.remaining = 0  # body bytes left (Content-Length), or of the current chunk

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        response = self.response
        if response is None:  # bytes nobody asked for: the connection cannot be trusted again
            self.close()
            return
        response.last_data = self.loop.time()
        response.received = True
        self.buffer += data
        try:
            pieces = self._parse(response)
        except UpstreamError as exc:
            response.fail(exc)
            self.close()
            return
        if pieces:
            response.deliver(pieces[0] if len(pieces) == 1 else b"".join(pieces))
        if self.state == _DONE and not response.ended:
            response.finish()

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost ends or fails the answer

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.client._forget(self)
        response = self.response
        if response is None or response.ended:
            return
        if self.state == _UNTIL_CLOSE:
            response.finish()
        else:
            response.fail(UpstreamReadError(f"{self.origin.key} closed the connection before the answer ended"))

    @property
    def usable(self) -> bool:
        """Open, with a transport that is not closing (its ``connection_lost`` may still be due)."""
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    def send(self, response: UpstreamResponse, request: bytes) -> None:
        self.response, self.state = response, _HEAD
        try:
            assert self.transport is not None
            self.transport.write(request)
        except (RuntimeError, OSError) as exc:  # closed under us (uvloop raises where asyncio's loop ignores)
            error = UpstreamReadError(f"{self.origin.key}: the connection closed before the request went out")
            response.unsent = True
            response.fail(error)
            self.close()
            raise error from exc

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()
            self.client._forget(self)

    # the parser: appends body pieces, advances self.state -----------------------------------------------------
    def _parse(self, response: UpstreamResponse) -> list[bytes]:
        pieces: list[bytes] = []
        buffer = self.buffer
        while buffer or self.state == _DONE:
            state = self.state
            if state == _HEAD:
                if not self._head(response):
                    break
            elif state in (_LENGTH, _CHUNK_DATA):
                take = min(self.remaining, len(buffer))
                pieces.append(bytes(buffer[:take]))
                del buffer[:take]
                self.remaining -= take
                if not self.remaining:
                    self.state = _DONE if state == _LENGTH else _CHUNK_END
            elif state == _CHUNK_SIZE:
                end = buffer.find(b"\r\n")
                if end < 0:
                    break
                self.remaining = _chunk_size(bytes(buffer[:end]))
                del buffer[: end + 2]
                self.state = _CHUNK_DATA if self.remaining else _TRAILER
            elif state == _CHUNK_END:
                if len(buffer) < 2:
                    break
                if buffer[:2] != b"\r\n":
                    raise UpstreamReadError("malformed chunked body: no CRLF after a chunk")
                del buffer[:2]
                self.state = _CHUNK_SIZE
            elif state == _TRAILER:
                end = buffer.find(b"\r\n")
                if end < 0:
                    break
                del buffer[: end + 2]
                self.state = _TRAILER if end else _DONE
            elif state == _UNTIL_CLOSE:
                pieces.append(bytes(buffer))
                buffer.clear()
            else:  # _DONE
                break
        return pieces

    def _head(self, response: UpstreamResponse) -> bool:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEAD_BYTES:
                raise UpstreamReadError(f"response head larger than {MAX_HEAD_BYTES} bytes")
            return False
        status, version, headers = _parse_head(bytes(self.buffer[:end]))
        del self.buffer[: end + 4]
        if 100 <= status < 200:
            return True  # an interim answer (100 Continue): the real one follows
        response.head(status, version, headers)
        if response.method == "HEAD" or status in _NO_BODY_STATUSES:
            self.state = _DONE
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self.state = _CHUNK_SIZE
        elif "content-length" in headers:
            self.remaining = _content_length(headers["content-length"])
            self.state = _LENGTH if self.remaining else _DONE
        else:
            self.state = _UNTIL_CLOSE
        return True

    @property
    def reusable(self) -> bool:
        response = self.response
        return (
            not self.closed
            and self.state == _DONE
            and not self.buffer
            and response is not None
            and response.keep_alive
            and response.error is None
        )


def _parse_head(head: bytes) -> tuple[int, str, dict[str, str]]:
    try:
        status_line, *lines = head.decode("latin-1").split("\r\n")
        version, code, *_ = status_line.split(" ", 2)
        status = int(code)
    except ValueError as exc:
        raise UpstreamReadError(f"malformed status line {head[:80]!r}") from exc
    if not version.startswith("HTTP/1."):
        raise UpstreamReadError(f"not an HTTP/1.x answer: {version[:20]!r}")
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise UpstreamReadError(f"malformed header line {line[:80]!r}")
        key, value = name.strip().lower(), value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return status, version[5:], headers


def _chunk_size(line: bytes) -> int:
    try:
        return int(line.split(b";", 1)[0].strip(), 16)
    except ValueError as exc:
        raise UpstreamReadError(f"malformed chunk size {line[:40]!r}") from exc


def _content_length(value: str) -> int:
    if not value.strip().isdigit():
        raise UpstreamReadError(f"invalid Content-Length {value!r}")
    return int(value)


# -- the response -----------------------------------------------------------------------------------------------
class UpstreamResponse:
    """One answer: :attr:`status` and :attr:`headers` (lower-case names) once :meth:`HttpClient.request` returns;
    its body through :meth:`read`, :meth:`next_chunk` or :meth:`relay`; :meth:`close` always (``finally``)."""

    def __init__(self, conn: _UpstreamConnection, method: str, read_timeout: float) -> None:
        self.conn, self.method, self.read_timeout = conn, method, read_timeout
        self.status = 0
        self.http_version = "1.1"
        self.headers: dict[str, str] = {}
        self.keep_alive = False
        self.ended = False
        self.error: UpstreamError | None = None
        self.received = False  # any byte of the answer arrived
        self.unsent = False  # the request could not be written at all
        self.last_data = conn.loop.time()
        self._queue: deque[bytes] = deque()
        self._queued = 0
        self._sink: Callable[[bytes], bool] | None = None
        self._gone = False  # the sink said its reader is gone
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    # called by the connection -------------------------------------------------------------------------------
    def head(self, status: int, version: str, headers: dict[str, str]) -> None:
        self.status, self.http_version, self.headers = status, version, headers
        connection = headers.get("connection", "").lower()
        self.keep_alive = "close" not in connection if version == "1.1" else "keep-alive" in connection
        self._wake()

    def deliver(self, data: bytes) -> None:
        if self._sink is not None:
            if not self._sink(data):
                self._gone = True
                self.conn.close()
                self._end()
            return
        self._queue.append(data)
        self._queued += len(data)
        if self._queued > _PAUSE_READING_BYTES and self.conn.transport is not None:
            self.conn.transport.pause_reading()
        self._wake()

    def finish(self) -> None:
        self._end()

    def fail(self, error: UpstreamError) -> None:
        if not self.ended:
            self.error = error
            self._end()

    def _end(self) -> None:
        self.ended = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # waiting, with the read timeout between two pieces of data ------------------------------------------------
    async def _wait(self) -> None:
        """Until the connection delivers something, ends, fails, or stays silent for the read timeout."""
        if self.ended:
            return
        self._waiter = self.conn.loop.create_future()
        if self._timer is None:
            self._timer = self.conn.loop.call_at(self.last_data + self.read_timeout, self._check_silence)
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _check_silence(self) -> None:
        self._timer = None
        if self.ended:
            return
        due = self.last_data + self.read_timeout
        if self.conn.loop.time() < due:
            self._timer = self.conn.loop.call_at(due, self._check_silence)
            return
        self.fail(ReadTimeout(f"{self.conn.origin.key} sent nothing for {self.read_timeout:g} s"))
        self.conn.close()

    def _raise_error(self) -> None:
        if self.error is not None:
            raise self.error

    async def wait_head(self) -> None:
        while not self.status:
            if self.ended:
                self._raise_error()
                raise UpstreamReadError(f"{self.conn.origin.key} closed the connection before answering")
            await self._wait()

    # the body ----------------------------------------------------------------------------------------------------
    async def next_chunk(self) -> bytes:
        """The next piece of the body as it arrived (several arrivals joined), or ``b""`` at its end."""
        while not self._queue:
            if self.ended:
                self._raise_error()
                return b""
            await self._wait()
        data = b"".join(self._queue) if len(self._queue) > 1 else self._queue[0]
        self._queue.clear()
        if self._queued > _PAUSE_READING_BYTES and not self.conn.closed and self.conn.transport is not None:
            self.conn.transport.resume_reading()
        self._queued = 0
        return data

    async def read(self) -> bytes:
        """The whole body."""
        parts = []
        while chunk := await self.next_chunk():
            parts.append(chunk)
        return b"".join(parts)

    async def relay(self, write: Callable[[bytes], bool]) -> bool:
        """Pass the rest of the body to ``write`` piece by piece as it arrives; ``write`` returning False (its
        reader is gone) closes the connection. True when the body ended, False when ``write`` stopped it."""
        if self._queue:
            data = await self.next_chunk()
            if not write(data):
                self.conn.close()
                return False
        self._sink = write
        while not self.ended:
            await self._wait()
        self._raise_error()
        return not self._gone

    def close(self) -> None:
        """Give the connection back to the pool when the answer was read to its end, else close it."""
        self._sink = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        conn = self.conn
        if conn.response is not self:
            return
        if self.ended and conn.reusable:
            conn.response = None
            conn.client._release(conn)
        else:
            self.ended = True
            conn.close()


# -- the client -------------------------------------------------------------------------------------------------
class HttpClient:
    """Keep-alive pools per origin; at most ``max_connections`` open, ``max_idle`` of them kept idle."""

    def __init__(self, max_connections: int = 2000, max_idle: int = 256) -> None:
        self.max_connections, self.max_idle = max_connections, max_idle
        self._origins: dict[str, _Origin] = {}
        self._idle: dict[str, list[_UpstreamConnection]] = {}
        self._open: set[_UpstreamConnection] = set()
        self._idle_count = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        body: bytes = b"",
        timeout: Timeouts,
    ) -> UpstreamResponse:
        """Send a request and wait for the answer's head. The caller reads the body and calls
        :meth:`UpstreamResponse.close`. Raises :class:`UpstreamError`."""
        key, target = _origin(url)
        origin = self._origins.get(key) or self._add_origin(key)
        payload = _request_bytes(method, target, origin, headers, body)
        conn, reused = await self._acquire(origin, timeout)
        try:
            return await self._exchange(conn, method, payload, timeout)
        except UpstreamReadError as exc:
            if not (reused and exc.before_answer and (exc.unsent or _may_resend(method, headers))):
                raise
        # the pooled connection was closed by the server while idle: once more, on a new connection
        conn, _ = await self._acquire(origin, timeout, fresh=True)
        return await self._exchange(conn, method, payload, timeout)

    async def _exchange(
        self, conn: _UpstreamConnection, method: str, payload: bytes, timeout: Timeouts
    ) -> UpstreamResponse:
        response = UpstreamResponse(conn, method, timeout.read)
        try:
            conn.send(response, payload)
            await response.wait_head()
        except UpstreamReadError as exc:
            response.close()
            exc.before_answer, exc.unsent = not response.received, response.unsent
            raise
        except BaseException:
            response.close()
            raise
        return response

    async def fetch(
        self, method: str, url: str, *, headers: dict[str, str] | None = None, body: bytes = b"", timeout: Timeouts
    ) -> tuple[UpstreamResponse, bytes]:
        """:meth:`request` and the whole body; the connection goes back to the pool."""
        response = await self.request(method, url, headers=headers, body=body, timeout=timeout)
        try:
            return response, await response.read()
        finally:
            response.close()

    async def close(self) -> None:
        """Close every connection; requests under way fail with :class:`UpstreamReadError`."""
        self._closed = True
        for conn in list(self._open):
            conn.close()

    # the pool ---------------------------------------------------------------------------------------------------
    def _add_origin(self, key: str) -> _Origin:
        hostport = key[7:]
        host, sep, port = hostport.rpartition(":")
        if not sep or not port.isdigit():
            host, port = hostport, "80"
        origin = _Origin(key, host.strip("[]"), int(port))
        self._origins[key] = origin
        self._idle[key] = []
        return origin

    async def _acquire(
        self, origin: _Origin, timeout: Timeouts, *, fresh: bool = False
    ) -> tuple[_UpstreamConnection, bool]:
        """A connection to ``origin`` and whether it was reused from the pool (``fresh``: a new one)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout.read
        while True:
            if self._closed:
                raise UpstreamConnectError("the client is closed")
            idle = self._idle[origin.key]
            while idle and not fresh:
                conn = idle.pop()
                self._idle_count -= 1
                if conn.usable:
                    return conn, True
                conn.close()
            if len(self._open) < self.max_connections:
                return await self._connect(origin, timeout), False
            if self._idle_count:  # make room: close an idle connection to another origin
                self._close_one_idle()
                continue
            await self._wait_for_slot(origin, deadline - loop.time())

    async def _wait_for_slot(self, origin: _Origin, left: float) -> None:
        if left <= 0:
            raise PoolTimeout(f"no free connection to {origin.key} within the timeout")
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, left)
        except TimeoutError as exc:
            raise PoolTimeout(f"no free connection to {origin.key} within the timeout") from exc
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    async def _connect(self, origin: _Origin, timeout: Timeouts) -> _UpstreamConnection:
        conn = _UpstreamConnection(self, origin)
        self._open.add(conn)
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.create_connection(lambda: conn, origin.host, origin.port), timeout.connect)
        except TimeoutError as exc:
            conn.close()
            raise ConnectTimeout(f"connecting to {origin.key} took over {timeout.connect:g} s") from exc
        except OSError as exc:
            conn.close()
            raise UpstreamConnectError(f"cannot connect to {origin.key}: {exc.strerror or exc}") from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def _release(self, conn: _UpstreamConnection) -> None:
        if self._closed or self._idle_count >= self.max_idle:
            conn.close()
            return
        self._idle[conn.origin.key].append(conn)
        self._idle_count += 1
        self._wake_one()

    def _close_one_idle(self) -> None:
        for idle in self._idle.values():
            if idle:
                self._idle_count -= 1
                idle.pop(0).close()
                return

    def _forget(self, conn: _UpstreamConnection) -> None:
        if conn in self._open:
            self._open.discard(conn)
            self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


#: Methods a request may be repeated with (RFC 9110 §9.2.2, idempotent methods).
_IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})


def _may_resend(method: str, headers: dict[str, str] | None) -> bool:
    """Whether a request that may have reached the server can be sent again: an idempotent method, or a key the
    server dedupes on (``Idempotency-Key``, as Go's ``net/http`` also accepts ``X-Idempotency-Key``)."""
    if method.upper() in _IDEMPOTENT_METHODS:
        return True
    names = {name.lower() for name in headers or {}}
    return "idempotency-key" in names or "x-idempotency-key" in names


def _request_bytes(method: str, target: str, origin: _Origin, headers: dict[str, str] | None, body: bytes) -> bytes:
    port = "" if origin.port == 80 else f":{origin.port}"
    lines = [f"{method} {target} HTTP/1.1", f"host: {origin.host}{port}"]
    if headers:
        lines.extend(f"{name}: {value}" for name, value in headers.items())
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"content-length: {len(body)}")
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1") + body
