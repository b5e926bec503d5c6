"""Ranked suspects: which services the fault window's evidence points at, pooled per service.

Per (service, span name) pair with spans in the fault window (see ``docs/trace-analysis.md``):

1. **Self time** of every span: its duration minus the time of its children on its critical path
   (clipped to the span), so a caller that only waits for a slow callee is not itself slower.
2. **Judged** when the pair has ``min_spans`` or more baseline spans: a one-sided Mann-Whitney rank
   test (:mod:`drill.traces.ranktest`) of the fault window's self times against the baseline's, and
   the median ratio ``(median_f + floor) / (median_b + floor)`` (``floor`` = ``min_excess_ms``, so a
   µs-scale span cannot look 3x slower). The log ratio less the median log ratio of the judged pairs of
   its kind of time, own work or link (a load change that slows every service's own work a little is not a
   fault, and hardly slows the network) is the pair's *effect*. A pair
   *deviates* when its rank test passes ``alpha``, its ratio reaches ``min_ratio`` and its median
   grew by ``min_excess_ms``. Pairs with fewer than ``min_baseline_spans`` baseline spans are judged
   the same way and marked *thin*; those under ``min_spans`` are *not judged*, with their counts.
3. **Attribution**: a CLIENT span's self time is the link's (network, proxy, the callee's queue): its
   evidence goes to the *callee* (its SERVER child's service, else ``server.address``,
   ``peer.service`` or ``net.peer.name``), weighed by the share of the callee's incoming links that
   are slow, and to the caller, weighed by the share of its outgoing links that are slow and by
   ``caller_weight`` (half of it for a CLIENT span no SERVER span answers: its time holds the callee's
   work): a delay on one service's network slows every link into it (and, on egress, out of it), not
   one caller's. A non-CLIENT span whose children are in other services (no CLIENT span
   between) holds link time too: it counts as the service's own only when the service's own work
   deviates elsewhere, else as its downstream link. Errors and missing children that are root causes
   (no abnormal span below them) count for their service, a CLIENT span's for its callee.
   One more unit per called service pools every link into it (each sample scaled by its own link's
   baseline median), so a service called rarely by many callers is judged over all of them; it counts
   only when no single link into it did. A service whose incoming links have fewer than
   ``min_baseline_spans`` baseline samples in all (first called in the fault window, or twice in a short
   baseline) has its links judged against every link's baseline link time (CLIENT spans over a SERVER
   span: the network's time, alike across a system's links), counting only 3x slower or more.
   One more unit per service pools all its own work (each sample scaled by its own pair's baseline
   median, pairs with 2 or more baseline spans): CPU contention slows every operation a little, and a
   rarely called service has too few spans per operation to judge any one; it replaces the service's own
   pairs' evidence when it is the stronger.
4. **Thin units**: a thin unit 3x slower or more is also judged on the log scale with a spread pooled
   from the well-sampled pairs (a rank test on a handful of spans cannot reach ``alpha``); every effect
   is shrunk by its sample sizes (``m / (m + 3)``, ``m = n_b·n_f / (n_b + n_f)``); units over 2,000
   spans a side are judged on a sample of that size, picked by the spans' duration before their self time
   is computed (a million spans need the self time of a few thousand per pair), then by value.
5. **Score** of a service: the sum of its deviating pairs' effects (as attributed), plus one point and
   twice the share of erring spans per pair with root-cause errors; an operation and the INTERNAL steps
   nested in it (UNSPECIFIED ones too: a step in traces that record no kinds) count once (the strongest of
   them). Services are ranked by score;
   ties go to the callee side.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from statistics import NormalDist

import numpy as np

from drill.traces.ranktest import SortedSides, group_medians, sort_sides
from drill.traces.selftime import cross_service_children, direct_links, self_time
from drill.traces.table import KIND_NAMES, SpanTable, int_counts, unique_ints

__all__ = ["CALLEE", "NotJudged", "PairEvidence", "Ranking", "Suspect", "SuspectInputs", "Thresholds", "rank_suspects"]

_CLIENT = KIND_NAMES.index("CLIENT")
_INTERNAL = KIND_NAMES.index("INTERNAL")
_PEER_KEYS = ("server.address", "peer.service", "net.peer.name")
#: Pieces of evidence kept per suspect.
_EVIDENCE_KEPT = 8
_OWN, _CALLEE, _CALLER = "own work", "callee of a slow link", "caller of a slow link"
#: The kind of a unit pooling one service's own work over its operations (_with_pooled_own).
_POOLED_OWN = "own work, pooled"
#: The role of a piece of evidence that counts for the callee of a slow link.
CALLEE = _CALLEE


@dataclass(frozen=True)
class Thresholds:
    min_spans: int  # baseline spans a pair needs to be judged at all (rank test)
    min_baseline_spans: int  # below this a judgement is marked thin
    alpha: float  # one-sided significance of the rank test
    min_ratio: float  # a deviating pair's self-time median ratio
    min_excess_ms: float  # ... and its median's growth; also the ratio's floor
    caller_weight: float = 0.75  # a slow link's weight for its caller (the callee's is 1)


@dataclass(frozen=True)
class SuspectInputs:
    """What the ranking needs from the analysis, as columns over the table's rows."""

    table: SpanTable
    parent: np.ndarray  # int64 parent row, -1 for a top
    group: np.ndarray  # int64 (service, name) pair code per row
    pair_service: np.ndarray  # service code per pair
    pair_name: np.ndarray  # operation code per pair: into names
    names: tuple[str, ...]  # the operations' names (span names, or templates of names with ids)
    baseline: np.ndarray  # bool per row
    fault: np.ndarray  # bool per row
    root_errors: np.ndarray  # bool per row: an error, missing child or fast failure that is a root cause


@dataclass(frozen=True)
class PairEvidence:
    """One (service, span name) pair's judgement, as it counts for one suspect."""

    service: str  # the spans' service
    name: str
    kind: str  # span kind
    role: str  # "own work" | "callee of a slow link" | "caller of a slow link"
    baseline_spans: int
    fault_spans: int
    thin: bool  # judged on fewer than min_baseline_spans baseline spans
    self_baseline_ms: float
    self_fault_ms: float  # medians of the self time
    duration_baseline_ms: float
    duration_fault_ms: float  # medians of the duration
    ratio: float  # self-time median ratio (floored)
    z: float  # rank test z of the self time (one-sided; alpha's z in Thresholds)
    errors: int  # root-cause error / missing-child / failed-fast spans in the fault window
    score: float  # what it adds to the suspect's score

    @property
    def text(self) -> str:
        thin = f", thin baseline: rank test on {self.baseline_spans} spans" if self.thin else ""
        parts = []
        if self.ratio > 1:
            parts.append(
                f"self time {self.ratio:.1f}x ({_ms(self.self_baseline_ms)} → {_ms(self.self_fault_ms)}, "
                f"duration {_ms(self.duration_baseline_ms)} → {_ms(self.duration_fault_ms)})"
            )
        if self.errors:
            parts.append(f"{self.errors} root-cause error(s)")
        counts = f"{self.baseline_spans} baseline / {self.fault_spans} fault spans{thin}"
        return f"{self.service}/{self.name} [{self.role}]: {'; '.join(parts) or 'no change'} ({counts})"


@dataclass(frozen=True)
class Suspect:
    service: str
    score: float
    evidence: tuple[PairEvidence, ...]  # strongest first
    why: str


@dataclass(frozen=True)
class NotJudged:
    pair: str  # "service/name"
    baseline_spans: int
    fault_spans: int


@dataclass(frozen=True)
class Ranking:
    suspects: tuple[Suspect, ...]
    weakest: tuple[PairEvidence, ...]  # the largest effects that did not deviate (when nothing did)
    pairs: int  # fault-window pairs
    judged: int  # of them judged (min_spans baseline spans or more)
    thin: int  # of the judged, on fewer than min_baseline_spans
    not_judged: tuple[NotJudged, ...]
    fault_spans: int
    unjudged_spans: int  # fault-window spans of pairs not judged
    min_spans: int

    @property
    def mostly_unjudged(self) -> bool:
        return self.unjudged_spans * 2 > self.fault_spans or self.judged * 2 < self.pairs

    @property
    def unjudged_reason(self) -> str:
        return (
            f"{len(self.not_judged)} of {self.pairs} pairs had fewer than {self.min_spans} baseline spans "
            f"({self.unjudged_spans} of {self.fault_spans} fault-window spans not judged)"
        )


def _ms(value: float) -> str:
    if not math.isfinite(value):
        return "-"
    return f"{value / 1000:.2f} s" if value >= 1000 else (f"{value:.0f} ms" if value >= 10 else f"{value:.3g} ms")


# -- what is judged: the pairs, and the calls made without a CLIENT span ----------------------------


@dataclass(frozen=True)
class _Units:
    """The judged units: codes 0..groups-1 are the (service, span name) pairs, then one per (caller pair,
    callee service) of the calls made without a CLIENT span; plus their samples (baseline and fault rows)."""

    values: np.ndarray  # float ns per sample: self time (pairs), link time (direct links)
    rows: np.ndarray  # int64 table row of each pair sample (the direct links' samples follow them)
    table: SpanTable
    unit: np.ndarray  # int64 unit code per sample
    fault: np.ndarray  # bool per sample
    errors: np.ndarray  # int per unit: root-cause errors / missing children in the fault window
    service: list[str]  # per unit: the spans' service (the caller's for a link)
    name: list[str]
    kind: list[str]
    callee: list[str | None]  # links (CLIENT pairs, direct links): the called service
    caller_pair: np.ndarray  # int64 per unit: a direct link's caller pair, else -1
    split_from: np.ndarray  # int64 per unit: the CLIENT pair a per-callee unit was split from, else -1
    pairs: int  # how many units are pairs
    pooled: int  # units from this code on pool every link into one callee (_with_pooled_links)
    dropped: np.ndarray  # int64 (units, 2): samples per unit and side (baseline, fault) left out by _presampled
    own_pooled: int = -1  # units from this code on pool one service's own work (_with_pooled_own); -1: none
    link_prior: int = -1  # units from this code judge thin links against every link (_with_link_prior); -1: none


def _units(inputs: SuspectInputs, groups: int, cross: tuple[np.ndarray, np.ndarray]) -> _Units:
    table = inputs.table
    rows = np.flatnonzero(inputs.baseline | inputs.fault)
    links = direct_links(table, inputs.parent, cross)
    keep = inputs.baseline[links.parent] | inputs.fault[links.parent]
    child, parent, gap = links.child[keep], links.parent[keep], links.gap[keep]
    width = max(len(table.services), 1)
    keys, link_unit = np.unique(inputs.group[parent] * width + table.service[child], return_inverse=True)
    kinds = _pair_kind(inputs, groups)
    service = [table.services[s] for s in inputs.pair_service.tolist()]
    name = [inputs.names[n] for n in inputs.pair_name.tolist()]
    client = table.kind[cross[1]] == _CLIENT
    calls = cross[0][client], cross[1][client]  # the calls out of a CLIENT span
    callee = _client_callees(inputs, groups, kinds, calls)
    link_pair = (keys // width).astype(np.int64)
    errors = np.bincount(inputs.group[inputs.root_errors & inputs.fault], minlength=groups)
    split = _split_clients(inputs, groups, rows, calls)
    unit = inputs.group.copy() if len(rows) == len(table) else inputs.group[rows]  # changed below: a copy
    first_split = groups + len(keys)
    unit[split.at] = first_split + split.unit
    n_split = len(split.pair)
    rows, unit, fault, dropped = _presampled(table, rows, unit, _on_rows(inputs.fault, rows), first_split + n_split)
    return _Units(
        values=np.concatenate((self_time(table, inputs.parent, rows), gap)),
        rows=rows,
        table=table,
        unit=np.concatenate((unit, groups + link_unit.astype(np.int64))),
        fault=np.concatenate((fault, inputs.fault[parent])),
        errors=np.concatenate((errors, np.zeros(len(keys) + n_split, dtype=np.int64))),
        service=service + [service[g] for g in link_pair.tolist()] + [service[g] for g in split.pair],
        name=name
        + [f"{name[g]} → {table.services[s]}" for g, s in zip(link_pair.tolist(), (keys % width).tolist())]
        + [f"{name[g]} → {c}" for g, c in zip(split.pair, split.callee)],
        kind=[KIND_NAMES[int(k)] for k in kinds] + ["link"] * len(keys) + ["CLIENT"] * n_split,
        callee=callee + [table.services[s] for s in (keys % width).tolist()] + list(split.callee),
        caller_pair=np.concatenate((np.full(groups, -1, dtype=np.int64), link_pair, np.full(n_split, -1))),
        split_from=np.concatenate((np.full(first_split, -1, dtype=np.int64), np.asarray(split.pair, dtype=np.int64))),
        pairs=groups,
        pooled=first_split + n_split,
        dropped=dropped,
    )


def _presampled(
    table: SpanTable, rows: np.ndarray, unit: np.ndarray, fault: np.ndarray, units: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The span samples whose self time is computed: every one of a unit's side up to ``_MAX_SAMPLES``, else
    about ``_MAX_SAMPLES`` of them picked by their span's duration (the fractional part of duration·φ, as
    :func:`_sampled` picks by value: whatever the rows' order). A million spans need the self time of a few
    thousand per pair, not of all. Returns rows, units and fault flags kept, and the count left out per unit
    and side (baseline, fault)."""
    side = unit * 2 + fault
    counts = np.bincount(side, minlength=2 * units)
    if int(counts.max(initial=0)) <= _MAX_SAMPLES:
        return rows, unit, fault, np.zeros((units, 2), dtype=np.int64)
    # a side's share kept, in 64-bit fixed point (all of a side under the cap); over the whole table: sequential
    # integer passes, then one gather. Duration times 2^64·φ (Fibonacci hashing, Knuth) modulo 2^64 is the
    # fractional part of duration·φ to 2^-64
    limit = np.full(len(counts), np.iinfo(np.uint64).max, dtype=np.uint64)
    over = counts > _MAX_SAMPLES
    limit[over] = (_MAX_SAMPLES / counts[over] * 2.0**64).astype(np.uint64)
    weyl = table.duration_ns.view(np.uint64) * _GOLDEN_64
    keep = np.flatnonzero(_on_rows(weyl, rows) <= limit[side])
    dropped = counts - np.bincount(side[keep], minlength=2 * units)
    return rows[keep], unit[keep], fault[keep], dropped.reshape(units, 2)


def _on_rows(column: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``column[rows]`` for ``rows`` sorted and distinct; the column itself, no gather, when they are every row (every
    span is in a window, the common case). Read-only."""
    return column if len(rows) == len(column) else column[rows]


@dataclass(frozen=True)
class _Split:
    """CLIENT pairs that call more than one service (a span named ``POST`` to every upstream), split per callee:
    ``pair``/``callee`` per split unit (0-based), and the samples that go to one: their positions in the sample
    rows (``at``) and the split unit of each (``unit``)."""

    pair: list[int]
    callee: list[str]
    at: np.ndarray
    unit: np.ndarray


def _split_clients(
    inputs: SuspectInputs, groups: int, rows: np.ndarray, calls: tuple[np.ndarray, np.ndarray]
) -> _Split:
    """The link time of a CLIENT pair that calls several services is judged per callee: a slow link to one
    replica behind a router whose calls all carry one span name is that replica's link, not a slower median
    of the router's calls. A row's callee is its SERVER child's service, else the peer its attributes name
    (read only for pairs whose first 50 such rows, with the services the pair's answered calls reached, name
    more than one). A peer name that is no service's, which the pair's answered calls show to be another
    service's (the router's ``replica-0`` for the replica's ``drill-replica-0``), counts as that service: a call
    whose callee's span was lost is judged with the calls that reached it."""
    table = inputs.table
    names = list(table.services)
    code = {n: i for i, n in enumerate(names)}
    by_name = np.argsort(np.array(names, dtype=object)).astype(np.int64) if names else np.zeros(0, dtype=np.int64)
    rank = np.empty(len(names), dtype=np.int64)
    rank[by_name] = np.arange(len(names))
    child, up = calls
    first = np.full(len(table), len(names), dtype=np.int64)
    np.minimum.at(first, up, rank[table.service[child]])  # several callees: the first by name
    at_client = np.flatnonzero(_on_rows(table.kind == _CLIENT, rows))  # positions in rows
    client = rows[at_client]
    named_first = first[client]
    callee = np.where(named_first < len(names), by_name[np.minimum(named_first, max(len(names) - 1, 0))], -1)
    bare = np.flatnonzero(callee < 0)  # positions in client
    group = inputs.group[client]
    answered = np.flatnonzero(callee >= 0)  # positions in client, by group: one sort, not a pass per group
    answered = answered[np.argsort(group[answered], kind="stable")]
    answered_group = group[answered]
    for g in unique_ints(group[bare]).tolist():
        mine = bare[group[bare] == g]
        answered_g = answered[slice(*np.searchsorted(answered_group, [g, g + 1]).tolist())]
        sample = _earliest(table, client, answered_g)
        alias = _peer_aliases(table, client[sample], callee[sample], code)
        reached = {names[c] for c in unique_ints(callee[answered_g]).tolist()}
        looked = client[_earliest(table, client, mine)]
        peers = {alias.get(p, p) for p in (_peer_service(table.attributes[r], code) for r in looked.tolist()) if p}
        if len(peers | reached) < 2:
            continue
        for at, r in zip(mine.tolist(), client[mine].tolist()):
            peer = _peer_service(table.attributes[r], code)
            if peer is not None:
                callee[at] = code.setdefault(alias.get(peer, peer), len(code))
    for peer in list(code)[len(names) :]:
        names.append(peer)
    named = callee >= 0
    at_client, client, callee = at_client[named], client[named], callee[named]  # the client rows naming a callee
    width = len(names)
    key = inputs.group[client] * width + callee
    keys = unique_ints(key[callee != table.service[client]])
    pair_of = keys // width
    multi = np.bincount(pair_of, minlength=groups) >= 2
    keys = keys[multi[pair_of]]
    if not len(keys):
        empty = np.zeros(0, dtype=np.int64)
        return _Split([], [], empty, empty)
    at = np.minimum(np.searchsorted(keys, key), len(keys) - 1)
    hit = keys[at] == key
    return _Split((keys // width).tolist(), [names[c] for c in (keys % width).tolist()], at_client[hit], at[hit])


def _earliest(table: SpanTable, client: np.ndarray, at: np.ndarray, n: int = 50) -> np.ndarray:
    """The first ``n`` of the positions ``at`` in ``client``, by start time (attributes are read span by span: a
    pair's peer names are sampled from its earliest calls)."""
    return at[np.argsort(table.start_ns[client[at]], kind="stable")[:n]]


def _peer_aliases(table: SpanTable, rows: np.ndarray, callee: np.ndarray, code: dict[str, int]) -> dict[str, str]:
    """The peer names that CLIENT ``rows`` give, in their attributes, to the services their answered calls
    reached (``callee``: a service code per row) where the name is no service's: each mapped to the service
    most of its calls reached."""
    votes: dict[str, Counter[str]] = {}
    services = set(table.services)
    for r, c in zip(rows.tolist(), callee.tolist()):
        peer = _peer_service(table.attributes[r], code)
        if peer is not None and peer not in services:
            votes.setdefault(peer, Counter())[table.services[c]] += 1
    return {peer: counts.most_common(1)[0][0] for peer, counts in votes.items()}


def _with_pooled_links(u: _Units) -> _Units:
    """``u`` with one more unit per called service: every link into it (CLIENT pairs and calls without a
    CLIENT span), each sample divided by its own link's baseline median and multiplied by the median of
    all their baseline samples. A service called rarely by many callers has a handful of baseline spans
    per caller, too few to judge any one link; pooled, its links are judged together (a slow, rarely
    called database)."""
    names = sorted({c for x, c in enumerate(u.callee) if c is not None and c != u.service[x]})
    if not names:
        return u
    index = {c: i for i, c in enumerate(names)}
    target = np.array(
        [index[c] if c is not None and c != u.service[x] else -1 for x, c in enumerate(u.callee)], dtype=np.int64
    )
    pooled = _pool(u, target, names, [f"every call into {c}, pooled" for c in names], "link", list(names))
    return replace(pooled, pooled=len(u.service))


def _pool(u: _Units, target: np.ndarray, names: list[str], labels: list[str], kind: str, callee: list) -> _Units:
    """``u`` with one more unit per name: the samples of the units ``target`` maps to it (int64 per unit, -1:
    none), each divided by its own unit's baseline median (units without one left out) and multiplied by the
    median of all their baseline samples, so units of different scales are judged together."""
    n = len(u.service)
    samples = np.flatnonzero(target[u.unit] >= 0)
    base = samples[~u.fault[samples]]
    unit_reference = group_medians(u.values[base], u.unit[base], n)
    reference = unit_reference[u.unit[samples]]
    keep = np.isfinite(reference) & (reference > 0)
    usable = (target >= 0) & np.isfinite(unit_reference) & (unit_reference > 0)
    dropped = np.zeros((len(names), 2), dtype=np.int64)
    np.add.at(dropped, target[usable], u.dropped[usable])  # what the pooled units left out, pooled too
    samples, reference = samples[keep], reference[keep]
    pooled = target[u.unit[samples]]
    base = ~u.fault[samples]
    scale = group_medians(u.values[samples[base]], pooled[base], len(names))
    values = u.values[samples] / reference * scale[pooled]
    return _appended(u, values, pooled, u.fault[samples], names, labels, kind, callee, dropped)


def _appended(
    u: _Units,
    values: np.ndarray,
    local: np.ndarray,
    fault: np.ndarray,
    names: list[str],
    labels: list[str],
    kind: str,
    callee: list,
    dropped: np.ndarray,
) -> _Units:
    """``u`` with ``len(names)`` more units (service ``names``, span names ``labels``) and their samples
    (``values``, ``fault``, each of new unit ``local``)."""
    k, n = len(names), len(u.service)
    return replace(
        u,
        values=np.concatenate((u.values, values)),
        unit=np.concatenate((u.unit, n + local)),
        fault=np.concatenate((u.fault, fault)),
        errors=np.concatenate((u.errors, np.zeros(k, dtype=np.int64))),
        service=u.service + names,
        name=u.name + labels,
        kind=u.kind + [kind] * k,
        callee=[*u.callee, *callee],
        caller_pair=np.concatenate((u.caller_pair, np.full(k, -1, dtype=np.int64))),
        split_from=np.concatenate((u.split_from, np.full(k, -1, dtype=np.int64))),
        dropped=np.concatenate((u.dropped, dropped)),
    )


def _own_candidates(u: _Units) -> list[int]:
    """The pairs that hold only their service's own work: not CLIENT spans, not calling another service, and
    not making calls without a CLIENT span (whose link time is in their self time)."""
    direct = {int(x) for x in u.caller_pair[u.caller_pair >= 0].tolist()}
    return [
        x
        for x in range(u.pairs)
        if u.kind[x] != "CLIENT" and (u.callee[x] is None or u.callee[x] == u.service[x]) and x not in direct
    ]


def _with_pooled_own(u: _Units) -> _Units:
    """``u`` with one more unit per service: the self time of all its own work (:func:`_own_candidates` with
    at least ``_MIN_POOLED_BASE`` baseline samples), each sample divided by its own pair's baseline median
    and multiplied by the median of all their baseline samples. CPU contention slows every operation of a
    service a little; a rarely called service has a handful of spans per operation, too few to judge any
    one of them, while all of them together are judged (Stouffer-style pooling needs each pair judged
    first)."""
    candidates = _own_candidates(u)
    if not candidates:
        return u
    n = len(u.service)
    n_base = np.bincount(u.unit[~u.fault], minlength=n)
    names = sorted({u.service[x] for x in candidates})
    index = {c: i for i, c in enumerate(names)}
    target = np.full(n, -1, dtype=np.int64)
    for x in candidates:
        if n_base[x] >= _MIN_POOLED_BASE:
            target[x] = index[u.service[x]]
    if not (target >= 0).any():
        return u
    labels = [f"all of {c}'s own work, pooled" for c in names]
    return replace(_pool(u, target, names, labels, _POOLED_OWN, [None] * len(names)), own_pooled=n)


def _unserved(u: _Units, link_callee: np.ndarray) -> set[int]:
    """The CLIENT units most of whose spans have no SERVER span of another service under them."""
    served = link_callee[u.rows] >= 0
    pair_samples = u.unit[: len(u.rows)]
    n = len(u.service)
    total = np.bincount(pair_samples, minlength=n)
    with_server = np.bincount(pair_samples[served], minlength=n)
    return {x for x in range(n) if u.kind[x] == "CLIENT" and total[x] and with_server[x] * 2 < total[x]}


def _link_callees(table: SpanTable, cross: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """int64 per row: for a CLIENT span with a SERVER span of another service under it, that service (its
    self time is then the link's alone: network, proxies, the callee's accept queue); else -1."""
    child, up = cross
    client = table.kind[up] == _CLIENT
    callee = np.full(len(table), -1, dtype=np.int64)
    callee[up[client]] = table.service[child[client]]
    return callee


def _with_link_prior(u: _Units, link_callee: np.ndarray, t: Thresholds) -> _Units:
    """``u`` with one more unit per service whose incoming links have fewer than ``min_baseline_spans``
    baseline samples in all: the fault window's link time into it (CLIENT spans over its SERVER spans) against
    the baseline's link time of every link into every service (at most ``_PRIOR_SAMPLES`` of them). A link's
    own time is the network's, much alike across a system's links; a service first called in the fault
    window, or called twice in a short baseline, is judged against that prior (and counts only 3x slower or
    more: a link can be slower by nature), instead of not at all."""
    n_pair_samples = len(u.rows)
    callee = link_callee[u.rows]
    pure = np.flatnonzero(callee >= 0)
    fault = u.fault[:n_pair_samples][pure]
    reference = pure[~fault]
    if len(reference) < _PRIOR_MIN_REFERENCE:
        return u
    into = np.bincount(callee[reference], minlength=len(u.table.services))
    late = pure[fault]
    thin = late[into[callee[late]] < t.min_baseline_spans]
    if not len(thin):
        return u
    weyl = u.values[reference] * _GOLDEN
    reference = reference[weyl - np.floor(weyl) < min(1.0, _PRIOR_SAMPLES / len(reference))]
    targets = unique_ints(callee[thin])
    local = np.searchsorted(targets, callee[thin])
    n = len(u.service)
    k = len(targets)
    names = [u.table.services[c] for c in targets.tolist()]
    base_values = np.tile(u.values[reference], k)
    base_unit = np.repeat(np.arange(k, dtype=np.int64), len(reference))
    prior = _appended(
        u,
        np.concatenate((base_values, u.values[thin])),
        np.concatenate((base_unit, local)),
        np.concatenate((np.zeros(len(base_values), dtype=bool), np.ones(len(thin), dtype=bool))),
        names,
        [f"calls into {c}, against every link's baseline" for c in names],
        "link",
        list(names),
        np.zeros((k, 2), dtype=np.int64),
    )
    return replace(prior, link_prior=n)


def _pair_kind(inputs: SuspectInputs, groups: int) -> np.ndarray:
    """The commonest span kind of each pair's spans (the smallest code on a tie): whatever the rows' order."""
    group, kind = inputs.group, inputs.table.kind
    one = np.zeros(groups, dtype=kind.dtype)
    one[group] = kind  # some span's kind per pair: every span's, for a pair of one kind (the common case)
    mixed = np.flatnonzero(kind != one[group])
    if not len(mixed):
        return one.astype(np.int64)
    several = np.zeros(groups, dtype=bool)
    several[group[mixed]] = True
    rows = np.flatnonzero(several[group])  # the spans of the pairs of several kinds
    width = len(KIND_NAMES)
    counts = np.bincount(group[rows] * width + kind[rows], minlength=groups * width).reshape(groups, width)
    out = one.astype(np.int64)
    out[several] = np.argmax(counts[several], axis=1)
    return out


def _peer_service(attributes: dict, services: dict[str, int]) -> str | None:
    """The service a CLIENT span's attributes name: the host of ``server.address`` / ``peer.service`` /
    ``net.peer.name`` (scheme, path and port dropped) when it is a known service, else its first DNS
    label (``cart.shop.svc.cluster.local`` is ``cart``); an IP address as it is."""
    for key in _PEER_KEYS:
        value = attributes.get(key)
        if value:
            host = str(value).split("://")[-1].split("/")[0]
            if host.count(":") == 1:  # host:port (an IPv6 address has more colons)
                host = host.split(":")[0]
            if host in services or ":" in host or host.replace(".", "").isdigit():
                return host
            return host.split(".")[0]
    return None


def _client_callees(
    inputs: SuspectInputs, groups: int, kinds: np.ndarray, calls: tuple[np.ndarray, np.ndarray]
) -> list[str | None]:
    """Per pair: for a CLIENT pair, the service it calls (its children's commonest service other than its
    own, else the peer its attributes name); None for other pairs and CLIENT spans naming no callee."""
    table, (child, up) = inputs.table, calls
    out: list[str | None] = [None] * groups
    width = max(len(table.services), 1)
    values, counts = np.unique(inputs.group[up] * width + table.service[child], return_counts=True)
    for value in values[np.argsort(counts, kind="stable")].tolist():  # the commonest last, so it wins
        out[value // width] = table.services[value % width]
    services = {name: code for code, name in enumerate(table.services)}
    client_rows = np.zeros(0, dtype=np.int64)
    for g in np.flatnonzero(kinds == _CLIENT).tolist():
        if out[g] is None:
            if not len(client_rows):
                client_rows = np.flatnonzero(table.kind == _CLIENT)
            rows = client_rows[inputs.group[client_rows] == g][:50]
            peers = [p for p in (_peer_service(table.attributes[r], services) for r in rows) if p]
            out[g] = max(sorted(set(peers)), key=peers.count) if peers else None
    return out


# -- per-unit judgement ----------------------------------------------------------------------------

#: A unit slower by min_ratio whose rank test passes only alpha times this (at most 0.2) is suggestive: it
#: counts this weight of its effect, so it ranks its service after every significant suspect's.
_SUGGESTIVE_ALPHA, _SUGGESTIVE_WEIGHT = 10, 0.05
#: Root-cause errors that count fully (fewer count in proportion).
_ERRORS_FULL = 5
#: The ratio's floor, as a share of min_excess_ms: a 20 µs span cannot look 3x slower by 40 µs.
_FLOOR_SHARE = 0.1
#: The weight, in spans, of the prior "no change" that a unit's effect is shrunk towards (_shrinkage).
_PRIOR_SPANS = 3.0
#: Well-sampled pairs needed to pool a spread for the thin units' log-scale test (_with_thin_z).
_MIN_SPREADS = 5
#: ... and the least ratio a thin unit needs for it: on a handful of spans only a large change is judged so.
_THIN_MIN_RATIO = 3.0
#: Baseline samples a pair needs to join its service's pooled own work (_with_pooled_own).
_MIN_POOLED_BASE = 2
#: The baseline link samples a link prior needs, and the most it judges against (_with_link_prior).
_PRIOR_MIN_REFERENCE, _PRIOR_SAMPLES = 30, 1000
#: A caller's weight, as a share of caller_weight, for a CLIENT span with no SERVER span under it.
_UNSERVED_WEIGHT = 0.5
#: Samples per unit and side judged at most (_sampled).
_MAX_SAMPLES = 2000
_GOLDEN = (math.sqrt(5) - 1) / 2
_GOLDEN_64 = np.uint64(0x9E3779B97F4A7C15)  # 2^64·φ, the fraction φ of _GOLDEN in 64-bit fixed point
#: The largest load shift (both windows slower or faster everywhere) the judgement corrects for.
_MAX_COMMON = math.log(1.5)
#: The kinds of units whose time is a link's (network, proxy, the callee's queue), not a service's own work.
_LINK_KINDS = frozenset({"CLIENT", "link"})


@dataclass(frozen=True)
class _Judged:
    z: np.ndarray  # rank test z per unit
    n_base: np.ndarray
    n_fault: np.ndarray
    self_base: np.ndarray  # ms medians
    self_fault: np.ndarray
    ratio: np.ndarray
    effect: np.ndarray  # log ratio less the common shift
    judged: np.ndarray  # bool
    deviates: np.ndarray  # bool
    suggestive: np.ndarray  # bool: slower, significant only at alpha·_SUGGESTIVE_ALPHA
    weight: np.ndarray  # float in (0, 1): how much of the effect the sample sizes back (_shrinkage)


def _side_counts(u: _Units) -> tuple[np.ndarray, np.ndarray]:
    """Samples per unit in the baseline and in the fault window (those :func:`_presampled` left out not
    counted)."""
    n = len(u.service)
    fault = np.bincount(u.unit[u.fault], minlength=n)
    return np.bincount(u.unit, minlength=n) - fault, fault


def _sampled(u: _Units, counts: tuple[np.ndarray, np.ndarray]) -> _Units:
    """``u`` with at most about ``_MAX_SAMPLES`` samples per unit and side: a unit with 300,000 spans judges
    the same on a few thousand of them (medians and the rank test's verdict), at a fraction of the sort. The
    samples kept are picked by their value (a Weyl sequence: the fractional part of value·φ), so the choice
    does not depend on the rows' order."""
    n_base, n_fault = counts
    if max(int(n_base.max(initial=0)), int(n_fault.max(initial=0))) <= _MAX_SAMPLES:
        return u
    side = np.where(u.fault, n_fault[u.unit], n_base[u.unit])
    share = np.minimum(1.0, _MAX_SAMPLES / np.maximum(side, 1))
    weyl = u.values * _GOLDEN  # the fractional parts of n·φ over integers n are spread evenly over [0, 1)
    keep = weyl - np.floor(weyl) < share
    pair_rows = keep[: len(u.rows)]
    return _Units(
        values=u.values[keep],
        rows=u.rows[pair_rows],
        table=u.table,
        unit=u.unit[keep],
        fault=u.fault[keep],
        errors=u.errors,
        service=u.service,
        name=u.name,
        kind=u.kind,
        callee=u.callee,
        caller_pair=u.caller_pair,
        split_from=u.split_from,
        pairs=u.pairs,
        pooled=u.pooled,
        dropped=u.dropped,
        own_pooled=u.own_pooled,
        link_prior=u.link_prior,
    )


def _judge(u: _Units, t: Thresholds, counts: tuple[np.ndarray, np.ndarray]) -> _Judged:
    n = len(u.service)
    sides = sort_sides(u.values, u.unit, u.fault, n)
    self_base, self_fault = sides.medians(fault=False) / 1e6, sides.medians(fault=True) / 1e6
    n_base, n_fault = counts
    judged = (n_base >= t.min_spans) & (n_fault > 0)
    floor = t.min_excess_ms * _FLOOR_SHARE
    ratio = (np.nan_to_num(self_fault) + floor) / (np.nan_to_num(self_base) + floor)
    log_ratio = np.log(ratio)
    pairs = judged.copy()
    pairs[u.pairs :] = False
    thin = n_base < t.min_baseline_spans
    common = _common_shift(u, log_ratio, pairs)
    # the rank test against the baseline scaled by the common shift: a load change everywhere is no deviation
    test = sides.rank_test(np.exp(common))
    wide = (n_base >= t.min_baseline_spans) & (n_fault >= t.min_baseline_spans)
    effect = np.where(wide, np.maximum(log_ratio, _mean_log_ratio(u, n, floor)), log_ratio) - common
    big = effect >= math.log(_THIN_MIN_RATIO)
    z = _with_thin_z(test.z, sides, effect, judged & thin & big, pairs & ~thin, floor)
    slower = judged & (effect >= math.log(t.min_ratio))
    deviates = slower & (z >= _z_alpha(t))
    significant_small = judged & (effect >= math.log(t.min_ratio) / 2) & (z >= _z_alpha(t))
    suggestive = (
        (slower | significant_small)
        & ~deviates
        & (z >= NormalDist().inv_cdf(1 - min(t.alpha * _SUGGESTIVE_ALPHA, 0.2)))
    )
    weight = _shrinkage(n_base, n_fault)
    return _Judged(z, n_base, n_fault, self_base, self_fault, ratio, effect, judged, deviates, suggestive, weight)


def _common_shift(u: _Units, log_ratio: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """Per unit, the shift of its kind of time that every unit of that kind shares: the median log ratio of the
    judged pairs of own work (SERVER, INTERNAL, ...) for units of own work, of links (CLIENT) for units of link
    time; either from all judged pairs when it has fewer than 5. A load change slows every service's own work
    alike but hardly the network's time, so one shift over both leaves own work looking slower everywhere
    (the busiest service, with the most operations, ranked first) and links faster."""
    link = np.array([k in _LINK_KINDS for k in u.kind], dtype=bool)
    every = _median_shift(log_ratio, pairs)
    every = 0.0 if every is None else every
    own, links = _median_shift(log_ratio, pairs & ~link), _median_shift(log_ratio, pairs & link)
    return np.where(link, every if links is None else links, every if own is None else own)


def _median_shift(log_ratio: np.ndarray, mine: np.ndarray) -> float | None:
    """The median log ratio of the ``mine`` units, within ±``_MAX_COMMON``; None for fewer than 5 of them."""
    return float(np.clip(np.median(log_ratio[mine]), -_MAX_COMMON, _MAX_COMMON)) if mine.sum() >= 5 else None


def _mean_log_ratio(u: _Units, n: int, floor: float) -> np.ndarray:
    """Per unit, the fault window's mean log self time less the baseline's (ms, floored): the log ratio of
    the geometric means. A fault that hits only some calls (a third of them 2x slower) hardly moves the
    median, but moves this by its share of the slowdown; a fault that hits every call moves both alike."""
    logs = np.log(u.values / 1e6 + floor)
    fault = u.fault
    sums_f = np.bincount(u.unit[fault], weights=logs[fault], minlength=n)
    sums_b = np.bincount(u.unit[~fault], weights=logs[~fault], minlength=n)
    n_f = np.maximum(np.bincount(u.unit[fault], minlength=n), 1)
    n_b = np.maximum(np.bincount(u.unit[~fault], minlength=n), 1)
    return np.asarray(sums_f / n_f - sums_b / n_b)


def _with_thin_z(
    z: np.ndarray, sides: SortedSides, effect: np.ndarray, thin: np.ndarray, well: np.ndarray, floor: float
) -> np.ndarray:
    """``z``, where a unit is thin, raised to a comparison of medians on the log scale with a spread pooled
    from the well-sampled pairs: ``effect / (σ·√(π/2·(1/n_b + 1/n_f)))`` (the median's variance is π/2 times
    the mean's), σ the upper quartile of their baseline spreads (interquartile range of log self time /
    1.349). A rank test on 3 baseline and 4 fault spans cannot pass α = 0.01 however far apart they are (its
    smallest p is 1/35); a 200x slower link on them is still a finding."""
    if int(well.sum()) < _MIN_SPREADS or not thin.any():
        return z
    counts = np.bincount(sides.base_group, minlength=sides.groups)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    rows = np.flatnonzero(well)
    low = np.log(sides.base_values[starts[rows] + (counts[rows] - 1) // 4] / 1e6 + floor)
    high = np.log(sides.base_values[starts[rows] + (3 * (counts[rows] - 1)) // 4] / 1e6 + floor)
    sigma = float(np.percentile((high - low) / 1.349, 75))  # sides are sorted by (group, value): quartiles
    if not sigma > 0:
        return z
    nb = np.maximum(np.bincount(sides.base_group, minlength=sides.groups), 1)
    nf = np.maximum(np.bincount(sides.fault_group, minlength=sides.groups), 1)
    z_log = effect / (sigma * np.sqrt(math.pi / 2 * (1 / nb + 1 / nf)))
    return np.where(thin, np.maximum(z, z_log), z)


def _shrinkage(n_base: np.ndarray, n_fault: np.ndarray) -> np.ndarray:
    """The share of a unit's effect its sample sizes back: ``m / (m + _PRIOR_SPANS)`` with ``m`` the
    effective sample size of a two-sample comparison (``n_b·n_f / (n_b + n_f)``) — a median ratio from 3
    baseline spans and 1 fault span is shrunk to a fifth, one from 30 and 60 hardly at all (a normal prior
    on the log ratio, centred on no change, worth ``_PRIOR_SPANS`` spans)."""
    nb, nf = n_base.astype(np.float64), n_fault.astype(np.float64)
    m = np.divide(nb * nf, nb + nf, out=np.zeros(len(nb)), where=(nb + nf) > 0)
    return m / (m + _PRIOR_SPANS)


def _durations(u: _Units, wanted: list[int]) -> dict[int, tuple[float, float]]:
    """Median durations (ms, baseline and fault window) of the ``wanted`` units, for their evidence."""
    lookup = np.full(len(u.service), -1, dtype=np.int64)
    lookup[np.asarray(wanted, dtype=np.int64)] = np.arange(len(wanted))
    local = lookup[u.unit]
    samples = np.flatnonzero(local >= 0)
    local = local[samples]
    index = {x: i for i, x in enumerate(wanted)}
    fault = u.fault[samples]
    pair = samples < len(u.rows)
    duration = u.values[samples].astype(np.float64)  # a direct link's duration is its link time
    rows = u.rows[samples[pair]]
    duration[pair] = u.table.end_ns[rows] - u.table.start_ns[rows]
    base = group_medians(duration[~fault], local[~fault], len(wanted)) / 1e6
    late = group_medians(duration[fault], local[fault], len(wanted)) / 1e6
    return {x: (float(base[i]), float(late[i])) for x, i in index.items()}


def _z_alpha(t: Thresholds) -> float:
    return NormalDist().inv_cdf(1 - t.alpha)


# -- attribution -----------------------------------------------------------------------------------


@dataclass
class _Tally:
    """Per service: (unit, score) of its own work, of slow links into it and out of it; links judged."""

    own: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    own_pooled: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # all its own work, pooled
    prior: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # thin links against every link's
    incoming: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    pooled: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # every link into it, pooled
    outgoing: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    in_links: dict[str, int] = field(default_factory=dict)
    out_links: dict[str, int] = field(default_factory=dict)


def _pooled(j: _Judged, units: list[int], t: Thresholds) -> list[int]:
    """A service's own units that count: those that deviate, or — when its own units' rank tests pooled
    (Stouffer's z = Σz/√k) pass ``alpha`` and their median effect reaches ``min_ratio`` — every judged one
    that is slower (a service slower everywhere by a little: CPU contention)."""
    judged = [x for x in units if j.judged[x]]
    if len(judged) >= 2:
        pooled_z = float(np.sum(j.z[judged])) / math.sqrt(len(judged))
        if pooled_z >= _z_alpha(t) and float(np.median(j.effect[judged])) >= math.log(t.min_ratio):
            return [x for x in judged if j.effect[x] > 0 and j.z[x] > 0]
    return [x for x in units if j.deviates[x]]


def _own_units(u: _Units, j: _Judged, t: Thresholds) -> set[int]:
    """Units counted as their service's own work: its pairs that are not links, and a caller's span whose
    calls went without a CLIENT span unless one of those links is slow while the rest of the service's
    own work is normal (then the time is the link's)."""
    live = np.flatnonzero(j.n_fault > 0).tolist()
    direct: dict[int, list[int]] = {}
    for x in live:
        if u.pairs <= x < u.pooled and u.caller_pair[x] >= 0:
            direct.setdefault(int(u.caller_pair[x]), []).append(x)
    own: dict[str, list[int]] = {}
    for x in live:
        if x < u.pairs and (u.callee[x] is None or u.callee[x] == u.service[x]) and x not in direct:
            own.setdefault(u.service[x], []).append(x)
    counted = {x for units in own.values() for x in _pooled(j, units, t)}
    working = {u.service[x] for x in counted}
    for caller, links in direct.items():
        slow = [x for x in links if j.deviates[x]]
        if u.service[caller] in working or not slow:
            if j.deviates[caller] or u.errors[caller]:
                counted.add(caller)
            counted.update(links)  # marked own: not counted as links
    return counted


def _error_score(u: _Units, j: _Judged, x: int) -> float:
    """Root-cause errors: twice their share of the unit's fault-window spans, less for a handful."""
    errors = float(u.errors[x])
    return 2.0 * errors / max(int(j.n_fault[x]), 1) * min(1.0, errors / _ERRORS_FULL)


def _effect(u: _Units, j: _Judged, own: set[int], x: int) -> float:
    """What unit ``x``'s slowdown adds: its effect when it deviates (or counts in its service's pooled own
    work), a ``_SUGGESTIVE_WEIGHT`` of it when it is only suggestive, else nothing."""
    effect = max(float(j.effect[x]), 0.0) * float(j.weight[x])
    if j.deviates[x] or (x in own and x < u.pairs):
        return effect
    return effect * _SUGGESTIVE_WEIGHT if j.suggestive[x] else 0.0


def _tally(u: _Units, j: _Judged, t: Thresholds) -> _Tally:
    tally = _Tally()
    own = _own_units(u, j, t)
    for x in np.flatnonzero(j.n_fault > 0).tolist():
        service, callee = u.service[x], u.callee[x]
        effect, errors = _effect(u, j, own, x), _error_score(u, j, x)
        if 0 <= u.link_prior <= x:
            if effect and j.effect[x] >= math.log(_THIN_MIN_RATIO):
                tally.prior[service] = [(x, effect)]
            continue
        if 0 <= u.own_pooled <= x:
            if effect:
                tally.own_pooled[service] = [(x, effect)]
            continue
        if x >= u.pooled:
            if effect:
                tally.pooled[service] = [(x, effect)]
            continue
        if x in own or callee is None or callee == service:
            if x < u.pairs and (effect or errors):
                tally.own.setdefault(service, []).append((x, effect + errors))
            continue
        if j.judged[x]:
            tally.in_links[callee] = tally.in_links.get(callee, 0) + 1
            tally.out_links[service] = tally.out_links.get(service, 0) + 1
        if effect:
            tally.incoming.setdefault(callee, []).append((x, effect))
            tally.outgoing.setdefault(service, []).append((x, effect))
        if errors:
            tally.incoming.setdefault(callee, []).append((x, errors))
    return tally


def _nested(inputs: SuspectInputs, groups: int, sampled: np.ndarray) -> dict[int, int]:
    """INTERNAL pair -> the pair of its own service it runs under (the commonest parent pair of its spans in
    the same service, among the ``sampled`` rows the ranking judges): a step of that operation's own work, not a
    second operation."""
    table, parent = inputs.table, inputs.parent
    rows = sampled[(table.kind[sampled] <= _INTERNAL) & (parent[sampled] >= 0)]  # UNSPECIFIED: as INTERNAL
    rows = rows[table.service[parent[rows]] == table.service[rows]]
    if not len(rows):
        return {}
    keys, counts = int_counts(inputs.group[rows] * groups + inputs.group[parent[rows]])
    out: dict[int, int] = {}
    for key in keys[np.argsort(counts, kind="stable")].tolist():  # the commonest last, so it wins
        if key // groups != key % groups:
            out[key // groups] = key % groups
    return out


def _once_per_request(items: list[tuple[int, float]], nested: dict[int, int]) -> list[tuple[int, float]]:
    """A service's own-work evidence with an operation and the steps nested in it counted once: each family's
    scores scaled so that they sum to its strongest (the same request's work slowed shows in both)."""

    def root(x: int) -> int:
        for _ in range(8):
            if x not in nested:
                break
            x = nested[x]
        return x

    families: dict[int, list[tuple[int, float]]] = {}
    for x, score in items:
        families.setdefault(root(x), []).append((x, score))
    out = []
    for members in families.values():
        total = sum(s for _, s in members)
        scale = max(s for _, s in members) / total if total > 0 else 1.0
        out += [(x, s * scale) for x, s in members]
    return out


def _scores(
    tally: _Tally, t: Thresholds, unserved: set[int], nested: dict[int, int]
) -> dict[str, list[tuple[int, float, str]]]:
    out: dict[str, list[tuple[int, float, str]]] = {}
    for service, items in tally.own.items():
        out.setdefault(service, []).extend((x, s, _OWN) for x, s in _once_per_request(items, nested))
    for service, items in tally.own_pooled.items():
        if sum(s for _, s in items) > sum(s for _, s in tally.own.get(service, [])):  # the stronger view
            out[service] = [(x, s, _OWN) for x, s in items]
    for service, items in tally.incoming.items():
        share = len(items) / max(tally.in_links.get(service, 0), len(items))
        out.setdefault(service, []).extend((x, s * share, _CALLEE) for x, s in items)
    for service, items in tally.pooled.items():
        if service not in tally.incoming:  # only when its links judged one by one showed nothing
            out.setdefault(service, []).extend((x, s, _CALLEE) for x, s in items)
    for service, items in tally.prior.items():
        if service not in tally.incoming and service not in tally.pooled:  # only when nothing else judged them
            out.setdefault(service, []).extend((x, s, _CALLEE) for x, s in items)
    for service, items in tally.outgoing.items():
        share = len(items) / max(tally.out_links.get(service, 0), len(items))
        out.setdefault(service, []).extend(
            (x, s * share * t.caller_weight * (_UNSERVED_WEIGHT if x in unserved else 1.0), _CALLER) for x, s in items
        )
    return out


# -- the report ------------------------------------------------------------------------------------


def _evidence(
    u: _Units, j: _Judged, x: int, role: str, score: float, t: Thresholds, durations: dict[int, tuple[float, float]]
) -> PairEvidence:
    dur_base, dur_fault = durations[x]
    return PairEvidence(
        service=u.service[x],
        name=u.name[x],
        kind=u.kind[x],
        role=role,
        baseline_spans=int(j.n_base[x]),
        fault_spans=int(j.n_fault[x]),
        thin=bool(j.n_base[x] < t.min_baseline_spans),
        self_baseline_ms=round(float(j.self_base[x]), 3),
        self_fault_ms=round(float(j.self_fault[x]), 3),
        duration_baseline_ms=round(dur_base, 3),
        duration_fault_ms=round(dur_fault, 3),
        ratio=round(float(j.ratio[x]), 3),
        z=round(float(j.z[x]), 2),
        errors=int(u.errors[x]),
        score=round(score, 4),
    )


def _why(service: str, evidence: tuple[PairEvidence, ...]) -> str:
    parts = []
    slower = [e for e in evidence if e.role == _OWN and e.ratio > 1 and not e.errors]
    erring = [e for e in evidence if e.role == _OWN and e.errors]
    if slower and slower[0].kind == _POOLED_OWN:
        parts.append(f"its own work is slower over all its operations, pooled (self time {slower[0].ratio:.1f}x)")
    elif slower:
        top = max(e.ratio for e in slower)
        parts.append(f"its own work is slower in {len(slower)} operation(s) (self time up to {top:.1f}x)")
    if erring:
        parts.append(f"root-cause errors in {len(erring)} operation(s)")
    callers = sorted({e.service for e in evidence if e.role == _CALLEE and e.service != service})
    if callers:
        parts.append(f"the links into it are slow (time in {', '.join(callers[:4])}'s calls, outside its spans)")
    elif any(e.role == _CALLEE for e in evidence):  # only units pooling its callers' links
        parts.append("the links into it are slow (time in its callers' calls, outside its spans)")
    if any(e.role == _CALLER for e in evidence):
        parts.append("its outgoing links are slow")
    return "; ".join(parts)


def rank_suspects(inputs: SuspectInputs, groups: int, t: Thresholds, top: int = 10) -> Ranking:
    """Services ranked by the fault window's pooled evidence against them (see the module doc)."""
    cross = cross_service_children(inputs.table, inputs.parent)
    link_callee = _link_callees(inputs.table, cross)
    u = _with_link_prior(_with_pooled_own(_with_pooled_links(_units(inputs, groups, cross))), link_callee, t)
    present = _side_counts(u)
    u = _sampled(u, present)
    j = _judge(u, t, (present[0] + u.dropped[:, 0], present[1] + u.dropped[:, 1]))  # the true counts
    scored = []
    for service, items in _scores(
        _tally(u, j, t), t, _unserved(u, link_callee), _nested(inputs, groups, u.rows)
    ).items():
        total = sum(s for _, s, _ in items)
        if total > 0:
            items = sorted(items, key=lambda item: -item[1])[:_EVIDENCE_KEPT]
            callee_side = sum(s for _, s, role in items if role == _CALLEE)
            scored.append((-total, -callee_side, service, items))
    scored = sorted(scored, key=lambda r: r[:3])[:top]
    weakest = [] if scored else _weakest_units(j)
    durations = _durations(u, sorted({x for *_, items in scored for x, _, _ in items} | set(weakest)))
    suspects = []
    for total, _, service, items in scored:
        evidence = tuple(_evidence(u, j, x, role, s, t, durations) for x, s, role in items)
        suspects.append(Suspect(service, round(-total, 4), evidence, _why(service, evidence)))
    weak = tuple(_evidence(u, j, x, _OWN, 0.0, t, durations) for x in weakest)
    return _ranking(u, j, tuple(suspects), weak, t)


def _weakest_units(j: _Judged) -> list[int]:
    """The largest effects among the judged units that are slower at all (the weakest signals)."""
    candidates = np.flatnonzero(j.judged & (j.ratio > 1))
    return candidates[np.argsort(-j.effect[candidates], kind="stable")][:5].tolist()


def _ranking(
    u: _Units, j: _Judged, suspects: tuple[Suspect, ...], weakest: tuple[PairEvidence, ...], t: Thresholds
) -> Ranking:
    pairs = (np.arange(len(u.service)) < u.pairs) | (u.split_from >= 0)  # a split pair counts per callee
    in_fault = pairs & (j.n_fault > 0)
    unjudged = in_fault & ~j.judged
    not_judged = tuple(
        NotJudged(f"{u.service[x]}/{u.name[x]}", int(j.n_base[x]), int(j.n_fault[x]))
        for x in sorted(np.flatnonzero(unjudged).tolist(), key=lambda x: -int(j.n_fault[x]))
    )
    return Ranking(
        suspects=suspects,
        weakest=weakest,
        pairs=int(in_fault.sum()),
        judged=int((in_fault & j.judged).sum()),
        thin=int((in_fault & j.judged & (j.n_base < t.min_baseline_spans)).sum()),
        not_judged=not_judged,
        fault_spans=int(j.n_fault[pairs].sum()),
        unjudged_spans=int(j.n_fault[unjudged].sum()),
        min_spans=t.min_spans,
    )
