"""OpenTelemetry spans of a replica (stack-contracts.md §7, docs/serving-facts.md §1).

Created by the replica with the launch's ``otlp_endpoint`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``);
with neither, :attr:`Tracing.enabled` is False and no OpenTelemetry object is made, so tracing
costs nothing. Spans are exported over OTLP/HTTP protobuf: for ``http://`` endpoints from the event
loop (:mod:`drill.stack.http.span_export`, so no exporter thread competes with the engine for the GIL),
otherwise by the SDK's ``BatchSpanProcessor``.

Per request, in the default span shape (``tracing.span_shape: vllm``), what vLLM exports: one
``llm_request`` span (vLLM's name and SERVER kind, start = arrival, end = finish), parented from the
incoming W3C ``traceparent``/``tracestate``, carrying vLLM's V1 ``gen_ai.*`` attributes (§1.2; the phases
as ``gen_ai.latency.time_in_queue`` / ``time_in_model_prefill`` / ``time_in_model_decode``, in seconds) and
the side-effect fields of contracts §6. A refused request never reaches the engine and has no span.

The ``teaching`` shape adds what vLLM does not export, to show where the time went:

* a SERVER span for the HTTP request (``POST /v1/completions``) around ``llm_request``, started when the
  request arrives and ended when its response ends (a refusal included);
* children of ``llm_request``: ``queue`` (arrival → first scheduled), ``prefill`` (first scheduled →
  first token) and ``decode`` (first token → last token).

Failures (engine death, queue timeout, aborts) set ERROR status with the message.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from drill.stack.config import SpanShape
from drill.stack.inference.request import Request

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.trace import Span
    from opentelemetry.util.types import AttributeValue

    from drill.stack.http.span_export import LoopSpanExporter

__all__ = ["SpanAttributes", "Tracing", "parse_traceparent"]

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")


class SpanAttributes:
    """vLLM's ``SpanAttributes`` strings (``vllm/tracing/utils.py``, §1.2) and the ledger's (§6)."""

    GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN = "gen_ai.latency.time_to_first_token"
    GEN_AI_LATENCY_E2E = "gen_ai.latency.e2e"
    GEN_AI_LATENCY_TIME_IN_QUEUE = "gen_ai.latency.time_in_queue"
    GEN_AI_USAGE_PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
    GEN_AI_USAGE_COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"
    GEN_AI_USAGE_CACHED_TOKENS = "gen_ai.usage.cached_tokens"
    GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL = "gen_ai.latency.time_in_model_prefill"
    GEN_AI_LATENCY_TIME_IN_MODEL_DECODE = "gen_ai.latency.time_in_model_decode"
    GEN_AI_LATENCY_TIME_IN_MODEL_INFERENCE = "gen_ai.latency.time_in_model_inference"
    GEN_AI_REQUEST_ID = "gen_ai.request.id"
    GEN_AI_RESPONSE_FINISH_REASON = "gen_ai.response.finish_reasons"
    GEN_AI_REQUEST_TOP_P = "gen_ai.request.top_p"
    GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
    GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
    GEN_AI_REQUEST_N = "gen_ai.request.n"
    DRILL_SIDE_EFFECT_SEQ = "drill.side_effect.seq"
    DRILL_IDEMPOTENCY_KEY = "drill.idempotency_key"
    DRILL_REPLICA = "drill.replica"
    DRILL_BILLED_TOKENS = "drill.billed_tokens"
    DRILL_ABORTED_IN = "drill.aborted_in"  # where an aborted request was: waiting, prefill or decode


def parse_traceparent(value: str | None) -> str | None:
    """The trace id (32 hex digits) of a W3C ``traceparent`` header, or None when absent or malformed."""
    if not value:
        return None
    match = _TRACEPARENT.match(value.strip().lower())
    if match is None or match.group(1) == "0" * 32:
        return None
    return match.group(1)


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


@dataclass(frozen=True, slots=True)
class _Incoming:
    """vLLM's span shape has no HTTP span: what stands for it is the context of the request's traceparent."""

    context: Context | None  # the extracted OpenTelemetry context, None without a traceparent
    trace_id: str | None


HttpSpan: TypeAlias = "Span | _Incoming | None"  # what start_http_span returns: None when tracing is off


class Tracing:
    """Span creation for one replica; a no-op when ``endpoint`` is None and no processor is given.

    ``span_processor`` replaces the OTLP exporter (tests pass a ``SimpleSpanProcessor`` over an
    in-memory exporter). ``clock_offset`` converts engine-loop seconds to UNIX seconds. ``span_shape``
    is the module docstring's.
    """

    def __init__(
        self,
        service_name: str,
        endpoint: str | None = None,
        *,
        span_processor: SpanProcessor | None = None,
        resource: Mapping[str, object] | None = None,
        span_shape: SpanShape = SpanShape.VLLM,
    ) -> None:
        self.teaching = span_shape is SpanShape.TEACHING
        endpoint = endpoint or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or None
        self.enabled = endpoint is not None or span_processor is not None
        self.endpoint = endpoint
        self._provider: TracerProvider | None = None
        self._loop_exporter: LoopSpanExporter | None = None
        if self.enabled:
            self._setup(service_name, endpoint, span_processor, dict(resource or {}))

    def _setup(self, service_name: str, endpoint: str | None, processor: SpanProcessor | None, resource: dict) -> None:
        # lazy: the OpenTelemetry SDK loads only in a replica that exports spans
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.trace import SpanKind, Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        if processor is None:
            assert endpoint is not None  # enabled: an endpoint or a processor
            processor = self._exporter(endpoint)
        attributes = {"service.name": service_name, "vllm.process_id": os.getpid(), **resource}
        self._provider = TracerProvider(resource=Resource.create(attributes))
        self._provider.add_span_processor(processor)
        self._tracer = self._provider.get_tracer("drill.stack")
        self._propagator = TraceContextTextMapPropagator()
        self._kinds = SpanKind
        self._status = (Status, StatusCode)

    def _exporter(self, endpoint: str) -> SpanProcessor:
        """The loop exporter for ``http://`` (see :mod:`drill.stack.http.span_export`), else the SDK's batch one."""
        if endpoint.startswith("http://"):
            # lazy: the exporter loads the OpenTelemetry SDK, only in a replica that exports spans
            from drill.stack.http.span_export import LoopSpanExporter

            self._loop_exporter = LoopSpanExporter(endpoint)
            return self._loop_exporter
        # lazy: the OpenTelemetry SDK loads only in a replica that exports spans
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        return BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint))

    def start(self) -> None:
        """Start exporting (call from inside the replica's running loop)."""
        if self._loop_exporter is not None:
            self._loop_exporter.start()

    # HTTP server spans -----------------------------------------------------------------------------
    def start_http_span(self, method: str, path: str, headers: Mapping[str, str], start_wall: float) -> HttpSpan:
        """Start the SERVER span of an HTTP request (None when disabled; in vLLM's shape only its parent context)."""
        if not self.enabled:
            return None
        carrier = {key: headers[key] for key in ("traceparent", "tracestate") if key in headers}
        parent = self._propagator.extract(carrier) if carrier else None
        if not self.teaching:
            return _Incoming(parent, parse_traceparent(headers.get("traceparent")))
        return self._tracer.start_span(
            f"{method} {path}",
            context=parent,
            kind=self._kinds.SERVER,
            start_time=_ns(start_wall),
            attributes={"http.request.method": method, "url.path": path},
        )

    def end_http_span(self, span: HttpSpan, status_code: int, end_wall: float, error: str | None = None) -> None:
        """End a SERVER span with the response status; ERROR status on ≥ 500 or when ``error`` is given."""
        if span is None or isinstance(span, _Incoming):
            return
        span.set_attribute("http.response.status_code", status_code)
        if error is not None or status_code >= 500:
            status, code = self._status
            span.set_status(status(code.ERROR, error or f"HTTP {status_code}"))
        span.end(end_time=_ns(end_wall))

    @staticmethod
    def trace_id_of(span: HttpSpan) -> str | None:
        """The hex trace id of a span (None for no span)."""
        if span is None:
            return None
        if isinstance(span, _Incoming):
            return span.trace_id
        return format(span.get_span_context().trace_id, "032x")

    # the llm_request span --------------------------------------------------------------------------
    def record_request(
        self,
        request: Request,
        parent: HttpSpan,
        *,
        clock_offset: float,
        attributes: Mapping[str, AttributeValue],
        error: str | None = None,
    ) -> None:
        """Emit ``llm_request`` (and, in the teaching shape, its ``queue``/``prefill``/``decode`` children).

        ``clock_offset`` is added to the request's engine-loop times to get UNIX seconds;
        ``attributes`` are extra attributes (the ledger's). No-op when disabled.
        """
        if not self.enabled:
            return
        # lazy: the OpenTelemetry SDK loads only in a replica that exports spans
        from opentelemetry import trace

        if isinstance(parent, _Incoming):
            context = parent.context
        else:
            context = trace.set_span_in_context(parent) if parent is not None else None
        start = request.arrival_time + clock_offset
        end = (request.finished_ts if request.finished_ts is not None else request.arrival_time) + clock_offset
        span = self._tracer.start_span(
            "llm_request",
            context=context,
            kind=self._kinds.SERVER,
            start_time=_ns(start),
            attributes={**_gen_ai_attributes(request), **attributes},
        )
        inner = trace.set_span_in_context(span)
        for name, begin, finish in _phases(request) if self.teaching else ():
            self._tracer.start_span(name, context=inner, start_time=_ns(begin + clock_offset)).end(
                end_time=_ns(finish + clock_offset)
            )
        if error is not None:
            status, code = self._status
            span.set_status(status(code.ERROR, error))
        span.end(end_time=_ns(end))

    def record_span(
        self,
        name: str,
        parent: HttpSpan,
        *,
        start_wall: float,
        end_wall: float,
        attributes: Mapping[str, AttributeValue],
        error: str | None = None,
    ) -> None:
        """Emit one INTERNAL span ``name`` under ``parent`` (an HTTP span or its incoming context); no-op when disabled.

        Used for a P/D worker's ``kv_transfer`` span (:mod:`drill.stack.replica.kv_worker`).
        """
        if not self.enabled:
            return
        from opentelemetry import trace  # lazy: the OpenTelemetry SDK loads only in a replica that exports spans

        if isinstance(parent, _Incoming):
            context = parent.context
        else:
            context = trace.set_span_in_context(parent) if parent is not None else None
        span = self._tracer.start_span(name, context=context, start_time=_ns(start_wall), attributes=dict(attributes))
        if error is not None:
            status, code = self._status
            span.set_status(status(code.ERROR, error))
        span.end(end_time=_ns(end_wall))

    async def aclose(self) -> None:
        """Export every pending span and stop (called once at replica exit, inside the loop)."""
        if self._loop_exporter is not None:
            await self._loop_exporter.aclose()
        if self._provider is not None:
            provider, self._provider = self._provider, None
            await asyncio.to_thread(_shutdown_provider, provider)


def _shutdown_provider(provider: TracerProvider) -> None:
    provider.force_flush(5_000)
    provider.shutdown()


def _phases(request: Request) -> list[tuple[str, float, float]]:
    phases = []
    scheduled = request.first_scheduled_ts
    end_of_queue = scheduled if scheduled is not None else request.finished_ts
    if end_of_queue is not None:
        phases.append(("queue", request.queued_ts, end_of_queue))
    if scheduled is not None and request.first_token_ts is not None:
        phases.append(("prefill", scheduled, request.first_token_ts))
        if request.last_token_ts is not None and request.num_output_tokens > 1:
            phases.append(("decode", request.first_token_ts, request.last_token_ts))
    return phases


def _gen_ai_attributes(request: Request) -> dict[str, AttributeValue]:
    """vLLM V1 ``do_tracing`` attributes (§1.2); absent timings are left out."""
    attrs = SpanAttributes
    reason = request.finish_reason.value if request.finish_reason else "abort"
    finished = request.finished_ts if request.finished_ts is not None else request.arrival_time
    out: dict[str, AttributeValue] = {
        attrs.GEN_AI_REQUEST_ID: request.request_id,
        attrs.GEN_AI_USAGE_PROMPT_TOKENS: request.num_prompt_tokens,
        attrs.GEN_AI_USAGE_COMPLETION_TOKENS: request.num_output_tokens,
        attrs.GEN_AI_RESPONSE_FINISH_REASON: json.dumps([reason]),
        attrs.GEN_AI_LATENCY_E2E: finished - request.arrival_time,
        attrs.GEN_AI_REQUEST_MAX_TOKENS: request.max_tokens,
        attrs.GEN_AI_REQUEST_N: 1,
    }
    if request.num_cached_tokens:
        out[attrs.GEN_AI_USAGE_CACHED_TOKENS] = request.num_cached_tokens
    scheduled = request.first_scheduled_ts
    if scheduled is not None:
        out[attrs.GEN_AI_LATENCY_TIME_IN_QUEUE] = scheduled - request.queued_ts
    if request.first_token_ts is not None and scheduled is not None:
        assert request.last_token_ts is not None  # the scheduler sets it with the first token
        out[attrs.GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN] = request.first_token_ts - request.arrival_time
        out[attrs.GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL] = request.first_token_ts - scheduled
        out[attrs.GEN_AI_LATENCY_TIME_IN_MODEL_DECODE] = request.last_token_ts - request.first_token_ts
        out[attrs.GEN_AI_LATENCY_TIME_IN_MODEL_INFERENCE] = request.last_token_ts - scheduled
    return out
