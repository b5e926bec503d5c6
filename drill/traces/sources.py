"""Built-in trace sources (``drill.traces`` entry points): where a run's spans can be read from.

Every source gives a :class:`~drill.traces.table.SpanTable` (``table(window)``), keeps the plugin
interface's ``spans(window)`` generator of normalized dicts, and leaves a :class:`SourceReport` in
``source.report`` after each read: what it could not read, counted and located, never skipped silently.

``receiver``
    The spans the run's own OTLP receiver wrote to ``spans.jsonl`` (the default): one normalized span
    per JSON line (:mod:`drill.traces.otlp`), decoded with msgspec into typed structs, in blocks.
``otlp_file``
    An OpenTelemetry Collector ``file`` exporter's output: one OTLP/JSON ``TracesData`` per line
    (:mod:`drill.traces.otlp`: hex or base64 ids, times as strings or numbers, Tempo's ``batches``).
``otlp_proto_file``
    OTLP protobuf files (:func:`drill.traces.otlp.read_proto_file` documents the framing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, Iterator

import msgspec
import numpy as np

from drill.api import PluginParams, TraceSource
from drill.jsonl import BadLine, ReadReport
from drill.traces.table import KIND_NAMES, STATUS_NAMES, SpanTable, kind_code, status_code

__all__ = ["OtlpFileSource", "OtlpProtoFileSource", "ReceiverSource", "SourceReport", "TableSource",
           "read_receiver_file", "table_to_dicts"]

#: How many located problems a report keeps verbatim (all are counted).
KEPT_PROBLEMS = 20
#: Bytes decoded at once by the JSON-lines readers (whole lines).
BLOCK_BYTES = 8 * 1024 * 1024


@dataclass
class SourceReport:
    """One read of one trace source: the spans it gave, the files it read, what it could not use.

    A file source keeps one :class:`~drill.jsonl.ReadReport` per file (bad lines, a torn last line); a
    source that is not a file (Jaeger's query API) records each response it could not use as a located
    problem (``url: reason``).
    """

    source: str                                            # the source's kind, e.g. "otlp_file"
    spans: int = 0
    files: list[ReadReport] = field(default_factory=list)
    problems: int = 0                                      # unreadable records that are not file lines
    problem_where: list[str] = field(default_factory=list)  # the first KEPT_PROBLEMS of them, located

    def file(self, path: Path) -> ReadReport:
        """A new ReadReport for ``path``, kept in :attr:`files`."""
        report = ReadReport(path)
        self.files.append(report)
        return report

    def add_problem(self, where: str, reason: str) -> None:
        self.problems += 1
        if len(self.problem_where) < KEPT_PROBLEMS:
            self.problem_where.append(f"{where}: {reason}")

    @property
    def unreadable(self) -> int:
        """Records that could not be read: bad lines, torn last lines and other problems."""
        lines = sum(r.bad_count + (r.torn_last_line is not None) for r in self.files)
        return lines + self.problems

    @property
    def where(self) -> tuple[str, ...]:
        """``file:line: reason`` / ``url: reason`` of (the first of) what could not be read."""
        out: list[str] = []
        for report in self.files:
            out += [bad.where(report.path) for bad in report.bad_lines]
            if report.torn_last_line is not None:
                out.append(report.torn_last_line.where(report.path) + " (torn last line)")
        return tuple(out + self.problem_where)

    @property
    def missing(self) -> tuple[str, ...]:
        """Files that did not exist."""
        return tuple(str(r.path) for r in self.files if not r.exists)

    def describe(self) -> str:
        if not self.unreadable:
            return f"{self.source}: {self.spans} spans, everything read"
        return f"{self.source}: {self.spans} spans, {self.unreadable} unreadable record(s) (first: {self.where[0]})"

    def to_json(self) -> dict:
        return {"source": self.source, "spans": self.spans, "unreadable": self.unreadable,
                "where": list(self.where), "files": [r.to_json() for r in self.files]}


class TableSource(TraceSource):
    """A trace source that reads into a :class:`SpanTable`; ``spans()`` yields the same rows as dicts."""

    def __init__(self, params: Any, run_dir: str) -> None:
        super().__init__(params, run_dir)
        self.report = SourceReport(self.kind)

    def table(self, window: tuple[int, int] | None = None) -> SpanTable:
        """The spans overlapping ``window`` (UNIX ns; None: all); ``self.report`` says what was not read."""
        self.report = SourceReport(self.kind)
        table = self._read(self.report, window).in_window(window)
        self.report.spans = len(table)
        return table

    def spans(self, window: tuple[int, int] | None = None) -> Iterator[dict]:
        yield from table_to_dicts(self.table(window))

    def _read(self, report: SourceReport, window: tuple[int, int] | None) -> SpanTable:
        raise NotImplementedError

    def _path(self, path: str) -> Path:
        resolved = Path(path).expanduser()
        return resolved if resolved.is_absolute() else Path(self.run_dir) / resolved


def table_to_dicts(table: SpanTable) -> Iterator[dict]:
    """The rows of ``table`` as normalized span dicts (the plugin interface's shape)."""
    for row in range(len(table)):
        span = table.span(row)
        yield {"trace_id": span.trace_id, "span_id": span.span_id, "parent_span_id": span.parent_id or None,
               "name": span.name, "kind": span.kind, "service": span.service, "start_ns": span.start_ns,
               "end_ns": span.end_ns, "duration_ms": span.duration_ms,
               "status": {"code": span.status, "message": span.status_message}, "attributes": span.attributes}


# --- the receiver's spans.jsonl ----------------------------------------------------------------------

class _Status(msgspec.Struct, gc=False):
    code: str | int = "UNSET"
    message: str | None = None


class _ReceiverSpan(msgspec.Struct, gc=False):
    """One line of spans.jsonl; the keys the table does not keep (resource, events, ...) are skipped."""

    trace_id: str
    span_id: str
    start_ns: int
    end_ns: int
    parent_span_id: str | None = None
    name: str = ""
    kind: str | int = "UNSPECIFIED"
    service: str = "unknown"
    status: _Status | None = None
    attributes: dict[str, Any] = msgspec.field(default_factory=dict)


_RECEIVER_DECODER = msgspec.json.Decoder(_ReceiverSpan)
_NO_STATUS = _Status()


def decode_json_lines(path: Path, decoder: msgspec.json.Decoder, report: ReadReport) -> Iterator[list]:
    """Blocks of decoded lines of ``path``; unreadable lines are counted and located in ``report``.

    A block (whole lines, about :data:`BLOCK_BYTES`) is decoded at once; a block with a bad line is
    decoded again line by line so that every bad line is counted with its number, as
    :func:`drill.jsonl.read_jsonl` does (a torn last line without its newline is ``torn_last_line``).
    """
    if not path.exists():
        report.exists = False
        return
    first_line = 1
    with path.open("rb") as fh:
        rest = b""
        while True:
            chunk = fh.read(BLOCK_BYTES)
            block = rest + chunk
            if not chunk:
                if block:
                    yield _decode_block(block, first_line, decoder, report)
                return
            cut = block.rfind(b"\n") + 1
            block, rest = block[:cut], block[cut:]
            if block:
                yield _decode_block(block, first_line, decoder, report)
                first_line += block.count(b"\n")


def _decode_block(block: bytes, first_line: int, decoder: msgspec.json.Decoder, report: ReadReport) -> list:
    try:
        items = decoder.decode_lines(block)
    except (msgspec.DecodeError, msgspec.ValidationError):
        items = _decode_lines_one_by_one(block, first_line, decoder, report)
    else:
        report.lines_read += len(items)
    return items


def _decode_lines_one_by_one(block: bytes, first_line: int, decoder: msgspec.json.Decoder,
                             report: ReadReport) -> list:
    items = []
    lines = block.split(b"\n")
    torn = not block.endswith(b"\n")
    for offset, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            items.append(decoder.decode(line))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            bad = BadLine(first_line + offset, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200])
            if torn and offset == len(lines) - 1:
                report.torn_last_line = bad
            else:
                report.add_bad(bad)
            continue
        report.lines_read += 1
    return items


def read_receiver_file(path: Path, report: ReadReport | None = None) -> SpanTable:
    """The spans of a receiver ``spans.jsonl`` as a table; bad lines are counted in ``report``."""
    report = report if report is not None else ReadReport(path)
    tables = [_receiver_table(block) for block in decode_json_lines(path, _RECEIVER_DECODER, report) if block]
    return SpanTable.concat(tables)


_KIND_OF = {**{name: code for code, name in enumerate(KIND_NAMES)}}
_STATUS_OF = {**{name: code for code, name in enumerate(STATUS_NAMES)}}


def _code(table: dict, value: Any, slow) -> int:
    code = table.get(value)
    return slow(value) if code is None else code


def _receiver_table(spans: list[_ReceiverSpan]) -> SpanTable:
    n = len(spans)
    statuses = [s.status or _NO_STATUS for s in spans]
    kind_of, status_of = _KIND_OF, _STATUS_OF
    kinds = [kind_of.get(k, -1) for k in map(attrgetter("kind"), spans)]
    if -1 in kinds:
        kinds = [kind_code(s.kind) for s in spans]
    codes = [status_of.get(c, -1) for c in map(attrgetter("code"), statuses)]
    if -1 in codes:
        codes = [status_code(s.code) for s in statuses]
    return SpanTable.from_columns(
        trace_id=list(map(attrgetter("trace_id"), spans)), span_id=list(map(attrgetter("span_id"), spans)),
        parent_id=[p or "" for p in map(attrgetter("parent_span_id"), spans)],
        service=list(map(attrgetter("service"), spans)), name=list(map(attrgetter("name"), spans)),
        kind=np.fromiter(kinds, dtype=np.int8, count=n),
        start_ns=np.fromiter(map(attrgetter("start_ns"), spans), dtype=np.int64, count=n),
        end_ns=np.fromiter(map(attrgetter("end_ns"), spans), dtype=np.int64, count=n),
        status=np.fromiter(codes, dtype=np.int8, count=n),
        status_message=list(map(attrgetter("message"), statuses)),
        attributes=list(map(attrgetter("attributes"), spans)))


class ReceiverParams(PluginParams):
    file: str = "spans.jsonl"


class ReceiverSource(TableSource):
    kind = "receiver"
    Params = ReceiverParams

    def _read(self, report: SourceReport, window: tuple[int, int] | None) -> SpanTable:
        return read_receiver_file(self._path(self.params.file), report.file(self._path(self.params.file)))


# --- OTLP files -------------------------------------------------------------------------------------

class OtlpFileParams(PluginParams):
    path: str


class OtlpFileSource(TableSource):
    kind = "otlp_file"
    Params = OtlpFileParams

    def _read(self, report: SourceReport, window: tuple[int, int] | None) -> SpanTable:
        from drill.traces.otlp import read_json_file

        path = self._path(self.params.path)
        return read_json_file(path, report.file(path))


class OtlpProtoFileParams(PluginParams):
    path: str


class OtlpProtoFileSource(TableSource):
    kind = "otlp_proto_file"
    Params = OtlpProtoFileParams

    def _read(self, report: SourceReport, window: tuple[int, int] | None) -> SpanTable:
        from drill.traces.otlp import read_proto_file

        path = self._path(self.params.path)
        return read_proto_file(path, report.file(path))
