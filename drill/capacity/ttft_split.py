"""The target's spans of a capacity run, split per rate point, and each point's TTFT split into queueing and prefill.

One OTLP receiver serves the whole run (the stack is told its endpoint once, at start) and writes the run's
``spans.jsonl``; :func:`split_spans` copies each span into the ``spans.jsonl`` of the point whose request carried
its trace id (the file of the run stays whole: the raw evidence). The embedded stack exports, per request, an
``llm_request`` span that carries, as vLLM's does, the time in queue (waiting for the scheduler), in prefill (the
prompt's forward passes, up to the first token) and in decode as attributes; with its teaching span shape, as the
children ``queue``, ``prefill`` and ``decode`` (stack-contracts.md §7). Both are read. A span line that cannot be
read is counted, never dropped silently.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from drill.rundir.jsonl import ReadReport, read_jsonl
from drill.rundir.records import RequestRecord
from drill.stats import percentile
from drill.traces.request_phases import LLM_REQUEST, PHASE_ATTRIBUTES

__all__ = ["SpanSplit", "TtftSplit", "split_spans", "ttft_split"]

QUEUE, PREFILL = "queue", "prefill"


@dataclass
class SpanSplit:
    """What :func:`split_spans` read and where it put it."""

    read: int = 0
    unreadable: int = 0
    unmatched: int = 0  # spans of no point's request (probes, the naive estimate's requests, late exports)
    written: dict[str, int] = field(default_factory=dict)  # point directory -> spans written
    #: trace id -> span name -> duration (ms) of its first span of that name
    durations: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class TtftSplit:
    """One pool at one point: how much of the time to first token the stack's spans put in queueing and prefill."""

    pool: str
    joined: int  # attempts with a queue span
    of: int  # attempts
    queue_p50_ms: float | None
    queue_p95_ms: float | None
    prefill_p50_ms: float | None
    prefill_p95_ms: float | None


def split_spans(spans_path: Path, owners: Mapping[str, Path]) -> SpanSplit:
    """Copy every span of ``spans_path`` whose trace id is in ``owners`` into ``<owner>/spans.jsonl`` (created, never
    overwritten) and collect the queue and prefill durations per trace."""
    report = ReadReport(spans_path)
    out = SpanSplit()
    handles: dict[Path, IO[str]] = {}
    try:
        for span in read_jsonl(spans_path, _span_dict, report):
            out.read += 1
            trace = str(span.get("trace_id") or "").lower()
            owner = owners.get(trace)
            if owner is None:
                out.unmatched += 1
                continue
            handle = handles.get(owner)
            if handle is None:
                handle = handles[owner] = open(owner / "spans.jsonl", "x", encoding="utf-8")
            handle.write(json.dumps(span, separators=(",", ":")) + "\n")
            out.written[str(owner)] = out.written.get(str(owner), 0) + 1
            _collect_phases(out.durations.setdefault(trace, {}), span)
    finally:
        for handle in handles.values():
            handle.close()
    out.unreadable = report.bad_count + (1 if report.torn_last_line is not None else 0)
    return out


def _collect_phases(phases: dict[str, float], span: dict) -> None:
    """The span's duration under its name, and for vLLM's span shape (an ``llm_request`` with the phases as
    attributes, in seconds: :mod:`drill.traces.request_phases`) the phases it carries; the first of each name is
    kept."""
    name, duration = span.get("name"), span.get("duration_ms")
    if isinstance(name, str) and isinstance(duration, (int, float)) and not isinstance(duration, bool):
        phases.setdefault(name, float(duration))
    attributes = span.get("attributes")
    if name != LLM_REQUEST or not isinstance(attributes, dict):
        return
    for phase, attribute in PHASE_ATTRIBUTES:
        seconds = attributes.get(attribute)
        if (
            isinstance(seconds, (int, float))
            and not isinstance(seconds, bool)
            and math.isfinite(seconds)
            and seconds >= 0
        ):
            phases.setdefault(phase, float(seconds) * 1000.0)


def _span_dict(data: object) -> dict:
    if not isinstance(data, dict):
        raise ValueError("a span line must be a JSON object")
    return data


def ttft_split(pool: str, records: Sequence[RequestRecord], durations: Mapping[str, Mapping[str, float]]) -> TtftSplit:
    """Queueing and prefill (p50, p95, ms) of ``records``, from their traces' spans: every attempt the spans cover,
    successful or not (past capacity, the slowest attempts are the ones cut off while they queued)."""
    traces = [durations.get(r.trace_id.lower(), {}) for r in records if r.trace_id]
    queue = [t[QUEUE] for t in traces if QUEUE in t]
    prefill = [t[PREFILL] for t in traces if PREFILL in t]
    return TtftSplit(
        pool=pool,
        joined=len(queue),
        of=len(records),
        queue_p50_ms=percentile(queue, 50),
        queue_p95_ms=percentile(queue, 95),
        prefill_p50_ms=percentile(prefill, 50),
        prefill_p95_ms=percentile(prefill, 95),
    )
