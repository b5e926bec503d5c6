"""Replay failed requests byte for byte: did they fail because of the fault, or would they fail anyway?

Called by the runner after a drill (and by tests) in the harness process, with
plain threads and ``http.client`` (no gevent). Each sample from
``failing_samples.jsonl`` is re-sent to the same endpoint with **the same body
bytes** (checked against ``payload_digest``) and the same headers except:

- ``traceparent``: a fresh trace id, recorded next to the original one, so the
  replay's server spans are told apart from the run's;
- ``X-Request-Id``: ``<original>-replay``;
- ``Idempotency-Key``: by default a new key, ``<original>-replay``. A replay is
  a new request made after the run: with the original key, a server or router
  that deduplicates would answer from (or refuse because of) the run's attempt
  and the replay would test nothing. Pass ``same_idempotency_key=True`` to
  re-send the original key instead, which is how one checks that deduplication
  works.

One line per replay goes to ``replay.jsonl`` (``out_path``).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from drill.load.payload import new_trace_ids, payload_digest, traceparent
from drill.load.records import ErrorClass, classify_status
from drill.load.samples import FailingSample, read_samples
from drill.load.sse import LineKind, classify_line, parse_error_message, parse_usage

__all__ = ["ReplaySummary", "ReplayResult", "replay_failing"]


@dataclass(frozen=True)
class ReplayResult:
    """One replayed request; times in ms from its send."""

    request_id: str
    original_request_id: str
    logical_id: str
    pool: str
    trace_id: str
    original_trace_id: str
    idempotency_key: str
    original_error: str | None
    original_status: int | None
    payload_digest: str
    sent_ts: float
    status: int | None = None
    error: str | None = None
    error_detail: str | None = None
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    chunks: int = 0
    completion_tokens: int | None = None

    @property
    def reproduced(self) -> bool:
        return self.error is not None and self.error == self.original_error


@dataclass(frozen=True)
class ReplaySummary:
    """How the replays went: counts by outcome (``ok`` or an error class)."""

    samples: int                 # samples in the file
    replayed: int
    skipped_digest_mismatch: int  # samples whose stored body no longer matches its digest (not sent)
    outcomes: dict[str, int] = field(default_factory=dict)
    reproduced: int = 0          # replays that failed with the original error class
    out_path: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def replay_failing(samples_path: Path, out_path: Path, target_url: str, *, concurrency: int, timeout_s: float,
                   max_samples: int, headers: dict[str, str] | None = None,
                   same_idempotency_key: bool = False) -> ReplaySummary:
    """Re-send up to ``max_samples`` failed requests to ``target_url``, ``concurrency`` at a time.

    Each replay has ``timeout_s`` seconds. Appends one JSON line per replay to
    ``out_path``. Never raises for request failures (they are outcomes).
    """
    samples = list(read_samples(samples_path))
    chosen = [s for s in samples if payload_digest(s.body) == s.payload_digest][:max_samples]
    mismatched = sum(1 for s in samples if payload_digest(s.body) != s.payload_digest)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    results: list[ReplayResult] = []
    with out_path.open("a", encoding="utf-8") as out, ThreadPoolExecutor(max(1, concurrency)) as pool:
        def one(sample: FailingSample) -> None:
            result = _replay_one(sample, target_url, timeout_s, headers or {}, same_idempotency_key)
            with lock:
                out.write(json.dumps(asdict(result), separators=(",", ":")) + "\n")
                out.flush()
                results.append(result)
        list(pool.map(one, chosen))
    outcomes = Counter(r.error or "ok" for r in results)
    return ReplaySummary(samples=len(samples), replayed=len(results), skipped_digest_mismatch=mismatched,
                         outcomes=dict(outcomes), reproduced=sum(r.reproduced for r in results),
                         out_path=str(out_path))


def _replay_one(sample: FailingSample, target_url: str, timeout_s: float, extra: dict[str, str],
                same_key: bool) -> ReplayResult:
    trace_id, span_id = new_trace_ids()
    key = sample.idempotency_key if same_key else f"{sample.idempotency_key}-replay"
    headers = {**sample.headers, **extra, "traceparent": traceparent(trace_id, span_id),
               "X-Request-Id": f"{sample.request_id}-replay", "Idempotency-Key": key}
    base = dict(request_id=headers["X-Request-Id"], original_request_id=sample.request_id,
                logical_id=sample.logical_id, pool=sample.pool, trace_id=trace_id, original_trace_id=sample.trace_id,
                idempotency_key=key, original_error=sample.error, original_status=sample.status,
                payload_digest=sample.payload_digest, sent_ts=round(time.time(), 6))
    return ReplayResult(**base, **_exchange(target_url, sample, headers, timeout_s))


def _exchange(target_url: str, sample: FailingSample, headers: dict[str, str], timeout_s: float) -> dict:
    url = urlsplit(target_url)
    conn_cls = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(url.hostname, url.port, timeout=timeout_s)
    start = time.perf_counter()
    deadline = start + timeout_s
    try:
        conn.request(sample.method, url.path.rstrip("/") + sample.endpoint, body=sample.body, headers=headers)
        response = conn.getresponse()
        return _read_response(response, sample.stream, start, deadline)
    except TimeoutError as exc:
        return {"error": ErrorClass.TIMEOUT.value, "error_detail": f"{type(exc).__name__}: {exc}"}
    except ConnectionRefusedError as exc:
        return {"error": ErrorClass.CONNECTION_ERROR.value, "error_detail": f"{type(exc).__name__}: {exc}"}
    except (OSError, http.client.HTTPException) as exc:
        return {"error": ErrorClass.CONNECTION_RESET.value, "error_detail": f"{type(exc).__name__}: {exc}"}
    finally:
        conn.close()


def _read_response(response: http.client.HTTPResponse, stream: bool, start: float, deadline: float) -> dict:
    status = response.status
    error = classify_status(status)
    if error is not None or not stream:
        data = response.read()
        out = {"status": status, "e2e_ms": _ms(start)}
        if error is not None:
            return {**out, "error": error.value, "error_detail": f"HTTP {status}: {parse_error_message(data)}"}
        return {**out, "completion_tokens": parse_usage(data)[1]}
    return {"status": status, **_read_stream(response, start, deadline)}


def _read_stream(response: http.client.HTTPResponse, start: float, deadline: float) -> dict:
    out: dict = {"chunks": 0}
    while True:
        if time.perf_counter() > deadline:
            return {**out, "error": ErrorClass.TIMEOUT.value, "error_detail": "replay timeout"}
        line = response.readline()
        if not line:
            return {**out, "error": ErrorClass.CONNECTION_RESET.value,
                    "error_detail": "the stream ended before data: [DONE]", "e2e_ms": _ms(start)}
        kind = classify_line(line)
        if kind is LineKind.CONTENT:
            out["chunks"] += 1
            out.setdefault("ttft_ms", _ms(start))
        elif kind is LineKind.USAGE:
            out["completion_tokens"] = parse_usage(line)[1]
        elif kind is LineKind.ERROR and "error" not in out:
            out.update(error=ErrorClass.MID_STREAM_ERROR.value, error_detail=parse_error_message(line))
        elif kind is LineKind.DONE:
            out["e2e_ms"] = _ms(start)
            return out


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000.0, 3)
