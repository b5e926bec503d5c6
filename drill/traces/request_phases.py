"""vLLM's request phases, read from its ``llm_request`` span's attributes into phase spans.

vLLM exports one span per request, ``llm_request`` (``vllm/v1/engine/output_processor.py``,
``OutputProcessor.do_tracing``), and no child spans: where the time went is in its attributes, in seconds
(``vllm/tracing/utils.py``, ``SpanAttributes``):

- ``gen_ai.latency.time_in_queue`` = ``scheduled_ts - queued_ts`` (waiting for the scheduler);
- ``gen_ai.latency.time_in_model_prefill`` = ``first_token_ts - scheduled_ts``;
- ``gen_ai.latency.time_in_model_decode`` = ``last_token_ts - first_token_ts``;
- ``gen_ai.latency.time_to_first_token`` = ``first_token_ts - arrival_time`` (places the phases in the span).

A reader that judges spans by name would never see a ``queue`` span on vLLM, so a queue flood could not be
named as the queue. :func:`with_phase_spans` adds, for each ``llm_request`` span that has these attributes and
no phase children of its own, the children the attributes describe: ``queue``, ``prefill`` and ``decode``
(INTERNAL spans of the same service, each carrying ``drill.phase_from`` = the attribute it came from). They are
placed from the first token back (``arrival + TTFT``), or from the span's start when TTFT is missing, and kept
inside the span. A request aborted before it was ever scheduled (``finish_reasons`` ``["abort"]``, none of the
attributes) spent all of its time in the queue: its ``queue`` child is the whole span.

Every trace source applies it when it reads (:meth:`drill.traces.sources.TableSource.table`), and says in its
report how many phase spans it derived. The reference stack's teaching option (``tracing.phase_spans``) exports
real children; a span that has them gets none derived.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

from drill.rundir.files import loads_json
from drill.traces.table import SpanTable, TableBuilder, kind_code

__all__ = ["LLM_REQUEST", "PHASE_ATTRIBUTES", "PHASE_FROM", "with_phase_spans"]

LLM_REQUEST = "llm_request"
#: (phase span name, vLLM's attribute in seconds), in the order a request goes through them.
PHASE_ATTRIBUTES = (
    ("queue", "gen_ai.latency.time_in_queue"),
    ("prefill", "gen_ai.latency.time_in_model_prefill"),
    ("decode", "gen_ai.latency.time_in_model_decode"),
)
TTFT_ATTRIBUTE = "gen_ai.latency.time_to_first_token"
FINISH_REASONS = "gen_ai.response.finish_reasons"
#: The attribute a derived phase span carries: which ``llm_request`` attribute it was made from.
PHASE_FROM = "drill.phase_from"
NEVER_SCHEDULED = "finish_reasons [abort] without time_in_queue: never scheduled"
_INTERNAL = kind_code("INTERNAL")


def with_phase_spans(table: SpanTable) -> tuple[SpanTable, int]:
    """``table`` with the phase spans of its ``llm_request`` spans added, and how many were added."""
    code = table.name_code(LLM_REQUEST)
    if code is None:
        return table, 0
    rows = np.flatnonzero(table.name == code)
    have_children = _with_phase_children(table)
    builder = TableBuilder()
    for row in rows.tolist():
        if row in have_children:
            continue
        span_id = table.span_id[row]
        for name, begin, end, source in _phases(
            table.attributes[row], int(table.start_ns[row]), int(table.end_ns[row])
        ):
            builder.add(
                table.trace_id[row],
                _derived_id(table.trace_id[row], span_id, name),
                span_id,
                table.services[table.service[row]],
                name,
                _INTERNAL,
                begin,
                end,
                0,
                None,
                {PHASE_FROM: source},
            )
    if not len(builder):
        return table, 0
    return SpanTable.concat([table, builder.build()]), len(builder)


def _with_phase_children(table: SpanTable) -> set[int]:
    """Rows of spans that already have a child named like a phase (the stack's teaching spans)."""
    codes = [c for name, _ in PHASE_ATTRIBUTES if (c := table.name_code(name)) is not None]
    if not codes:
        return set()
    parents = table.parent_row
    children = np.isin(table.name, codes) & (parents >= 0)
    return set(parents[children].tolist())


def _phases(attributes: dict, start: int, end: int) -> list[tuple[str, int, int, str]]:
    """(name, start ns, end ns, source attribute) of each phase the attributes give, inside [start, end]."""
    seconds = {name: _seconds(attributes.get(attribute)) for name, attribute in PHASE_ATTRIBUTES}
    if all(value is None for value in seconds.values()):
        if _aborted(attributes):
            return [("queue", start, end, NEVER_SCHEDULED)]
        return []
    queue, prefill, decode = (seconds[name] for name, _ in PHASE_ATTRIBUTES)
    ttft = _seconds(attributes.get(TTFT_ATTRIBUTE))
    if ttft is not None:
        first_token = start + _ns(ttft)
        scheduled = first_token - _ns(prefill or 0.0)
        queued = scheduled - _ns(queue or 0.0)
    else:
        queued = start
        scheduled = queued + _ns(queue or 0.0)
        first_token = scheduled + _ns(prefill or 0.0)
    bounds = {
        "queue": (queued, scheduled),
        "prefill": (scheduled, first_token),
        "decode": (first_token, first_token + _ns(decode or 0.0)),
    }
    out = []
    for name, attribute in PHASE_ATTRIBUTES:
        if seconds[name] is None:
            continue
        begin, finish = (min(max(t, start), end) for t in bounds[name])
        out.append((name, begin, max(begin, finish), attribute))
    return out


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None


def _ns(seconds: float) -> int:
    return int(round(seconds * 1e9))


def _aborted(attributes: dict) -> bool:
    reasons = attributes.get(FINISH_REASONS)
    if isinstance(reasons, str):
        try:
            reasons = loads_json(reasons)
        except ValueError:
            return False
    return isinstance(reasons, list) and reasons == ["abort"]


def _derived_id(trace_id: str, span_id: str, name: str) -> str:
    """A stable 16-hex span id for the phase ``name`` of one span (the same on every read)."""
    return hashlib.blake2b(f"{trace_id}:{span_id}:{name}".encode(), digest_size=8).hexdigest()
