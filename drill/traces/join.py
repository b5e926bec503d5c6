"""Client records joined to their server spans, and how far the client's numbers can be trusted.

The load client sends each attempt with a fresh W3C ``traceparent`` and records its trace id
(:class:`~drill.rundir.records.RequestRecord`). Every span the servers exported for that attempt
carries the same trace id, so the join is by trace id alone.

**Measurement truth** puts the client-seen and the server-seen latency of each joined request side
by side. Client values are measured from the send (``ttft_ms``/``e2e_ms`` minus ``schedule_lag_ms``,
since the records count from the intended start). Server values come from the replica:

- server TTFT: the ``llm_request`` span's ``gen_ai.latency.time_to_first_token`` (s, vLLM's
  attribute), else its ``prefill`` child's end minus the replica SERVER span's start;
- server E2E: the replica SERVER span's duration (the HTTP span that is ``llm_request``'s parent, in the
  reference stack's teaching span shape), else, as vLLM exports no HTTP span, ``llm_request``'s own
  duration (arrival to finish).

With several ``llm_request`` spans in one trace (router retries) the last one is used. The
difference client - server is what the network, the router and the client itself add.

Without spans, a server that reports its own per-request timings (llama.cpp's ``timings``, kept in
:attr:`~drill.rundir.records.RequestRecord.server_timings`) is the server truth instead
(:func:`timings_truth`): server TTFT is its prompt evaluation (``prompt_ms``), server E2E prompt
evaluation plus generation (``prompt_ms + predicted_ms``). Neither counts the time the request waited
for a free slot, so there the difference also holds the server's own queueing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import numpy as np

from drill.traces.table import SpanTable, kind_code

__all__ = ["JoinedRequests", "MeasurementTruth", "TruthRow", "percentiles", "timings_truth"]

LLM_REQUEST = "llm_request"
PREFILL = "prefill"
TTFT_ATTRIBUTE = "gen_ai.latency.time_to_first_token"
PERCENTILES = (50, 95, 99)
_SERVER = kind_code("SERVER")


def percentiles(values: Sequence[float]) -> dict[str, float] | None:
    """``{"p50": .., "p95": .., "p99": ..}`` of ``values`` (linear interpolation), None when empty."""
    if len(values) == 0:
        return None
    points = np.percentile(np.asarray(values, dtype=float), PERCENTILES)
    return {f"p{p}": float(v) for p, v in zip(PERCENTILES, points)}


@dataclass(frozen=True)
class TruthRow:
    """One joined request: what the client saw and what the server saw, in ms."""

    request_id: str
    trace_id: str
    client_ttft_ms: float | None
    server_ttft_ms: float | None
    client_e2e_ms: float | None
    server_e2e_ms: float | None

    @property
    def ttft_diff_ms(self) -> float | None:
        return _diff(self.client_ttft_ms, self.server_ttft_ms)

    @property
    def e2e_diff_ms(self) -> float | None:
        return _diff(self.client_e2e_ms, self.server_e2e_ms)

    def to_json(self) -> dict:
        return {
            "request_id": self.request_id,
            "trace_id": self.trace_id,
            "client_ttft_ms": self.client_ttft_ms,
            "server_ttft_ms": self.server_ttft_ms,
            "client_e2e_ms": self.client_e2e_ms,
            "server_e2e_ms": self.server_e2e_ms,
        }


def _diff(client: float | None, server: float | None) -> float | None:
    return None if client is None or server is None else client - server


@dataclass(frozen=True)
class MeasurementTruth:
    """Client vs server TTFT and E2E per joined request, and the percentiles of client - server (ms)."""

    rows: tuple[TruthRow, ...]
    ttft_diff_ms: dict[str, float] | None  # p50/p95/p99 of client - server TTFT
    e2e_diff_ms: dict[str, float] | None  # p50/p95/p99 of client - server E2E
    source: str = "spans"  # where the server values come from: "spans", or "server_timings" (llama.cpp)

    @property
    def joined(self) -> int:
        return len(self.rows)

    def only(self, request_ids: set[str]) -> MeasurementTruth:
        """The same measurement over the rows of ``request_ids`` alone (one phase's, one window's)."""
        return _truth(tuple(r for r in self.rows if r.request_id in request_ids), self.source)

    def to_json(self, max_rows: int = 0) -> dict:
        """Summary (and the first ``max_rows`` rows) for a verdict's ``observed``."""
        data: dict[str, Any] = {
            "source": self.source,
            "joined": self.joined,
            "ttft_diff_ms": self.ttft_diff_ms,
            "e2e_diff_ms": self.e2e_diff_ms,
            "with_server_ttft": sum(1 for r in self.rows if r.ttft_diff_ms is not None),
            "with_server_e2e": sum(1 for r in self.rows if r.e2e_diff_ms is not None),
        }
        if max_rows:
            data["rows"] = [r.to_json() for r in self.rows[:max_rows]]
        return data


class JoinedRequests:
    """Client :class:`~drill.rundir.records.RequestRecord` s joined to the table's spans by trace id."""

    def __init__(self, table: SpanTable, records: Sequence) -> None:
        self.table = table
        self.records = tuple(records)

    @cached_property
    def rows_by_trace(self) -> dict[str, np.ndarray]:
        """Every trace id of the table -> its rows (int64, in start order)."""
        table = self.table
        if not len(table):
            return {}
        order = np.lexsort((table.start_ns, table.trace_code))
        codes = table.trace_code[order]
        cuts = np.flatnonzero(codes[1:] != codes[:-1]) + 1
        groups = np.split(order.astype(np.int64), cuts)
        return {table.trace_ids[int(codes[g0])]: rows for g0, rows in zip(np.r_[0, cuts], groups)}

    @cached_property
    def _by_request(self) -> dict[str, Any]:  # request id -> its RequestRecord
        return {r.request_id: r for r in self.records}

    def server_spans(self, request_id: str) -> list[int]:
        """Rows of the spans of this request's trace (start order); [] when none or unknown."""
        record = self._by_request.get(request_id)
        if record is None or not record.trace_id:
            return []
        return self.rows_by_trace.get(record.trace_id.lower(), np.empty(0, dtype=np.int64)).tolist()

    @property
    def joined(self) -> list:
        """The records that have at least one span."""
        rows = self.rows_by_trace
        return [r for r in self.records if r.trace_id and r.trace_id.lower() in rows]

    def measurement_truth(self) -> MeasurementTruth:
        rows = tuple(
            _truth_row(self.table, record, self.rows_by_trace[record.trace_id.lower()]) for record in self.joined
        )
        return _truth(rows, "spans")


def _truth(rows: tuple[TruthRow, ...], source: str) -> MeasurementTruth:
    ttft = [d for r in rows if (d := r.ttft_diff_ms) is not None]
    e2e = [d for r in rows if (d := r.e2e_diff_ms) is not None]
    return MeasurementTruth(rows=rows, ttft_diff_ms=percentiles(ttft), e2e_diff_ms=percentiles(e2e), source=source)


def timings_truth(records: Sequence) -> MeasurementTruth:
    """Client vs the server's own timings, for the successful records that carry them (see the module)."""
    rows = tuple(
        TruthRow(
            request_id=r.request_id,
            trace_id=r.trace_id.lower(),
            client_ttft_ms=_client_ms(r, r.ttft_ms),
            server_ttft_ms=r.server_timings.prompt_ms,
            client_e2e_ms=_client_ms(r, r.e2e_ms),
            server_e2e_ms=r.server_timings.prompt_ms + r.server_timings.predicted_ms,
        )
        for r in records
        if r.server_timings is not None and r.ok
    )
    return _truth(rows, "server_timings")


class _ClientRecord(Protocol):
    """What the truth rows read of a :class:`~drill.rundir.records.RequestRecord`."""

    @property
    def request_id(self) -> str: ...
    @property
    def trace_id(self) -> str: ...
    @property
    def schedule_lag_ms(self) -> float | None: ...
    @property
    def ttft_ms(self) -> float | None: ...
    @property
    def e2e_ms(self) -> float | None: ...


def _client_ms(record: _ClientRecord, value: float | None) -> float | None:
    if value is None:
        return None
    return value - (record.schedule_lag_ms or 0.0)


def _truth_row(table: SpanTable, record: _ClientRecord, rows: np.ndarray) -> TruthRow:
    server_ttft = server_e2e = None
    llm_code, prefill_code = table.name_code(LLM_REQUEST), table.name_code(PREFILL)
    llm_rows = rows[table.name[rows] == llm_code] if llm_code is not None else rows[:0]
    if len(llm_rows):
        llm = int(llm_rows[-1])
        http = _replica_http_span(table, llm)
        outer = http if http >= 0 else llm
        server_e2e = (int(table.end_ns[outer]) - int(table.start_ns[outer])) / 1e6
        server_ttft = _server_ttft(table, rows, llm, http, prefill_code)
    return TruthRow(
        request_id=record.request_id,
        trace_id=record.trace_id.lower(),
        client_ttft_ms=_client_ms(record, record.ttft_ms),
        server_ttft_ms=server_ttft,
        client_e2e_ms=_client_ms(record, record.e2e_ms),
        server_e2e_ms=server_e2e,
    )


def _replica_http_span(table: SpanTable, llm: int) -> int:
    """The row of ``llm_request``'s parent when it is the replica's own HTTP SERVER span (same service), else -1."""
    parent = int(table.parent_row[llm])
    if parent < 0 or table.service[parent] != table.service[llm] or table.kind[parent] != _SERVER:
        return -1
    return parent


def _server_ttft(table: SpanTable, rows: np.ndarray, llm: int, http: int, prefill_code: int | None) -> float | None:
    value = table.attributes[llm].get(TTFT_ATTRIBUTE)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) * 1e3
    if http < 0 or prefill_code is None:
        return None
    prefill = rows[(table.name[rows] == prefill_code) & (table.parent_row[rows] == llm)]
    if not len(prefill):
        return None
    return (int(table.end_ns[int(prefill[0])]) - int(table.start_ns[http])) / 1e6
