"""Hand-built spans for the trace tests: normalized dicts as the receiver writes them."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

_ids = itertools.count(1)

T0 = 1_700_000_000_000_000_000  # UNIX ns


def trace_id(n: int) -> str:
    return f"{n:032x}"


def new_span_id() -> str:
    return f"{next(_ids):016x}"


def span(
    trace: int | str,
    name: str,
    *,
    service: str = "svc",
    parent: dict | str | None = None,
    start_ms: float = 0.0,
    end_ms: float = 1.0,
    kind: str = "INTERNAL",
    status: str = "UNSET",
    message: str | None = None,
    attributes: dict | None = None,
    span_id: str | None = None,
) -> dict:
    parent_id = parent["span_id"] if isinstance(parent, dict) else parent
    return {
        "trace_id": trace if isinstance(trace, str) else trace_id(trace),
        "span_id": span_id or new_span_id(),
        "parent_span_id": parent_id,
        "name": name,
        "kind": kind,
        "service": service,
        "scope": "test",
        "start_ns": T0 + int(start_ms * 1e6),
        "end_ns": T0 + int(end_ms * 1e6),
        "duration_ms": end_ms - start_ms,
        "status": {"code": status, "message": message},
        "attributes": attributes or {},
        "resource": {"service.name": service},
        "events": [],
    }


def drill_request(
    trace: int,
    *,
    replica: int = 0,
    start_ms: float = 0.0,
    queue_ms: float = 1.0,
    prefill_ms: float = 5.0,
    decode_ms: float = 20.0,
    error: bool = False,
    client_parent: str | None = "c0ffee00c0ffee00",
) -> list[dict]:
    """The embedded stack's spans of one request: router SERVER + CLIENT, replica SERVER, llm_request, phases."""
    total = queue_ms + prefill_ms + decode_ms
    status = "ERROR" if error else "UNSET"
    router = span(
        trace,
        "POST /v1/chat/completions",
        service="drill-router",
        kind="SERVER",
        parent=client_parent,
        start_ms=start_ms,
        end_ms=start_ms + total + 2,
        status=status,
    )
    client = span(
        trace,
        "POST",
        service="drill-router",
        kind="CLIENT",
        parent=router,
        start_ms=start_ms + 0.2,
        end_ms=start_ms + total + 1.8,
        attributes={"drill.upstream": f"replica-{replica}", "drill.attempt": 1},
    )
    replica_svc = f"drill-replica-{replica}"
    http = span(
        trace,
        "POST /v1/chat/completions",
        service=replica_svc,
        kind="SERVER",
        parent=client,
        start_ms=start_ms + 0.5,
        end_ms=start_ms + total + 1.5,
        status=status,
    )
    t = start_ms + 0.7
    llm = span(
        trace,
        "llm_request",
        service=replica_svc,
        kind="SERVER",
        parent=http,
        start_ms=t,
        end_ms=t + total,
        status=status,
        attributes={"gen_ai.latency.time_to_first_token": (queue_ms + prefill_ms) / 1e3, "drill.replica": replica},
    )
    queue = span(trace, "queue", service=replica_svc, parent=llm, start_ms=t, end_ms=t + queue_ms)
    prefill = span(
        trace, "prefill", service=replica_svc, parent=llm, start_ms=t + queue_ms, end_ms=t + queue_ms + prefill_ms
    )
    decode = span(
        trace, "decode", service=replica_svc, parent=llm, start_ms=t + queue_ms + prefill_ms, end_ms=t + total
    )
    return [router, client, http, llm, queue, prefill, decode]


def vllm_request(
    trace: int,
    *,
    replica: int = 0,
    start_ms: float = 0.0,
    queue_ms: float = 1.0,
    prefill_ms: float = 5.0,
    decode_ms: float = 20.0,
    client_parent: str | None = "c0ffee00c0ffee00",
) -> list[dict]:
    """Real vLLM's spans of one request behind the router: router SERVER + CLIENT, then vLLM's one ``llm_request``
    (its parent the incoming traceparent), with the phases only as ``gen_ai.latency.*`` attributes in seconds."""
    total = queue_ms + prefill_ms + decode_ms
    router = span(
        trace,
        "POST /v1/chat/completions",
        service="drill-router",
        kind="SERVER",
        parent=client_parent,
        start_ms=start_ms,
        end_ms=start_ms + total + 2,
    )
    client = span(
        trace,
        "POST",
        service="drill-router",
        kind="CLIENT",
        parent=router,
        start_ms=start_ms + 0.2,
        end_ms=start_ms + total + 1.8,
        attributes={"drill.upstream": f"replica-{replica}", "drill.attempt": 1},
    )
    llm = span(
        trace,
        "llm_request",
        service=f"vllm-{replica}",
        kind="SERVER",
        parent=client,
        start_ms=start_ms + 0.7,
        end_ms=start_ms + 0.7 + total + 0.3,  # detokenizing and the output processor after the last token
        attributes={
            "gen_ai.latency.time_to_first_token": (queue_ms + prefill_ms + 0.1) / 1e3,  # arrival -> queued: 0.1 ms
            "gen_ai.latency.time_in_queue": queue_ms / 1e3,
            "gen_ai.latency.time_in_model_prefill": prefill_ms / 1e3,
            "gen_ai.latency.time_in_model_decode": decode_ms / 1e3,
            "gen_ai.latency.time_in_model_inference": (prefill_ms + decode_ms) / 1e3,
            "gen_ai.latency.e2e": (total + 0.3) / 1e3,
            "gen_ai.response.finish_reasons": '["length"]',
        },
    )
    return [router, client, llm]


def write_spans(path: Path, spans: list[dict]) -> Path:
    path.write_text("".join(json.dumps(s) + "\n" for s in spans))
    return path


def zipkin_span(span: dict, *, remote_from_address: bool = False) -> dict:
    """A normalized span in Zipkin's v2 model (µs times, ``localEndpoint``, string tags). With
    ``remote_from_address``, as Brave reports a call: the callee only in ``remoteEndpoint`` (the first DNS label of
    ``server.address``), no address tags."""
    tags = dict(span["attributes"])
    remote = ""
    if remote_from_address:
        remote = str(tags.pop("server.address", "")).split(".")[0]
        tags.pop("server.port", None)
    out = {
        "traceId": span["trace_id"],
        "id": span["span_id"],
        "name": span["name"],
        "kind": span["kind"],
        "timestamp": span["start_ns"] // 1000,
        "duration": (span["end_ns"] - span["start_ns"]) // 1000,
        "localEndpoint": {"serviceName": span["service"]},
        "tags": {k: str(v) for k, v in tags.items()},
    }
    if span.get("parent_span_id"):
        out["parentId"] = span["parent_span_id"]
    if remote:
        out["remoteEndpoint"] = {"serviceName": remote}
    return out
