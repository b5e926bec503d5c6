"""Per-request raw records: one JSON line per attempt in ``requests.jsonl``.

This module does not import Locust; the harness reads records with it.

Times: ``intended_ts`` and ``sent_ts`` are wall-clock UNIX seconds (shared by
every process on the host, so they line up with the journal and with spans).
Every ``*_ms`` offset (headers, TTFT, chunks, E2E) is measured **from the
intended start**, so a stalled server or a late client shows up in full (no
coordinated omission). Subtract ``schedule_lag_ms`` to get the from-send values
that vLLM's benchmark reports. TPOT follows vLLM's definition: it excludes the
first token, ``(e2e - ttft) / (completion_tokens - 1)``
(``docs/serving-facts.md`` §5.1); ITL is the list of gaps between content chunks.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from drill.fieldtypes import check_fields, field_rules
from drill.rundir.jsonl import ReadReport, read_jsonl
from drill.stats import percentile

__all__ = [
    "ErrorClass",
    "RecordTail",
    "RequestRecord",
    "ServerTimings",
    "classify_status",
    "classify_stream_error",
    "latency_values",
    "read_records",
]


class ErrorClass(str, enum.Enum):
    REFUSED = "refused"  # 429 / 503 (the status, or the code of an error event in a 200 stream): admission said no
    CLIENT_ERROR = "client_error"  # other 4xx (e.g. 400 prompt too long)
    SERVER_ERROR = "server_error"  # other 5xx (e.g. 500 engine dead)
    TIMEOUT = "timeout"  # the client's timeout expired
    CONNECTION_RESET = "connection_reset"  # reset or closed mid-request
    CONNECTION_ERROR = "connection_error"  # could not connect
    MID_STREAM_ERROR = "mid_stream_error"  # HTTP 200, then an error event in the stream (not a refusal's code)
    CLIENT_DROP = "client_drop"  # never sent: the in-flight cap was reached
    CANCELLED = "cancelled"  # still in flight when the drain period at stop ran out


def classify_status(status: int) -> ErrorClass | None:
    if status < 400:
        return None
    if status in (429, 503):
        return ErrorClass.REFUSED
    return ErrorClass.CLIENT_ERROR if status < 500 else ErrorClass.SERVER_ERROR


def classify_stream_error(code: int | None) -> ErrorClass:
    """The class of an error event inside a stream whose HTTP status was 200, from the ``code`` it carries.

    vLLM answers a streamed request that its admission control refuses after the 200 has gone out with
    ``data: {"error": {..., "code": 503}}`` then ``data: [DONE]``: the refusal is in the event, not the status
    line. A 429/503 code is therefore a refusal like the status would be; any other error event is a
    mid-stream error.
    """
    return ErrorClass.REFUSED if code in (429, 503) else ErrorClass.MID_STREAM_ERROR


@dataclass(frozen=True, slots=True)
class ServerTimings:
    """The server's own account of one request, where it gives one (llama.cpp's ``timings`` object, in the final
    streamed chunk or the response body): tokens and milliseconds of prompt evaluation and of generation, and
    the prompt tokens reused from its cache. Time waiting for a free slot is in neither."""

    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float
    cache_n: int | None = None

    @classmethod
    def from_json(cls, data: object) -> ServerTimings | None:
        """A ``timings`` object as the server sent it; None when it is not one (a field missing or not a number)."""
        if not isinstance(data, dict):
            return None
        numbers: dict[str, float] = {}
        for key in ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms"):
            value = data.get(key)
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                return None
            numbers[key] = value
        cache = data.get("cache_n")
        return cls(
            prompt_n=int(numbers["prompt_n"]),
            prompt_ms=float(numbers["prompt_ms"]),
            predicted_n=int(numbers["predicted_n"]),
            predicted_ms=float(numbers["predicted_ms"]),
            cache_n=cache if isinstance(cache, int) and not isinstance(cache, bool) else None,
        )

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class RequestRecord:
    request_id: str  # unique per attempt (sent as X-Request-Id)
    logical_id: str  # shared by all attempts of one logical request
    pool: str
    attempt: int  # 1-based
    intended_ts: float  # UNIX s: when the arrival was scheduled
    sent_ts: float | None  # UNIX s: when it was actually sent (None: never sent)
    schedule_lag_ms: float | None  # sent - intended
    status: int | None = None  # HTTP status (None: no response)
    error: ErrorClass | None = None
    error_detail: str | None = None
    headers_ms: float | None = None  # from the intended start
    ttft_ms: float | None = None  # first content chunk, from the intended start
    e2e_ms: float | None = None  # last byte, from the intended start
    chunk_offsets_ms: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None  # from the server's usage
    completion_tokens: int | None = None
    planned_input_tokens: int | None = None
    planned_output_tokens: int | None = None
    trace_id: str = ""
    idempotency_key: str = ""
    payload_digest: str = ""  # sha256 of the exact request body bytes
    endpoint: str = "chat"
    stream: bool = True
    retry_after_s: float | None = None
    stream_error_code: int | None = None  # the code of an error event in a 200 stream (vLLM: 503 = refused)
    burst: str | None = None  # the queue_flood burst that produced it, if any
    worker: str | None = None
    output_digest: str | None = None  # sha256 of the generated text (controls; every temperature-0 answer on demand)
    output_head: list[str] | None = None  # its first tokens (drill.load.output.HEAD_TOKENS), beside the digest
    server_timings: ServerTimings | None = None  # the server's own timings of the request, where it reports them

    @property
    def ok(self) -> bool:
        return self.error is None and self.status is not None and self.status < 400

    @property
    def tpot_ms(self) -> float | None:
        """vLLM bench TPOT: (E2E - TTFT) / (output tokens - 1); None with <= 1 token."""
        n = self.completion_tokens
        if not self.ok or self.ttft_ms is None or self.e2e_ms is None or not n or n <= 1:
            return None
        end = self.chunk_offsets_ms[-1] if self.chunk_offsets_ms else self.e2e_ms
        return (end - self.ttft_ms) / (n - 1)

    def measured_from_send(self) -> RequestRecord:
        """This attempt with its latencies (status line, first chunk, chunk offsets, last byte) measured from its send
        instead of its intended start: ``schedule_lag_ms``, the generator's own lateness, taken off. What the target
        did, without the harness's part; the gaps (ITL, TPOT) are the same."""
        lag = self.schedule_lag_ms or 0.0
        if not lag:
            return self
        return replace(
            self,
            headers_ms=None if self.headers_ms is None else self.headers_ms - lag,
            ttft_ms=None if self.ttft_ms is None else self.ttft_ms - lag,
            e2e_ms=None if self.e2e_ms is None else self.e2e_ms - lag,
            chunk_offsets_ms=[offset - lag for offset in self.chunk_offsets_ms],
            schedule_lag_ms=0.0,
        )

    def itl_ms(self) -> list[float]:
        """Gaps between successive content chunks (vLLM bench ITL)."""
        offs = self.chunk_offsets_ms
        return [b - a for a, b in zip(offs, offs[1:])]

    def metric_ms(self, metric: str, pct: float) -> float | None:
        """This request's own value of an SLO metric (``ttft``, ``e2e``, ``tpot``; ``itl``: the ``pct`` percentile
        of its gaps), in ms; None when it has none (e.g. the TPOT of a one-token answer)."""
        if metric == "ttft":
            return self.ttft_ms
        if metric == "e2e":
            return self.e2e_ms
        if metric == "tpot":
            return self.tpot_ms
        return percentile(self.itl_ms(), pct)

    def to_json(self) -> str:
        # A shallow dict, not dataclasses.asdict: asdict deep-copies every chunk offset, which
        # cost the load generator about a third of its CPU at 30k chunks/s. Same output.
        data = {name: getattr(self, name) for name in _FIELD_NAMES}
        if self.error is not None:
            data["error"] = self.error.value
        if self.server_timings is not None:
            data["server_timings"] = self.server_timings.to_dict()
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict) -> RequestRecord:
        """The record of one ``requests.jsonl`` line; ValueError naming the field when a value is not of the type
        the field documents (``"ttft_ms": "fast"``), so the reader counts the line instead of a check crashing."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        check_fields(_FIELD_RULES, values)
        if values.get("error") is not None:
            values["error"] = ErrorClass(values["error"])
        if values.get("server_timings") is not None:
            values["server_timings"] = ServerTimings.from_json(values["server_timings"])
        return cls(**values)


_FIELD_NAMES = tuple(f.name for f in fields(RequestRecord))


_FIELD_RULES = field_rules(RequestRecord)


def latency_values(records: Iterable[RequestRecord], metric: str, from_send: bool = False) -> list[float]:
    """Every value of ``metric`` (ttft, tpot, itl, e2e; ms) the records carry; ITL gives every gap of every record.
    ``from_send``: TTFT and E2E measured from each attempt's send instead of its intended start (its
    ``schedule_lag_ms`` taken off); the other metrics do not start at the send and are as they are."""
    if metric == "itl":
        return [gap for r in records for gap in r.itl_ms()]
    if metric == "tpot":
        return [t for r in records if (t := r.tpot_ms) is not None]
    attr = "ttft_ms" if metric == "ttft" else "e2e_ms"
    if from_send:
        records = map(RequestRecord.measured_from_send, records)
    return [v for r in records if (v := getattr(r, attr)) is not None]


def read_records(path: Path, report: ReadReport | None = None) -> Iterator[RequestRecord]:
    """Records of a ``requests.jsonl``; a torn last line (crash mid-write) or an unreadable line is
    counted in ``report`` (see :mod:`drill.rundir.jsonl`), never dropped silently."""
    return read_jsonl(path, RequestRecord.from_dict, report)


class RecordTail:
    """Reads complete new lines of a growing ``requests.jsonl`` while the run writes it (the stop conditions and
    the live status line); a line it cannot read is skipped there, and counted when the file is read after the run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def read_new(self) -> list[RequestRecord]:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        out = []
        for line in lines:
            try:
                out.append(RequestRecord.from_dict(json.loads(line)))
            except (ValueError, TypeError):
                continue
        return out
