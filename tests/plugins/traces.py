"""A Zipkin v1 JSON trace source, registered only in tests: a new span format is one module and one entry point.

Zipkin's v1 API (https://zipkin.io/zipkin-api/zipkin-api.yaml) exchanges a JSON array of spans without a local
endpoint: ``traceId``, ``id``, ``parentId``, ``name``, ``timestamp`` and ``duration`` in microseconds, and
``annotations`` (``cs``/``sr``/``ss``/``cr``) and ``binaryAnnotations`` that each name the ``endpoint`` (the
service) they were recorded on; an ``error`` binary annotation marks a failed span. The built-in ``zipkin_file``
reads v2 and leaves v1 alone. ``tests/traces/test_detect.py`` registers this one with ``DRILL_EXTRA_PLUGINS`` and
hands ``drill traces analyze`` a v1 file.
"""

from __future__ import annotations

from typing import Any

from drill.api import PluginParams, SpanFileHead
from drill.rundir.files import loads_json, read_bytes
from drill.traces.sources import SourceReport, TableSource
from drill.traces.table import SpanTable, TableBuilder, kind_code

_KIND_OF = {"sr": "SERVER", "cs": "CLIENT"}


class ZipkinV1FileParams(PluginParams):
    path: str


class ZipkinV1FileSource(TableSource):
    kind = "test_zipkin_v1_file"
    Params = ZipkinV1FileParams
    params: ZipkinV1FileParams
    file_param = "path"
    format_name = "Zipkin v1 JSON"

    @classmethod
    def sniff(cls, head: SpanFileHead) -> bool:
        """A JSON array whose first span has Zipkin's ``traceId`` and annotations with an ``endpoint``."""
        return head.text and head.head.lstrip()[:1] == b"[" and b'"traceId"' in head.head and b'"endpoint"' in head.head

    def _read(self, report: SourceReport, window: tuple[int, int] | None) -> SpanTable:
        document = read_bytes(self._path(self.params.path), what="Zipkin JSON", root=self._root(self.params.path))
        builder = TableBuilder()
        for index, span in enumerate(loads_json(document)):
            try:
                _add(builder, span)
            except (KeyError, TypeError, ValueError, StopIteration) as exc:
                report.add_problem(f"{self.params.path}: span {index}", f"{type(exc).__name__}: {exc}")
        return builder.build()


def _add(builder: TableBuilder, span: dict[str, Any]) -> None:
    notes = {a["value"]: a for a in span.get("annotations") or []}
    side = next(value for value in ("sr", "cs") if value in notes)  # the span's own side: served, else called
    tags = {str(b["key"]): str(b["value"]) for b in span.get("binaryAnnotations") or []}
    start_ns = int(span["timestamp"]) * 1000
    builder.add(
        trace_id=span["traceId"].lower().rjust(32, "0"),
        span_id=span["id"].lower(),
        parent_id=(span.get("parentId") or "").lower(),
        service=notes[side]["endpoint"]["serviceName"],
        name=span["name"],
        kind=kind_code(_KIND_OF[side]),
        start_ns=start_ns,
        end_ns=start_ns + int(span.get("duration") or 0) * 1000,
        status=2 if "error" in tags else 0,
        status_message=tags.get("error"),
        attributes=tags,
    )
