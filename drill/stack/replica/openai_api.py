"""The OpenAI-compatible HTTP API of a replica (stack-contracts.md §4; formats: docs/serving-facts.md §3).

:class:`OpenAIApi` registers ``POST /v1/completions``, ``POST /v1/chat/completions``,
``GET /v1/models``, ``GET /health``, ``GET /metrics`` and ``GET /version`` on a
:class:`~drill.stack.http.server.Router`. A generation request is validated, turned into an engine
:class:`~drill.stack.inference.request.Request` whose sink writes SSE events straight to the socket from the
engine's step loop (or collects the text for a plain response), and aborted (finish reason
``abort``) when the client disconnects.

Answers as vLLM gives them: 400 for a prompt over the context length, 404 for an unknown model,
503 when admission control refuses or ``max_queue_wait`` expires (no ``Retry-After``, as in vLLM, unless
``engine.refusal_retry_after`` is set), 500 when the engine dies; for a stream whose 200 has gone out, an error
event with that code, then ``[DONE]``. Admission is checked twice, as vLLM does: before the response starts
(a refusal there is HTTP 503) and when the engine queues the request (a streamed request refused there gets
200 + the error event; see :meth:`OpenAIApi._admit`). Headers
honoured: ``traceparent``/``tracestate``, ``X-Request-Id``, ``Idempotency-Key``, ``X-Drill-Priority``
(lower = more urgent; ignored under ``scheduling_policy: fcfs``, where a non-zero body ``priority``
is a 400 as in vLLM).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from drill import __version__
from drill.spec.scenario import Endpoint
from drill.stack.config import SchedulingPolicy, StackConfig
from drill.stack.http.server import HttpError, HttpRequest, HttpResponse, ResponseStream, Router
from drill.stack.inference.core import Engine
from drill.stack.inference.exceptions import AdmissionRefused, EngineDeadError
from drill.stack.inference.request import Request
from drill.stack.inference.textgen import TokenSampler, prompt_seed, stable_seed, token_text
from drill.stack.inference.tokenizer import chat_tokens
from drill.stack.kv.wire import KV_HEADER
from drill.stack.replica.kv_worker import KvHooks
from drill.stack.replica.metrics import CONTENT_TYPE, EngineMetrics
from drill.stack.replica.openai_protocol import (
    DONE_EVENT,
    ChatCompletionRequest,
    ChunkTemplates,
    CompletionRequest,
    SamplingRequest,
    chat_response,
    check_context_length,
    completion_response,
    error_event,
    parse_body,
    token_json,
    usage,
)
from drill.stack.replica.request_spans import HttpSpan, Tracing, parse_traceparent

__all__ = ["ApiContext", "OpenAIApi"]

#: nginx's status for a request whose client closed the connection first; it never reaches the client.
CLIENT_CLOSED_REQUEST = 499


@dataclass(slots=True, eq=False)
class ApiContext:
    """What the API layer keeps per request (``Request.context``)."""

    endpoint: Endpoint
    stream: bool
    include_usage: bool
    continuous_usage: bool
    templates: ChunkTemplates
    base_id: str
    idempotency_key: str | None
    trace_id: str | None
    http_span: HttpSpan
    arrival_wall: float
    clock_offset: float  # add to engine-loop seconds to get UNIX seconds
    temperature: float | None
    top_p: float | None
    response: ResponseStream
    done: asyncio.Future[None]  # resolved when the request finishes, fails or its client goes
    role_pending: bool = False  # chat streams: the role-only chunk is still to be sent
    error: tuple[int, str, str] | None = None  # (status, message, type)
    error_status: int | None = None
    kv_transfer: dict[str, object] | None = None  # a prefill worker's announcement (kv_transfer_params)

    def resolve(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


class ApiSink:
    """The engine's sink for API requests: streams SSE events or collects for a plain response."""

    def on_tokens(self, request: Request, token_ids: Sequence[int], finished: bool) -> None:
        ctx: ApiContext = request.context  # type: ignore[assignment]
        if not ctx.stream:
            if finished:
                ctx.resolve()
            return
        if finished or ctx.role_pending or ctx.continuous_usage or len(token_ids) != 1:
            self._event(request, ctx, token_ids, finished)
            return
        templates = ctx.templates  # the common case: one decode token, one plain event
        ctx.response.write(templates.head + token_json(token_ids[0]) + templates.plain_tail)

    @staticmethod
    def _event(request: Request, ctx: ApiContext, token_ids: Sequence[int], finished: bool) -> None:
        templates = ctx.templates
        parts = []
        if ctx.role_pending:
            parts.append(templates.role_event)  # chat: the role-only chunk arrives with the first token
            ctx.role_pending = False
        text = token_json(token_ids[0]) if len(token_ids) == 1 else _join_json(token_ids)
        reason = request.finish_reason.value if finished and request.finish_reason else None
        usage_json = _usage_json(request) if ctx.continuous_usage else None
        parts.append(templates.token_event(text, reason, usage_json))
        if finished:
            if ctx.include_usage:
                parts.append(templates.usage_event(request.num_prompt_tokens, request.num_output_tokens))
            parts.append(DONE_EVENT)
        ctx.response.write(b"".join(parts))
        if finished:
            ctx.resolve()

    def on_error(self, request: Request, status: int, message: str, error_type: str) -> None:
        ctx: ApiContext = request.context  # type: ignore[assignment]
        ctx.error = (status, message, error_type)
        ctx.error_status = status
        if ctx.stream:
            ctx.response.write(error_event(message, error_type, status))
        ctx.resolve()


def _join_json(token_ids: Sequence[int]) -> bytes:
    return json.dumps("".join(token_text(token) for token in token_ids)).encode()


def _usage_json(request: Request) -> bytes:
    return json.dumps(usage(request.num_prompt_tokens, request.num_output_tokens), separators=(",", ":")).encode()


class OpenAIApi:
    """The replica's OpenAI routes over one engine."""

    def __init__(
        self,
        engine: Engine,
        config: StackConfig,
        metrics: EngineMetrics,
        tracing: Tracing,
        *,
        seed: int = 0,
        kv: KvHooks | None = None,
    ) -> None:
        self.engine = engine
        self.kv = kv  # a P/D worker's KV side (drill.stack.replica.kv_worker), None when aggregated
        self.config = config
        self.metrics = metrics
        self.tracing = tracing
        self.model_name = config.model_name
        self.max_model_len = config.engine.max_model_len
        self.created = int(time.time())
        self._sink = ApiSink()
        self._ids = itertools.count(1)
        self._unseeded = random.Random(stable_seed("replica", seed))
        token_json(0)  # build the token table now, not inside the first request's TTFT

    def register(self, router: Router) -> None:
        """Add the OpenAI, health, metrics and version routes."""
        router.add("POST", "/v1/completions", self.completions)
        router.add("POST", "/v1/chat/completions", self.chat_completions)
        router.add("GET", "/v1/models", self.models)
        router.add("GET", "/health", self.health)
        router.add("GET", "/metrics", self.metrics_route)
        router.add("GET", "/version", self.version)

    # simple routes ---------------------------------------------------------------------------------
    async def models(self, request: HttpRequest, stream: ResponseStream) -> HttpResponse:
        card = {
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "vllm",
            "root": self.config.model_preset.hf_id,
            "parent": None,
            "max_model_len": self.max_model_len,
            "permission": [],
        }
        return HttpResponse.json({"object": "list", "data": [card]})

    async def health(self, request: HttpRequest, stream: ResponseStream) -> HttpResponse:
        """200 with an empty body, or 503 once the engine is dead (§4 "/health")."""
        return HttpResponse(200 if self.engine.alive else 503, b"", "application/json")

    async def metrics_route(self, request: HttpRequest, stream: ResponseStream) -> HttpResponse:
        return HttpResponse(200, self.metrics.render(), CONTENT_TYPE)

    async def version(self, request: HttpRequest, stream: ResponseStream) -> HttpResponse:
        return HttpResponse.json({"version": __version__})

    # generation ------------------------------------------------------------------------------------
    async def completions(self, request: HttpRequest, stream: ResponseStream) -> HttpResponse | None:
        body = parse_body(CompletionRequest, request.json())
        return await self._generate(request, stream, body, Endpoint.COMPLETIONS, body.prompt_tokens(), body.max_tokens)

    async def chat_completions(self, request: HttpRequest, stream: ResponseStream) -> HttpResponse | None:
        body = parse_body(ChatCompletionRequest, request.json())
        try:
            tokens = chat_tokens([message.model_dump() for message in body.messages])
        except ValueError as exc:
            raise HttpError(400, str(exc)) from exc
        return await self._generate(request, stream, body, Endpoint.CHAT, tokens, body.requested_max_tokens)

    async def _generate(
        self,
        http: HttpRequest,
        stream: ResponseStream,
        body: SamplingRequest,
        endpoint: Endpoint,
        tokens: Sequence[object],
        max_tokens: int | None,
    ) -> HttpResponse | None:
        arrival_wall = time.time()
        span = self.tracing.start_http_span(http.method, http.path, http.headers, arrival_wall)
        try:
            request = self._build(http, stream, body, endpoint, tokens, max_tokens, arrival_wall, span)
            self.engine.check_admission(request)  # vLLM's early check (before the response starts): HTTP 503
        except (HttpError, AdmissionRefused, EngineDeadError) as exc:
            raise self._refuse(exc, span) from None
        ctx: ApiContext = request.context  # type: ignore[assignment]
        kv_header = await self._load_kv(request, body, span, stream)
        if kv_header is None:  # the client went away during the KV load, which was aborted
            self.tracing.end_http_span(span, CLIENT_CLOSED_REQUEST, time.time(), "client disconnected during KV load")
            return HttpResponse(CLIENT_CLOSED_REQUEST, b"", "text/plain")
        if ctx.stream:
            stream.start(200, "text/event-stream; charset=utf-8", kv_header)
        if not await self._admit(request, ctx, stream, span):
            return None

        def client_gone() -> None:
            self.engine.abort_request(request)
            ctx.resolve()

        stream.on_disconnect(client_gone)
        await ctx.done
        if self.kv is not None:
            ctx.kv_transfer = self.kv.after_engine(request, body.kv_transfer_params, span)
        return self._finish(request, ctx, stream, span, kv_header)

    async def _load_kv(
        self, request: Request, body: SamplingRequest, span: HttpSpan, stream: ResponseStream
    ) -> tuple[tuple[str, str], ...] | None:
        """A decode worker reads the request's KV cache first (an HttpError when that fails and is fatal).

        Returns the response headers to add, or None when the client went away meanwhile: with ``abort_abandoned``
        the load is aborted then, as vLLM aborts a request whose connection closed, wherever it is.
        """
        if self.kv is None:
            return ()
        load = asyncio.ensure_future(self.kv.before_engine(request, body.kv_transfer_params, span))
        if self.config.abort_abandoned:
            stream.on_disconnect(lambda: None if load.cancel() else None)  # a no-op once the load is done
        try:
            value = await load
        except HttpError as exc:
            self.tracing.end_http_span(span, exc.status, time.time(), exc.message)
            raise
        except asyncio.CancelledError:
            if not stream.disconnected:
                raise  # the replica itself is stopping
            return None
        return () if value is None else ((KV_HEADER, value),)

    async def _admit(self, request: Request, ctx: ApiContext, stream: ResponseStream, span: HttpSpan) -> bool:
        """Queue the request in the engine, which checks admission again; False when a stream was refused.

        As in vLLM: the early check reserves nothing, and between it and the engine's own check
        (``AsyncLLM._add_request``) the request is rendered, an await during which other requests of a burst pass
        their early checks too. The ones the engine then refuses are answered in the stream whose 200 has gone
        out: an error event with code 503, then ``[DONE]``.
        """
        await asyncio.sleep(0)  # the prompt rendering's await: the other requests of a burst get here too
        try:
            self.engine.add_request(request)
        except (AdmissionRefused, EngineDeadError) as exc:
            error = self._refuse(exc, span if not ctx.stream else None)
            if not ctx.stream:
                raise error from None
            stream.write(error_event(error.message, error.type, error.status))
            stream.end()
            self.tracing.end_http_span(span, 200, time.time(), error.message)
            return False
        return True

    def _refuse(self, exc: Exception, span: HttpSpan) -> HttpError:
        """The HTTP error for ``exc`` (counted when it is an admission refusal); ends ``span`` with it."""
        if isinstance(exc, AdmissionRefused):
            self.metrics.admission_rejected(exc.reason)
        error = _as_http_error(exc, self._retry_after())
        self.tracing.end_http_span(span, error.status, time.time(), error.message)
        return error

    def _retry_after(self) -> tuple[tuple[str, str], ...]:
        """The ``Retry-After`` header of a 503: none, as vLLM sends none, unless ``refusal_retry_after`` is set."""
        seconds = self.config.engine.refusal_retry_after
        return () if seconds is None else (("Retry-After", f"{math.ceil(seconds):d}"),)

    def _finish(
        self,
        request: Request,
        ctx: ApiContext,
        stream: ResponseStream,
        span: HttpSpan,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> HttpResponse | None:
        if stream.disconnected and request.aborted_in is not None:
            return self._client_gone(request, stream, span)
        if ctx.stream:
            stream.end()
            self.tracing.end_http_span(span, 200, time.time(), ctx.error[1] if ctx.error else None)
            return None
        if ctx.error is not None:
            status, message, error_type = ctx.error
            headers = self._retry_after() if status == 503 else ()
            self.tracing.end_http_span(span, status, time.time(), message)
            raise HttpError(status, message, type=error_type, headers=headers)
        text = "".join(token_text(token) for token in request.output_token_ids)
        render = completion_response if ctx.endpoint is Endpoint.COMPLETIONS else chat_response
        reason = request.finish_reason.value if request.finish_reason else "abort"
        payload = render(
            ctx.templates.response_id,
            ctx.templates.created,
            self.model_name,
            text,
            reason,
            request.num_prompt_tokens,
            request.num_output_tokens,
        )
        if ctx.kv_transfer is not None:
            payload["kv_transfer_params"] = ctx.kv_transfer
        self.tracing.end_http_span(span, 200, time.time())
        return HttpResponse.json(payload, headers=headers)

    def _client_gone(self, request: Request, stream: ResponseStream, span: HttpSpan) -> HttpResponse | None:
        """The client closed its connection and the request was aborted: a stream ends (its 200 went out), a
        plain request answers 499 (nginx's "client closed request") to nobody. The span says so."""
        message = f"client disconnected; request aborted ({request.aborted_in})"
        status = 200 if stream.started else CLIENT_CLOSED_REQUEST
        self.tracing.end_http_span(span, status, time.time(), message)
        if stream.started:
            stream.end()
            return None
        return HttpResponse(CLIENT_CLOSED_REQUEST, b"", "text/plain")

    def _build(
        self,
        http: HttpRequest,
        stream: ResponseStream,
        body: SamplingRequest,
        endpoint: Endpoint,
        tokens: Sequence[object],
        max_tokens: int | None,
        arrival_wall: float,
        span: HttpSpan,
    ) -> Request:
        if body.model is not None and body.model != self.model_name:
            raise HttpError(404, f"The model `{body.model}` does not exist.", type="NotFoundError")
        limit = check_context_length(len(tokens), max_tokens, self.max_model_len)
        priority = self._priority(http, body)
        base_id = http.headers.get("x-request-id") or os.urandom(16).hex()
        prefix = "cmpl-" if endpoint is Endpoint.COMPLETIONS else "chatcmpl-"
        loop_now = asyncio.get_running_loop().time()
        sampler = self._sampler(tokens, body.temperature, body.seed)
        stop_after = None if body.ignore_eos else sampler.natural_length()
        ctx = ApiContext(
            endpoint,
            body.stream,
            body.include_usage,
            body.continuous_usage,
            ChunkTemplates(endpoint, prefix + base_id, int(arrival_wall), self.model_name),
            base_id,
            http.headers.get("idempotency-key"),
            Tracing.trace_id_of(span) or parse_traceparent(http.headers.get("traceparent")),
            span,
            arrival_wall,
            arrival_wall - loop_now,
            body.temperature,
            body.top_p,
            stream,
            asyncio.get_running_loop().create_future(),
            role_pending=endpoint is Endpoint.CHAT and body.stream,
        )
        return Request(
            f"{base_id}#{next(self._ids)}",
            tokens,
            max_tokens=limit,
            arrival_time=loop_now,
            arrival_wall=arrival_wall,
            priority=priority,
            min_tokens=body.min_tokens,
            stop_after=stop_after,
            sink=self._sink,
            sampler=sampler,
            context=ctx,
        )

    def _priority(self, http: HttpRequest, body: SamplingRequest) -> int:
        policy = self.config.engine.scheduling_policy
        if policy is SchedulingPolicy.FCFS:
            if body.priority != 0:
                raise HttpError(400, f"Got priority {body.priority} but Priority scheduling is not enabled.")
            return 0
        header = http.headers.get("x-drill-priority")
        if header is None:
            return body.priority
        try:
            return int(header)
        except ValueError as exc:
            raise HttpError(400, f"X-Drill-Priority must be an integer, got {header!r}") from exc

    def _sampler(self, tokens: Sequence[object], temperature: float | None, seed: int | None) -> TokenSampler:
        if temperature == 0:
            return TokenSampler(prompt_seed(tokens))
        if seed is not None:
            return TokenSampler(stable_seed(prompt_seed(tokens), seed, temperature))
        return TokenSampler(self._unseeded.getrandbits(64))


def _as_http_error(exc: Exception, retry_after: tuple[tuple[str, str], ...]) -> HttpError:
    if isinstance(exc, HttpError):
        return exc
    if isinstance(exc, AdmissionRefused):
        return HttpError(503, str(exc), type=exc.error_type, headers=retry_after)
    return HttpError(500, EngineDeadError.CLIENT_MESSAGE, type="InternalServerError")
