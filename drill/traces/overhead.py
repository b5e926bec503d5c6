"""How much of each request's latency the router added, measured from its spans.

A request through the reference stack's router has the router's SERVER span (from the moment the router read the
request to the moment it finished the answer) and, in the same trace, the replica's ``llm_request`` (vLLM's span:
from the request's arrival at the replica to its last token, ``gen_ai.latency.time_to_first_token`` after its
arrival). Per request (the last ``llm_request`` of a trace: after router retries, the attempt that answered):

- **router-added E2E** = the router SERVER span's duration minus ``llm_request``'s: the forwarding before the
  replica saw the request plus the relay after its last token (loopback network included, which is
  microseconds);
- **router-added TTFT** = when the router wrote the first chunk to the client (``drill.router.first_chunk_unix_ns``
  on its CLIENT span, set by ``drill/stack/router/proxy.py``) minus when the replica produced the first token
  (``llm_request`` start + its TTFT attribute) plus the forwarding before it: the router's share of the client's
  TTFT. Streams only; a router that does not set the attribute leaves it unknown;
- **router share of TTFT** = router-added TTFT / the TTFT the router's own client saw (router SERVER start to its
  first chunk).

Times on both sides are the same host's wall clock (the stack runs on one machine); a router on another host
would add its clock skew, which :mod:`drill.traces.completeness` measures.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from drill.traces.table import SpanTable, kind_code

__all__ = ["FIRST_CHUNK_ATTRIBUTE", "ROUTER_SERVICE", "RouterHop", "router_hops"]

ROUTER_SERVICE = "drill-router"
FIRST_CHUNK_ATTRIBUTE = "drill.router.first_chunk_unix_ns"
LLM_REQUEST = "llm_request"
TTFT_ATTRIBUTE = "gen_ai.latency.time_to_first_token"
_SERVER, _CLIENT = kind_code("SERVER"), kind_code("CLIENT")


@dataclass(frozen=True)
class RouterHop:
    """One request's router overhead (ms); ``start_ns`` is when the router read it (UNIX ns)."""

    trace_id: str
    start_ns: int
    added_e2e_ms: float
    added_ttft_ms: float | None
    ttft_share: float | None


def router_hops(table: SpanTable) -> list[RouterHop]:
    """Every trace with both a router SERVER span and a replica ``llm_request``: what the router added."""
    service = table.service_code(ROUTER_SERVICE)
    llm_code = table.name_code(LLM_REQUEST)
    if service is None or llm_code is None or not len(table):
        return []
    codes = table.trace_code
    router = _first_by_trace(codes, np.flatnonzero((table.service == service) & (table.kind == _SERVER)), table)
    llm = _last_by_trace(codes, np.flatnonzero(table.name == llm_code), table)
    clients = np.flatnonzero((table.service == service) & (table.kind == _CLIENT))
    first_chunk: dict[int, int] = {}
    for row in clients[np.argsort(table.start_ns[clients], kind="stable")].tolist():
        value = table.attributes[row].get(FIRST_CHUNK_ATTRIBUTE)
        if isinstance(value, int) and not isinstance(value, bool):
            first_chunk[int(codes[row])] = value
    hops = []
    for trace, r in router.items():
        row = llm.get(trace)
        if row is not None:
            hops.append(_hop(table, r, row, first_chunk.get(trace)))
    return hops


def _hop(table: SpanTable, router: int, llm: int, first_chunk_ns: int | None) -> RouterHop:
    r_start, r_end = int(table.start_ns[router]), int(table.end_ns[router])
    l_start, l_end = int(table.start_ns[llm]), int(table.end_ns[llm])
    added_ttft = share = None
    ttft = table.attributes[llm].get(TTFT_ATTRIBUTE)
    if first_chunk_ns is not None and isinstance(ttft, (int, float)) and not isinstance(ttft, bool):
        first_token_ns = l_start + int(round(float(ttft) * 1e9))
        added_ttft = ((l_start - r_start) + (first_chunk_ns - first_token_ns)) / 1e6
        seen = (first_chunk_ns - r_start) / 1e6
        share = round(added_ttft / seen, 4) if seen > 0 else None
    return RouterHop(
        trace_id=table.trace_id[router],
        start_ns=r_start,
        added_e2e_ms=((r_end - r_start) - (l_end - l_start)) / 1e6,
        added_ttft_ms=added_ttft,
        ttft_share=share,
    )


def _first_by_trace(codes: np.ndarray, rows: np.ndarray, table: SpanTable) -> dict[int, int]:
    ordered = rows[np.argsort(table.start_ns[rows], kind="stable")][::-1]
    return {int(codes[row]): int(row) for row in ordered.tolist()}  # the earliest wins: written last


def _last_by_trace(codes: np.ndarray, rows: np.ndarray, table: SpanTable) -> dict[int, int]:
    ordered = rows[np.argsort(table.start_ns[rows], kind="stable")]
    return {int(codes[row]): int(row) for row in ordered.tolist()}  # the latest wins: written last
