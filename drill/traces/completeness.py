"""How complete a run's traces are, so that a check can say "too thin to judge" instead of passing.

Definitions (all over one :class:`~drill.traces.table.SpanTable`):

root
    The span a trace starts at: its earliest span whose parent is not in the table, when that span has
    no parent at all, or when it is a SERVER/CONSUMER span (its parent is a *remote* caller that exports
    no spans, e.g. the load client, whose ``traceparent`` names a span nobody exports). ``remote_roots``
    counts the second kind.
orphan
    Any other span whose parent is set but not in the table (a lost or not-yet-exported span).
trace without root
    A trace whose earliest parentless-in-table span is not a root by the rule above (e.g. only an
    INTERNAL span whose parent was lost).
clock skew
    For a parent and a child in *different services* (so maybe on different clocks), how far the
    child starts before its parent, in ms: only a clock behind makes that happen. A few ms are normal
    between hosts (NTP, two timers); ``skewed_spans`` counts children beyond ``skew_tolerance_ms``.
backwards span
    A span that ends before it starts (a negative duration): a broken exporter or clock. Counted and said in
    the notes, as no latency judgement can rest on it.
overrun
    A child that ends after its parent: work the caller no longer waited for (a timed-out or cancelled
    request whose callee kept going), or a callee clock that runs ahead (a late start cannot be told
    from queueing before the callee's span began, so it is not counted as skew). ``overrun_spans``
    counts children (any services) ending more than ``skew_tolerance_ms`` after their parent, and
    ``overrun_ms`` is the largest such amount. Measured on embedded-stack runs (one host, one clock):
    no child started before its parent, while overloaded replicas ended spans up to 30 s after the
    router had given up.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from drill.traces.table import SpanTable

__all__ = ["Completeness", "SKEW_TOLERANCE_MS", "measure_completeness"]

#: Cross-service clock skew (ms) tolerated without counting the child as skewed.
SKEW_TOLERANCE_MS = 5.0
#: Share of orphan spans above which the traces are too broken to judge.
MAX_ORPHAN_SHARE = 0.5

NO_SPANS = "the target exported no spans"

_SERVER, _CONSUMER = 2, 5


@dataclass(frozen=True)
class Completeness:
    spans: int
    traces: int
    orphans: int  # parent set but not in the table (remote-parented roots excepted)
    traces_without_root: int
    spans_per_trace_p50: float | None
    clock_skew_ms: float  # largest cross-service early start of a child (0 when none)
    skew_by_service_pair: dict[str, float]  # "parent-service -> child-service": largest skew, ms (> 0 only)
    unreadable: int  # records the source could not read
    unreadable_where: tuple[str, ...]
    requests: int = 0  # client records given (0: none)
    requests_with_spans: int = 0  # of those, with at least one span of their trace id
    spans_per_request_p50: float | None = None
    remote_roots: int = 0  # roots whose parent is a remote caller (see module doc)
    skewed_spans: int = 0  # cross-service children beyond skew_tolerance_ms
    skew_tolerance_ms: float = SKEW_TOLERANCE_MS
    overrun_spans: int = 0  # children ending > skew_tolerance_ms after their parent
    overrun_ms: float = 0.0  # the largest such overrun
    backwards_spans: int = 0  # spans that end before they start (a negative duration: a broken exporter or clock)
    backwards_where: str = ""  # the first of them: "trace T span S"

    @property
    def orphan_share(self) -> float:
        return self.orphans / self.spans if self.spans else 0.0

    def thin_reason(self, min_spans: int) -> str | None:
        """Why these traces are too thin to judge a span-based check, or None when they are enough."""
        if self.spans == 0:
            if self.unreadable:
                return f"no span could be read ({self.unreadable} unreadable record(s))"
            return NO_SPANS
        if self.spans < min_spans:
            return f"only {self.spans} span(s), fewer than the {min_spans} needed"
        if self.orphan_share > MAX_ORPHAN_SHARE:
            return f"{self.orphans} of {self.spans} spans have a parent that was never exported"
        if self.requests and self.requests_with_spans == 0:
            return (
                f"none of the {self.requests} client requests has a span of its trace id (is traceparent propagated?)"
            )
        return None

    def notes(self) -> tuple[str, ...]:
        """Lines for a verdict's notes: skew, orphans, unreadable records (empty when all is clean)."""
        out = []
        if self.clock_skew_ms > 0:
            pair = max(self.skew_by_service_pair, key=lambda p: self.skew_by_service_pair[p])
            verdict = (
                "tolerated"
                if self.skewed_spans == 0
                else f"{self.skewed_spans} span(s) beyond {self.skew_tolerance_ms:g} ms"
            )
            out.append(f"clock skew up to {self.clock_skew_ms:.3f} ms ({pair}); {verdict}")
        if self.overrun_spans:
            out.append(
                f"{self.overrun_spans} span(s) ended after their parent (up to {self.overrun_ms:.3f} ms): "
                "work the caller no longer waited for"
            )
        if self.backwards_spans:
            out.append(
                f"{self.backwards_spans} span(s) end before they start (first: {self.backwards_where}): "
                "their durations are negative, so they are not evidence of normal or abnormal latency"
            )
        if self.orphans:
            out.append(f"{self.orphans} orphan span(s) (parent not exported)")
        if self.traces_without_root:
            out.append(f"{self.traces_without_root} trace(s) without a root span")
        if self.unreadable:
            first = f" (first: {self.unreadable_where[0]})" if self.unreadable_where else ""
            out.append(f"{self.unreadable} unreadable span record(s){first}")
        return tuple(out)

    def to_json(self) -> dict:
        return {
            "spans": self.spans,
            "traces": self.traces,
            "orphans": self.orphans,
            "traces_without_root": self.traces_without_root,
            "remote_roots": self.remote_roots,
            "spans_per_trace_p50": self.spans_per_trace_p50,
            "clock_skew_ms": self.clock_skew_ms,
            "skew_by_service_pair": dict(self.skew_by_service_pair),
            "skewed_spans": self.skewed_spans,
            "skew_tolerance_ms": self.skew_tolerance_ms,
            "overrun_spans": self.overrun_spans,
            "overrun_ms": self.overrun_ms,
            "backwards_spans": self.backwards_spans,
            "backwards_where": self.backwards_where,
            "unreadable": self.unreadable,
            "unreadable_where": list(self.unreadable_where),
            "requests": self.requests,
            "requests_with_spans": self.requests_with_spans,
            "spans_per_request_p50": self.spans_per_request_p50,
        }


def measure_completeness(
    table: SpanTable,
    records: Sequence | None = None,
    unreadable: int = 0,
    where: Iterable[str] = (),
    skew_tolerance_ms: float = SKEW_TOLERANCE_MS,
) -> Completeness:
    """Completeness of ``table``; ``records`` are client :class:`~drill.rundir.records.RequestRecord` s (or
    anything with a ``trace_id``), ``unreadable``/``where`` what the source could not read."""
    n = len(table)
    if n == 0:
        return Completeness(
            spans=0,
            traces=0,
            orphans=0,
            traces_without_root=0,
            spans_per_trace_p50=None,
            clock_skew_ms=0.0,
            skew_by_service_pair={},
            unreadable=unreadable,
            unreadable_where=tuple(where),
            requests=len(records or ()),
            spans_per_request_p50=(0.0 if records else None),
            skew_tolerance_ms=skew_tolerance_ms,
        )
    roots = _roots(table)
    skew, pairs, skewed = _clock_skew(table, skew_tolerance_ms)
    overruns, overrun_ms = _overruns(table, skew_tolerance_ms)
    per_trace = np.bincount(table.trace_code, minlength=len(table.trace_ids))
    requests, with_spans, per_request = _per_request(table, per_trace, records)
    backwards = np.flatnonzero(table.end_ns < table.start_ns)
    first_backwards = (
        f"trace {table.trace_ids[table.trace_code[backwards[0]]]} span {table.span_id[backwards[0]]}"
        if len(backwards)
        else ""
    )
    return Completeness(
        spans=n,
        traces=len(table.trace_ids),
        orphans=roots.orphans,
        traces_without_root=roots.without_root,
        spans_per_trace_p50=float(np.median(per_trace)),
        clock_skew_ms=skew,
        skew_by_service_pair=pairs,
        unreadable=unreadable,
        unreadable_where=tuple(where),
        requests=requests,
        requests_with_spans=with_spans,
        spans_per_request_p50=per_request,
        remote_roots=roots.remote,
        skewed_spans=skewed,
        skew_tolerance_ms=skew_tolerance_ms,
        overrun_spans=overruns,
        overrun_ms=overrun_ms,
        backwards_spans=len(backwards),
        backwards_where=first_backwards,
    )


@dataclass(frozen=True)
class _Roots:
    orphans: int
    without_root: int
    remote: int
    is_root: np.ndarray = field(repr=False)


def root_mask(table: SpanTable) -> np.ndarray:
    """bool per row: the row is its trace's root (see the module doc)."""
    return _roots(table).is_root


def _roots(table: SpanTable) -> _Roots:
    top = np.flatnonzero(table.parent_row < 0)  # parent absent from the table (or none)
    traces = table.trace_code[top]
    # earliest top span per trace: sort by (trace, start), keep the first of each trace
    order = np.lexsort((table.start_ns[top], traces))
    first = np.ones(len(order), dtype=bool)
    first[1:] = traces[order][1:] != traces[order][:-1]
    earliest = top[order[first]]
    no_parent = ~table.has_parent[earliest]
    remote = ~no_parent & np.isin(table.kind[earliest], (_SERVER, _CONSUMER))
    is_root = np.zeros(len(table), dtype=bool)
    is_root[earliest[no_parent | remote]] = True
    missing_parent = (table.parent_row < 0) & table.has_parent
    orphans = int(np.count_nonzero(missing_parent & ~is_root))
    without_root = len(table.trace_ids) - int(np.count_nonzero(no_parent | remote))
    return _Roots(orphans=orphans, without_root=without_root, remote=int(np.count_nonzero(remote)), is_root=is_root)


def _clock_skew(table: SpanTable, tolerance_ms: float) -> tuple[float, dict[str, float], int]:
    child = np.flatnonzero(table.parent_row >= 0)
    parent = table.parent_row[child]
    cross = table.service[child] != table.service[parent]
    child, parent = child[cross], parent[cross]
    skew_ns = np.maximum(table.start_ns[parent] - table.start_ns[child], 0)
    positive = skew_ns > 0
    if not positive.any():
        return 0.0, {}, 0
    pairs: dict[str, float] = {}
    p_service, c_service, amount = table.service[parent][positive], table.service[child][positive], skew_ns[positive]
    for ps, cs in set(zip(p_service.tolist(), c_service.tolist())):
        worst = amount[(p_service == ps) & (c_service == cs)].max()
        pairs[f"{table.services[ps]} -> {table.services[cs]}"] = float(worst) / 1e6
    skewed = int(np.count_nonzero(skew_ns > tolerance_ms * 1e6))
    return float(skew_ns.max()) / 1e6, pairs, skewed


def _overruns(table: SpanTable, tolerance_ms: float) -> tuple[int, float]:
    child = np.flatnonzero(table.parent_row >= 0)
    over = table.end_ns[child] - table.end_ns[table.parent_row[child]]
    beyond = over > tolerance_ms * 1e6
    return int(np.count_nonzero(beyond)), (float(over[beyond].max()) / 1e6 if beyond.any() else 0.0)


def _per_request(table: SpanTable, per_trace: np.ndarray, records: Sequence | None) -> tuple[int, int, float | None]:
    if not records:
        return 0, 0, None
    index = {trace: code for code, trace in enumerate(table.trace_ids)}
    counts = [int(per_trace[index[t]]) if (t := (r.trace_id or "").lower()) in index else 0 for r in records]
    return len(records), sum(1 for c in counts if c), float(np.median(counts))
