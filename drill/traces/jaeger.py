"""Jaeger trace sources (``drill.traces`` entry points): the UI's JSON files and the HTTP query API.

Both read Jaeger's JSON model (``model/json`` in jaegertracing/jaeger; the UI's "download"/"upload"
file and the query API wrap it as ``{"data": [trace, ...]}``):

- a trace is ``{"traceID", "spans": [...], "processes": {"p1": {"serviceName", "tags"}}}``;
- a span has ``traceID``, ``spanID``, ``operationName``, ``references`` (``CHILD_OF`` is the parent;
  ``FOLLOWS_FROM`` is used when there is no ``CHILD_OF``; a reference into another trace is a link,
  not a parent), ``startTime`` and ``duration`` in **µs**, ``tags`` (``{key, type, value}``, type
  ``string|bool|int64|float64|binary``), and ``processID`` into the trace's ``processes``;
- the kind is the ``span.kind`` tag; the status is ``otel.status_code`` (+ ``otel.status_description``)
  when converted from OTLP, else ERROR when the ``error`` tag is true. Those tags become the table's
  kind and status and are not kept as attributes.

Ids are lowercased and left-padded with zeros (older Jaeger clients use 64-bit trace ids). A span that
cannot be read (a missing id, a non-integer time) is counted and located (``file: data[i].spans[j]:
reason``), never dropped silently; a file that is not Jaeger JSON at all is an input error.

``jaeger_file``
    A Jaeger JSON file (or a directory of them).
``jaeger_api``
    Jaeger's query API (``/api/services``, then ``/api/traces?service=&start=&end=&limit=`` per
    service, times in µs) for a time window: every service of the window unless ``services`` names
    some. A trace found under several services is read once. A service whose answer holds ``limit``
    traces may have more: that is noted in the source's report.
"""

from __future__ import annotations

import base64
import binascii
import time
from typing import Any

import httpx
import msgspec

from drill.api import PluginParams, SpanFileHead
from drill.errors import InputError, TargetError
from drill.rundir.files import MAX_DOCUMENT_BYTES, UnsafeFileError, read_bytes
from drill.traces.sources import SourceReport, TableSource
from drill.traces.table import AttributeValue, SpanTable, TableBuilder, hex_id, kind_code

__all__ = ["JaegerApiSource", "JaegerFileSource", "read_jaeger_document"]

_CONVERSION_TAGS = frozenset({"span.kind", "otel.status_code", "otel.status_description", "error"})


class _Tag(msgspec.Struct):
    key: str
    type: str = "string"
    value: AttributeValue = None


class _Reference(msgspec.Struct, rename={"ref_type": "refType", "trace_id": "traceID", "span_id": "spanID"}):
    ref_type: str = "CHILD_OF"
    trace_id: str = ""
    span_id: str = ""


class _Process(msgspec.Struct, rename={"service_name": "serviceName"}):
    service_name: str = "unknown"
    tags: list[_Tag] = []


class _Span(
    msgspec.Struct,
    rename={
        "trace_id": "traceID",
        "span_id": "spanID",
        "operation_name": "operationName",
        "start_time": "startTime",
        "process_id": "processID",
    },
):
    trace_id: str
    span_id: str
    start_time: int
    duration: int
    operation_name: str = ""
    references: list[_Reference] | None = None
    tags: list[_Tag] | None = None
    process_id: str = ""
    process: _Process | None = None  # some exports embed the process in each span


class _Trace(msgspec.Struct, rename={"trace_id": "traceID"}):
    trace_id: str = ""
    spans: list[msgspec.Raw] = []
    processes: dict[str, _Process] = {}


class _ApiError(msgspec.Struct, rename={"trace_id": "traceID"}):
    code: int = 0
    msg: str = ""
    trace_id: str = ""


class _Document(msgspec.Struct):
    data: list[_Trace] | None = None
    errors: list[_ApiError] | None = None


_DOCUMENT = msgspec.json.Decoder(_Document)
_SPAN = msgspec.json.Decoder(_Span)
_SERVICES = msgspec.json.Decoder(dict)


def _tag_value(tag: _Tag) -> Any:
    if tag.type == "binary" and isinstance(tag.value, str):
        try:
            return base64.b64decode(tag.value).hex()
        except binascii.Error:
            return tag.value
    if tag.type == "int64" and isinstance(tag.value, str):
        return int(tag.value)
    if tag.type == "float64" and isinstance(tag.value, str):
        return float(tag.value)
    return tag.value


def _parent(span: _Span, trace_id: str) -> str:
    refs = span.references or []
    for wanted in ("CHILD_OF", "FOLLOWS_FROM"):
        for ref in refs:
            if ref.ref_type == wanted and ref.span_id and (not ref.trace_id or hex_id(ref.trace_id, 32) == trace_id):
                return hex_id(ref.span_id, 16)
    return ""


def _status(tags: dict[str, Any]) -> tuple[int, str | None]:
    code = str(tags.get("otel.status_code", "")).upper()
    message = tags.get("otel.status_description")
    if code == "ERROR" or (not code and tags.get("error") in (True, "true", "True", 1)):
        return 2, None if message is None else str(message)
    return (1 if code == "OK" else 0), None


def _add_span(span: _Span, processes: dict[str, _Process], builder: TableBuilder) -> None:
    trace_id = hex_id(span.trace_id, 32)
    tags = {tag.key: _tag_value(tag) for tag in span.tags or ()}
    process = span.process or processes.get(span.process_id)
    if process is None:
        raise ValueError(f"processID {span.process_id!r} is not in the trace's processes")
    status, message = _status(tags)
    start_ns = span.start_time * 1000
    builder.add(
        trace_id,
        hex_id(span.span_id, 16),
        _parent(span, trace_id),
        process.service_name,
        span.operation_name,
        kind_code(str(tags.get("span.kind", "")).lower()),
        start_ns,
        start_ns + span.duration * 1000,
        status,
        message,
        {k: v for k, v in tags.items() if k not in _CONVERSION_TAGS},
    )


def read_jaeger_document(
    body: bytes, where: str, report: SourceReport, builder: TableBuilder, seen: set[str] | None = None
) -> int:
    """Add the spans of one Jaeger JSON document to ``builder``; returns how many traces it held.

    Raises :class:`ValueError` when ``body`` is not Jaeger JSON at all; a span or trace that cannot be
    read, and every entry of the API's ``errors``, is a located problem in ``report``. Traces whose id
    is in ``seen`` are skipped (already read), and new ones are added to it.
    """
    try:
        document = _DOCUMENT.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
        raise ValueError(f'not Jaeger JSON ({{"data": [trace, ...]}}): {exc}') from exc
    for error in document.errors or ():
        report.add_problem(
            where, f"Jaeger error {error.code}: {error.msg}" + (f" (trace {error.trace_id})" if error.trace_id else "")
        )
    traces = document.data or []
    for t, trace in enumerate(traces):
        key = trace.trace_id.strip().lower().zfill(32)
        if seen is not None and trace.trace_id:
            if key in seen:
                continue
            seen.add(key)
        for s, raw in enumerate(trace.spans):
            mark = len(builder)
            try:
                _add_span(_SPAN.decode(raw), trace.processes, builder)
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError, RecursionError) as exc:
                builder.truncate(mark)
                report.add_problem(f"{where}: data[{t}].spans[{s}]", f"{type(exc).__name__}: {exc}"[:200])
    return len(traces)


# --- Jaeger JSON files --------------------------------------------------------------------------------


class JaegerFileParams(PluginParams):
    path: str  # a Jaeger JSON file, or a directory of *.json files


class JaegerFileSource(TableSource):
    kind = "jaeger_file"
    Params = JaegerFileParams
    params: JaegerFileParams
    file_param = "path"
    format_name = "Jaeger JSON"

    @classmethod
    def sniff(cls, head: SpanFileHead) -> bool:
        """A Jaeger UI download (``data``: a list of traces) or one trace of it (``traceID``)."""
        return bool(head.keys & {"data", "traceID"})

    def _read(self, report: SourceReport, window: tuple[int, int] | None) -> SpanTable:
        path = self._path(self.params.path)
        if not path.exists():
            raise InputError(f"{path}: no such Jaeger JSON file or directory")
        files = sorted(path.glob("*.json")) if path.is_dir() else [path]
        builder = TableBuilder()
        seen: set[str] = set()
        for file in files:
            document = read_bytes(file, limit=MAX_DOCUMENT_BYTES, what="Jaeger JSON", root=self._root(self.params.path))
            try:
                read_jaeger_document(document, str(file), report, builder, seen)
            except UnsafeFileError:
                raise
            except ValueError as exc:
                raise InputError(f"{file}: {exc}") from exc
        return builder.build()


# --- Jaeger's HTTP query API ----------------------------------------------------------------------------


class JaegerApiParams(PluginParams):
    url: str = "http://127.0.0.1:16686"  # the query service (UI) base URL
    services: list[str] | None = None  # None: every service Jaeger lists
    limit: int = 10_000  # traces per service query
    timeout_s: float = 30.0
    lookback_s: float = 3600.0  # the window when none is given: the last lookback_s


class JaegerApiSource(TableSource):
    kind = "jaeger_api"
    Params = JaegerApiParams
    params: JaegerApiParams

    def _read(self, report: SourceReport, window: tuple[int, int] | None) -> SpanTable:
        start_us, end_us = self._window_us(window)
        builder = TableBuilder()
        seen: set[str] = set()
        with httpx.Client(base_url=self.params.url.rstrip("/"), timeout=self.params.timeout_s) as client:
            for service in self.params.services or self._services(client):
                self._query(client, service, start_us, end_us, report, builder, seen)
        return builder.build()

    def _window_us(self, window: tuple[int, int] | None) -> tuple[int, int]:
        if window is not None:
            return window[0] // 1000, -(-window[1] // 1000)

        end = int(time.time() * 1e6)
        return end - int(self.params.lookback_s * 1e6), end

    def _services(self, client: httpx.Client) -> list[str]:
        try:
            response = client.get("/api/services")
            response.raise_for_status()
            data = _SERVICES.decode(response.content).get("data") or []
        except (httpx.HTTPError, msgspec.DecodeError) as exc:
            raise TargetError(
                f"cannot list Jaeger's services at {self.params.url}/api/services: {exc}",
                hint="is the Jaeger query service running there?",
            ) from exc
        return sorted(str(s) for s in data)

    def _query(
        self,
        client: httpx.Client,
        service: str,
        start_us: int,
        end_us: int,
        report: SourceReport,
        builder: TableBuilder,
        seen: set[str],
    ) -> None:
        params: dict[str, str | int] = {
            "service": service,
            "start": start_us,
            "end": end_us,
            "limit": self.params.limit,
        }
        where = f"{self.params.url}/api/traces?service={service}"
        try:
            response = client.get("/api/traces", params=params)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            report.add_problem(where, f"{type(exc).__name__}: {exc}"[:200])
            return
        try:
            traces = read_jaeger_document(response.content, where, report, builder, seen)
        except ValueError as exc:
            report.add_problem(where, str(exc)[:200])
            return
        if traces >= self.params.limit:
            report.notes.append(
                f"{service}: {traces} traces, the query limit; older traces of the window may be missing (raise limit)"
            )
