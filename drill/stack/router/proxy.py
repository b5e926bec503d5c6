"""One request through the router: upstream attempts, retries as a naive gateway makes them,
streaming passed through chunk by chunk, and the Idempotency-Key store in front.

Retry rules (stack-contracts.md §1 ``router.retries``; off by default): an attempt *fails* with
``error`` (connect/read failure, or a 5xx answer) or ``timeout`` (no answer, or no next chunk,
within ``retries.timeout``). A failed attempt whose reason is listed in ``retries.on`` is re-sent
unchanged — same body, same ``X-Request-Id`` and ``Idempotency-Key`` — to whichever replica the
policy picks next, up to ``retries.attempts`` extra times. The abandoned attempt may already have
been admitted by its replica: that is how duplicate side effects arise. A stream is retried only
before its first byte reached the client; the router holds the status line back until the first
upstream chunk so that a replica dying during prefill is still retryable. After that, an upstream
failure ends the stream with a vLLM-style error event and ``data: [DONE]``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from drill.api import RouterRetryOn
from drill.stack.config import RouterConfig
from drill.stack.http.client import HttpClient, Timeouts, UpstreamConnectError, UpstreamError, UpstreamResponse
from drill.stack.http.server import HttpRequest, HttpResponse, ResponseStream, error_body
from drill.stack.router.routing import CachedResponse, ReplicaState
from drill.stack.router.telemetry import inject_context

__all__ = ["FIRST_CHUNK_ATTRIBUTE", "Attempt", "UpstreamOutcome", "Tee", "forward_headers", "sse_error"]

#: Set on an attempt's CLIENT span when the stream's first chunk has been written to the client (UNIX ns): with the
#: replica's ``llm_request`` (arrival + ``gen_ai.latency.time_to_first_token``) it gives the router's share of TTFT
#: (:mod:`drill.traces.overhead`).
FIRST_CHUNK_ATTRIBUTE = "drill.router.first_chunk_unix_ns"

_HOP_BY_HOP = frozenset(
    {
        "host",
        "content-length",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "upgrade",
        "expect",
        "proxy-authorization",
        "proxy-connection",
        "trailer",
    }
)
#: Upstream response headers the client sees: the request id, and a refusal's ``Retry-After`` (a 503 from
#: admission control says when to come back; a gateway that drops it turns a fast refusal into a blind retry).
_PASS_BACK = ("x-request-id", "retry-after")


def forward_headers(headers: dict[str, str]) -> dict[str, str]:
    """The client's headers minus hop-by-hop ones (``traceparent`` is re-injected per attempt)."""
    return {k: v for k, v in headers.items() if k not in _HOP_BY_HOP}


def sse_error(message: str, status: int = 502) -> bytes:
    """A mid-stream error event followed by ``[DONE]`` (docs/serving-facts.md §3.1)."""
    body = json.dumps(error_body(message, "BadGateway", status), separators=(",", ":"))
    return f"data: {body}\n\ndata: [DONE]\n\n".encode()


@dataclass
class UpstreamOutcome:
    """How one attempt ended: ``done`` (answered or streamed; nothing to retry) or ``failure``
    with the answer to give if no retry follows (``fallback``)."""

    done: bool
    response: HttpResponse | None = None
    failure: RouterRetryOn | None = None
    fallback: HttpResponse | None = None
    error_kind: str | None = None


class Tee:
    """Wraps the client's stream and keeps a copy for the Idempotency-Key store.

    While capturing it reports every write as delivered, so the router reads the upstream to
    the end even after the client left: a retry with the same key then gets the whole answer.
    """

    def __init__(self, stream: ResponseStream) -> None:
        self.stream = stream
        self.status = 200
        self.content_type = "text/event-stream; charset=utf-8"
        self.chunks: list[bytes] = []

    @property
    def started(self) -> bool:
        return self.stream.started

    def start(self, status: int, content_type: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.status, self.content_type = status, content_type
        self.stream.start(status, content_type, headers)

    def write(self, data: bytes) -> bool:
        self.chunks.append(data)
        self.stream.write(data)
        return True

    def end(self) -> None:
        self.stream.end()

    def cached(self) -> CachedResponse:
        """The complete streamed answer."""
        return CachedResponse(self.status, self.content_type, b"".join(self.chunks))


@dataclass
class Attempt:
    """Sends one attempt of ``request`` to ``replica`` and relays its answer to ``out``."""

    client: HttpClient
    tracer: trace.Tracer
    config: RouterConfig
    request: HttpRequest
    headers: dict[str, str]
    number: int
    replica: ReplicaState
    out: ResponseStream | Tee
    observe: Callable[[dict[str, str]], None] | None = None  # sees the upstream's headers (the P/D router's kv span)

    async def run(self) -> UpstreamOutcome:
        """Run the attempt under a CLIENT span carrying ``drill.attempt`` and ``drill.upstream``, and the upstream's
        name as ``peer.service`` (OpenTelemetry's name of the remote service, which trace readers know)."""
        attributes: dict[str, AttributeValue] = {
            "drill.attempt": self.number,
            "drill.upstream": self.replica.name,
            "peer.service": self.replica.name,
            "http.request.method": self.request.method,
            "url.full": self.replica.url + self.request.path,
        }
        with self.tracer.start_as_current_span(
            f"{self.request.method} upstream", kind=SpanKind.CLIENT, attributes=attributes
        ) as span:
            outcome = await self._send(inject_context(self.headers, span))
            if outcome.failure is not None:
                span.set_status(Status(StatusCode.ERROR, f"{outcome.failure.value}: {outcome.error_kind}"))
            return outcome

    async def _send(self, headers: dict[str, str]) -> UpstreamOutcome:
        target = self.replica.url + self.request.path + (f"?{self.request.query}" if self.request.query else "")
        try:
            response = await self.client.request(
                self.request.method,
                target,
                headers=headers,
                body=self.request.body,
                timeout=Timeouts.of(self.config.retries.timeout),
            )
        except UpstreamError as exc:
            return self._transport_failure(exc)
        try:
            trace.get_current_span().set_attribute("http.response.status_code", response.status)
            if self.observe is not None:
                self.observe(response.headers)
            if response.status >= 500:
                return await self._upstream_5xx(response)
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                return await self._relay_stream(response)
            return await self._relay_body(response)
        finally:
            response.close()

    def _transport_failure(self, exc: UpstreamError) -> UpstreamOutcome:
        if exc.kind == "timeout":
            return self._failed(RouterRetryOn.TIMEOUT, "timeout", 504)
        return self._failed(RouterRetryOn.ERROR, "connect" if isinstance(exc, UpstreamConnectError) else "read", 502)

    def _failed(
        self, reason: RouterRetryOn, kind: str, status: int, fallback: HttpResponse | None = None
    ) -> UpstreamOutcome:
        message = f"upstream {self.replica.name} failed ({kind})"
        fallback = fallback or HttpResponse.json(
            error_body(message, "BadGateway" if status == 502 else "GatewayTimeout", status), status
        )
        return UpstreamOutcome(done=False, failure=reason, fallback=fallback, error_kind=kind)

    async def _upstream_5xx(self, response: UpstreamResponse) -> UpstreamOutcome:
        try:
            body = await response.read()
        except UpstreamError:
            body = b""
        answer = HttpResponse(
            response.status,
            body,
            response.headers.get("content-type", "application/json"),
            self._pass_back(response),
        )
        return self._failed(RouterRetryOn.ERROR, "status_5xx", response.status, answer)

    async def _relay_body(self, response: UpstreamResponse) -> UpstreamOutcome:
        try:
            body = await response.read()
        except UpstreamError as exc:
            return self._transport_failure(exc)
        content_type = response.headers.get("content-type", "application/json")
        return UpstreamOutcome(
            done=True, response=HttpResponse(response.status, body, content_type, self._pass_back(response))
        )

    async def _relay_stream(self, response: UpstreamResponse) -> UpstreamOutcome:
        try:
            first = await response.next_chunk()
        except UpstreamError as exc:
            return self._transport_failure(exc)
        self.out.start(response.status, response.headers["content-type"], self._pass_back(response))
        delivered = self.out.write(first)
        trace.get_current_span().set_attribute(FIRST_CHUNK_ATTRIBUTE, time.time_ns())  # the router's share of TTFT
        if delivered:
            await self._pump(response)
        self.out.end()
        return UpstreamOutcome(done=True)

    async def _pump(self, response: UpstreamResponse) -> None:
        """Relay the rest of the stream as it arrives; a failure now can only end it with an error event. The
        client leaving (a write that fails) closes the upstream connection, which aborts the request there."""
        try:
            await response.relay(self.out.write)
        except UpstreamError as exc:
            trace.get_current_span().set_status(Status(StatusCode.ERROR, f"mid-stream: {type(exc).__name__}"))
            self.out.write(sse_error(f"upstream {self.replica.name} failed mid-stream ({type(exc).__name__})"))

    @staticmethod
    def _pass_back(response: UpstreamResponse) -> tuple[tuple[str, str], ...]:
        return tuple((name, response.headers[name]) for name in _PASS_BACK if name in response.headers)
