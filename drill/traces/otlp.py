"""Decode OTLP trace exports (protobuf or JSON) into normalized span dicts.

OTLP/JSON writes ``traceId``/``spanId``/``parentSpanId`` as **hex**, while
protobuf's ``json_format.Parse`` expects **base64** for bytes fields and
silently mis-decodes hex (``dependency-notes.md`` §4). The JSON path therefore
rewrites those keys from hex to base64 before parsing. A normalized span::

    {"trace_id": "5b8e...", "span_id": "...", "parent_span_id": null, "name": "llm_request",
     "kind": "SERVER", "service": "drill-replica-0", "scope": "drill.stack", "start_ns": ..,
     "end_ns": .., "duration_ms": 12.5, "status": {"code": "ERROR", "message": "..."},
     "attributes": {"gen_ai.latency.time_in_queue": 0.01, ...}, "resource": {...},
     "events": [{"name": "...", "ts_ns": .., "attributes": {...}}]}
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import zlib
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest, ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

__all__ = ["OtlpDecodeError", "decode_body", "decode_request", "encode_response", "normalize"]

_KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}
_ID_KEYS = ("traceId", "spanId", "parentSpanId")


class OtlpDecodeError(ValueError):
    """The body is not a valid OTLP trace export."""


def decode_body(body: bytes, content_encoding: str | None) -> bytes:
    encoding = (content_encoding or "").strip().lower()
    try:
        if encoding == "gzip":
            return gzip.decompress(body)
        if encoding == "deflate":
            return zlib.decompress(body)
    except (OSError, zlib.error) as exc:
        raise OtlpDecodeError(f"cannot {encoding}-decompress the body: {exc}") from exc
    if encoding not in ("", "identity"):
        raise OtlpDecodeError(f"unsupported Content-Encoding {content_encoding!r}")
    return body


def decode_request(body: bytes, content_type: str | None) -> ExportTraceServiceRequest:
    message = ExportTraceServiceRequest()
    if _is_json(content_type):
        try:
            raw = json.loads(body or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise OtlpDecodeError(f"invalid JSON: {exc}") from exc
        _hex_ids_to_base64(raw)
        try:
            json_format.ParseDict(raw, message, ignore_unknown_fields=True)
        except json_format.ParseError as exc:
            raise OtlpDecodeError(f"not an OTLP trace export: {exc}") from exc
        return message
    try:
        message.ParseFromString(body)
    except DecodeError as exc:
        raise OtlpDecodeError(f"invalid protobuf: {exc}") from exc
    return message


def encode_response(content_type: str | None) -> tuple[bytes, str]:
    response = ExportTraceServiceResponse()
    if _is_json(content_type):
        return b"{}", "application/json"
    return response.SerializeToString(), "application/x-protobuf"


def _is_json(content_type: str | None) -> bool:
    return "json" in (content_type or "").lower()


def _hex_ids_to_base64(node: Any) -> None:
    """Rewrite hex trace/span ids into the base64 that protobuf's JSON parser expects."""
    if isinstance(node, dict):
        for key in _ID_KEYS:
            value = node.get(key)
            if isinstance(value, str) and value:
                node[key] = _hex_to_b64(value)
        for value in node.values():
            _hex_ids_to_base64(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids_to_base64(item)


def _hex_to_b64(value: str) -> str:
    try:
        return base64.b64encode(bytes.fromhex(value)).decode("ascii")
    except ValueError:
        return value   # already base64 (some exporters do that); leave it


def _any_value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return binascii.hexlify(value.bytes_value).decode("ascii")
    return getattr(value, which)


def _attributes(items) -> dict[str, Any]:
    return {kv.key: _any_value(kv.value) for kv in items}


def normalize(request: ExportTraceServiceRequest) -> list[dict[str, Any]]:
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        service = resource.get("service.name", "unknown")
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name
            for span in scope_spans.spans:
                spans.append(_span(span, service, scope, resource))
    return spans


def _span(span, service: str, scope: str, resource: dict[str, Any]) -> dict[str, Any]:
    return {
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent_span_id": span.parent_span_id.hex() or None,
        "name": span.name,
        "kind": _KINDS.get(span.kind, str(span.kind)),
        "service": service,
        "scope": scope,
        "start_ns": span.start_time_unix_nano,
        "end_ns": span.end_time_unix_nano,
        "duration_ms": (span.end_time_unix_nano - span.start_time_unix_nano) / 1e6,
        "status": {"code": _STATUS.get(span.status.code, str(span.status.code)), "message": span.status.message or None},
        "attributes": _attributes(span.attributes),
        "resource": resource,
        "events": [{"name": e.name, "ts_ns": e.time_unix_nano, "attributes": _attributes(e.attributes)}
                   for e in span.events],
    }
