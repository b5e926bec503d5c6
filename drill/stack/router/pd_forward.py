"""The P/D router's first leg: send the request to a prefill worker with ``max_tokens: 1``, then hand the decode
worker the transfer the prefill answer announced.

This is what vLLM's disaggregated proxy examples do (``examples/online_serving/disaggregated_serving/`` and the
NixlConnector's ``toy_proxy_server.py``): the prefill request carries ``kv_transfer_params: {"do_remote_decode":
true}`` and no stream; its answer's ``kv_transfer_params`` go unchanged into the original request, which the
router then sends to a decode worker like any request (retries, streaming, cancellation as in
:mod:`drill.stack.router.proxy`). The decode worker's ``X-Drill-KV-Transfer`` header (state and seconds of its KV
load) becomes the router's ``kv_transfer`` span, a child of the decode attempt's span.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from drill.stack.config import RouterConfig
from drill.stack.http.client import HttpClient, Timeouts, UpstreamConnectError, UpstreamError
from drill.stack.http.server import HttpRequest, HttpResponse, error_body
from drill.stack.kv.wire import KV_SPAN
from drill.stack.router.routing import ReplicaPool, ReplicaState
from drill.stack.router.telemetry import inject_context

__all__ = ["PrefillLeg", "decode_body", "prefill_body", "record_kv_span"]


def prefill_body(body: dict[str, object]) -> dict[str, object]:
    """The prefill leg's body: one token, no stream, ``do_remote_decode`` (as vLLM's proxy sends it)."""
    leg = {key: value for key, value in body.items() if key not in ("stream", "stream_options")}
    leg.update(max_tokens=1, stream=False, kv_transfer_params={"do_remote_decode": True})
    if "max_completion_tokens" in leg:
        leg["max_completion_tokens"] = 1
    return leg


def decode_body(body: dict[str, object], announced: dict[str, object]) -> dict[str, object]:
    """The decode leg's body: the original request with the prefill answer's ``kv_transfer_params``."""
    return {**body, "kv_transfer_params": announced}


def record_kv_span(tracer: trace.Tracer, value: str) -> None:
    """The router's ``kv_transfer`` span from a decode answer's header (``state=...;seconds=...``), ending now."""
    fields = dict(part.split("=", 1) for part in value.split(";") if "=" in part)
    try:
        seconds = max(0.0, float(fields.get("seconds", "0")))
    except ValueError:
        seconds = 0.0
    end = time.time_ns()
    state = fields.get("state", "unknown")
    span = tracer.start_span(
        KV_SPAN,
        start_time=end - int(seconds * 1e9),
        attributes={"drill.kv.state": state, "drill.kv.seconds": seconds},
    )
    if state != "consumed":
        span.set_status(Status(StatusCode.ERROR, f"KV load {state}"))
    span.end(end_time=end)


@dataclass
class PrefillLeg:
    """Sends the prefill leg to a prefill worker of ``pool``; ``mark`` takes a worker out of rotation."""

    pool: ReplicaPool
    client: HttpClient
    tracer: trace.Tracer
    mark: Callable[[ReplicaState, bool, str], None]

    async def run(
        self, request: HttpRequest, headers: dict[str, str], config: RouterConfig
    ) -> HttpRequest | HttpResponse:
        """The decode leg's request, or the answer to give the client (the prefill failed everywhere)."""
        try:
            body = json.loads(request.body)
        except (ValueError, UnicodeDecodeError):
            return _error(400, "request body is not valid JSON")
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object")
        answer = _error(503, "no healthy prefill worker")
        for _ in range(config.retries.attempts + 1):
            worker = self.pool.pick()
            if worker is None:
                return answer
            announced, answer = await self._send(worker, request, headers, prefill_body(body), config)
            if announced is not None:
                return replace(request, body=json.dumps(decode_body(body, announced)).encode())
        return answer

    async def _send(
        self,
        worker: ReplicaState,
        request: HttpRequest,
        headers: dict[str, str],
        body: dict[str, object],
        config: RouterConfig,
    ) -> tuple[dict[str, object] | None, HttpResponse]:
        attributes = {
            "drill.upstream": worker.name,
            "peer.service": worker.name,
            "drill.phase": "prefill",
            "url.full": worker.url + request.path,
        }
        with self.tracer.start_as_current_span("POST prefill", kind=SpanKind.CLIENT, attributes=attributes) as span:
            sent = inject_context(headers, span)
            sent["content-type"] = "application/json"
            limit = config.retries.timeout
            self.pool.acquire(worker)
            try:
                response, content = await self.client.fetch(
                    "POST", worker.url + request.path, headers=sent, body=json.dumps(body).encode(),
                    timeout=Timeouts(connect=limit, read=limit),
                )  # fmt: skip
            except UpstreamError as exc:
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                if isinstance(exc, UpstreamConnectError):
                    self.mark(worker, False, "connect error")
                return None, _error(502, f"prefill worker {worker.name} failed ({type(exc).__name__})")
            finally:
                self.pool.release(worker)
            span.set_attribute("http.response.status_code", response.status)
            if response.status != 200:
                span.set_status(Status(StatusCode.ERROR, f"HTTP {response.status}"))
                passed = HttpResponse(response.status, content, "application/json")
                return None, passed
            announced = _announced(content)
            if announced is None:
                span.set_status(Status(StatusCode.ERROR, "no kv_transfer_params"))
                return None, _error(502, f"prefill worker {worker.name} announced no KV transfer")
            return announced, HttpResponse(200, b"", "application/json")


def _announced(content: bytes) -> dict[str, object] | None:
    try:
        params = json.loads(content).get("kv_transfer_params")
    except (ValueError, AttributeError):
        return None
    return params if isinstance(params, dict) else None


def _error(status: int, message: str) -> HttpResponse:
    kind = {400: "BadRequestError", 503: "ServiceUnavailableError"}.get(status, "BadGateway")
    return HttpResponse.json(error_body(message, kind, status), status)
