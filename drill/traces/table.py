"""The span model: one columnar table, whatever the source (receiver, OTLP JSON/protobuf, Jaeger).

A :class:`SpanTable` holds one row per span in numpy columns, so the checks and the analysis work on
whole columns (durations, masks, group codes) rather than on a million Python dicts. Ids are
lowercase hex strings (32 characters for a trace, 16 for a span; ``""`` for "no parent"); service
and span names are ``int32`` codes into :attr:`SpanTable.services` / :attr:`SpanTable.names`; kind
and status are the OTLP enum codes (:data:`KIND_NAMES`, :data:`STATUS_NAMES`); times are UNIX ns.

Derived columns that need a pass over the ids (:attr:`SpanTable.trace_code`,
:attr:`SpanTable.parent_row`) are computed once, on first use.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from functools import cached_property
from itertools import count, filterfalse
from typing import Any, Union

import numpy as np

__all__ = [
    "KIND_NAMES",
    "STATUS_NAMES",
    "Span",
    "SpanTable",
    "TableBuilder",
    "hex_id",
    "hex_u64",
    "int_counts",
    "intern_codes",
    "kind_code",
    "status_code",
    "unique_ints",
]

KIND_NAMES = ("UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")  # OTLP SpanKind codes 0..5
STATUS_NAMES = ("UNSET", "OK", "ERROR")  # OTLP status codes 0..2

_KIND_CODES: dict[Any, int] = {name: code for code, name in enumerate(KIND_NAMES)}
_KIND_CODES.update({f"SPAN_KIND_{name}": code for code, name in enumerate(KIND_NAMES)})
_KIND_CODES.update({name.lower(): code for code, name in enumerate(KIND_NAMES)})  # Jaeger's span.kind tag
_KIND_CODES.update({code: code for code in range(len(KIND_NAMES))})
_STATUS_CODES: dict[Any, int] = {name: code for code, name in enumerate(STATUS_NAMES)}
_STATUS_CODES.update({f"STATUS_CODE_{name}": code for code, name in enumerate(STATUS_NAMES)})
_STATUS_CODES.update({code: code for code in range(len(STATUS_NAMES))})


def kind_code(kind: Any) -> int:
    """The OTLP SpanKind code of ``kind`` (a code, ``"SERVER"``, ``"SPAN_KIND_SERVER"``, ``"server"``); 0 if unknown."""
    return _KIND_CODES.get(kind, 0)


def hex_id(value: str, width: int) -> str:
    """An id as the table holds it: lower-case hex, left-padded with zeros to ``width`` (a 64-bit trace id of an
    older client is a 128-bit one with zeros in front); ValueError unless it is 1 to ``width`` hex characters."""
    value = value.strip().lower()
    if not value or len(value) > width or value.strip("0123456789abcdef"):
        raise ValueError(f"id {value!r} is not 1 to {width} hex characters")
    return value.zfill(width)


def status_code(status: Any) -> int:
    """The OTLP status code of ``status`` (a code, ``"ERROR"`` or ``"STATUS_CODE_ERROR"``); 0 if unknown."""
    return _STATUS_CODES.get(status, 0)


@dataclass(frozen=True)
class Span:
    """One row of a table as plain Python values, for reports and verdict evidence."""

    trace_id: str
    span_id: str
    parent_id: str
    service: str
    name: str
    kind: str
    start_ns: int
    end_ns: int
    status: str
    status_message: str | None
    attributes: dict

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


def _objects(values: Sequence[Any]) -> np.ndarray:
    """A 1-d object array of ``values`` (np.array would build a 2-d array from a list of lists/dicts)."""
    return np.fromiter(values, dtype=object, count=len(values))


def intern_codes(values: Sequence[str], names: dict[str, int]) -> list[int]:
    """Codes of ``values`` in ``names``; new names get the next codes in first-seen order (C-level passes)."""
    new = list(filterfalse(names.__contains__, dict.fromkeys(values)))
    if new:
        names.update(zip(new, count(len(names))))
    return list(map(names.__getitem__, values))


@dataclass(frozen=True, eq=False)
class SpanTable:
    """Columnar spans: every column has ``len(table)`` rows. Treat the columns and attribute dicts as read-only."""

    trace_id: np.ndarray  # dtype object: lowercase 32-hex str
    span_id: np.ndarray  # dtype object: lowercase 16-hex str
    parent_id: np.ndarray  # dtype object: lowercase 16-hex str, "" for a root
    service: np.ndarray  # int32 codes into .services
    name: np.ndarray  # int32 codes into .names
    kind: np.ndarray  # int8 OTLP SpanKind code
    start_ns: np.ndarray  # int64 UNIX ns
    end_ns: np.ndarray  # int64 UNIX ns
    status: np.ndarray  # int8 OTLP status code
    status_message: np.ndarray  # dtype object: str or None
    attributes: np.ndarray  # dtype object: dict[str, scalar|list] per span (may be {})
    services: tuple[str, ...]
    names: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.span_id)

    def __repr__(self) -> str:
        return f"SpanTable({len(self)} spans, {len(self.services)} services, {len(self.names)} span names)"

    @cached_property
    def duration_ns(self) -> np.ndarray:
        """int64 ns per row (``end_ns - start_ns``), computed once: the analysis reads it many times."""
        return self.end_ns - self.start_ns

    # construction -----------------------------------------------------------------------------------
    @classmethod
    def from_spans(cls, spans: Iterable[dict]) -> SpanTable:
        """A table of normalized span dicts (the shape :func:`drill.traces.otlp.normalize` makes).

        ``parent_span_id`` may be None/"" for a root; ``kind`` and ``status.code`` may be names or codes;
        ``status`` may also be a bare code or name. Missing optional keys get their defaults.
        """
        builder = TableBuilder()
        for span in spans:
            status = span.get("status")
            if isinstance(status, dict):
                code, message = status.get("code"), status.get("message")
            else:
                code, message = status, None
            builder.add(
                str(span["trace_id"]).lower(),
                str(span["span_id"]).lower(),
                str(span.get("parent_span_id") or span.get("parent_id") or "").lower(),
                span.get("service") or "unknown",
                span.get("name") or "",
                kind_code(span.get("kind")),
                int(span["start_ns"]),
                int(span["end_ns"]),
                status_code(code),
                message or None,
                span.get("attributes") or {},
            )
        return builder.build()

    @classmethod
    def empty(cls) -> SpanTable:
        return TableBuilder().build()

    @classmethod
    def from_columns(
        cls,
        *,
        trace_id: Sequence[str],
        span_id: Sequence[str],
        parent_id: Sequence[str],
        service: Sequence[str],
        name: Sequence[str],
        kind: Sequence[int],
        start_ns: Sequence[int],
        end_ns: Sequence[int],
        status: Sequence[int],
        status_message: Sequence[str | None],
        attributes: Sequence[dict],
    ) -> SpanTable:
        """A table from equal-length Python sequences (service and name as strings, kind/status as codes)."""
        services: dict[str, int] = {}
        names: dict[str, int] = {}
        n = len(span_id)
        return cls(
            trace_id=_objects(trace_id),
            span_id=_objects(span_id),
            parent_id=_objects(parent_id),
            service=np.array(intern_codes(service, services), dtype=np.int32).reshape(n),
            name=np.array(intern_codes(name, names), dtype=np.int32).reshape(n),
            kind=np.asarray(kind, dtype=np.int8).reshape(n),
            start_ns=np.asarray(start_ns, dtype=np.int64).reshape(n),
            end_ns=np.asarray(end_ns, dtype=np.int64).reshape(n),
            status=np.asarray(status, dtype=np.int8).reshape(n),
            status_message=_objects(status_message),
            attributes=_objects(attributes),
            services=tuple(services),
            names=tuple(names),
        )

    @classmethod
    def concat(cls, tables: Sequence[SpanTable]) -> SpanTable:
        """One table of all rows of ``tables``, in order; service/name codes are merged."""
        tables = [t for t in tables if len(t)]
        if not tables:
            return cls.empty()
        if len(tables) == 1:
            return tables[0]
        services: dict[str, int] = {}
        names: dict[str, int] = {}
        service_cols, name_cols = [], []
        for table in tables:
            service_map = np.asarray(intern_codes(table.services, services), dtype=np.int32)
            name_map = np.asarray(intern_codes(table.names, names), dtype=np.int32)
            service_cols.append(service_map[table.service] if len(service_map) else table.service)
            name_cols.append(name_map[table.name] if len(name_map) else table.name)

        def cat(column: str) -> np.ndarray:
            return np.concatenate([getattr(t, column) for t in tables])

        return cls(
            trace_id=cat("trace_id"),
            span_id=cat("span_id"),
            parent_id=cat("parent_id"),
            service=np.concatenate(service_cols),
            name=np.concatenate(name_cols),
            kind=cat("kind"),
            start_ns=cat("start_ns"),
            end_ns=cat("end_ns"),
            status=cat("status"),
            status_message=cat("status_message"),
            attributes=cat("attributes"),
            services=tuple(services),
            names=tuple(names),
        )

    def take(self, rows: np.ndarray) -> SpanTable:
        """The rows ``rows`` (int indices or a bool mask), same service/name codes."""
        rows = np.asarray(rows)
        if rows.dtype != bool:
            rows = rows.astype(np.intp, copy=False)
        return SpanTable(
            trace_id=self.trace_id[rows],
            span_id=self.span_id[rows],
            parent_id=self.parent_id[rows],
            service=self.service[rows],
            name=self.name[rows],
            kind=self.kind[rows],
            start_ns=self.start_ns[rows],
            end_ns=self.end_ns[rows],
            status=self.status[rows],
            status_message=self.status_message[rows],
            attributes=self.attributes[rows],
            services=self.services,
            names=self.names,
        )

    def in_window(self, window: tuple[int, int] | None) -> SpanTable:
        """The spans that overlap ``window`` (UNIX ns, inclusive); all of them for None."""
        if window is None:
            return self
        return self.take((self.end_ns >= window[0]) & (self.start_ns <= window[1]))

    def with_derived(
        self,
        *,
        trace_code: np.ndarray,
        trace_ids: tuple[str, ...],
        id_values: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> SpanTable:
        """This table with :attr:`trace_code`/:attr:`trace_ids` (and the ids' 64-bit values: span, parent,
        has_parent) already computed by a reader that had them cheaply; they must be what the properties
        would compute."""
        self.__dict__["_trace_codes"] = (trace_code, trace_ids)
        if id_values is not None:
            self.__dict__["_id_values"] = id_values
        return self

    def with_kinds(self, kind: np.ndarray) -> SpanTable:
        """This table with another kind column (int8 OTLP SpanKind codes); the derived columns already computed
        (parents, trace codes, durations), none of which depend on kinds, are carried over."""
        out = replace(self, kind=kind)
        columns = {f.name for f in fields(self)}
        out.__dict__.update((key, value) for key, value in self.__dict__.items() if key not in columns)
        return out

    # one row ----------------------------------------------------------------------------------------
    def span(self, row: int) -> Span:
        row = int(row)
        return Span(
            trace_id=self.trace_id[row],
            span_id=self.span_id[row],
            parent_id=self.parent_id[row],
            service=self.services[self.service[row]],
            name=self.names[self.name[row]],
            kind=_name_of(KIND_NAMES, self.kind[row]),
            start_ns=int(self.start_ns[row]),
            end_ns=int(self.end_ns[row]),
            status=_name_of(STATUS_NAMES, self.status[row]),
            status_message=self.status_message[row],
            attributes=self.attributes[row],
        )

    def service_code(self, name: str) -> int | None:
        return self._service_codes.get(name)

    def name_code(self, name: str) -> int | None:
        return self._name_codes.get(name)

    @cached_property
    def _service_codes(self) -> dict[str, int]:
        return {name: code for code, name in enumerate(self.services)}

    @cached_property
    def _name_codes(self) -> dict[str, int]:
        return {name: code for code, name in enumerate(self.names)}

    # derived columns --------------------------------------------------------------------------------
    @cached_property
    def trace_ids(self) -> tuple[str, ...]:
        """The distinct trace ids, in first-seen order: ``trace_ids[trace_code[row]]`` is the row's trace."""
        return self._trace_codes[1]

    @cached_property
    def trace_code(self) -> np.ndarray:
        """int32 code of each row's trace id into :attr:`trace_ids`."""
        return self._trace_codes[0]

    @cached_property
    def _trace_codes(self) -> tuple[np.ndarray, tuple[str, ...]]:
        codes: dict[str, int] = {}
        column = np.array(intern_codes(self.trace_id.tolist(), codes), dtype=np.int32)
        return column, tuple(codes)

    @cached_property
    def has_parent(self) -> np.ndarray:
        """bool per row: the span names a parent (``parent_id != ""``), whether or not it is in the table."""
        values = self._id_values
        return self.parent_id != "" if values is None else values[2]

    @cached_property
    def _id_values(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(span id values, parent id values, has_parent) when every id is 16 hex characters, else None."""
        span_u64, span_ok, _ = hex_u64(self.span_id)
        parent_u64, parent_ok, no_parent = hex_u64(self.parent_id)
        if not (span_ok.all() and (parent_ok | no_parent).all()):
            return None
        return span_u64, parent_u64, ~no_parent

    @cached_property
    def parent_row(self) -> np.ndarray:
        """int64 row of each span's parent in this table (same trace), -1 for a root or a parent not here."""
        values = self._id_values
        rows = None if values is None else _parent_rows_by_value(*values)
        if rows is None:  # ids that are not 16 hex, or span ids repeated: by dict
            rows = self._parent_rows_by_key()
        found = np.flatnonzero(rows >= 0)
        other_trace = self.trace_code[rows[found]] != self.trace_code[found]
        rows[found[other_trace]] = -1  # a parent id that names a span of another trace
        return rows

    def _parent_rows_by_key(self) -> np.ndarray:
        codes, span_ids = self.trace_code.tolist(), self.span_id.tolist()
        keyed = {(c, s): row for row, (c, s) in enumerate(zip(codes, span_ids))}
        return np.fromiter(
            (keyed.get((c, p), -1) if p else -1 for c, p in zip(codes, self.parent_id.tolist())),
            dtype=np.int64,
            count=len(self),
        )

    def children_count(self) -> np.ndarray:
        """int64 number of children (in this table) of each row."""
        parents = self.parent_row
        return np.bincount(parents[parents >= 0], minlength=len(self)).astype(np.int64)


_HEX_NIBBLE = np.full(256, 255, dtype=np.uint8)
_HEX_NIBBLE[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = np.arange(16, dtype=np.uint8)
_HEX_NIBBLE[np.frombuffer(b"ABCDEF", dtype=np.uint8)] = np.arange(10, 16, dtype=np.uint8)


def hex_u64(ids: np.ndarray | Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The 64-bit values of 16-hex-character ids (vectorised), a mask of the ids that are such, and a mask
    of the empty ids."""
    n = len(ids)
    if not n:
        return np.empty(0, dtype=np.uint64), np.empty(0, dtype=bool), np.empty(0, dtype=bool)
    try:
        raw = np.asarray(ids, dtype="S17").view(np.uint8).reshape(n, 17)
    except (UnicodeEncodeError, ValueError, TypeError):
        return np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=bool), np.asarray(ids, dtype=object) == ""
    nibbles = _HEX_NIBBLE[raw[:, :16]]
    ok = (raw[:, 16] == 0) & (nibbles.max(axis=1) != 255)
    packed = (nibbles[:, 0::2] << 4) | nibbles[:, 1::2]  # (n, 8) bytes, most significant first
    return np.ascontiguousarray(packed).view(">u8").reshape(n).astype(np.uint64), ok, raw[:, 0] == 0


def unique_ints(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of an integer array, by one sort: what ``np.unique(values)`` gives.

    numpy 2.3+ answers a bare ``np.unique`` of integers from a hash table, which is tens of times slower than
    sorting on the analysis's arrays of a million parent/child keys (0.6 s against 6 ms). Small non-negative
    codes (at most a few per value, such as (pair, service) keys) are counted in place instead of sorted.
    """
    return int_counts(values)[0]


def int_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`unique_ints` of ``values`` and how many times each occurs (``np.unique(values, return_counts=True)``)."""
    flat = values.ravel()
    if len(flat) and flat.dtype.kind in "iu":
        low, high = int(flat.min()), int(flat.max())
        if low >= 0 and high < 4 * len(flat) + 1024:
            counts = np.bincount(flat, minlength=high + 1)
            keys = np.flatnonzero(counts)
            return keys.astype(flat.dtype), counts[keys]
    ordered = np.sort(flat)
    if not len(ordered):
        return ordered, np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    return ordered[starts], np.diff(np.append(starts, len(ordered))).astype(np.int64)


def _parent_rows_by_value(span_u64: np.ndarray, parent_u64: np.ndarray, has_parent: np.ndarray) -> np.ndarray | None:
    """Parent rows by sorting the span ids' values; None when a span id repeats (then keys need the trace)."""
    order = np.argsort(span_u64)
    ordered = span_u64[order]
    if len(ordered) > 1 and (ordered[1:] == ordered[:-1]).any():
        return None
    rows = np.full(len(span_u64), -1, dtype=np.int64)
    children = np.flatnonzero(has_parent)
    wanted = parent_u64[children]
    by_value = np.argsort(wanted)
    position = np.searchsorted(ordered, wanted[by_value])
    position[position == len(ordered)] = 0
    hit = ordered[position] == wanted[by_value] if len(ordered) else np.zeros(len(wanted), dtype=bool)
    rows[children[by_value[hit]]] = order[position[hit]]
    return rows


def _name_of(names: tuple[str, ...], code: int) -> str:
    code = int(code)
    return names[code] if 0 <= code < len(names) else str(code)


#: The span times a table holds: signed 64-bit nanoseconds (numpy ``int64``), as OTLP's ``fixed64`` times are
#: read; 2**63 ns is the year 2262.
NS_RANGE = (-(2**63), 2**63 - 1)


def _check_ns(values: Sequence[int]) -> None:
    """ValueError (a span a reader counts as unreadable) when a time does not fit the table's ``int64``."""
    if values and (min(values) < NS_RANGE[0] or max(values) > NS_RANGE[1]):
        bad = next(v for v in values if not NS_RANGE[0] <= v <= NS_RANGE[1])
        raise ValueError(f"span time {bad} ns is outside the signed 64-bit range of span times")


_Scalar = str | int | float | bool | None


def _nested(depth: int) -> Any:
    """An attribute value: a scalar, or lists and maps of them nested at most ``depth`` deep (OTLP's
    ``AnyValue`` arrays and kvlists), as a type the readers' msgspec decoders check while they decode."""
    value: Any = _Scalar
    for _ in range(depth):
        value = Union[_Scalar, list[value], dict[str, value]]  # noqa: UP007 - built at run time
    return value


#: How deep a span attribute's value may nest (OTel's attributes are flat; kvlists add a level or two). A span
#: with a deeper one is unreadable, counted and located by its reader, never a RecursionError.
ATTRIBUTE_DEPTH = 8
AttributeValue = _nested(ATTRIBUTE_DEPTH)


class TableBuilder:
    """Accumulates spans row by row (for sources whose records are not one flat row each)."""

    def __init__(self) -> None:
        self.trace_id: list[str] = []
        self.span_id: list[str] = []
        self.parent_id: list[str] = []
        self.service: list[str] = []
        self.name: list[str] = []
        self.kind: list[int] = []
        self.start_ns: list[int] = []
        self.end_ns: list[int] = []
        self.status: list[int] = []
        self.status_message: list[str | None] = []
        self.attributes: list[dict] = []

    def __len__(self) -> int:
        return len(self.span_id)

    def add(
        self,
        trace_id: str,
        span_id: str,
        parent_id: str,
        service: str,
        name: str,
        kind: int,
        start_ns: int,
        end_ns: int,
        status: int,
        status_message: str | None,
        attributes: dict,
    ) -> None:
        _check_ns((start_ns, end_ns))
        self.trace_id.append(trace_id)
        self.span_id.append(span_id)
        self.parent_id.append(parent_id)
        self.service.append(service)
        self.name.append(name)
        self.kind.append(kind)
        self.start_ns.append(start_ns)
        self.end_ns.append(end_ns)
        self.status.append(status)
        self.status_message.append(status_message)
        self.attributes.append(attributes)

    def extend(self, **columns: list) -> None:
        """Append equal-length column lists (every column of :meth:`add`, by name)."""
        for name in ("start_ns", "end_ns"):
            _check_ns(columns.get(name) or ())
        for name, values in columns.items():
            getattr(self, name).extend(values)

    def truncate(self, rows: int) -> None:
        """Drop every row after the first ``rows`` (a record that turned out unreadable half-way)."""
        for column in (
            self.trace_id,
            self.span_id,
            self.parent_id,
            self.service,
            self.name,
            self.kind,
            self.start_ns,
            self.end_ns,
            self.status,
            self.status_message,
            self.attributes,
        ):
            del column[rows:]

    def build(self) -> SpanTable:
        return SpanTable.from_columns(
            trace_id=self.trace_id,
            span_id=self.span_id,
            parent_id=self.parent_id,
            service=self.service,
            name=self.name,
            kind=self.kind,
            start_ns=self.start_ns,
            end_ns=self.end_ns,
            status=self.status,
            status_message=self.status_message,
            attributes=self.attributes,
        )
