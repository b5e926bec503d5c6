"""A Zipkin v2 JSON trace source, registered only in tests: a new span format is one module and one entry point.

Zipkin's v2 API (https://zipkin.io/zipkin-api/) exchanges a JSON array of spans: ``traceId``, ``id``,
``parentId``, ``name``, ``kind``, ``timestamp`` and ``duration`` in microseconds, ``localEndpoint.serviceName``
and string ``tags``, where ``error`` marks a failed span. ``tests/traces/test_detect.py`` registers it with
``DRILL_EXTRA_PLUGINS`` and hands ``drill traces analyze`` a Zipkin file.
"""

from __future__ import annotations

from typing import Any

from drill.api import PluginParams, SpanFileHead
from drill.rundir.files import loads_json, read_bytes
from drill.traces.sources import SourceReport, TableSource
from drill.traces.table import SpanTable, TableBuilder, kind_code


class ZipkinFileParams(PluginParams):
    path: str


class ZipkinFileSource(TableSource):
    kind = "test_zipkin_file"
    Params = ZipkinFileParams
    params: ZipkinFileParams
    file_param = "path"
    format_name = "Zipkin v2 JSON"

    @classmethod
    def sniff(cls, head: SpanFileHead) -> bool:
        """A JSON array whose first span has Zipkin's ``traceId``."""
        return head.text and head.head.lstrip()[:1] == b"[" and b'"traceId"' in head.head[:4096]

    def _read(self, report: SourceReport, window: tuple[int, int] | None) -> SpanTable:
        document = read_bytes(self._path(self.params.path), what="Zipkin JSON", root=self._root(self.params.path))
        builder = TableBuilder()
        for index, span in enumerate(loads_json(document)):
            try:
                _add(builder, span)
            except (KeyError, TypeError, ValueError) as exc:
                report.add_problem(f"{self.params.path}: span {index}", f"{type(exc).__name__}: {exc}")
        return builder.build()


def _add(builder: TableBuilder, span: dict[str, Any]) -> None:
    tags = {str(k): str(v) for k, v in (span.get("tags") or {}).items()}
    start_ns = int(span["timestamp"]) * 1000
    builder.add(
        trace_id=span["traceId"].lower().rjust(32, "0"),
        span_id=span["id"].lower(),
        parent_id=(span.get("parentId") or "").lower(),
        service=span["localEndpoint"]["serviceName"],
        name=span["name"],
        kind=kind_code(span.get("kind")),
        start_ns=start_ns,
        end_ns=start_ns + int(span.get("duration") or 0) * 1000,
        status=2 if "error" in tags else 0,
        status_message=tags.get("error"),
        attributes=tags,
    )
