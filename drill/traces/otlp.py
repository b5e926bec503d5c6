"""Decode OTLP trace exports: the receiver's HTTP bodies into normalized span dicts, and OTLP files
(JSON lines, protobuf) into a :class:`~drill.traces.table.SpanTable`.

OTLP/JSON writes ``traceId``/``spanId``/``parentSpanId`` as **hex** (opentelemetry-proto,
``docs/specification.md``, "JSON Protobuf Encoding"), while protobuf's ``json_format.Parse`` expects
**base64** for bytes fields and silently mis-decodes hex. The receiver's JSON path therefore rewrites
those keys from hex to base64 before parsing. A normalized span (one line of ``spans.jsonl``)::

    {"trace_id": "5b8e...", "span_id": "...", "parent_span_id": null, "name": "llm_request",
     "kind": "SERVER", "service": "drill-replica-0", "scope": "drill.stack", "start_ns": ..,
     "end_ns": .., "duration_ms": 12.5, "status": {"code": "ERROR", "message": "..."},
     "attributes": {"gen_ai.latency.time_in_queue": 0.01, ...}, "resource": {...},
     "events": [{"name": "...", "ts_ns": .., "attributes": {...}}]}

Files: :func:`read_json_file` (the OpenTelemetry Collector file exporter's JSON lines, one ``TracesData``
per line; Tempo's ``batches`` and base64 ids, Jaeger API v3's ``{"result": ...}`` too) and
:func:`read_proto_file` (protobuf, framed as :data:`PROTO_FRAMINGS` says).
"""

from __future__ import annotations

import base64
import binascii
import gzip
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

from drill.rundir.files import MAX_DOCUMENT_BYTES, loads_json, read_bytes
from drill.rundir.jsonl import BadLine, ReadReport, read_lines_or_document, unreadable_reason
from drill.traces.table import ATTRIBUTE_DEPTH, SpanTable, TableBuilder, kind_code, status_code

__all__ = [
    "PROTO_FRAMINGS",
    "OtlpDecodeError",
    "TracesData",
    "decode_body",
    "decode_request",
    "encode_response",
    "normalize",
    "read_json_file",
    "read_proto_file",
    "span_id_hex",
    "trace_id_hex",
]

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
            raw = loads_json(body or b"{}")
        except (ValueError, UnicodeDecodeError) as exc:  # JsonTooDeep too: ParseDict below recurses
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
        return value  # already base64 (some exporters do that); leave it


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


def _attributes(items: Iterable[KeyValue]) -> dict[str, Any]:
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


def _span(span: ProtoSpan, service: str, scope: str, resource: dict[str, Any]) -> dict[str, Any]:
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
        "status": {
            "code": _STATUS.get(span.status.code, str(span.status.code)),
            "message": span.status.message or None,
        },
        "attributes": _attributes(span.attributes),
        "resource": resource,
        "events": [
            {"name": e.name, "ts_ns": e.time_unix_nano, "attributes": _attributes(e.attributes)} for e in span.events
        ],
    }


# --- OTLP files: JSON lines (collector file exporter, Tempo) and protobuf -----------------------------
#
# Decoded with msgspec typed structs straight into a TableBuilder (no protobuf message per span for
# JSON). Ids follow the robust rule of the OTLP deviations seen in the wild: a trace id of 24 characters
# ending in "==" or a span id of 12 ending in "=" is base64 (Tempo, the Java SDK's JSON), anything else
# is hex (the OTLP/JSON spec). 64-bit times may be decimal strings (the spec) or numbers.


class _AnyValue(msgspec.Struct, rename="camel"):
    string_value: str | None = None
    bool_value: bool | None = None
    int_value: int | str | None = None
    double_value: float | str | None = None
    bytes_value: str | None = None
    array_value: _ArrayValue | None = None
    kvlist_value: _KvList | None = None


class _KeyValue(msgspec.Struct):
    key: str
    value: _AnyValue | None = None


class _ArrayValue(msgspec.Struct):
    values: list[_AnyValue] = []


class _KvList(msgspec.Struct):
    values: list[_KeyValue] = []


class _JsonStatus(msgspec.Struct):
    code: int | str = 0
    message: str = ""


class _JsonSpan(msgspec.Struct, rename="camel"):
    trace_id: str = ""
    span_id: str = ""
    parent_span_id: str = ""
    name: str = ""
    kind: int | str = 0
    start_time_unix_nano: int | str = 0
    end_time_unix_nano: int | str = 0
    attributes: list[_KeyValue] = []
    status: _JsonStatus | None = None


class _JsonScopeSpans(msgspec.Struct):
    spans: list[_JsonSpan] = []


class _JsonResource(msgspec.Struct):
    attributes: list[_KeyValue] = []


class _JsonResourceSpans(msgspec.Struct, rename="camel"):
    resource: _JsonResource | None = None
    scope_spans: list[_JsonScopeSpans] = []
    instrumentation_library_spans: list[_JsonScopeSpans] = []  # OTLP < 0.15, older Tempo


class TracesData(msgspec.Struct, rename="camel"):
    """One OTLP/JSON ``TracesData`` (or ``ExportTraceServiceRequest``); Tempo names the list ``batches``; Jaeger's
    API v3 (``/api/v3/traces``, through grpc-gateway) wraps each one as ``{"result": TracesData}``."""

    resource_spans: list[_JsonResourceSpans] = []
    batches: list[_JsonResourceSpans] = []
    result: TracesData | None = None


_TRACES_DECODER = msgspec.json.Decoder(TracesData)


_HEX_DIGITS = "0123456789abcdefABCDEF"


def _id_hex(value: str, b64_len: int, b64_pad: str, hex_len: int) -> str:
    if not value:
        return ""
    if len(value) == b64_len and value.endswith(b64_pad):
        try:
            return base64.b64decode(value, validate=True).hex()
        except binascii.Error as exc:
            raise ValueError(f"id {value!r} is neither hex nor base64") from exc
    if len(value) != hex_len or value.strip(_HEX_DIGITS):
        raise ValueError(f"id {value!r} is neither {hex_len} hex characters nor base64")
    return value.lower()


def trace_id_hex(value: str) -> str:
    """Lowercase 32-hex trace id of an OTLP/JSON trace id (hex, or base64 as Tempo returns it)."""
    return _id_hex(value, 24, "==", 32)


def span_id_hex(value: str) -> str:
    """Lowercase 16-hex span id of an OTLP/JSON span id (hex, or base64); "" for none."""
    return _id_hex(value, 12, "=", 16)


def _json_value(value: _AnyValue | None, depth: int = 0) -> Any:
    if depth > ATTRIBUTE_DEPTH:
        raise ValueError(f"an attribute value nested more than {ATTRIBUTE_DEPTH} deep")
    if value is None:
        return None
    if value.string_value is not None:
        return value.string_value
    if value.bool_value is not None:
        return value.bool_value
    if value.int_value is not None:
        return int(value.int_value)
    if value.double_value is not None:
        return float(value.double_value)
    if value.array_value is not None:
        return [_json_value(v, depth + 1) for v in value.array_value.values]
    if value.kvlist_value is not None:
        return _json_attributes(value.kvlist_value.values, depth + 1)
    if value.bytes_value is not None:
        return base64.b64decode(value.bytes_value).hex()
    return None


def _json_attributes(items: list[_KeyValue], depth: int = 0) -> dict[str, Any]:
    return {kv.key: _json_value(kv.value, depth) for kv in items}


_NO_STATUS = _JsonStatus()
_GET = {
    name: attrgetter(name)
    for name in (
        "trace_id",
        "span_id",
        "parent_span_id",
        "name",
        "kind",
        "start_time_unix_nano",
        "end_time_unix_nano",
        "attributes",
        "status",
        "code",
        "message",
    )
}


def _ids_hex(values: list[str], hex_len: int, convert: Callable[[str], str]) -> list[str]:
    """``convert`` (:func:`trace_id_hex`/:func:`span_id_hex`) of each value, by C-level passes when all
    are hex of the right length (or empty)."""
    present = [v for v in values if v] if "" in values else values
    joined = "".join(present)
    if set(map(len, present)) <= {hex_len} and not joined.strip(_HEX_DIGITS):
        return [v.lower() for v in values] if joined != joined.lower() else values
    return list(map(convert, values))


def _add_traces_data(data: TracesData, builder: TableBuilder) -> None:
    """Every span of one ``TracesData`` into ``builder``, a column at a time (ValueError: a bad id)."""
    get = _GET
    if data.result is not None:
        _add_traces_data(data.result, builder)
    for resource_spans in data.resource_spans or data.batches:
        resource = _json_attributes(resource_spans.resource.attributes) if resource_spans.resource else {}
        service = str(resource.get("service.name", "unknown"))
        for scope in resource_spans.scope_spans or resource_spans.instrumentation_library_spans:
            spans = scope.spans
            if not spans:
                continue
            statuses = [_NO_STATUS if st is None else st for st in map(get["status"], spans)]
            builder.extend(
                trace_id=_ids_hex(list(map(get["trace_id"], spans)), 32, trace_id_hex),
                span_id=_ids_hex(list(map(get["span_id"], spans)), 16, span_id_hex),
                parent_id=_ids_hex(list(map(get["parent_span_id"], spans)), 16, span_id_hex),
                service=[service] * len(spans),
                name=list(map(get["name"], spans)),
                kind=list(map(kind_code, map(get["kind"], spans))),
                start_ns=list(map(int, map(get["start_time_unix_nano"], spans))),
                end_ns=list(map(int, map(get["end_time_unix_nano"], spans))),
                status=list(map(status_code, map(get["code"], statuses))),
                status_message=[m or None for m in map(get["message"], statuses)],
                attributes=list(map(_json_attributes, map(get["attributes"], spans))),
            )


def read_json_file(path: Path, report: ReadReport | None = None) -> SpanTable:
    """The spans of an OTLP/JSON-lines file (one ``TracesData`` per line, the collector's file exporter).

    A line that is not JSON, not a ``TracesData``, or has an id that is neither hex nor base64 is counted
    and located in ``report`` (all its spans are left out); a torn last line is ``torn_last_line``. A file
    that is one pretty-printed document (what Tempo's ``/api/traces/<id>`` returns, saved) is read whole
    when some line of it does not read on its own but the whole does (:func:`read_lines_or_document`).
    """
    report = report if report is not None else ReadReport(path)
    lines, whole = TableBuilder(), TableBuilder()
    if read_lines_or_document(
        path, report, lambda data, _: _add_json(data, lines), lambda data: _add_json(data, whole) is None
    ):
        return whole.build()
    return lines.build()


def _add_json(data: bytes, builder: TableBuilder) -> str | None:
    """The spans of one JSON ``TracesData`` into ``builder``; None, or why none could be read (then none are)."""
    mark = len(builder)
    try:
        _add_traces_data(_TRACES_DECODER.decode(data), builder)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError, RecursionError) as exc:
        builder.truncate(mark)
        return unreadable_reason(exc)
    return None


#: How an OTLP protobuf file holds its messages (each a ``TracesData``, wire-identical to an
#: ``ExportTraceServiceRequest``):
#: ``message`` — the whole file is one message (``.binpb``; a directory: every file in it, one each);
#: ``uint32`` — each message is prefixed by its length as a 4-byte big-endian integer;
#: ``varint`` — each message is prefixed by its length as a protobuf varint (Go ``protodelim``,
#: Java ``writeDelimitedTo``).
PROTO_FRAMINGS = ("message", "uint32", "varint")


def _frames(data: bytes, framing: str) -> Iterator[tuple[int, bytes | None, str]]:
    """(byte offset, message bytes or None, reason) for each framed message of ``data``."""
    if framing == "message":
        yield 0, data, ""
        return
    offset = 0
    while offset < len(data):
        start = offset
        if framing == "uint32":
            if offset + 4 > len(data):
                yield start, None, "truncated length prefix"
                return
            (length,) = struct.unpack_from(">I", data, offset)
            offset += 4
        else:
            length, offset = _varint(data, offset)
            if length < 0:
                yield start, None, "truncated length prefix"
                return
        if offset + length > len(data):
            yield start, None, f"message of {length} bytes cut short at {len(data) - offset}"
            return
        yield start, data[offset : offset + length], ""
        offset += length


def _varint(data: bytes, offset: int) -> tuple[int, int]:
    value = shift = 0
    while offset < len(data):
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
        shift += 7
    return -1, offset


def read_proto_file(path: Path, report: ReadReport | None = None, framing: str = "message") -> SpanTable:
    """The spans of OTLP protobuf ``TracesData``/``ExportTraceServiceRequest`` messages in ``path``
    (a file, or a directory whose files each hold one message), framed as :data:`PROTO_FRAMINGS` says.

    A message that does not parse, or a frame cut short, is counted in ``report`` as a bad "line" whose
    number is the message's 1-based index and whose reason names its byte offset.
    """
    if framing not in PROTO_FRAMINGS:
        raise ValueError(f"unknown protobuf framing {framing!r} (one of {', '.join(PROTO_FRAMINGS)})")
    report = report if report is not None else ReadReport(path)
    if not path.exists():
        report.exists = False
        return SpanTable.empty()
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    root = report.root
    tables, index = [], 0
    for file in files:
        data = read_bytes(file, limit=MAX_DOCUMENT_BYTES, what="OTLP protobuf", root=root)
        for offset, payload, reason in _frames(data, framing):
            index += 1
            where = f"{file.name} byte {offset}"
            if payload is None:
                report.add_bad(BadLine(index, f"{where}: {reason}"))
                continue
            message = ExportTraceServiceRequest()
            try:
                message.ParseFromString(payload)
            except DecodeError as exc:
                report.add_bad(BadLine(index, f"{where}: invalid protobuf: {exc}"[:200]))
                continue
            try:
                tables.append(SpanTable.from_spans(normalize(message)))
            except (ValueError, TypeError, RecursionError) as exc:
                report.add_bad(BadLine(index, f"{where}: {exc}"[:200]))
                continue
            report.lines_read += 1
    return SpanTable.concat(tables)
