"""Send one attempt and read its SSE stream, timestamping every chunk as it arrives.

Runs inside the load-generator child process only (gevent-patched; imported by
:mod:`drill.load.child.openloop`, never by the harness). The request and its headers go
through ``geventhttpclient``; the streamed body is read by the process's
:class:`~drill.load.child.reactor.StreamReactor` — one greenlet reading every ready stream
socket per wake-up — which feeds geventhttpclient's parser and timestamps each SSE
event the moment its bytes are read (not Locust's 1 KB-buffered iterators:
``docs/dependencies.md`` §1.1, 0.16 ms vs 51 ms p50 delivery lag). TLS or an unexpected
response layout falls back to reading in the request's own greenlet. Times are
``time.perf_counter()`` values; :mod:`drill.load.child.openloop` turns them into offsets from
the intended start.

A stream that ends abnormally (timeout, cancel, reset) has its socket closed,
never returned to the keep-alive pool with unread bytes in it.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gevent
import gevent.socket
from geventhttpclient import HTTPClient
from geventhttpclient.connectionpool import ConnectionPool
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError, HTTPSocketPoolResponse
from geventhttpclient.url import URL

from drill.load.child.reactor import reactor
from drill.load.output import OutputDigest
from drill.load.sse import (
    LineKind,
    carries_usage,
    classify_line,
    is_role_only,
    parse_error_code,
    parse_error_message,
    parse_timings,
    parse_usage,
)
from drill.rundir.records import ErrorClass, ServerTimings, classify_status, classify_stream_error

__all__ = ["Cancelled", "ClientOutcome", "Transport", "send_attempt"]


class Cancelled(BaseException):
    """Thrown into a request greenlet when the drain period at stop has run out."""


class _Deadline(BaseException):
    """The pool's client timeout expired (raised by ``gevent.Timeout``)."""


@dataclass(slots=True)
class ClientOutcome:
    """What happened to one attempt, as the load driver's client saw it; times are ``perf_counter`` seconds."""

    sent_at: float
    status: int | None = None
    error: ErrorClass | None = None
    detail: str | None = None
    headers_at: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    end_at: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    role_only_first: bool = False
    retry_after_s: float | None = None
    stream_error_code: int | None = None  # the code of an error event in a 200 stream (vLLM's refusal: 503)
    output: OutputDigest | None = None  # the generated text's digest, for a watched (control) request
    server_timings: ServerTimings | None = None  # the server's own timings (llama.cpp), from the final chunk/body

    def fail(self, error: ErrorClass, detail: str) -> ClientOutcome:
        if self.error is None:
            self.error, self.detail = error, detail
        self.end_at = self.end_at or time.perf_counter()
        return self


class _TrackingPool(ConnectionPool):
    """A keep-alive pool that remembers which socket each greenlet last took.

    geventhttpclient returns a socket to the pool when a read is interrupted
    (timeout, cancel) even though the response was not read to the end; the next
    request on it would read the old response. :meth:`abandon` closes that socket
    (the pool drops closed sockets) or, if it is still checked out, releases it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # ConnectionPool's own parameters
        super().__init__(*args, **kwargs)
        self._last: dict[object, gevent.socket.socket] = {}  # by greenlet
        self._out: set[gevent.socket.socket] = set()

    def get_socket(self) -> gevent.socket.socket:
        sock = super().get_socket()
        self._last[gevent.getcurrent()] = sock
        self._out.add(sock)
        return sock

    def return_socket(self, sock: gevent.socket.socket) -> None:
        self._out.discard(sock)
        super().return_socket(sock)

    def release_socket(self, sock: gevent.socket.socket) -> None:
        self._out.discard(sock)
        super().release_socket(sock)

    def abandon(self) -> None:
        sock = self._last.pop(gevent.getcurrent(), None)
        if sock is None:
            return
        if sock in self._out:
            self.release_socket(sock)
        else:
            try:
                sock.close()
            except OSError:
                pass

    def forget(self) -> None:
        self._last.pop(gevent.getcurrent(), None)


class Transport:
    """One keep-alive HTTP client for a target base URL, with up to ``concurrency`` connections.

    Sockets have no timeout of their own (``network_timeout=None``): every attempt runs under
    one ``gevent.Timeout`` for the pool's client timeout, and a socket timeout would make gevent
    arm a timer on every read (a quarter of the CPU per chunk). Connecting is bounded by
    ``connect_timeout_s``.
    """

    def __init__(self, base_url: str, concurrency: int, connect_timeout_s: float = 10.0) -> None:
        url = URL(base_url)
        self.client = HTTPClient(
            url.host,
            url.port,
            concurrency=concurrency,
            network_timeout=None,  # type: ignore[arg-type]  # annotated float; None is socket.settimeout(None)
            connection_timeout=connect_timeout_s,
            ssl=url.scheme == "https",
        )
        self.pool: _TrackingPool | None
        old = self.client._connection_pool
        if url.scheme != "https":  # the tracking pool is for plain HTTP; TLS keeps geventhttpclient's own
            self.client._connection_pool = self.pool = _TrackingPool(
                old._connection_host,
                old._connection_port,
                old._request_host,
                old._request_port,
                size=concurrency,
                network_timeout=None,
                connection_timeout=connect_timeout_s,
            )
        else:
            self.pool = None
        self.prefix = url.path.rstrip("/")

    def abandon(self) -> None:
        if self.pool is not None:
            self.pool.abandon()

    def forget(self) -> None:
        if self.pool is not None:
            self.pool.forget()

    def close(self) -> None:
        self.client.close()


def send_attempt(
    transport: Transport,
    path: str,
    body: bytes,
    headers: dict[str, str],
    *,
    stream: bool,
    timeout_s: float,
    capture: bool = False,
) -> ClientOutcome:
    """POST ``body`` to ``path`` and read the whole response within ``timeout_s`` seconds.

    Never raises for request failures: they come back as ``ClientOutcome.error``. An
    attempt cancelled with :class:`Cancelled` returns with ``ErrorClass.CANCELLED``.
    With ``capture``, ``ClientOutcome.output`` digests the generated text (parsing every
    content chunk: for the few control requests only).
    """
    outcome = ClientOutcome(sent_at=time.perf_counter(), output=OutputDigest() if capture else None)
    timer = gevent.Timeout(timeout_s, _Deadline)
    timer.start()
    got_headers = False
    try:
        response = transport.client.post(transport.prefix + path, body=body, headers=headers)
        got_headers = True
        outcome.headers_at = time.perf_counter()
        outcome.status = response.status_code
        _read(response, outcome, stream)
        transport.forget()
        return outcome
    except _Deadline:
        transport.abandon()
        return outcome.fail(ErrorClass.TIMEOUT, f"no complete response within the {timeout_s:g}s client timeout")
    except (Cancelled, gevent.GreenletExit):
        transport.abandon()
        return outcome.fail(ErrorClass.CANCELLED, "still in flight when the drain period at stop ran out")
    except Exception as exc:  # noqa: BLE001 - every transport failure becomes an error class
        transport.abandon()
        return outcome.fail(_classify_exception(exc, got_headers), f"{type(exc).__name__}: {exc}"[:300])
    finally:
        timer.close()


def _read(response: HTTPSocketPoolResponse, outcome: ClientOutcome, stream: bool) -> None:
    if outcome.status != 200 or not stream:
        data = response.read()
        outcome.end_at = time.perf_counter()
        assert outcome.status is not None  # send_attempt set it from the response
        error = classify_status(outcome.status)
        if error is not None:
            outcome.fail(error, f"HTTP {outcome.status}: {parse_error_message(data)}")
            outcome.retry_after_s = _retry_after(response.get("retry-after"))
        else:
            outcome.prompt_tokens, outcome.completion_tokens = parse_usage(data)
            outcome.server_timings = parse_timings(data)
            if outcome.output is not None:
                outcome.output.feed_body(data)
        return
    _read_stream(response, outcome)


class _SseLines:
    """Turns body bytes into chunk timestamps, usage, errors and the end of the stream."""

    __slots__ = ("outcome", "pending", "done")

    def __init__(self, outcome: ClientOutcome) -> None:
        self.outcome = outcome
        self.pending = b""
        self.done = False

    def feed(self, data: bytes, now: float) -> bool:
        """Every event that came in one read gets that read's time; True once ``data: [DONE]`` was seen."""
        outcome = self.outcome
        times = outcome.chunk_times
        if (
            times
            and not self.pending
            and data.endswith(b"\n\n")
            and data.count(b"\n") == 2
            and data.startswith(b'data: {"')
            and b'"choices":[{' in data
            and b'{"error"' not in data[:16]
            and b'"usage"' not in data
        ):
            times.append(now)  # the hot path: exactly one content chunk, as vLLM sends them
            if outcome.output is not None:
                outcome.output.feed_chunk(data)
            return False
        lines = (self.pending + data).split(b"\n") if self.pending else data.split(b"\n")
        self.pending = lines.pop()
        for line in lines:
            if len(line) < 6:
                continue
            kind = classify_line(line)
            if kind is LineKind.CONTENT:
                times.append(now)
                if len(times) == 1:
                    outcome.role_only_first = is_role_only(line)
                if outcome.output is not None:
                    outcome.output.feed_chunk(line)
                if carries_usage(line):
                    outcome.prompt_tokens, outcome.completion_tokens = parse_usage(line)
                    outcome.server_timings = parse_timings(line)
            elif kind is LineKind.DONE:
                outcome.end_at = now
                self.done = True
                return True
            elif kind is LineKind.USAGE:
                outcome.prompt_tokens, outcome.completion_tokens = parse_usage(line)
                outcome.server_timings = parse_timings(line)
            elif kind is LineKind.ERROR and outcome.error is None:
                self._error_event(line)
        return False

    def _error_event(self, line: bytes) -> None:
        """An error event after the 200: a refusal when its code says 429/503 (vLLM's late admission check)."""
        outcome = self.outcome
        code = parse_error_code(line)
        outcome.stream_error_code = code
        outcome.error = classify_stream_error(code)
        message = parse_error_message(line)
        outcome.detail = f"HTTP 200, then an error event with code {code}: {message}" if code is not None else message


class _ReactorStream:
    """The reactor's view of one response: feed the HTTP parser, then the SSE lines (see reactor.py)."""

    __slots__ = ("response", "buf", "lines", "error", "eof")

    def __init__(self, response: HTTPSocketPoolResponse, buf: bytearray, lines: _SseLines) -> None:
        self.response = response
        self.buf = buf
        self.lines = lines
        self.error: BaseException | None = None
        self.eof = False

    def on_data(self, data: bytes, now: float) -> bool:
        if not data:
            self.eof = True
            return True
        self.response.feed(data)
        return self.take(now) or self.response.message_complete

    def take(self, now: float) -> bool:
        if not self.buf:
            return False
        data = bytes(self.buf)
        del self.buf[:]
        return self.lines.feed(data, now)

    def on_error(self, exc: BaseException) -> None:
        self.error = exc


def _read_stream(response: HTTPSocketPoolResponse, outcome: ClientOutcome) -> None:
    """Read the SSE stream through the process's reactor (one greenlet for every stream)."""
    buf = getattr(response, "_body_buffer", None)
    sock = getattr(response, "_sock", None)
    raw = getattr(sock, "_sock", None)
    if not isinstance(buf, bytearray) or raw is None or getattr(sock, "_sslobj", None) is not None:
        _read_stream_blocking(response, outcome)
        return
    lines = _SseLines(outcome)
    stream = _ReactorStream(response, buf, lines)
    if not stream.take(time.perf_counter()) and not response.message_complete:
        loop = reactor()
        done = loop.watch(raw, stream)
        try:
            done.wait()
        except BaseException:  # timeout or cancel: hand the socket back as geventhttpclient's read() does
            loop.unwatch(raw)
            response.release()
            raise
        loop.unwatch(raw)
    _end_stream(response, outcome, stream)


def _end_stream(response: HTTPSocketPoolResponse, outcome: ClientOutcome, stream: _ReactorStream) -> None:
    if stream.error is not None:
        response.release()
        raise stream.error
    if stream.lines.done:
        if not response.message_complete:
            response.read()  # the chunked terminator: completes the message, returns the connection
        return
    if stream.eof:
        response.release()
        raise HTTPConnectionClosed("connection closed mid-stream")
    outcome.fail(ErrorClass.CONNECTION_RESET, "the stream ended before data: [DONE]")


def _read_stream_blocking(response: HTTPSocketPoolResponse, outcome: ClientOutcome) -> None:
    """The fallback (TLS, an unexpected response layout): read in this greenlet."""
    read = _reader(response)
    lines = _SseLines(outcome)
    while True:
        data = read()
        if not data:
            outcome.fail(ErrorClass.CONNECTION_RESET, "the stream ended before data: [DONE]")
            return
        if lines.feed(data, time.perf_counter()):
            response.read()
            return


def _reader(response: HTTPSocketPoolResponse) -> Callable[[], bytes]:
    """A function returning the body bytes received so far (blocking until some come), b"" at the end.

    Reads geventhttpclient's body buffer whole instead of calling ``readline`` twice per
    event (it copies each line), and waits for readability before reading (see
    :func:`_socket_reader`). Falls back to the public ``readline`` if the response is laid out
    differently.
    """
    buf = getattr(response, "_body_buffer", None)
    sock = getattr(response, "_sock", None)
    if not isinstance(buf, bytearray) or sock is None:
        return lambda: response.readline(b"\n")
    recv = _socket_reader(sock)
    size = response.block_size

    def read() -> bytes:
        while not buf:
            if response.message_complete:
                return b""
            if response._sock is None:
                raise HTTPConnectionClosed("connection closed")
            try:
                data = recv(size)
                response.feed(data)
            except BaseException:
                response.release()
                raise
            if not data and not buf and not response.message_complete:
                raise HTTPConnectionClosed("connection closed mid-stream")
        data = bytes(buf)
        del buf[:]
        return data

    return read


def _socket_reader(sock: gevent.socket.socket) -> Callable[[int], bytes]:
    """``sock.recv`` with one system call instead of two when nothing is buffered yet.

    gevent's ``recv`` first tries the read (EAGAIN when the next chunk has not come), then
    waits for readability and reads again. Between chunks of a stream nothing is buffered, so
    waiting first halves the ``recvfrom`` calls (measured with ``strace -c``). Decided once per
    response: plain gevent sockets only; anything else (TLS) keeps ``recv``.
    """
    raw = getattr(sock, "_sock", None)
    event = getattr(sock, "_read_event", None)
    wait = getattr(sock, "_wait", None)
    if raw is None or event is None or wait is None or getattr(sock, "_sslobj", None) is not None:
        return sock.recv

    def recv(size: int) -> bytes:
        wait(event)
        return raw.recv(size)

    return recv


def _classify_exception(exc: Exception, got_headers: bool) -> ErrorClass:
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return ErrorClass.TIMEOUT
    if isinstance(exc, (ConnectionRefusedError, socket.gaierror)):
        return ErrorClass.CONNECTION_ERROR
    if isinstance(exc, (ConnectionError, HTTPParseError, OSError)):
        return ErrorClass.CONNECTION_RESET
    return ErrorClass.CONNECTION_RESET if got_headers else ErrorClass.CONNECTION_ERROR


def _retry_after(value: str | list[str] | None) -> float | None:
    try:
        return float(value) if isinstance(value, str) else None  # absent, or a repeated header
    except (TypeError, ValueError):
        return None
