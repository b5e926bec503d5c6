"""Where a span's time went: its self time, and the link time around calls made without a CLIENT span.

- :func:`self_time`: a span's duration less the time of its children on its critical path (Jaeger's
  critical path, one step deep: the last-finishing child and the children that ended before it
  started; a child running in parallel with it was not waited for). Clipped to the span: a child's
  clock skew cannot make it negative; a child in another service counts whole (up to the span's length)
  even where clock skew puts part of it outside the span.
- :func:`direct_links`: for a call into another service with no CLIENT span between (the caller's
  SERVER or INTERNAL span is the callee's SERVER span's parent), the time around the callee's span:
  from the previous sibling's end (the parent's start when that sibling still ran) to the callee
  span's start, plus from its end to the next sibling's start — when the next one started before it
  ended (calls in parallel), to the parent's end if it is the last call to end, else nothing: that
  time is the wait for a slower sibling. It holds the network both ways and the caller's own
  work next to the call: a delay on that link shows there, and not in the callee's spans.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from drill.traces.ranktest import order_by
from drill.traces.table import KIND_NAMES, SpanTable

__all__ = ["DirectLinks", "critical_children", "cross_service_children", "direct_links", "self_time"]

_CLIENT = KIND_NAMES.index("CLIENT")


def critical_children(table: SpanTable, parent: np.ndarray, child: np.ndarray | None = None) -> np.ndarray:
    """bool per row: the span is on its parent's critical path (Jaeger's: from the last-finishing child
    back, each time the child that finished last before the current one started). ``child``: the rows
    looked at (every child of each of their parents), when not all of them; the others are False."""
    if child is None:
        child = np.flatnonzero(parent >= 0)
    up = parent[child]
    only = np.bincount(up, minlength=len(table))[up] == 1
    critical = np.zeros(len(table), dtype=bool)
    critical[child[only]] = True  # an only child is on the path
    rows = child[~only]
    if not len(rows):
        return critical
    t0 = int(table.start_ns.min())
    by_end = rows[order_by(parent[rows], table.end_ns[rows] - t0)]
    last = np.ones(len(by_end), dtype=bool)
    last[:-1] = parent[by_end[1:]] != parent[by_end[:-1]]
    before = _finished_before(table, parent, by_end, t0)
    on_path = np.zeros(len(by_end), dtype=bool)  # per position in by_end: no table-sized columns
    frontier = np.flatnonzero(last)
    while len(frontier):
        on_path[frontier] = True
        frontier = before[frontier]
        frontier = frontier[(frontier >= 0) & ~on_path[np.maximum(frontier, 0)]]
    critical[by_end[on_path]] = True
    return critical


def _finished_before(table: SpanTable, parent: np.ndarray, by_end: np.ndarray, t0: int) -> np.ndarray:
    """int64 per position in ``by_end``: the position of the sibling that ended last at or before its start (-1:
    none).

    ``by_end`` is sorted by (parent, end): a binary search of each child's start among its parent's ends
    (one int64 key per (parent, time)), kept when the end found is the same parent's."""
    up = parent[by_end]
    dense = np.cumsum(np.concatenate(([0], up[1:] != up[:-1])))  # parent rank, ascending along by_end
    end, start = table.end_ns[by_end] - t0, table.start_ns[by_end] - t0
    if int(dense[-1]) >= 2**21 or int(max(end.max(), start.max())) >= 2**42:
        return _finished_before_merged(table, parent, by_end)
    keys = (dense << 42) | np.maximum(end, 0)
    found = np.searchsorted(keys, (dense << 42) | np.maximum(start, 0), side="right") - 1
    found -= found == np.arange(len(by_end))  # a zero-length child finds its own end: the one before it
    same = (found >= 0) & (dense[np.maximum(found, 0)] == dense)
    return np.where(same, found, -1)


def _finished_before_merged(table: SpanTable, parent: np.ndarray, by_end: np.ndarray) -> np.ndarray:
    """:func:`_finished_before` by one sort of the ends and starts together (any ids and times)."""
    n = len(by_end)
    times = np.concatenate((table.end_ns[by_end], table.start_ns[by_end]))
    owners = np.concatenate((parent[by_end], parent[by_end]))
    is_start = np.concatenate((np.zeros(n, dtype=bool), np.ones(n, dtype=bool)))
    order = np.lexsort((is_start, times, owners))
    position = np.where(~is_start[order], order, -1)  # index into by_end of each end event
    seen = np.maximum.accumulate(position)
    starts = np.flatnonzero(is_start[order])
    found = seen[starts]
    at = order[starts] - n  # the position in by_end of each start
    found -= found == at  # a zero-length child finds its own end: the one before it
    same = (found >= 0) & (parent[by_end[np.maximum(found, 0)]] == parent[by_end[at]])
    out = np.full(len(by_end), -1, dtype=np.int64)
    out[at[same]] = found[same]
    return out


def self_time(table: SpanTable, parent: np.ndarray, spans: np.ndarray | None = None) -> np.ndarray:
    """float ns per row (per row of ``spans``, when given): the duration less its critical-path children's
    time inside it (never below 0)."""
    child = None
    if spans is not None:  # only their children
        wanted = np.zeros(len(table) + 1, dtype=bool)  # the last entry, False, is where a root's -1 points
        wanted[spans] = True
        child = np.flatnonzero(wanted[parent])
    rows = np.flatnonzero(critical_children(table, parent, child))
    up = parent[rows]
    start, end = table.start_ns[rows], table.end_ns[rows]
    up_start, up_end = table.start_ns[up], table.end_ns[up]
    inside = np.minimum(end, up_end) - np.maximum(start, up_start)
    # a child in another process has another clock: one that sticks out of its parent is skewed, not partly
    # outside it (Jaeger's clock-skew adjuster moves it back in); all of it, up to the parent's length, was waited
    # for, so a slower callee never shows as its caller's self time through the part the skew cut off
    cross = np.flatnonzero(table.service[rows] != table.service[up])
    inside[cross] = np.minimum(end[cross] - start[cross], up_end[cross] - up_start[cross])
    if spans is None:
        waited = np.bincount(up, weights=np.maximum(inside, 0), minlength=len(table))
        return np.maximum(table.duration_ns - waited, 0.0)
    if len(spans) > 1 and not bool((spans[1:] > spans[:-1]).all()):  # rows in any order: counted per row
        waited = np.bincount(up, weights=np.maximum(inside, 0), minlength=len(table))[spans]
    else:  # sorted rows (the ranking's): counted per position, no table-sized column
        waited = np.bincount(np.searchsorted(spans, up), weights=np.maximum(inside, 0), minlength=len(spans))
    return np.maximum(table.end_ns[spans] - table.start_ns[spans] - waited, 0.0)


@dataclass(frozen=True)
class DirectLinks:
    """One entry per call into another service without a CLIENT span."""

    child: np.ndarray  # int64 row of the callee's span
    parent: np.ndarray  # int64 row of the caller's span
    gap: np.ndarray  # float ns of link time around the call


def _last_end(up: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per entry of ``up`` (sorted, grouped by parent), the latest ``end`` among its parent's entries."""
    first = np.flatnonzero(np.concatenate(([True], up[1:] != up[:-1])))
    latest = np.maximum.reduceat(end, first)
    return np.repeat(latest, np.diff(np.append(first, len(up))))


def cross_service_children(table: SpanTable, parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, their parent rows) of the spans whose parent is a span of another service."""
    cross = table.service[parent] != table.service  # one gather, no compaction of all (a top's -1: the last row)
    cross &= parent >= 0
    child = np.flatnonzero(cross)
    return child, parent[child]


def direct_links(
    table: SpanTable, parent: np.ndarray, cross: tuple[np.ndarray, np.ndarray] | None = None
) -> DirectLinks:
    """``cross``: :func:`cross_service_children`, when the caller has it already."""
    _, up = cross_service_children(table, parent) if cross is None else cross
    up = up[table.kind[up] != _CLIENT]
    if not len(up):
        empty = np.zeros(0, dtype=np.int64)
        return DirectLinks(empty, empty, np.zeros(0))
    callers = np.zeros(len(table), dtype=bool)
    callers[up] = True
    rows = np.flatnonzero(parent >= 0)
    rows = rows[callers[parent[rows]]]  # only the children of spans that call another service without a CLIENT span
    t0 = int(table.start_ns.min())
    order = rows[order_by(parent[rows], table.start_ns[rows] - t0)]
    up = parent[order]
    same_before = np.zeros(len(order), dtype=bool)
    same_before[1:] = up[1:] == up[:-1]
    same_after = np.zeros(len(order), dtype=bool)
    same_after[:-1] = same_before[1:]
    start, end = table.start_ns[order], table.end_ns[order]
    prev_end = np.where(same_before, np.roll(end, 1), table.start_ns[up])
    prev_end = np.where(prev_end <= start, prev_end, table.start_ns[up])
    next_start = np.roll(start, -1)
    # after a call: until the next one starts when it starts later (calls in sequence), else — for the last
    # call, or one the next overlapped (in parallel) — until the parent's end if it is the last call to end;
    # a call that ended while a sibling still ran has no time after it (that is the wait for the sibling)
    latest = end >= _last_end(up, end)
    after = np.where(same_after & (next_start >= end), next_start - end, np.where(latest, table.end_ns[up] - end, 0))
    gap = (np.maximum(start - prev_end, 0) + np.maximum(after, 0)).astype(np.float64)
    cross = (table.service[order] != table.service[up]) & (table.kind[up] != _CLIENT)
    return DirectLinks(order[cross], up[cross], gap[cross])
