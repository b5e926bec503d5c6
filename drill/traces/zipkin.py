"""Zipkin JSON files (``zipkin_file``, a ``drill.traces`` entry point): Zipkin's v2 span model.

Zipkin's v2 JSON (``zipkin2-api.yaml`` in openzipkin/zipkin-api, https://zipkin.io/zipkin-api/) is what Zipkin
stores and serves, what Brave and Spring's tracing report, and what OpenTelemetry's Zipkin exporters write. A
file is one JSON document — a list of spans (the body of ``POST /api/v2/spans``, or ``GET /api/v2/trace/{id}``)
or a list of traces, each a list of spans (``GET /api/v2/traces``) — or JSON lines, one span or one list of spans
per line. A span:

- ``traceId`` (16 or 32 hex: a 64-bit one is padded), ``id``, ``parentId`` (none: a root);
- ``timestamp`` and ``duration`` in **µs** (a span without them was never finished: unreadable, counted);
- ``name``, ``kind`` (``CLIENT``, ``SERVER``, ``PRODUCER``, ``CONSUMER``; none for a local span: the table's
  UNSPECIFIED, whose kind :mod:`drill.traces.kinds` infers);
- ``localEndpoint.serviceName``: the service (``unknown`` when missing);
- ``remoteEndpoint``: the other side of a CLIENT or SERVER span, kept as attributes (``peer.service`` from its
  ``serviceName``, ``network.peer.address``/``network.peer.port``): the callee of a call to an uninstrumented
  database is named there only;
- ``tags``: the attributes. The status is ``otel.status_code`` (+ ``otel.status_description``) where an
  OpenTelemetry exporter wrote it, else ERROR when the ``error`` tag is present, its value the message (Zipkin's
  convention); those tags become the status and are not kept.

**Shared span ids.** A B3 client may let its server reuse its span id (Envoy's Zipkin tracer does by default): the
server half then carries ``"shared": true`` (a conversion from v1 may drop the flag) and the same ``id`` as the
CLIENT half. Kept as two spans with one id, a child could not tell which is its parent. The server half gets an id
of its own (derived, stable), the CLIENT half for parent, and the children of that id in the server's service are
moved under it: the callee's work is under the callee's span, as Zipkin's own trace tree (``SpanNode``) puts it.

A span that cannot be read (a missing or non-hex id, no timestamp or duration) is counted and located
(``file:line: [i][j]: reason``), never dropped silently; so is a line that is not JSON. The file is read line by
line (no limit but a line's, :data:`~drill.rundir.files.MAX_LINE_BYTES`); a pretty-printed document, none of
whose lines reads on its own, is read whole, up to :data:`~drill.rundir.files.MAX_DOCUMENT_BYTES`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import msgspec

from drill.api import PluginParams, SpanFileHead
from drill.rundir.jsonl import ReadReport, read_lines_or_document, unreadable_reason
from drill.traces.sources import SourceReport, TableSource
from drill.traces.table import NS_RANGE, AttributeValue, SpanTable, TableBuilder, hex_id, kind_code

__all__ = ["ZipkinFileSource", "read_zipkin_file"]

_STATUS_TAGS = frozenset({"otel.status_code", "otel.status_description", "error"})
_DOCUMENT_START = re.compile(rb"\s*\[\s*(\[\s*)?(\{|\])")
_MAX_US = NS_RANGE[1] // 1000  # the latest span time the table holds, in µs
_V1 = re.compile(rb'"(binaryAnnotations|endpoint)"\s*:')  # Zipkin v1: annotations carry the endpoint


class _Endpoint(msgspec.Struct, rename="camel"):
    service_name: str | None = None
    ipv4: str | None = None
    ipv6: str | None = None
    port: int | None = None


class _ZipkinSpan(msgspec.Struct, rename="camel"):
    trace_id: str
    id: str
    parent_id: str | None = None
    name: str | None = None
    kind: str | None = None
    timestamp: int | float | None = None
    duration: int | float | None = None
    local_endpoint: _Endpoint | None = None
    remote_endpoint: _Endpoint | None = None
    tags: dict[str, AttributeValue] | None = None
    shared: bool | None = None


_ITEMS = msgspec.json.Decoder(list[msgspec.Raw])
_SPAN = msgspec.json.Decoder(_ZipkinSpan)


@dataclass
class _ZipkinRead:
    """One span read, its ids as the table holds them."""

    span: _ZipkinSpan
    trace_id: str
    span_id: str
    parent_id: str
    service: str
    start_ns: int
    end_ns: int


def read_zipkin_file(path: Path, file_report: ReadReport, report: SourceReport) -> SpanTable:
    """The spans of a Zipkin v2 JSON file (JSON lines, or one document over several lines:
    :func:`~drill.rundir.jsonl.read_lines_or_document`). A line that is not JSON is a bad line of ``file_report``; a
    span that cannot be read is a located problem of ``report``."""
    lines: list[_ZipkinRead] = []
    whole: list[_ZipkinRead] = []
    found = SourceReport(report.source)  # what the whole document could not read
    if read_lines_or_document(
        path,
        file_report,
        lambda data, number: _read_value(data, f"{path}:{number}", lines, report),
        lambda data: _read_value(data, str(path), whole, found) is None,
        what="Zipkin JSON",
    ):
        lines = whole
        report.problems, report.problem_where = found.problems, found.problem_where
    return _table(_with_shared_ids_apart(lines))


def _read_value(body: bytes, where: str, out: list[_ZipkinRead], report: SourceReport) -> str | None:
    """:func:`_add_value`; None, or why ``body`` is no span, list of spans or list of traces."""
    try:
        _add_value(body, where, out, report)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        return unreadable_reason(exc)
    return None


def _add_value(body: bytes, where: str, out: list[_ZipkinRead], report: SourceReport) -> None:
    """The spans of one JSON value: a span, a list of spans, or a list of traces (lists of spans). Raises when
    ``body`` is not JSON or none of these; a span of a list that cannot be read is a problem of ``report``."""
    if body.lstrip()[:1] != b"[":
        _add_span(out, _SPAN.decode(body), where, report)
        return
    for i, item in enumerate(_ITEMS.decode(body)):
        if bytes(item).lstrip()[:1] != b"[":
            _add_span(out, item, f"{where}: [{i}]", report)
            continue
        try:
            trace = _ITEMS.decode(item)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            report.add_problem(f"{where}: [{i}]", unreadable_reason(exc))
            continue
        for j, raw in enumerate(trace):
            _add_span(out, raw, f"{where}: [{i}][{j}]", report)


def _add_span(out: list[_ZipkinRead], span: _ZipkinSpan | msgspec.Raw, where: str, report: SourceReport) -> None:
    try:
        out.append(_read(span if isinstance(span, _ZipkinSpan) else _SPAN.decode(span)))
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, ValueError) as exc:
        report.add_problem(where, unreadable_reason(exc))


def _read(span: _ZipkinSpan) -> _ZipkinRead:
    if span.timestamp is None or span.duration is None:
        raise ValueError("no timestamp or no duration: a span that was never finished")
    if not (0 <= span.timestamp <= _MAX_US and 0 <= span.duration <= _MAX_US - span.timestamp):  # NaN: False
        raise ValueError(f"timestamp {span.timestamp} and duration {span.duration} µs are no span time (0 to 2^63 ns)")
    start_ns, end_ns = round(span.timestamp * 1000), round((span.timestamp + span.duration) * 1000)
    service = (span.local_endpoint.service_name if span.local_endpoint else None) or "unknown"
    parent = hex_id(span.parent_id, 16) if span.parent_id else ""
    return _ZipkinRead(span, hex_id(span.trace_id, 32), hex_id(span.id, 16), parent, service, start_ns, end_ns)


def _with_shared_ids_apart(spans: list[_ZipkinRead]) -> list[_ZipkinRead]:
    """The server halves of shared span ids with ids of their own, under their CLIENT halves, and the children of
    such an id in the server's service under the server half (module doc)."""
    halves = {(r.trace_id, r.span_id) for r in spans if not _server(r.span)}
    moved: dict[tuple[str, str], tuple[str, str]] = {}  # (trace, shared id) -> (server's service, its new id)
    for r in spans:
        key = (r.trace_id, r.span_id)
        if _server(r.span) and key in halves:
            new_id = hashlib.blake2b(f"{r.trace_id}:{r.span_id}:shared".encode(), digest_size=8).hexdigest()
            moved[key] = (r.service, new_id)
            r.parent_id, r.span_id = r.span_id, new_id
    if moved:
        for r in spans:
            to = moved.get((r.trace_id, r.parent_id))
            if to is not None and to[0] == r.service and r.span_id != to[1]:
                r.parent_id = to[1]
    return spans


def _server(span: _ZipkinSpan) -> bool:
    """A SERVER span: the server half of an id it shares with another span of its trace (flagged ``shared`` or
    not: a conversion from v1 may drop the flag, and two spans of one id are one call's two sides either way)."""
    return (span.kind or "").upper() == "SERVER"


def _table(spans: list[_ZipkinRead]) -> SpanTable:
    builder = TableBuilder()
    for r in spans:
        span = r.span
        tags = dict(span.tags or {})
        status, message = _status(tags)
        builder.add(
            r.trace_id,
            r.span_id,
            r.parent_id,
            r.service,
            span.name or "",
            kind_code((span.kind or "").upper()),
            r.start_ns,
            r.end_ns,
            status,
            message,
            {**{k: v for k, v in tags.items() if k not in _STATUS_TAGS}, **_remote(span.remote_endpoint)},
        )
    return builder.build()


def _status(tags: dict[str, AttributeValue]) -> tuple[int, str | None]:
    code = str(tags.get("otel.status_code", "")).upper()
    if code == "ERROR" or (not code and "error" in tags):
        message = tags.get("otel.status_description", tags.get("error"))
        return 2, None if message in (None, "") else str(message)
    return (1 if code == "OK" else 0), None


def _remote(endpoint: _Endpoint | None) -> dict[str, AttributeValue]:
    if endpoint is None:
        return {}
    out: dict[str, AttributeValue] = {}
    if endpoint.service_name:
        out["peer.service"] = endpoint.service_name
    if endpoint.ipv4 or endpoint.ipv6:
        out["network.peer.address"] = endpoint.ipv4 or endpoint.ipv6
    if endpoint.port:
        out["network.peer.port"] = endpoint.port
    return out


class ZipkinFileParams(PluginParams):
    path: str  # a Zipkin v2 JSON file: a list of spans or of traces, or JSON lines


class ZipkinFileSource(TableSource):
    kind = "zipkin_file"
    Params = ZipkinFileParams
    params: ZipkinFileParams
    file_param = "path"
    format_name = "Zipkin JSON"

    @classmethod
    def sniff(cls, head: SpanFileHead) -> bool:
        """A list of spans or of traces whose first span has ``traceId`` and ``id``, or JSON lines of them; not
        Zipkin's v1 model (its annotations name an ``endpoint``; ``binaryAnnotations``), which has no
        ``localEndpoint`` and would read as spans of no service."""
        if not head.text or _V1.search(head.head):
            return False
        if head.keys:
            return {"traceId", "id"} <= head.keys
        start = _DOCUMENT_START.match(head.head)
        return start is not None and (start.group(2) == b"]" or bool(re.search(rb'"traceId"\s*:', head.head)))

    def _read(self, report: SourceReport, window: tuple[int, int] | None) -> SpanTable:
        path, file_report = self._file(report, self.params.path)
        return read_zipkin_file(path, file_report, report)
