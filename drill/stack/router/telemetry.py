"""The router's own ``/metrics`` counters and its OpenTelemetry tracer.

Metrics (Prometheus text, one registry per router, nothing global)::

    drill_router_requests_total{route,status}            requests answered, by final status
    drill_router_attempts_total{replica}                 upstream attempts sent
    drill_router_retries_total{reason}                   attempts after the first (error|timeout)
    drill_router_upstream_errors_total{replica,kind}     connect|read|timeout|status_5xx
    drill_router_idempotent_replays_total                answers served from the Idempotency-Key store
    drill_router_idempotency_conflicts_total             same key, different body (422)
    drill_router_cancelled_total                         client gone first: upstream request closed (499)
    drill_router_replica_healthy{replica}                1 in rotation, 0 out
    drill_router_outstanding_requests{replica}           attempts in flight

Tracing (stack-contracts.md §7): service ``drill-router``; a SERVER span per request and a CLIENT
child per upstream attempt with ``drill.attempt`` (1-based), ``drill.upstream`` and ``peer.service`` (the replica's
name),
exported over OTLP/HTTP protobuf when an endpoint is given: from the router's loop for ``http://``
(:mod:`drill.stack.http.span_export`: no exporter thread takes the GIL in the middle of the relay), with the SDK's
BatchSpanProcessor otherwise. Without
one the tracer is a no-op that still passes the caller's ``traceparent`` upstream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

if TYPE_CHECKING:
    from drill.stack.http.span_export import LoopSpanExporter

__all__ = ["RouterMetrics", "extract_context", "inject_context", "make_tracer"]

SERVICE_NAME = "drill-router"


class RouterMetrics:
    """Counters and gauges of one router; :meth:`render` is the ``/metrics`` body."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "drill_router_requests", "Requests answered by the router", ["route", "status"], registry=r
        )
        self.attempts = Counter("drill_router_attempts", "Upstream attempts sent", ["replica"], registry=r)
        self.retries = Counter("drill_router_retries", "Upstream attempts after the first", ["reason"], registry=r)
        self.upstream_errors = Counter(
            "drill_router_upstream_errors", "Failed upstream attempts", ["replica", "kind"], registry=r
        )
        self.replays = Counter(
            "drill_router_idempotent_replays", "Answers replayed for a known Idempotency-Key", registry=r
        )
        self.conflicts = Counter(
            "drill_router_idempotency_conflicts",
            "Requests refused: known Idempotency-Key with a different body",
            registry=r,
        )
        self.cancelled = Counter(
            "drill_router_cancelled",
            "Requests whose client went away first; their upstream request was closed (status 499)",
            registry=r,
        )
        self.healthy = Gauge(
            "drill_router_replica_healthy", "1 when the replica is in rotation", ["replica"], registry=r
        )
        self.outstanding = Gauge(
            "drill_router_outstanding_requests", "Upstream attempts in flight", ["replica"], registry=r
        )

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)


_W3C = TraceContextTextMapPropagator()


def extract_context(headers: Mapping[str, str]) -> Context:
    """The caller's trace context from its ``traceparent``/``tracestate`` (W3C Trace Context only: a ``baggage``
    header is forwarded upstream as it came, with the other end-to-end headers)."""
    return _W3C.extract(headers)


def inject_context(headers: dict[str, str], span: Span) -> dict[str, str]:
    """A copy of ``headers`` with ``span`` as the upstream's parent (``traceparent``, and ``tracestate`` when it has
    one): what ``propagate.inject`` writes, without the global propagator's lookups per attempt. A span without a
    valid context (no caller's trace, no exporter) leaves the headers as they are."""
    sent = dict(headers)
    context = span.get_span_context()
    if context.is_valid:
        sent["traceparent"] = f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
        if context.trace_state:
            sent["tracestate"] = context.trace_state.to_header()
    return sent


def make_tracer(otlp_endpoint: str | None) -> tuple[trace.Tracer, TracerProvider | None, LoopSpanExporter | None]:
    """The router's tracer and, when exporting, its provider (the caller shuts it down) and, for an ``http://``
    endpoint, the exporter that runs on the router's loop (the caller starts it inside the loop and closes it).

    ``otlp_endpoint`` is the collector's base URL or its ``…/v1/traces`` URL.
    """
    if not otlp_endpoint:
        return trace.NoOpTracer(), None, None
    endpoint = (
        otlp_endpoint if otlp_endpoint.rstrip("/").endswith("/v1/traces") else otlp_endpoint.rstrip("/") + "/v1/traces"
    )
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    exporter = None
    if endpoint.startswith("http://"):
        # lazy: the exporter loads the OTLP encoder (protobuf, ~0.3 s), only in a router that exports spans
        from drill.stack.http.span_export import LoopSpanExporter

        exporter = LoopSpanExporter(endpoint)
        provider.add_span_processor(exporter)
    else:
        # lazy: the OTLP/HTTP exporter (protobuf, ~0.3 s) loads only in a router that exports spans over https
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, timeout=5)))
    return provider.get_tracer("drill.stack.router"), provider, exporter
