"""Span tables in CSV (``csv_file``): one span per row, the columns named in a header line.

Trace stores and public fault-injection benchmarks export spans as flat tables. The columns are found by
their names, compared without case, spaces or punctuation (``traceID``, ``trace_id`` and ``TraceId`` are one
name); the delimiter is a comma, a tab or a semicolon, whichever splits the header into both id columns.

=============  ===============================================================================================
trace id       ``traceId`` (required)
span id        ``spanId``, else ``id`` (required)
parent         ``parentSpanId``, ``parentId``, ``parentSpan``, ``parent``, ``pid``; empty, ``root``, ``none``,
               ``null``, ``0``, ``-1`` or all zeros: a trace's first span
service        ``serviceName``, ``service``; else ``podName``/``pod``/``k8s.pod.name``, with a Deployment's
               ``-<replica set hash>-<pod hash>`` suffix taken off (``frontend-579b9bff58-t2dbm`` is
               ``frontend``; the pod is kept as the ``k8s.pod.name`` attribute)
span name      ``spanName``, ``operationName``, ``operation``, ``name``; else ``methodName``
start          ``startTimeUnix``, ``startTime``, ``startTimestamp``, ``start``, ``timestamp`` (required): the
               first of these the header has (a row's ``timestamp`` beside ``StartTimeUnixNano`` is not the
               span's start); of one name, the finest unit (``startTime`` in µs before ``startTimeMillis``)
end            ``endTimeUnix``, ``endTime``, ``end``; else ``duration``/``elapsed``/``elapsedTime``/``latency``
               (likewise the first, the finest)
kind           ``spanKind``, ``kind``: ``SERVER``, ``SPAN_KIND_SERVER``, ``server`` or the OTLP code (0–5)
status         ``statusCode``, ``status``, ``otel.status_code``: ``OK``/``ERROR``/``UNSET`` (``STATUS_CODE_``
               prefix allowed), the OTLP code (0–2), or an HTTP status code (ERROR from 500 on; kept as
               ``http.response.status_code``)
               else ``success``/``isSuccess``: ERROR where it is false (``False``, ``0``)
status message ``statusMessage``, ``statusDescription``, ``otel.status_description``
=============  ===============================================================================================

Every other column is an attribute under its header's name (an integer as a number, else the text; empty cells
are left out).

**Times.** A unit in the column's name is used: ``startTimeUnixNano``, ``start_ns``, ``startTime(µs)``,
``duration_ms``, ``endTimeMillis``, ``elapsed_seconds``. Without one, a number is an epoch time whose size
tells its unit (from 10^17 ns, from 10^14 µs, from 10^11 ms, else seconds; a fraction is kept exactly), and a
date-time (``2024-05-01 12:00:00.123456789``, ISO 8601 with ``T``, a zone offset or ``Z``; UTC when none) is
read as such. A duration without a unit has the start time's (nanoseconds next to a date-time: the
OpenTelemetry Collector ClickHouse exporter's ``Duration``); when there is an end column, the duration
column is not used. The source's ``time_unit`` param sets the unit of unitless numbers (relative times).

A row that cannot be read (a missing id, a time that is not one, a status that is none of the above, the
wrong number of cells, bytes that are not UTF-8, a cell over the CSV reader's field limit, a line over
:data:`~drill.rundir.files.MAX_LINE_BYTES`, which is skipped without being held) is counted and located
(``file:line: reason``), never dropped silently. A header without a required column is an input error that names the
column it looked for and the columns the file has.
"""

from __future__ import annotations

import calendar
import csv
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Literal

from drill.api import PluginParams, SpanFileHead
from drill.errors import InputError
from drill.rundir.files import MAX_LINE_BYTES
from drill.rundir.jsonl import BadLine, ReadReport
from drill.traces.sources import SourceReport, TableSource
from drill.traces.table import SpanTable, TableBuilder, kind_code
from drill.units import NS_PER, epoch_unit

__all__ = ["CsvFileSource", "CsvLayout", "read_csv_file"]

TimeUnit = Literal["ns", "us", "ms", "s"]
_DELIMITERS = (",", "\t", ";")
_CLOCK_ROLES = ("start", "end", "duration")

_ROLES: dict[str, tuple[str, ...]] = {  # normalized header names, most specific first
    "trace_id": ("traceid",),
    "span_id": ("spanid", "id"),  # a bare ``id`` beside a trace id column: the span's
    "parent_id": ("parentspanid", "parentid", "parentspan", "parent", "pid"),
    "service": ("servicename", "service"),
    "pod": ("podname", "pod", "k8spodname"),
    "name": ("spanname", "operationname", "operation", "name"),
    "method": ("methodname",),
    "kind": ("spankind", "kind"),
    "status": ("statuscode", "status", "otelstatuscode"),
    "success": ("success", "issuccess"),  # True/False: False is an error
    "status_message": ("statusmessage", "statusdescription", "otelstatusdescription"),
}
_TIME_ROLES: dict[str, tuple[str, ...]] = {
    "start": ("starttimeunix", "starttime", "starttimestamp", "start", "timestamp"),
    "end": ("endtimeunix", "endtime", "endtimestamp", "end"),
    "duration": ("duration", "elapsedtime", "elapsed", "latency"),
}
_UNITS: dict[str, TimeUnit] = {
    **dict.fromkeys(("nano", "nanos", "nanoseconds", "ns"), "ns"),
    **dict.fromkeys(("micro", "micros", "microseconds", "us", "µs", "μs"), "us"),
    **dict.fromkeys(("milli", "millis", "milliseconds", "ms"), "ms"),
    **dict.fromkeys(("sec", "secs", "seconds"), "s"),
}
_PRECISION: dict[TimeUnit | None, int] = {"ns": 0, "us": 1, None: 2, "ms": 3, "s": 4}  # finest first
_NO_VALUE = frozenset({"", "none", "null", "nan"})  # an empty cell as exporters write it (pandas: empty or NaN)
_NO_PARENT = _NO_VALUE | {"root", "-1"}
_POD_SUFFIX = re.compile(r"-[a-z0-9]{6,10}-[a-z0-9]{5}$")  # a Deployment's pod: <name>-<rs hash>-<pod hash>
_DATETIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?\s*(Z|UTC|[+-]\d{2}:?\d{2})?", re.IGNORECASE
)
_INTEGER = re.compile(r"-?\d{1,19}")  # a time in ns has 19 digits
_UNDECODED = re.compile("[\udc80-\udcff]")  # a byte that is not UTF-8, as the surrogateescape handler keeps it
_ATTRIBUTE_INTEGER = re.compile(r"-?\d{1,18}")  # fits the int64 of an OTLP intValue
#: Characters of the header line read at most: a longer one is no header.
MAX_HEADER_CHARS = 64 * 1024


def _normalized(name: str) -> str:
    return re.sub(r"[^0-9a-zµμ]", "", name.lower())


@dataclass(frozen=True)
class CsvLayout:
    """Which column holds what (indexes into a row), found from the header."""

    delimiter: str
    columns: tuple[str, ...]  # the header's names
    roles: dict[str, int]  # role -> column
    units: dict[str, TimeUnit | None]  # time role -> the unit its name gives (None: none)
    attributes: tuple[int, ...]  # columns kept as attributes

    @classmethod
    def of_header(cls, line: str) -> CsvLayout | None:
        """The layout of a header ``line``, or None when no delimiter splits it into a trace id and a span id column."""
        for delimiter in _DELIMITERS:
            columns = tuple(next(csv.reader([line], delimiter=delimiter), []))
            normalized = [_normalized(c) for c in columns]
            if "traceid" in normalized and ("spanid" in normalized or "id" in normalized):
                return cls._found(delimiter, columns, normalized)
        return None

    @classmethod
    def _found(cls, delimiter: str, columns: tuple[str, ...], normalized: list[str]) -> CsvLayout:
        roles: dict[str, int] = {}
        units: dict[str, TimeUnit | None] = {}
        for role, names in _ROLES.items():
            at = next((normalized.index(n) for n in names if n in normalized), None)
            if at is not None:
                roles[role] = at
        for role, bases in _TIME_ROLES.items():
            found = _time_column(normalized, bases, set(roles.values()))
            if found is not None:
                roles[role], units[role] = found
        for role, over in (
            ("method", "name"),
            ("pod", "service"),
            ("success", "status"),
        ):  # an unneeded fallback: an attribute
            if over in roles:
                roles.pop(role, None)
        used = set(roles.values())
        if "end" in roles and "duration" in roles:
            del roles["duration"]  # the end is exact; a duration column is often in another unit (or rounded)
        keep = tuple(i for i in range(len(columns)) if i not in used and columns[i].strip())
        return cls(delimiter, columns, roles, units, keep)

    def missing(self) -> list[str]:
        """The required columns the header lacks, in words."""
        out = []
        for role, words in (("trace_id", "a trace id"), ("span_id", "a span id"), ("start", "a start time")):
            if role not in self.roles:
                out.append(f"{words} ({_looked_for(role)})")
        if "end" not in self.roles and "duration" not in self.roles:
            out.append(f"an end time or a duration ({_looked_for('end')}, or {_looked_for('duration')})")
        if "service" not in self.roles and "pod" not in self.roles:
            out.append(f"a service ({_looked_for('service')}, or {_looked_for('pod')})")
        if "name" not in self.roles and "method" not in self.roles:
            out.append(f"a span name ({_looked_for('name')})")
        return out


def _time_column(normalized: list[str], bases: tuple[str, ...], taken: set[int]) -> tuple[int, TimeUnit | None] | None:
    """The column (and the unit its name gives) of a time role: the most specific name first (``startTimeUnixNano``
    before ``start``, a row's ``timestamp`` last); of the columns of one name, the finest unit, a unitless number
    (an epoch time whose size tells its unit) between µs and ms. Jaeger's stored spans carry ``startTimeMillis``
    beside ``startTime`` in µs, and their ``duration`` is in µs: the millisecond column would make every start
    coarse and every duration (which has the start's unit) 1,000 times too long (Jaeger's
    ``plugin/storage/es/spanstore/dbmodel/model.go``)."""
    for base in bases:
        found = [
            (at, unit)
            for at, name in enumerate(normalized)
            if at not in taken and (unit := _time_unit(name, base)) is not False
        ]
        if found:
            return min(found, key=lambda column: _PRECISION[column[1]])
    return None


def _time_unit(name: str, base: str) -> TimeUnit | None | Literal[False]:
    """The unit a time column's normalized ``name`` gives: a unit, None (``base`` itself, no unit in it), or False
    (another column)."""
    if name == base:
        return None
    return _UNITS[name[len(base) :]] if name.startswith(base) and name[len(base) :] in _UNITS else False


def _looked_for(role: str) -> str:
    names = _ROLES.get(role) or _TIME_ROLES[role]
    return "/".join(names[:4])


# --- cells ------------------------------------------------------------------------------------------------


def _id(value: str) -> str:
    return value.strip().lower()


def _parent(value: str) -> str:
    value = value.strip().lower()
    return "" if value in _NO_PARENT or not value.strip("0") else value


def _service(pod: str) -> str:
    return _POD_SUFFIX.sub("", pod.strip())


def _kind(value: str) -> int:
    value = value.strip()
    code = _whole_number(value)
    return kind_code(code if code is not None else value.upper().removeprefix("SPAN_KIND_"))


def _status(value: str, attributes: dict) -> int:
    """The OTLP status code of a status cell (an HTTP code is also kept in ``attributes``)."""
    value = value.strip()
    if value.lower() in _NO_VALUE:
        return 0
    code = _whole_number(value)  # "500.0": an integer column with gaps, as pandas writes it
    if code is not None and 0 <= code <= 2:
        return code
    if code is not None and 100 <= code <= 599:
        attributes["http.response.status_code"] = code
        return 2 if code >= 500 else 0
    name = value.upper().removeprefix("STATUS_CODE_")
    if name in ("UNSET", "OK", "ERROR"):
        return ("UNSET", "OK", "ERROR").index(name)
    raise ValueError(f"status {value!r} is none of OK, ERROR, UNSET, an OTLP code (0-2) or an HTTP status code")


def _failed(value: str) -> int:
    """The OTLP status code of a ``success`` cell: ERROR for false (``False``, ``false``, ``0``), else UNSET."""
    value = value.strip().lower()
    if value in ("false", "0", "no", "f"):
        return 2
    if value in ("true", "1", "yes", "t") or value in _NO_VALUE:
        return 0
    raise ValueError(f"success {value!r} is neither true nor false")


def _whole_number(value: str) -> int | None:
    try:
        number = float(value)
    except ValueError:
        return None
    return int(number) if number.is_integer() else None


def _datetime_ns(value: str) -> int | None:
    found = _DATETIME.fullmatch(value)
    if found is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = found.groups()
    seconds = calendar.timegm((int(year), int(month), int(day), int(hour), int(minute), int(second)))
    ns = seconds * 1_000_000_000 + int((fraction or "0").ljust(9, "0"))
    if zone and zone.upper() not in ("Z", "UTC"):
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        ns -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60) * 1_000_000_000
    return ns


class _Clock:
    """One time column's reading: its unit fixed by its name, the source's ``time_unit``, or its first value; ``how``
    says which, for the columns note."""

    def __init__(self, unit: TimeUnit | None, how: str) -> None:
        self.unit = unit
        self.how = how
        self.datetime = False

    def ns(self, value: str, relative: bool = False) -> int:
        value = value.strip()
        if _INTEGER.fullmatch(value) and self.unit is not None:
            return int(value) * NS_PER[self.unit]
        try:
            number = Decimal(value)
        except InvalidOperation:
            number = None
        if number is None or not number.is_finite():
            ns = _datetime_ns(value)
            if ns is None or relative:
                raise ValueError(f"time {value[:40]!r} is not a number or a date-time")
            self.datetime = True
            return ns
        if self.unit is None:
            self.unit, self.how = epoch_unit(number), "its size"
        return int(number * NS_PER[self.unit])


# --- reading ----------------------------------------------------------------------------------------------


def read_csv_file(
    path: Path, report: ReadReport, time_unit: TimeUnit | None = None, notes: list[str] | None = None
) -> SpanTable:
    """The spans of a CSV span table; rows that cannot be read are counted and located in ``report``. ``notes``
    gets which column was read as what, and each time column's unit (:func:`_columns_note`)."""
    builder = TableBuilder()
    fh = report.open_input(path)
    if fh is None:
        return builder.build()
    with fh, io.TextIOWrapper(fh, encoding="utf-8-sig", errors="surrogateescape", newline="") as text:
        header = _header(text, path)
        if header is None:
            return builder.build()
        layout, header_lines = header
        clocks = _read_rows(_Lines(text, header_lines, report), layout, time_unit, builder, report)
    if notes is not None:
        notes.append(_columns_note(layout, clocks))
    return builder.build()


_UNIT_NAMES = {"ns": "ns", "us": "µs", "ms": "ms", "s": "s"}


def _columns_note(layout: CsvLayout, clocks: dict[str, _Clock]) -> str:
    """``columns read: trace id traceID, ..., start startTime (µs, by its size), duration duration (µs, the
    start's); as attributes: methodName, ...``: what the header's names were taken for, for a reader to check."""
    names, roles = layout.columns, layout.roles
    parts = [f"{role.replace('_', ' ')} {names[at]}" for role, at in roles.items() if role not in _CLOCK_ROLES]
    for role in (r for r in _CLOCK_ROLES if r in roles):
        clock = clocks[role]
        read = (
            "date-time"
            if clock.datetime
            else f"{_UNIT_NAMES[clock.unit]}, by {clock.how}"
            if clock.unit
            else "no value read"
        )
        parts.append(f"{role} {names[roles[role]]} ({read})")
    kept = [names[i] for i in layout.attributes]
    more = f" and {len(kept) - 8} more" if len(kept) > 8 else ""
    return "columns read: " + ", ".join(parts) + (f"; as attributes: {', '.join(kept[:8])}{more}" if kept else "")


def _header(text: io.TextIOWrapper, path: Path) -> tuple[CsvLayout, int] | None:
    """The layout of the first non-blank line and that line's number (None: an empty file)."""
    number = 0
    for line in iter(lambda: text.readline(MAX_HEADER_CHARS), ""):
        number += 1
        if not line.strip():
            continue
        if len(line) == MAX_HEADER_CHARS and not line.endswith("\n"):
            raise InputError(
                f"{path}:{number}:1: not a CSV span table: its first line is longer than {MAX_HEADER_CHARS} characters",
                hint="the first line must be a header naming the columns",
            )
        if _UNDECODED.search(line):
            raise InputError(
                f"{path}:{number}:1: the CSV header is not UTF-8 text",
                hint="save the file as UTF-8 (with or without BOM)",
            )
        layout = CsvLayout.of_header(line.rstrip("\r\n"))
        if layout is None:
            raise InputError(
                f"{path}:{number}:1: not a CSV span table: its first line names no trace id and span id columns",
                hint="the header line must name the columns, e.g. traceId,spanId,parentSpanId,serviceName,...",
            )
        missing = layout.missing()
        if missing:
            raise InputError(
                f"{path}:{number}:1: the CSV header lacks {'; '.join(missing)}; its columns: "
                + ", ".join(layout.columns[:20])
                + " (names match in any case, without spaces or punctuation)",
                hint="rename the column, or see docs/reading-traces.md for the names each field is found by",
            )
        return layout, number
    return None


def _clock(named: TimeUnit | None, time_unit: TimeUnit | None) -> _Clock:
    if named is not None:
        return _Clock(named, "its name")
    return _Clock(time_unit, "the source's time_unit") if time_unit is not None else _Clock(None, "")


def _read_rows(
    lines: _Lines,
    layout: CsvLayout,
    time_unit: TimeUnit | None,
    builder: TableBuilder,
    report: ReadReport,
) -> dict[str, _Clock]:
    clocks = {role: _clock(layout.units.get(role), time_unit) for role in _CLOCK_ROLES}
    add = _row_reader(layout, clocks)
    rows = csv.reader(lines, delimiter=layout.delimiter)
    while True:
        lines.first, lines.replaced = None, False
        try:
            row = next(rows)
        except StopIteration:
            return clocks
        except csv.Error as exc:
            report.add_bad(BadLine(lines.first or lines.number, f"csv.Error: {exc}"[:200]))
            continue
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        try:
            if lines.replaced:
                raise ValueError("not UTF-8 text")
            add(row, builder)
        except (ValueError, IndexError) as exc:
            report.add_bad(BadLine(lines.first or lines.number, f"{type(exc).__name__}: {exc}"[:200]))
            continue
        report.lines_read += 1


class _Lines:
    """The text's lines for the csv reader, none over :data:`~drill.rundir.files.MAX_LINE_BYTES` characters (a
    longer one is skipped, counted and located in the report, never held whole); ``number`` is the lines read so
    far, ``first`` the first line given since it was last set to None (where a row starts); ``replaced`` says a
    line given since it was last set False was not UTF-8 (the decoder escaped its bad bytes as lone surrogates)."""

    def __init__(self, text: io.TextIOWrapper, number: int, report: ReadReport) -> None:
        self.text, self.number, self.report = text, number, report
        self.first: int | None = None
        self.replaced = False

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        while True:
            line = self.text.readline(MAX_LINE_BYTES)
            if not line:
                raise StopIteration
            self.number += 1
            if len(line) < MAX_LINE_BYTES or line.endswith("\n"):
                if self.first is None:
                    self.first = self.number
                if not line.isascii() and _UNDECODED.search(line):
                    self.replaced = True
                return line
            size = len(line) + self._skip_rest()
            reason = f"line of {size} characters skipped: longer than the {MAX_LINE_BYTES}-character cap on one line"
            self.report.add_bad(BadLine(self.number, reason))

    def _skip_rest(self) -> int:
        skipped = 0
        while True:
            chunk = self.text.readline(MAX_LINE_BYTES)
            skipped += len(chunk)
            if not chunk or chunk.endswith("\n"):
                return skipped


def _row_reader(layout: CsvLayout, clocks: dict[str, _Clock]) -> Callable[[list[str], TableBuilder], None]:
    roles, width, names = layout.roles, len(layout.columns), layout.columns
    name_at = roles.get("name", roles.get("method"))
    pod_at = roles.get("pod")
    service_at = roles.get("service")

    def add(row: list[str], builder: TableBuilder) -> None:
        if len(row) != width:
            raise ValueError(f"{len(row)} cells where the header has {width}")
        trace_id, span_id = _id(row[roles["trace_id"]]), _id(row[roles["span_id"]])
        if not trace_id or not span_id:
            raise ValueError("no trace id" if not trace_id else "no span id")
        attributes: dict = {names[i]: _cell(row[i]) for i in layout.attributes if row[i] != ""}
        if service_at is not None:
            service = row[service_at].strip()
        else:
            attributes["k8s.pod.name"] = row[pod_at].strip()  # type: ignore[index]
            service = _service(row[pod_at])  # type: ignore[index]
        start = clocks["start"].ns(row[roles["start"]])
        if "end" in roles:
            end = clocks["end"].ns(row[roles["end"]])
        else:
            duration = clocks["duration"]
            if duration.unit is None:
                beside = clocks["start"]
                duration.unit = "ns" if beside.datetime else beside.unit
                duration.how = "being beside a date-time" if beside.datetime else "the start's"
            end = start + duration.ns(row[roles["duration"]], relative=True)
        if end < start:
            raise ValueError(f"it ends {(start - end) / 1e6:g} ms before it starts")
        status = _status(row[roles["status"]], attributes) if "status" in roles else 0
        if "success" in roles and "status" not in roles:
            status = _failed(row[roles["success"]])
        message = (row[roles["status_message"]].strip() or None) if "status_message" in roles else None
        kind = _kind(row[roles["kind"]]) if "kind" in roles else 0
        parent = _parent(row[roles["parent_id"]]) if "parent_id" in roles else ""
        name = row[name_at].strip() if name_at is not None else ""
        builder.add(
            trace_id, span_id, parent, service or "unknown", name, kind, start, end, status, message, attributes
        )

    return add


def _cell(value: str) -> str | int:
    return int(value) if _ATTRIBUTE_INTEGER.fullmatch(value) else value


# --- the source -------------------------------------------------------------------------------------------


class CsvFileParams(PluginParams):
    path: str
    time_unit: TimeUnit | None = None  # the unit of time columns whose name gives none (None: epoch, by size)


class CsvFileSource(TableSource):
    kind = "csv_file"
    Params = CsvFileParams
    params: CsvFileParams
    file_param = "path"
    format_name = "CSV span table"

    @classmethod
    def sniff(cls, head: SpanFileHead) -> bool:
        """Text whose first non-blank line is a header naming a trace id and a span id column."""
        if not head.text:
            return False
        first = next((line for line in head.head.splitlines() if line.strip()), b"")
        if first.lstrip()[:1] in (b"{", b"["):
            return False
        return CsvLayout.of_header(first.decode("utf-8-sig", "replace")) is not None

    def _read(self, report: SourceReport, window: tuple[int, int] | None) -> SpanTable:
        path, file_report = self._file(report, self.params.path)
        return read_csv_file(path, file_report, self.params.time_unit, report.notes)
