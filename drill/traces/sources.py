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

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import IO, Annotated, Any, Literal

import msgspec
import numpy as np

from drill.api import PluginParams, SpanFileHead, TraceSource
from drill.rundir.files import MAX_LINE_BYTES, open_input
from drill.rundir.jsonl import BadLine, ReadReport, unreadable_reason
from drill.traces.otlp import read_json_file, read_proto_file
from drill.traces.request_phases import with_phase_spans
from drill.traces.table import (
    KIND_NAMES,
    NS_RANGE,
    STATUS_NAMES,
    AttributeValue,
    SpanTable,
    intern_codes,
    kind_code,
    status_code,
)

__all__ = [
    "OtlpFileSource",
    "OtlpProtoFileSource",
    "ReceiverSource",
    "SourceReport",
    "TableSource",
    "read_receiver_file",
    "table_to_dicts",
]

#: How many located problems a report keeps verbatim (all are counted).
KEPT_PROBLEMS = 20
#: Bytes decoded at once by the JSON-lines readers (whole lines). A block's decoded objects (about twice its size)
#: are read into the table's columns right after it is decoded: at 256 KiB they are still in a core's L2 cache, and
#: the reader takes about 15% less CPU time than with 1 MiB blocks (``bench/trace_reader.py``).
BLOCK_BYTES = 256 * 1024


@dataclass
class SourceReport:
    """One read of one trace source: the spans it gave, the files it read, what it could not use.

    A file source keeps one :class:`~drill.rundir.jsonl.ReadReport` per file (bad lines, a torn last line); a
    source that is not a file (Jaeger's query API) records each response it could not use as a located
    problem (``url: reason``).
    """

    source: str  # the source's kind, e.g. "otlp_file"
    spans: int = 0
    files: list[ReadReport] = field(default_factory=list)
    problems: int = 0  # unreadable records that are not file lines
    problem_where: list[str] = field(default_factory=list)  # the first KEPT_PROBLEMS of them, located
    notes: list[str] = field(default_factory=list)  # e.g. a query limit reached: maybe incomplete

    def file(self, path: Path, root: Path | None = None) -> ReadReport:
        """A new ReadReport for ``path`` (a file of the run directory ``root``, if given), kept in :attr:`files`."""
        report = ReadReport(path, root=root)
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
        return {
            "source": self.source,
            "spans": self.spans,
            "unreadable": self.unreadable,
            "where": list(self.where),
            "files": [r.to_json() for r in self.files],
            "notes": list(self.notes),
        }


class TableSource(TraceSource):
    """A trace source that reads into a :class:`SpanTable`; ``spans()`` yields the same rows as dicts."""

    def __init__(self, params: Any, run_dir: str) -> None:
        super().__init__(params, run_dir)
        self.report = SourceReport(self.kind)

    def table(self, window: tuple[int, int] | None = None) -> SpanTable:
        """The spans overlapping ``window`` (UNIX ns; None: all); ``self.report`` says what was not read.

        The phases of vLLM's ``llm_request`` spans come as child spans (:mod:`drill.traces.request_phases`), derived
        here from the span's attributes; the report's note says how many.
        """
        self.report = SourceReport(self.kind)
        table = self._read(self.report, window).in_window(window)
        self.report.spans = len(table)
        table, derived = with_phase_spans(table)
        if derived:
            self.report.notes.append(
                f"{derived} phase span(s) (queue/prefill/decode) derived from llm_request's gen_ai.latency.* attributes"
            )
        return table

    def spans(self, window: tuple[int, int] | None = None) -> Iterator[dict]:
        yield from table_to_dicts(self.table(window))

    def _read(self, report: SourceReport, window: tuple[int, int] | None) -> SpanTable:
        raise NotImplementedError

    def _path(self, path: str) -> Path:
        resolved = Path(path).expanduser()
        return resolved if resolved.is_absolute() else Path(self.run_dir) / resolved

    def _root(self, path: str) -> Path | None:
        """The run directory when ``path`` is relative: it names a file of the run directory, which is opened
        inside it, following no link (:func:`drill.rundir.files.open_input`); None for an absolute path."""
        return None if Path(path).expanduser().is_absolute() else Path(self.run_dir)

    def _file(self, report: SourceReport, path: str) -> tuple[Path, ReadReport]:
        """The file ``path`` names and its report (see :meth:`_root`)."""
        return self._path(path), report.file(self._path(path), root=self._root(path))


def table_to_dicts(table: SpanTable) -> Iterator[dict]:
    """The rows of ``table`` as normalized span dicts (the plugin interface's shape)."""
    for row in range(len(table)):
        span = table.span(row)
        yield {
            "trace_id": span.trace_id,
            "span_id": span.span_id,
            "parent_span_id": span.parent_id or None,
            "name": span.name,
            "kind": span.kind,
            "service": span.service,
            "start_ns": span.start_ns,
            "end_ns": span.end_ns,
            "duration_ms": span.duration_ms,
            "status": {"code": span.status, "message": span.status_message},
            "attributes": span.attributes,
        }


# --- the receiver's spans.jsonl ----------------------------------------------------------------------


class _Status(msgspec.Struct, gc=False, frozen=True):
    code: str | int = "UNSET"
    message: str | None = None


_NO_STATUS = _Status()


#: A span time as the table holds it (signed 64-bit ns): a larger one makes its line unreadable, counted.
_Ns = Annotated[int, msgspec.Meta(ge=NS_RANGE[0], le=NS_RANGE[1])]


class _SpanLine(msgspec.Struct, gc=False):
    """One line of spans.jsonl, less its kind and status; the keys the table does not keep (resource, events, ...)
    are skipped."""

    trace_id: str
    span_id: str
    start_ns: _Ns
    end_ns: _Ns
    parent_span_id: str | None = None
    name: str = ""
    service: str = "unknown"
    attributes: dict[str, AttributeValue] = msgspec.field(default_factory=dict)


class _ReceiverSpan(_SpanLine):
    """One line of spans.jsonl, any spelling of its kind and status."""

    kind: str | int = "UNSPECIFIED"
    status: _Status | None = _NO_STATUS  # None only for an explicit null


#: The kind and status names the receiver writes (:data:`~drill.traces.table.KIND_NAMES`, ``STATUS_NAMES``) as
#: literals: msgspec hands back its one string per name instead of a new string per span, and the code lookups
#: that follow hash nothing.
_KindName = Literal["UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER"]
_StatusName = Literal["UNSET", "OK", "ERROR"]


class _WrittenStatus(msgspec.Struct, gc=False, frozen=True):
    code: _StatusName | int = "UNSET"
    message: str | None = None


class _WrittenSpan(_SpanLine):
    """One line as the receiver writes it: the kind and status code among the names the receiver writes, and a
    status object. A block with any other line is decoded as :class:`_ReceiverSpan`."""

    kind: _KindName | int = "UNSPECIFIED"
    status: _WrittenStatus = _WrittenStatus()


class LineDecoder:
    """Decodes blocks of JSON lines with the first of ``decoders`` (narrowest first) that reads the whole block.

    A narrow decoder that fails once is not tried again on that file: a file written by another tool fails it on
    every block, and would be decoded twice.
    """

    def __init__(self, *decoders: msgspec.json.Decoder) -> None:
        self.decoders = list(decoders)

    def decode_lines(self, block: memoryview) -> list:
        """The block's lines decoded; raises the widest decoder's error when even it cannot read them all."""
        while len(self.decoders) > 1:
            try:
                return self.decoders[0].decode_lines(block)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                del self.decoders[0]
        return self.decoders[0].decode_lines(block)

    def decode(self, line: bytes) -> Any:
        """One line, by the widest decoder."""
        return self.decoders[-1].decode(line)


def _receiver_decoder() -> LineDecoder:
    return LineDecoder(msgspec.json.Decoder(_WrittenSpan), msgspec.json.Decoder(_ReceiverSpan))


def decode_json_lines(
    path: Path, decoder: msgspec.json.Decoder | LineDecoder, report: ReadReport
) -> Iterator[tuple[list, int]]:
    """Blocks of decoded lines of ``path`` with their size in bytes; unreadable lines are counted and
    located in ``report``.

    The file is read into one reusable buffer; each block of whole lines (about :data:`BLOCK_BYTES`;
    a longer line grows the buffer) is decoded at once. A block with a bad line is decoded again line
    by line so that every bad line is counted with its number, as :func:`drill.rundir.jsonl.read_jsonl` does
    (a torn last line without its newline is ``torn_last_line``).
    """
    fh = report.open_input(path)
    if fh is None:
        return
    buffer = bytearray(BLOCK_BYTES)
    kept, offset = 0, 0  # bytes of a partial line at the buffer's start; its file offset
    with fh:
        while True:
            if kept == len(buffer):  # one line longer than the buffer
                if kept >= MAX_LINE_BYTES:
                    offset += _skip_long_line(fh, path, offset, kept, report)
                    kept = 0
                    continue
                buffer.extend(bytes(len(buffer)))
            with memoryview(buffer) as view:
                read = fh.readinto(view[kept:])
                end = kept + read
                cut = buffer.rfind(b"\n", 0, end) + 1 if read else end
                if cut:
                    yield _decode_block(path, view[:cut], offset, decoder, report), cut
            if not read:
                return
            offset += cut
            buffer[: end - cut] = buffer[cut:end]
            kept = end - cut


def _skip_long_line(fh: IO[bytes], path: Path, offset: int, kept: int, report: ReadReport) -> int:
    """Drop the rest of a line over :data:`~drill.rundir.files.MAX_LINE_BYTES` (counted as a bad line, or
    the torn last line); returns its size in bytes."""
    number = _line_number(path, offset, report.root)
    size, newline = kept, False
    while True:
        chunk = fh.readline(BLOCK_BYTES)
        if not chunk:
            break
        size += len(chunk)
        if chunk.endswith(b"\n"):
            newline = True
            break
    bad = BadLine(number, f"line of {size} bytes skipped: longer than the {MAX_LINE_BYTES}-byte cap on one line")
    if newline:
        report.add_bad(bad)
    else:
        report.torn_last_line = bad
    return size


def _decode_block(
    path: Path, block: memoryview, offset: int, decoder: msgspec.json.Decoder | LineDecoder, report: ReadReport
) -> list:
    try:
        items = decoder.decode_lines(block)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        items = _decode_lines_one_by_one(bytes(block), _line_number(path, offset, report.root), decoder, report)
    else:
        report.lines_read += len(items)
    return items


def _line_number(path: Path, offset: int, root: Path | None = None) -> int:
    """1-based number of the line starting at byte ``offset`` (only counted when a block has a bad line)."""
    lines, done = 1, 0
    with open_input(path, root=root) as fh:
        while done < offset:
            data = fh.read(min(BLOCK_BYTES, offset - done))
            if not data:
                break
            lines += data.count(b"\n")
            done += len(data)
    return lines


def _decode_lines_one_by_one(
    block: bytes, first_line: int, decoder: msgspec.json.Decoder | LineDecoder, report: ReadReport
) -> list:
    items = []
    lines = block.split(b"\n")
    torn = not block.endswith(b"\n")
    for offset, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            items.append(decoder.decode(line))
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            bad = BadLine(first_line + offset, unreadable_reason(exc))
            if torn and offset == len(lines) - 1:
                report.torn_last_line = bad
            else:
                report.add_bad(bad)
            continue
        report.lines_read += 1
    return items


def read_receiver_file(path: Path, report: ReadReport | None = None) -> SpanTable:
    """The spans of a receiver ``spans.jsonl`` as a table; bad lines are counted in ``report``.

    Decoded block by block into typed structs, whose fields go straight into numpy columns with
    C-level ``map``/``attrgetter`` passes (no per-span Python code on the common path). Ids are
    lower-cased where they are not already. Lines as the receiver writes them are decoded with its kind and
    status names as literals (:class:`_WrittenSpan`); another spelling, an explicit null status or a bad line
    sends the file, from that block on, to the general decoder (:class:`LineDecoder`).
    """
    report = report if report is not None else ReadReport(path)
    columns = _ReceiverColumns(path.stat().st_size if path.is_file() else 0)
    for block, size in decode_json_lines(path, _receiver_decoder(), report):
        columns.add(block, size)
    return columns.build()


_KIND_OF = {name: code for code, name in enumerate(KIND_NAMES)}
_STATUS_OF = {name: code for code, name in enumerate(STATUS_NAMES)}
_GET = {
    name: attrgetter(name)
    for name in (
        "trace_id",
        "span_id",
        "parent_span_id",
        "service",
        "name",
        "kind",
        "start_ns",
        "end_ns",
        "status",
        "attributes",
        "code",  # of a status
        "message",
    )
}


def _lowercase(ids: list[str]) -> tuple[list[str], str]:
    """``ids`` with upper-case hex lowered (the receiver writes lower case; a hand-written file may not), and
    all of them joined."""
    joined = "".join(ids)
    lowered = joined.lower()
    return ([i.lower() for i in ids] if joined != lowered else ids), lowered


def _hex_values(ids: list[str], joined: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The 64-bit values of ``ids`` (``joined`` is them joined) and a mask of the non-empty ones, when every
    non-empty id is 16 hex characters; else None. One ``bytes.fromhex`` of the block, not a pass per id."""
    lengths = list(map(len, ids))
    present = len(ids) - lengths.count(0)
    if lengths.count(16) != present:
        return None
    try:
        raw = bytes.fromhex(joined)
    except ValueError:  # not hex
        return None
    if len(raw) != 8 * present:  # fromhex skips whitespace between pairs of digits
        return None
    values = np.frombuffer(raw, dtype=">u8").astype(np.uint64)
    if present == len(ids):
        return values, np.ones(len(ids), dtype=bool)
    has = np.asarray(lengths, dtype=bool)
    out = np.zeros(len(ids), dtype=np.uint64)
    out[has] = values
    return out, has


def _known_codes(out: np.ndarray, field: Callable[[Any], str], spans: list, names: dict[str, int]) -> None:
    """``out`` filled with the codes of each span's ``field`` in ``names``: one C-level pass when every value
    already has its code (service and span names: a block rarely brings a new one), else :func:`intern_codes`."""
    try:
        out[:] = np.fromiter(map(names.__getitem__, map(field, spans)), dtype=out.dtype, count=len(spans))
    except KeyError:
        out[:] = intern_codes(list(map(field, spans)), names)


def _codes(out: np.ndarray, field: Callable[[Any], Any], spans: list, table: dict[Any, int], slow: Callable) -> None:
    """``out`` filled with ``table[value]`` of each span's ``field`` (C-level), or ``slow(value)`` for all when
    one is not in ``table``."""
    try:
        out[:] = np.fromiter(map(table.__getitem__, map(field, spans)), dtype=out.dtype, count=len(spans))
    except (KeyError, TypeError):
        out[:] = [slow(v) for v in map(field, spans)]


class _ReceiverColumns:
    """The receiver's spans as numpy columns, filled block by block.

    Columns are allocated once for the number of spans the file's size suggests (grown if that was
    short) and filled per block while the block's objects are in the CPU cache; trace ids are interned
    then too (the table's ``trace_code``), and the trace id column holds one string per trace, not one per
    span. Parents are found later, vectorised (``SpanTable.parent_row``).
    """

    def __init__(self, file_bytes: int) -> None:
        self.file_bytes = file_bytes
        self.columns: dict[str, np.ndarray] = {name: np.empty(0, dtype=dtype) for name, dtype in _COLUMNS.items()}
        self.services: dict[str, int] = {}
        self.names: dict[str, int] = {}
        self.traces: dict[str, int] = {}
        self.rows = 0
        self.bytes_seen = 0
        self.ids_hex = True

    def add(self, spans: list[_WrittenSpan] | list[_ReceiverSpan], block_bytes: int) -> None:
        self.bytes_seen += block_bytes
        if not spans:
            return
        get, n, first = _GET, len(spans), self.rows
        self._room(n)
        rows = slice(first, first + n)
        columns = self.columns
        trace_ids, _ = _lowercase(list(map(get["trace_id"], spans)))
        columns["trace_code"][rows] = intern_codes(trace_ids, self.traces)  # the trace_id column: at build()
        span_ids, span_joined = _lowercase(list(map(get["span_id"], spans)))
        columns["span_id"][rows] = span_ids
        parents = list(map(get["parent_span_id"], spans))
        if None in parents:
            parents = ["" if p is None else p for p in parents]
        parents, parent_joined = _lowercase(parents)
        columns["parent_id"][rows] = parents
        self._id_values(rows, (span_ids, span_joined), (parents, parent_joined))
        _known_codes(columns["service"][rows], get["service"], spans, self.services)
        _known_codes(columns["name"][rows], get["name"], spans, self.names)
        _codes(columns["kind"][rows], get["kind"], spans, _KIND_OF, kind_code)
        columns["start_ns"][rows] = np.fromiter(map(get["start_ns"], spans), dtype=np.int64, count=n)
        columns["end_ns"][rows] = np.fromiter(map(get["end_ns"], spans), dtype=np.int64, count=n)
        columns["attributes"][rows] = np.fromiter(map(get["attributes"], spans), dtype=object, count=n)
        statuses = list(map(get["status"], spans))
        if None in statuses:  # an explicit "status": null
            statuses = [_NO_STATUS if s is None else s for s in statuses]
        _codes(columns["status"][rows], get["code"], statuses, _STATUS_OF, status_code)
        columns["status_message"][rows] = np.fromiter(map(get["message"], statuses), dtype=object, count=n)
        self.rows += n

    def _id_values(self, rows: slice, span_ids: tuple[list[str], str], parents: tuple[list[str], str]) -> None:
        """The ids' 64-bit values for SpanTable.parent_row, while the strings are hot (until one is not hex);
        each id list comes with its ids joined."""
        if not self.ids_hex:
            return
        spans = _hex_values(*span_ids)
        up = _hex_values(*parents)
        if spans is None or up is None or not spans[1].all():  # a span id that is not 16 hex, or empty
            self.ids_hex = False
            return
        columns = self.columns
        columns["span_u64"][rows], columns["parent_u64"][rows], columns["has_parent"][rows] = spans[0], *up

    def _room(self, n: int) -> None:
        capacity = len(self.columns["span_id"])
        if self.rows + n <= capacity:
            return
        per_span = self.bytes_seen / (self.rows + n)
        estimate = int((self.file_bytes - self.bytes_seen) / per_span * 1.05) + self.rows + n
        capacity = max(estimate, self.rows + n, int(capacity * 1.25))
        for name, old in self.columns.items():
            new = np.empty(capacity, dtype=old.dtype)
            new[: self.rows] = old[: self.rows]
            self.columns[name] = new

    def build(self) -> SpanTable:
        columns = {name: column[: self.rows] for name, column in self.columns.items()}
        trace_code = columns.pop("trace_code")
        trace_ids = np.fromiter(self.traces, dtype=object, count=len(self.traces))
        columns["trace_id"] = trace_ids[trace_code]
        id_values = columns.pop("span_u64"), columns.pop("parent_u64"), columns.pop("has_parent")
        table = SpanTable(**columns, services=tuple(self.services), names=tuple(self.names))
        return table.with_derived(
            trace_code=trace_code, trace_ids=tuple(trace_ids), id_values=id_values if self.ids_hex else None
        )


_COLUMNS = {  # the trace_id column is made at build(), of the trace codes
    "span_id": object,
    "parent_id": object,
    "service": np.int32,
    "name": np.int32,
    "kind": np.int8,
    "start_ns": np.int64,
    "end_ns": np.int64,
    "status": np.int8,
    "status_message": object,
    "attributes": object,
    # derived columns, handed to the table already computed
    "trace_code": np.int32,
    "span_u64": np.uint64,
    "parent_u64": np.uint64,
    "has_parent": bool,
}


class ReceiverParams(PluginParams):
    file: str = "spans.jsonl"


class ReceiverSource(TableSource):
    kind = "receiver"
    Params = ReceiverParams
    params: ReceiverParams
    file_param = "file"
    format_name = "receiver JSON lines"

    @classmethod
    def sniff(cls, head: SpanFileHead) -> bool:
        """Normalized spans (``trace_id`` and ``span_id`` in the first object), or an empty file: no span yet."""
        return head.empty or {"trace_id", "span_id"} <= head.keys

    def _read(self, report: SourceReport, window: tuple[int, int] | None) -> SpanTable:
        return read_receiver_file(*self._file(report, self.params.file))


# --- OTLP files -------------------------------------------------------------------------------------


class OtlpFileParams(PluginParams):
    path: str


class OtlpFileSource(TableSource):
    kind = "otlp_file"
    Params = OtlpFileParams
    params: OtlpFileParams
    file_param = "path"
    format_name = "OTLP JSON lines"

    @classmethod
    def sniff(cls, head: SpanFileHead) -> bool:
        """A ``TracesData`` object first: ``resourceSpans`` (or ``resource_spans``), Tempo's ``batches``, or Jaeger API
        v3's ``{"result": {"resourceSpans": ...}}``."""
        if head.keys == {"result"}:
            return re.match(rb'\s*\{\s*"result"\s*:\s*\{\s*"resource_?[sS]pans"', head.head) is not None
        return bool(head.keys & {"resourceSpans", "resource_spans", "batches"})

    def _read(self, report: SourceReport, window: tuple[int, int] | None) -> SpanTable:
        return read_json_file(*self._file(report, self.params.path))


class OtlpProtoFileParams(PluginParams):
    path: str  # a file, or a directory of one-message files
    framing: Literal["message", "uint32", "varint"] = "message"  # see drill.traces.otlp.PROTO_FRAMINGS


class OtlpProtoFileSource(TableSource):
    kind = "otlp_proto_file"
    Params = OtlpProtoFileParams
    params: OtlpProtoFileParams
    file_param = "path"
    format_name = "OTLP protobuf"

    @classmethod
    def sniff(cls, head: SpanFileHead) -> bool:
        """Anything that is not text: the other span formats are all JSON."""
        return not head.text

    def _read(self, report: SourceReport, window: tuple[int, int] | None) -> SpanTable:
        path, file_report = self._file(report, self.params.path)
        return read_proto_file(path, file_report, framing=self.params.framing)
