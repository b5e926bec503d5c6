"""Span kinds inferred from the traces' shape, for services whose spans record none.

The analysis reads a call between services from span kinds: a CLIENT span in the caller over a SERVER span in
the callee holds the link's own time (network, proxy, the callee's accept queue), and a CLIENT span that no
SERVER span answers names a callee that exports no spans (a database, an external API). Many traces carry no
kinds at all: span tables exported to CSV by fault-injection benchmarks and trace stores, older
instrumentations, converted Zipkin or Jaeger data. There every span is UNSPECIFIED, a slow link is blamed on
its caller, and an uninstrumented dependency cannot be named.

For a service none of whose spans has a kind, the kind of each of its (service, span name) pairs is inferred
from what its spans' places in the traces agree on, as OpenTelemetry's trace API defines the kinds (the "SpanKind"
section of the specification: SERVER for the remote side of a synchronous call, CLIENT for the caller's side):

- **SERVER** when most of its spans start a trace (no parent id) or are called from another service (their
  parent is another service's span);
- else **CLIENT** when most of its spans that have a parent in the same service are calls: every child in
  another service, or no child and an attribute that names the remote peer (``peer.service``,
  ``server.address``, ``net.peer.name``, ``db.system``, ``rpc.service``, ``url.full``, ``http.url``);
- else the kind stays UNSPECIFIED (the analysis treats it as INTERNAL).

The pair decides, not each span: a CLIENT span whose SERVER span was lost (sampling, a full export queue) is
still a CLIENT span. A service that records a kind on any span keeps every kind as recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from drill.traces.table import KIND_NAMES, SpanTable

__all__ = ["PEER_ATTRIBUTES", "InferredKinds", "infer_kinds", "with_inferred_kinds"]

#: Attributes that name the remote side of a call (OpenTelemetry semantic conventions, old and new names): a span
#: with one and no child, under a span of its own service, is a call to a peer that exports no spans.
PEER_ATTRIBUTES = (
    "peer.service",
    "server.address",
    "net.peer.name",
    "db.system",
    "rpc.service",
    "url.full",
    "http.url",
)

_SERVER = KIND_NAMES.index("SERVER")
_CLIENT = KIND_NAMES.index("CLIENT")
_UNSPECIFIED = KIND_NAMES.index("UNSPECIFIED")


@dataclass(frozen=True)
class InferredKinds:
    """The kind column with inferred kinds, and the services they were inferred for (none: the column as recorded)."""

    kind: np.ndarray  # int8 per row
    services: tuple[str, ...]  # services whose spans record no kind, in the table's order
    server_pairs: int = 0  # (service, span name) pairs inferred SERVER
    client_pairs: int = 0  # ... inferred CLIENT

    def text(self) -> str | None:
        """In words, for reports (None: no kind was inferred)."""
        if not self.services:
            return None
        shown = ", ".join(self.services[:5]) + (f" and {len(self.services) - 5} more" if len(self.services) > 5 else "")
        return (
            f"span kinds inferred from the traces' shape for {len(self.services)} service(s) that record none "
            f"({shown}): {self.server_pairs} operation(s) SERVER, {self.client_pairs} CLIENT"
        )


def infer_kinds(table: SpanTable) -> InferredKinds:
    """The kinds of ``table`` with those of services that record none inferred (see the module doc)."""
    service = table.service.astype(np.int64)
    recorded = np.bincount(service[table.kind != _UNSPECIFIED], minlength=len(table.services)) > 0
    kindless = ~recorded & (np.bincount(service, minlength=len(table.services)) > 0)
    if not kindless.any():
        return InferredKinds(table.kind, ())
    rows = np.flatnonzero(kindless[service])
    server, client, called = _votes(table, service, rows)
    pair = service[rows] * max(len(table.names), 1) + table.name[rows].astype(np.int64)
    keys, code = np.unique(pair, return_inverse=True)
    spans = np.bincount(code, minlength=len(keys))
    servers = np.bincount(code, weights=server, minlength=len(keys))
    calls = np.bincount(code, weights=client, minlength=len(keys))
    under = np.bincount(code, weights=called, minlength=len(keys))
    pair_kind = np.full(len(keys), _UNSPECIFIED, dtype=table.kind.dtype)
    pair_kind[(under > 0) & (calls * 2 > under)] = _CLIENT
    pair_kind[servers * 2 > spans] = _SERVER
    kind = table.kind.copy()
    kind[rows] = pair_kind[code]
    names = tuple(table.services[s] for s in np.flatnonzero(kindless).tolist())
    return InferredKinds(kind, names, int((pair_kind == _SERVER).sum()), int((pair_kind == _CLIENT).sum()))


def _votes(table: SpanTable, service: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of ``rows``: whether it looks like a SERVER span (a trace's start, or called from another service),
    like a CLIENT span (not that, and a call: every child in another service, or no child and a peer attribute),
    and whether it can tell (not a SERVER span: it has a child, or a parent id)."""
    parent = table.parent_row
    up = parent[rows]
    found = up >= 0
    from_other = np.zeros(len(rows), dtype=bool)
    from_other[found] = service[up[found]] != service[rows[found]]
    server = from_other | ~table.has_parent[rows]
    child = np.flatnonzero(parent >= 0)
    out = service[child] != service[parent[child]]
    children = table.children_count()[rows]
    outgoing = np.bincount(parent[child[out]], minlength=len(table))[rows]
    leaf = np.flatnonzero(~server & (children == 0))
    peer = np.zeros(len(rows), dtype=bool)
    peer[leaf] = [any(key in attributes for key in PEER_ATTRIBUTES) for attributes in table.attributes[rows[leaf]]]
    client = ~server & (((children > 0) & (outgoing == children)) | peer)
    return server, client, ~server & ((children > 0) | peer)


def with_inferred_kinds(table: SpanTable) -> tuple[SpanTable, InferredKinds]:
    """``table`` with the kinds :func:`infer_kinds` gives (the same table when none was inferred)."""
    inferred = infer_kinds(table)
    return (table.with_kinds(inferred.kind) if inferred.services else table), inferred
