"""First abnormal span: where a fault first showed in the traces, for any service's spans.

The analysis compares a *fault window* (the selection) with a *baseline* (BubbleUp's pattern), per
(service, span name) pair, and then walks the trace trees:

1. **Baseline model**, per pair: the duration's median, MAD (scaled to σ by 1.4826) and p99 (linear
   interpolation between closest ranks); the error rate; and the pair's *usual children* — the child
   pairs found under at least ``child_presence`` of the pair's baseline spans (Jaeger's trace
   comparison groups spans the same way).
2. **Flags** on the fault window's spans:

   * *latency*: duration above ``max(p99, median + latency_mads·σ, median + min_excess_ms)`` — the
     absolute margin keeps µs jitter from counting;
   * *error*: ERROR status;
   * *missing child*: a usual child pair absent under this span;
   * *failed fast*: a span on the path of last-finishing children down from a span missing a child (its
     last-finishing child, that one's, and so on) that ended far earlier than usual (at most half its
     pair's baseline median and under its 1st percentile): where the parent's work stopped. Traces
     without status codes show an exception this way: the failing service returns at once and the
     callers above it skip the calls they would have made next. Where no caller stops, a span counts on
     its pair's own evidence: at most a quarter of the baseline median, with no child or fewer than any
     of the pair's baseline spans had, in significantly more of the fault window's spans than of the
     baseline's (both samples' sizes weighed, as for missing children).

   A flag counts only where its pair's rate in the fault window is significantly above the rate the
   same rule gives in the baseline (a Chernoff bound on the binomial tail, ``alpha``; the baseline rate
   is smoothed as ``(k + ½)/(n + 1)``), so a pair that errs 5% of the time in the baseline is not
   abnormal for erring 5% of the time under the fault, and p99 exceedances at the baseline's own rate
   are noise. A child's absence is judged against its baseline rate with both samples' sizes weighed
   (the likelihood ratio of two rates, half the G-test's statistic), from ``min_judged_spans`` baseline
   parents on: on a thin baseline only a large rise counts. An error in a pair that never erred in
   ``min_baseline_spans`` or more baseline spans, and the absence of a child that was under every one of
   ``min_baseline_spans`` or more baseline parents, always count: a healthy baseline has none, and one
   is enough to say where a crash showed.
3. **Causal depth** ("explained" spans are not causes): a latency-only span is explained when its
   children's time over their baseline medians covers ``explain_share`` of its own excess and an
   abnormal span lies below it (Jaeger's critical path: the time is in the child; the child in between
   need not be flagged itself, its baseline may be too wide or too thin), or a child erred; an error,
   missing-child or failed-fast span is explained by any abnormal span below it (TraceQL's
   ``{status=error} !< {status=error}``: the deepest error). The rest are *root causes*.
4. **Link**: a root-cause slow CLIENT span whose SERVER children are judged, not slow, and leave
   ``explain_share`` of its excess outside them (network, proxy, connection set-up) — or that has no
   child at all — points at the link between the two services; it is reported with the CLIENT span as
   the abnormal span and the link named.
5. **Materiality**: a slow root cause is *material* when the part of its excess that reached the
   user-facing (top) span is at least ``min_impact`` of the top's usual duration (its pair's baseline
   median); errors, missing children and fast failures always are. The part that reached the top is its excess capped
   by each ancestor's, and nothing when a span on the way ran off its parent's critical path (in
   parallel with the last-finishing child: the parent did not wait for it). A 50 ms longer queue under
   a 4 s request, more load on the healthy replica, or a slow call nobody waited for is a deviation
   worth listing but not where the fault is.
6. **First abnormal span**: the material root cause (any root cause when none is material) with the
   earliest *onset* — when a slow span passed its threshold (a material one: when its excess reached
   ``min_impact``), an error, a missing child or a fast failure at the span's end; onsets within
   ``onset_tolerance_ms`` of the earliest are simultaneous (clock skew between processes), and among
   them the deepest span wins, then the earliest, then the smallest (trace id, span id). With the
   ranked suspects (7.), only the pairs whose ranked evidence is comparable with the strongest (a
   quarter of its score) are candidates when they hold a material cause, so the onset rule and the
   ranking agree: under a flood, decode slowing a little before the queue grew by orders of magnitude
   does not make decode the first abnormal span. Pairs are
   ranked the same way: those with material causes first, then those with causes, then the explained
   ones, each by its earliest onset, then by flagged spans. For each listed pair, the low-cardinality
   attribute values its flagged spans share far more than its other spans are named (BubbleUp).

7. **Ranked suspects** (:mod:`drill.traces.suspects`, ``docs/trace-analysis.md``): services ranked by
   their pooled evidence — self time over the critical path, slow links attributed to the callee,
   root-cause errors — judged by a rank test that works on thin baselines; pairs that could not be
   judged are counted, and :attr:`AbnormalReport.inconclusive_reason` says when most of the fault
   window could not be.

Spans are assigned to the baseline or the fault window by their trace's top span's start (the root,
or the top-most span present when parents are missing), so one trace is never split; orphans are
analysed as the tops of their own subtrees. Everything is vectorised over the table's columns; Python
runs only for the handful of spans that are reported.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from drill.traces.kinds import with_inferred_kinds
from drill.traces.names import NameTemplates, name_templates
from drill.traces.ranktest import order_by
from drill.traces.suspects import CALLEE, PairEvidence, Ranking, Suspect, SuspectInputs, Thresholds, rank_suspects
from drill.traces.table import KIND_NAMES, STATUS_NAMES, SpanTable, unique_ints

__all__ = [
    "AbnormalPair",
    "AbnormalReport",
    "AbnormalSpan",
    "AnalysisOptions",
    "AttributeSkew",
    "ChainSpan",
    "Deviation",
    "Link",
    "find_abnormal",
]

_SERVER = KIND_NAMES.index("SERVER")
_CLIENT = KIND_NAMES.index("CLIENT")
_CONSUMER = KIND_NAMES.index("CONSUMER")
_ERROR = STATUS_NAMES.index("ERROR")
_MAD_TO_SIGMA = 1.4826
_NEVER = np.iinfo(np.int64).max
#: Attribute prefixes shown first among a span's key attributes.
_KEY_PREFIXES = (
    "drill.",
    "gen_ai.",
    "http.",
    "server.",
    "url.",
    "rpc.",
    "db.",
    "net.",
    "peer.",
    "network.",
    "error.",
    "exception.",
    "messaging.",
)
_MAX_ATTRIBUTES = 24
#: A span at most this share of its baseline median (and below its baseline's 1st percentile) ended far earlier
#: than usual.
_FAST_RATIO = 0.5
#: ... and a pair whose spans fell to this share of its baseline median, significantly often, failed fast on its
#: own evidence (_collapsed).
_COLLAPSED_RATIO = 0.25
#: A pair's ranked evidence is comparable with the strongest piece when it scores at least this share of it
#: (the first abnormal span is looked for among the comparable pairs: _lead_pairs).
_COMPARABLE = 0.25
#: Suspects scoring at least this share of the first one's are tied with it: the onset rule picks among them.
_TIED = 0.75


@dataclass(frozen=True)
class AnalysisOptions:
    """Thresholds of the analysis (defaults in parentheses are the check's defaults too)."""

    latency_mads: float = 5.0  # robust z: a span is slow above median + latency_mads·1.4826·MAD
    min_excess_ms: float = 1.0  # ... and at least this far above the baseline median
    min_baseline_spans: int = 10  # baseline spans a pair needs before its latency and children are judged
    child_presence: float = 0.95  # a child pair is usual when present under this share of baseline parents
    alpha: float = 0.01  # significance of a pair's flag rate against its baseline rate
    explain_share: float = 0.5  # slow children explain a slow parent when they cover this share of its excess
    onset_tolerance_ms: float = 10.0  # onsets this close are simultaneous (clock skew); the deeper span wins
    min_impact: float = 0.5  # a slow cause is material when its excess is this share of the user-facing
    #                                  span's baseline median (errors and missing children always are)
    min_judged_spans: int = 3  # baseline spans a pair needs for the suspects' rank test; fewer: not judged
    min_ratio: float = 1.15  # a suspect's pair deviates when its self-time median grew this much (and significantly)
    name_templates: bool = True  # thin span names that differ only in ids are one operation (drill.traces.names)
    infer_kinds: bool = True  # services whose spans record no kind get SERVER/CLIENT from the traces' shape (kinds)

    def thresholds(self) -> Thresholds:
        return Thresholds(
            self.min_judged_spans, self.min_baseline_spans, self.alpha, self.min_ratio, self.min_excess_ms
        )


@dataclass(frozen=True)
class Deviation:
    kind: str  # "latency" | "error" | "missing_child" | "failed_fast"
    text: str  # e.g. "14x baseline p99 (2.1 s vs p99 150 ms)"
    ratio: float | None = None  # latency: duration / baseline p99; failed fast: duration / baseline median
    baseline: float | None = None  # latency: p99 (ms); error: error rate; missing: presence; failed fast: median (ms)


@dataclass(frozen=True)
class Link:
    """A slow CLIENT span over a normal (or absent) SERVER span: the time went between the two."""

    client_service: str
    server_service: str | None  # the SERVER child's service, None when the server never showed a span
    peer: str | None  # server.address[:server.port] / net.peer.name / peer.service of the CLIENT span
    server_span_id: str | None
    text: str


@dataclass(frozen=True)
class ChainSpan:
    """One span of the chain from the abnormal span up to the user-facing span."""

    span_id: str
    service: str
    name: str
    kind: str
    status: str
    duration_ms: float
    deviation: str  # "" when the span is normal


@dataclass(frozen=True)
class AbnormalSpan:
    trace_id: str
    span_id: str
    parent_id: str
    service: str
    name: str
    kind: str
    status: str
    start_ns: int
    duration_ms: float
    depth: int  # edges to the top span of its trace
    deviations: tuple[Deviation, ...]
    onset_ns: int
    onset_s: float | None  # seconds after the reference (the fault's injection, else the baseline's end)
    impact: float | None  # excess that reached the user-facing span / that span's baseline median
    material: bool  # impact >= min_impact, or an error / missing child / fast failure
    attributes: dict[str, Any]  # the span's own key attributes
    context_attributes: dict[str, Any]  # key attributes of its ancestors in the same service (nearest wins)
    chain: tuple[ChainSpan, ...]  # this span first, the user-facing (top) span last
    root_missing: bool  # the chain's top span is not a root: its parent is lost (not a remote caller)
    link: Link | None = None

    @property
    def deviation(self) -> str:
        parts = [d.text for d in self.deviations]
        if self.link is not None:
            parts.append(self.link.text)
        return "; ".join(parts)


@dataclass(frozen=True)
class AttributeSkew:
    """An attribute value the pair's flagged spans share far more than its other spans (BubbleUp)."""

    key: str
    value: Any
    flagged_share: float  # of the flagged spans, how many carry key=value
    others_share: float  # of the pair's other spans (baseline and unflagged)

    @property
    def text(self) -> str:
        return (
            f"{self.key}={self.value} on {_pct(self.flagged_share)} of flagged vs {_pct(self.others_share)} of others"
        )


@dataclass(frozen=True)
class AbnormalPair:
    """A (service, span name) pair with spans flagged in the fault window."""

    service: str
    name: str
    spans: int  # spans of the pair in the fault window
    flagged: int  # of them abnormal
    share: float  # flagged / spans
    root_causes: int  # abnormal and not explained by an abnormal child
    material: int  # of them material (see AnalysisOptions.min_impact)
    latency: int  # flagged for latency, error, missing child, failing fast (a span may have several)
    errors: int
    missing_child: int
    median_ratio: float | None  # median duration of the flagged spans / baseline median
    baseline_spans: int
    baseline_median_ms: float | None
    baseline_p99_ms: float | None
    baseline_error_rate: float | None
    deviation: str
    attributes: tuple[AttributeSkew, ...] = ()  # what the flagged spans have in common, most telling first
    failed_fast: int = 0


@dataclass(frozen=True)
class AbnormalReport:
    first: AbnormalSpan | None
    pairs: tuple[AbnormalPair, ...]
    spans: int
    baseline_spans: int
    fault_spans: int
    baseline_rule: str  # how the baseline was chosen, in words
    reference_ns: int | None  # what onset_s is relative to
    reference: str  # "fault injection" | "baseline end"
    orphans: int  # spans whose parent was lost (a SERVER span's remote caller is not lost)
    candidates: int  # root-cause spans in the fault window
    judged_pairs: int  # fault-window pairs with enough baseline spans to judge latency
    thin_pairs: tuple[str, ...]  # fault-window pairs with some but too few baseline spans
    new_pairs: tuple[str, ...]  # fault-window pairs absent from the baseline
    options: AnalysisOptions = field(default_factory=AnalysisOptions)
    ranking: Ranking | None = None  # ranked suspects and what could be judged (None: ranking not asked for)
    merged_names: tuple[tuple[str, int], ...] = ()  # (template, span names with ids it joined) judged as one
    inferred_kinds: str | None = None  # which services' span kinds were inferred, in words (drill.traces.kinds)

    @property
    def suspects(self) -> tuple[Suspect, ...]:
        return () if self.ranking is None else self.ranking.suspects

    @property
    def inconclusive_reason(self) -> str | None:
        """Why no finding can be stated: most of the fault window could not be judged (None: it could)."""
        if self.ranking is None or not self.ranking.mostly_unjudged or self.suspects:
            return None
        return self.ranking.unjudged_reason

    @property
    def merged_names_text(self) -> str | None:
        """What ``merged_names`` says, in words (None: every span name was judged as it is)."""
        if not self.merged_names:
            return None
        shown = ", ".join(f"{template} ({names} names)" for template, names in self.merged_names[:5])
        more = f" and {len(self.merged_names) - 5} more" if len(self.merged_names) > 5 else ""
        return f"span names that differ only in ids judged as one operation: {shown}{more}"

    def to_json(self) -> dict:
        data = asdict(self)
        if self.first is not None:
            data["first"]["deviation"] = self.first.deviation
        if self.ranking is not None:
            for suspect in data["ranking"]["suspects"]:
                suspect["evidence"] = [
                    {**e, "text": x.text} for e, x in zip(suspect["evidence"], _evidence_of(self, suspect))
                ]
            data["ranking"]["inconclusive_reason"] = self.inconclusive_reason
        return data


def _evidence_of(report: AbnormalReport, suspect: dict) -> tuple:
    return next(s.evidence for s in report.suspects if s.service == suspect["service"])


# -- structure ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Tree:
    parent: np.ndarray  # int64 parent row, -1 for a top span
    top: np.ndarray  # int64 row of the top span of each row's (sub)tree
    depth: np.ndarray  # int64 edges to the top


def _tree(table: SpanTable) -> _Tree:
    rows = np.arange(len(table), dtype=np.int64)
    parent = np.asarray(table.parent_row, dtype=np.int64).copy()
    parent[parent == rows] = -1
    top, depth, stuck = _jump(parent, rows)
    if stuck.any():  # a parent cycle (malformed ids): its members become tops
        parent[stuck] = -1
        top, depth, _ = _jump(parent, rows)
    return _Tree(parent, top, depth)


def _jump(parent: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top and depth of every row by pointer jumping (log₂ depth passes over the columns)."""
    up = parent.copy()
    depth = (parent >= 0).astype(np.int64)
    top = np.where(parent >= 0, parent, rows)
    for _ in range(64):
        active = np.flatnonzero(up >= 0)
        if not len(active):
            break
        ahead = up[active]
        depth[active] += depth[ahead]
        up[active] = up[ahead]
        top[active] = top[ahead]
    return top, depth, up >= 0


def _operations(table: SpanTable, options: AnalysisOptions) -> NameTemplates:
    """The operations the pairs are made of: each span name, or where ``options.name_templates`` merges thin names
    that differ only in ids, their template."""
    if not options.name_templates:
        return NameTemplates.each_apart(table.names)
    spans = np.bincount(table.name, minlength=len(table.names))
    return name_templates(table.names, spans, options.min_judged_spans)


def _group_codes(table: SpanTable, operations: NameTemplates) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dense (service, operation) pair code per row, and each pair's service and operation codes (an operation:
    a span name, or the template of names that differ only in ids, :mod:`drill.traces.names`)."""
    width = max(len(operations.names), 1)
    name = operations.code[table.name] if operations.merged else table.name.astype(np.int64)
    key = table.service.astype(np.int64) * width + name
    if len(table.services) * width <= 4_000_000:
        present = np.bincount(key, minlength=len(table.services) * width) > 0
        keys = np.flatnonzero(present)
        dense = np.cumsum(present) - 1
        group = dense[key]
    else:
        keys, group = np.unique(key, return_inverse=True)
    return group.astype(np.int64), keys // width, keys % width


# -- windows --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Windows:
    baseline: np.ndarray
    fault: np.ndarray
    rule: str
    reference_ns: int | None
    reference: str


def _windows(
    table: SpanTable,
    tree: _Tree,
    baseline: np.ndarray | None,
    baseline_from_ns: int | None,
    baseline_until_ns: int | None,
    fault_start_ns: int | None,
    fault_end_ns: int | None,
) -> _Windows:
    trace_start = table.start_ns[tree.top]
    if baseline is not None:
        base = np.asarray(baseline, dtype=bool)
        if base.shape != (len(table),):
            raise ValueError(f"the baseline mask has shape {base.shape}, the table {len(table)} rows")
        rule = "the given baseline spans"
        boundary = None
    else:
        if baseline_until_ns is None:
            first, last = int(table.start_ns.min()), int(table.end_ns.max())
            baseline_until_ns = first + (last - first) // 3
            rule = "the first third of the time range (no baseline given)"
        else:
            rule = (
                "traces starting in the baseline window"
                if baseline_from_ns is not None
                else "traces starting before the baseline's end"
            )
        base = trace_start < baseline_until_ns
        if baseline_from_ns is not None:
            base &= trace_start >= baseline_from_ns
        boundary = baseline_until_ns
    if fault_start_ns is not None:
        fault = trace_start >= fault_start_ns
        if fault_end_ns is not None:
            fault &= trace_start <= fault_end_ns
        fault &= ~base
        return _Windows(base, fault, rule, fault_start_ns, "fault injection")
    fault = ~base if boundary is None else (trace_start >= boundary)
    if fault_end_ns is not None:
        fault &= trace_start <= fault_end_ns
    reference = boundary if boundary is not None else (int(table.start_ns[fault].min()) if fault.any() else None)
    return _Windows(base, fault, rule, reference, "baseline end" if boundary is not None else "fault window start")


# -- baseline model -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Model:
    count: np.ndarray  # baseline spans per pair
    median: np.ndarray  # ns (nan without baseline)
    p99: np.ndarray  # ns
    threshold: np.ndarray  # ns; inf where latency is not judged
    floor: np.ndarray  # ns; a span this short or shorter ended far earlier than usual (-inf: not judged)
    latency_rate: np.ndarray  # smoothed baseline share above the threshold
    collapsed: np.ndarray  # ns: at most the floor and _COLLAPSED_RATIO of the median (-inf: not judged)
    collapsed_base: np.ndarray  # baseline spans at or under it
    error_rate: np.ndarray  # raw baseline error rate (nan without baseline)
    error_prior: np.ndarray  # smoothed
    never_erred: np.ndarray  # bool: min_baseline_spans or more baseline spans, none of them an error


def _group_quantiles(
    values: np.ndarray, group: np.ndarray, groups: int, qs: tuple[float, ...]
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per-group counts and linear-interpolated quantiles ``qs`` (nan for empty groups)."""
    counts = np.bincount(group, minlength=groups)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    ordered = _sorted_by_group(values, group, groups, counts, starts)
    has = counts > 0
    out = []
    for q in qs:
        result = np.full(groups, np.nan)
        pos = q * (counts[has] - 1)
        low = np.floor(pos).astype(np.int64)
        i = starts[has] + low
        j = np.minimum(i + 1, starts[has] + counts[has] - 1)
        result[has] = ordered[i] + (ordered[j] - ordered[i]) * (pos - low)
        out.append(result)
    return counts, out


#: Above this many groups of two or more values, :func:`_sorted_by_group` sorts in two whole-array passes instead
#: of one small sort per group.
_SEGMENT_SORTS = 4096


def _sorted_by_group(
    values: np.ndarray, group: np.ndarray, groups: int, counts: np.ndarray, starts: np.ndarray
) -> np.ndarray:
    """``values`` as float64, grouped by ``group`` (ascending) and sorted within each group: what
    ``values[np.lexsort((values, group))]`` gives, without lexsort's two stable sorts of the whole array (the
    group codes are sorted stably, by radix when they fit 16 bits, then each group's values on their own)."""
    codes = group.astype(np.uint16) if groups <= 1 << 16 else group
    multi = np.flatnonzero(counts > 1)
    if len(multi) > _SEGMENT_SORTS:
        by_value = np.argsort(values)
        return values[by_value[np.argsort(codes[by_value], kind="stable")]].astype(np.float64)
    ordered = values[np.argsort(codes, kind="stable")].astype(np.float64)
    for start, count in zip(starts[multi].tolist(), counts[multi].tolist()):
        ordered[start : start + count].sort()
    return ordered


def _model(
    duration: np.ndarray, status: np.ndarray, group: np.ndarray, groups: int, base: np.ndarray, options: AnalysisOptions
) -> _Model:
    d, g = duration[base], group[base]
    count, (median, p99, p01) = _group_quantiles(d, g, groups, (0.5, 0.99, 0.01))
    _, (mad,) = _group_quantiles(np.abs(d - median[g]), g, groups, (0.5,))
    threshold = np.fmax(
        p99, np.fmax(median + options.latency_mads * _MAD_TO_SIGMA * mad, median + options.min_excess_ms * 1e6)
    )
    threshold[(count < options.min_baseline_spans) | np.isnan(threshold)] = np.inf
    above = np.bincount(g, weights=d > threshold[g], minlength=groups)
    errors = np.bincount(g, weights=status[base] == _ERROR, minlength=groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        error_rate = errors / count
    never_erred = (errors == 0) & (count >= options.min_baseline_spans)
    floor = np.fmin(p01, np.fmin(median * _FAST_RATIO, median - options.min_excess_ms * 1e6))
    floor[(count < options.min_judged_spans) | np.isnan(floor)] = -np.inf
    collapsed = np.fmin(floor, median * _COLLAPSED_RATIO)
    return _Model(
        count,
        median,
        p99,
        threshold,
        floor,
        (above + 0.5) / (count + 1),
        collapsed,
        np.bincount(g, weights=d <= collapsed[g], minlength=groups),
        error_rate,
        (errors + 0.5) / (count + 1),
        never_erred,
    )


def _significant(k: np.ndarray, n: np.ndarray, prior: np.ndarray, alpha: float) -> np.ndarray:
    """Whether k of n is above rate ``prior`` beyond chance: Chernoff bound exp(-n·KL(k/n‖p)) < alpha."""
    n = n.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        q = np.where(n > 0, k / n, 0.0)
    return (k > 0) & (q > prior) & (n * _kl(q, prior) >= math.log(1 / alpha))


def _rises(k: np.ndarray, n: np.ndarray, k_base: np.ndarray, n_base: np.ndarray, alpha: float) -> np.ndarray:
    """Whether k of n is a higher rate than k_base of n_base beyond chance, both samples' sizes weighed: the
    likelihood ratio of two rates against one pooled rate, n·KL(q‖p) + n_base·KL(q_base‖p) (half the G-test's
    statistic), at least ln(1/alpha). With a thin baseline (3 spans) a rate must rise far more than with a thick
    one: a smoothed baseline rate taken as exact would call every fault window with many spans significant."""
    n, n_base = n.astype(np.float64), n_base.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        q = np.where(n > 0, k / n, 0.0)
        q_base = np.where(n_base > 0, k_base / n_base, 0.0)
        pooled = (k + k_base) / np.maximum(n + n_base, 1.0)
    ratio = n * _kl(q, pooled) + n_base * _kl(q_base, pooled)
    return (k > 0) & (q > q_base) & (ratio >= math.log(1 / alpha))


def _kl(q: np.ndarray, p: np.ndarray) -> np.ndarray:
    """KL(q‖p) of two Bernoulli rates (p clipped off 0 and 1)."""
    p = np.clip(p, 1e-12, 1 - 1e-12)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(q > 0, q * np.log(np.where(q > 0, q, 1) / p), 0.0) + np.where(
            q < 1, (1 - q) * np.log(np.where(q < 1, 1 - q, 1) / (1 - p)), 0.0
        )


# -- children -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Missing:
    rows: np.ndarray  # parent rows (fault window) missing a usual child
    child: np.ndarray  # the missing child pair of each
    presence: np.ndarray  # how often the baseline had it


def _absence_rises(
    absent: int, rows: int, absent_base: int, n_base: int, loss: float, options: AnalysisOptions
) -> bool:
    """Whether a child is absent from more of the fault window's parents than of the baseline's, beyond chance
    (both samples' sizes weighed) and beyond the share of spans the traces lose anyway."""
    k, n = np.array([absent]), np.array([rows])
    rises = _rises(k, n, np.array([absent_base]), np.array([n_base]), options.alpha)[0]
    return bool(rises and (not loss or _significant(k, n, np.array([loss]), options.alpha)[0]))


def _present_pairs(parent: np.ndarray, group: np.ndarray, groups: int, mask: np.ndarray) -> np.ndarray:
    """Sorted unique ``parent_row * groups + child_pair`` of the rows in ``mask`` whose parent is in ``mask``."""
    rows = np.flatnonzero(mask & (parent >= 0))
    rows = rows[mask[parent[rows]]]
    return unique_ints(parent[rows] * groups + group[rows])


def _loss_share(table: SpanTable, tree: _Tree, baseline: np.ndarray) -> float:
    """The share of spans lost on the way in the baseline (sampling, a full export queue), as the share of its
    spans whose parent is missing: a child can be absent for the same reason, so an absence must be
    significant against it (a crash's lost spans in the fault window are not counted: they are the fault)."""
    tops = np.flatnonzero((tree.parent < 0) & baseline)
    spans = int(baseline.sum()) - len(tops)
    return float(_lost_parent(table, tops).sum()) / spans if spans > 0 else 0.0


def _missing_children(
    table: SpanTable,
    tree: _Tree,
    group: np.ndarray,
    groups: int,
    win: _Windows,
    model: _Model,
    options: AnalysisOptions,
) -> _Missing:
    present = _present_pairs(tree.parent, group, groups, win.baseline)
    pair = group[present // groups] * groups + present % groups
    pairs, with_child = np.unique(pair, return_counts=True)
    parent_pair, child_pair = pairs // groups, pairs % groups
    parents = model.count[parent_pair]
    presence = with_child / np.maximum(parents, 1)
    usual = (presence >= options.child_presence) & (parents >= options.min_judged_spans)
    fault_present = _present_pairs(tree.parent, group, groups, win.fault)
    fault_rows = np.flatnonzero(win.fault)
    fault_rows = fault_rows[np.argsort(group[fault_rows], kind="stable")]  # each pair's rows: one slice
    bounds = np.searchsorted(group[fault_rows], np.arange(groups + 1))
    loss = _loss_share(table, tree, win.baseline)
    found_rows, found_child, found_presence = [], [], []
    for gp, gc, share, n_base, n_with in zip(
        parent_pair[usual], child_pair[usual], presence[usual], parents[usual], with_child[usual]
    ):
        rows = fault_rows[bounds[gp] : bounds[gp + 1]]
        keys = rows * groups + gc
        at = np.minimum(np.searchsorted(fault_present, keys), max(len(fault_present) - 1, 0))
        absent = rows[fault_present[at] != keys] if len(fault_present) else rows
        # under every one of min_baseline_spans or more baseline parents: any absence counts, unless spans get lost
        always = n_with == n_base >= options.min_baseline_spans and not loss
        if len(absent) and (always or _absence_rises(len(absent), len(rows), n_base - n_with, n_base, loss, options)):
            found_rows.append(absent)
            found_child.append(np.full(len(absent), gc, dtype=np.int64))
            found_presence.append(np.full(len(absent), share))
    if not found_rows:
        empty = np.zeros(0, dtype=np.int64)
        return _Missing(empty, empty, np.zeros(0))
    return _Missing(np.concatenate(found_rows), np.concatenate(found_child), np.concatenate(found_presence))


# -- flags and causes -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Flags:
    latency: np.ndarray  # bool per row
    error: np.ndarray
    missing: np.ndarray
    fast: np.ndarray  # failed fast: far shorter than usual where a caller's work stopped, or collapsed
    stopped: np.ndarray  # ... of them, those where a caller's work stopped
    abnormal: np.ndarray
    cause: np.ndarray  # abnormal and not explained by a child
    material: np.ndarray  # causes that matter to the user-facing span
    impact: np.ndarray  # float: excess reaching the top / the top's baseline median (nan: not slow)
    onset: np.ndarray  # int64 ns (_NEVER where not abnormal)
    slow_raw: np.ndarray  # above the latency threshold, significant or not


def _flags(
    table: SpanTable,
    tree: _Tree,
    group: np.ndarray,
    groups: int,
    win: _Windows,
    model: _Model,
    missing: _Missing,
    options: AnalysisOptions,
) -> _Flags:
    n = len(table)
    duration = table.duration_ns
    fault_group = group[win.fault]
    spans = np.bincount(fault_group, minlength=groups)
    slow_raw = win.fault & (duration > model.threshold[group])
    sig_slow = _significant(np.bincount(group[slow_raw], minlength=groups), spans, model.latency_rate, options.alpha)
    erred = win.fault & (table.status == _ERROR)
    sig_error = _significant(np.bincount(group[erred], minlength=groups), spans, model.error_prior, options.alpha)
    sig_error |= model.never_erred
    latency = slow_raw & sig_slow[group]
    error = erred & sig_error[group]
    miss = np.zeros(n, dtype=bool)
    miss[missing.rows] = True
    last = _last_children(tree.parent, table.end_ns)
    short = win.fault & (duration <= model.floor[group])
    stopped = _failed_fast(last, short, miss)  # where a caller's work stopped
    less = _fewer_children(tree.parent, group, groups, win.baseline)
    fast = stopped | _collapsed(short & less, duration, group, groups, spans, model, options.alpha)
    abnormal = latency | error | miss | fast
    critical = _critical(table, tree, last, options)
    cause = abnormal & ~_explained(
        tree.parent, critical, duration, group, model, latency, error, miss, abnormal, options
    )
    ended = error | miss | fast
    impact, usual = _impact(duration, group, tree, critical, model, latency)
    material = cause & (ended | (impact >= options.min_impact))
    onset = _onset(table, group, model, latency, ended, material, usual, options)
    return _Flags(latency, error, miss, fast, stopped, abnormal, cause, material, impact, onset, slow_raw)


def _fewer_children(parent: np.ndarray, group: np.ndarray, groups: int, baseline: np.ndarray) -> np.ndarray:
    """bool per row: the span has no child, or fewer than any baseline span of its pair had."""
    children = np.bincount(parent[parent >= 0], minlength=len(parent))
    least = np.full(groups, np.iinfo(np.int64).max)
    rows = np.flatnonzero(baseline)
    np.minimum.at(least, group[rows], children[rows])
    return (children == 0) | (children < least[group])


def _collapsed(
    short: np.ndarray,
    duration: np.ndarray,
    group: np.ndarray,
    groups: int,
    spans: np.ndarray,
    model: _Model,
    alpha: float,
) -> np.ndarray:
    """bool per row: a ``short`` span of a pair whose spans collapsed, failing fast on the pair's own evidence:
    at most ``_COLLAPSED_RATIO`` of its baseline median, in significantly more of the fault window's spans than of
    the baseline's, both samples' sizes weighed (``short`` holds only spans that made fewer calls than usual:
    :func:`_fewer_children`). A service that throws on a share of its requests shows so even where no caller stops
    calling (a leaf whose callers make no further calls, a call in parallel). A span half as long is no such
    evidence on its own: a thin baseline of a wide or mixed distribution gives that by chance, and so does the
    tail of an earlier slowdown in the baseline, against which normal spans look short; nor is a short span that
    made its usual calls (a cache, a cheaper path)."""
    collapsed = short & (duration <= model.collapsed[group])
    k = np.bincount(group[collapsed], minlength=groups)
    return collapsed & _rises(k, spans, model.collapsed_base, model.count, alpha)[group]


def _failed_fast(last: np.ndarray, short: np.ndarray, miss: np.ndarray) -> np.ndarray:
    """bool per row: where a parent's work stopped, failing fast. From each span missing a usual child, down its
    last-finishing child, that child's last-finishing child, and so on: the spans on that path far shorter
    than usual (``short``) failed fast. A service that fails returns at once, each caller on the way up may
    skip the calls it would have made next, and the first caller missing a usual child can be several calls
    above it; the spans in between need not be shorter than their pair's usual (a call that fails fast where
    it is usually slow can end a caller's work later than its usual one). Traces without status codes show
    an exception so; without this, the caller missing its children is the deepest deviation and a failing
    service is never named. ``last``: each row's last-finishing child (:func:`_last_children`)."""
    on_path = np.zeros(len(last), dtype=bool)
    frontier = np.flatnonzero(miss)
    while len(frontier):
        child = last[frontier]
        child = child[child >= 0]
        frontier = child[~on_path[child]]
        on_path[frontier] = True
    return on_path & short


def _last_children(parent: np.ndarray, end_ns: np.ndarray) -> np.ndarray:
    """Per row, its last-finishing child's row (-1: none; on a tie, the later row)."""
    lfc = np.full(len(parent), -1, dtype=np.int64)
    rows = np.flatnonzero(parent >= 0)
    if not len(rows):
        return lfc
    order = rows[order_by(parent[rows], end_ns[rows] - int(end_ns.min()), stable=True)]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = parent[order[1:]] != parent[order[:-1]]
    lfc[parent[order[last]]] = order[last]
    return lfc


def _onset(
    table: SpanTable,
    group: np.ndarray,
    model: _Model,
    latency: np.ndarray,
    ended: np.ndarray,
    material: np.ndarray,
    usual: np.ndarray,
    options: AnalysisOptions,
) -> np.ndarray:
    """When each abnormal span became abnormal (ns): a slow span when it passed its threshold — a material
    one when its excess reached ``min_impact`` of the user-facing span's usual duration — an error or a
    missing child at the span's end."""
    onset = np.full(len(table), _NEVER, dtype=np.int64)
    rows = np.flatnonzero(latency)
    g = group[rows]
    after = model.threshold[g]
    matters = material[rows]
    after[matters] = np.fmax(after[matters], model.median[g[matters]] + options.min_impact * usual[rows[matters]])
    onset[rows] = table.start_ns[rows] + after.astype(np.int64)
    onset[ended] = np.minimum(onset[ended], table.end_ns[ended])
    return onset


def _critical(table: SpanTable, tree: _Tree, last: np.ndarray, options: AnalysisOptions) -> np.ndarray:
    """bool per row: the span is on its parent's critical path (tops are).

    Jaeger's critical path, one step deep: a child is critical when it is the last-finishing child of its
    parent, or ends before that child starts (it ran before it, in sequence); a child that overlaps the
    last-finishing one ran in parallel and the parent did not wait for it. ``onset_tolerance_ms`` of
    slack absorbs the clock skew between the children's processes. ``last``: each row's last-finishing child.
    """
    parent = tree.parent
    critical = np.ones(len(table), dtype=bool)
    rows = np.flatnonzero(parent >= 0)
    if not len(rows):
        return critical
    slack = int(options.onset_tolerance_ms * 1e6)
    final = last[parent[rows]]
    critical[rows] = (table.end_ns[rows] >= table.end_ns[final] - slack) | (
        table.end_ns[rows] <= table.start_ns[final] + slack
    )
    return critical


def _impact(
    duration: np.ndarray, group: np.ndarray, tree: _Tree, critical: np.ndarray, model: _Model, latency: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """How much of each slow span's excess reached its user-facing (top) span, as a share of the top's usual
    duration, and that usual duration (ns; nan for spans that are not slow).

    The excess that reached the top is the span's own excess over its baseline median, capped by each
    ancestor's excess on the way up, and nothing when a span on the way is off its parent's critical
    path (the user-facing span did not wait for it). The usual duration is the top's pair's baseline
    median, else the top's own duration.
    """
    excess = duration - model.median[group]
    impact = np.full(len(duration), np.nan)
    usual = np.full(len(duration), np.nan)
    rows = np.flatnonzero(latency)
    cap, on_path = _path_min(tree.parent, np.where(np.isnan(excess), np.inf, excess), critical, rows)
    top = tree.top[rows]
    median = model.median[group[top]]
    usual[rows] = np.where(np.isfinite(median) & (median > 0), median, duration[top])
    reached = np.where(on_path, np.minimum(excess[rows], cap), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        impact[rows] = reached / usual[rows]
    return impact, usual


def _path_min(
    parent: np.ndarray, value: np.ndarray, link: np.ndarray, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``rows``, the smallest ``value`` among its ancestors (inf for a top) and whether ``link`` holds
    for it and every ancestor below the top. A walk up the (acyclic) tree, one step per level, over the ancestors
    of ``rows`` only: the slow spans are a small part of a large table."""
    up = parent[rows]
    low = np.full(len(rows), np.inf)
    ok = np.where(up >= 0, link[rows], True)
    live = np.flatnonzero(up >= 0)
    while len(live):
        at = up[live]
        low[live] = np.minimum(low[live], value[at])
        above = parent[at]
        ok[live] &= np.where(above >= 0, link[at], True)
        up[live] = above
        live = live[above >= 0]
    return low, ok


def _explained(
    parent: np.ndarray,
    critical: np.ndarray,
    duration: np.ndarray,
    group: np.ndarray,
    model: _Model,
    latency: np.ndarray,
    error: np.ndarray,
    miss: np.ndarray,
    abnormal: np.ndarray,
    options: AnalysisOptions,
) -> np.ndarray:
    """Abnormal spans whose deviation a deeper abnormal span accounts for.

    A slow (only) span is explained when its children's time over their baseline medians covers
    ``explain_share`` of its own excess and an abnormal span lies below it (children on its critical path
    only: a parallel child it did not wait for explains nothing) — whether or not the child
    in between was flagged (its own baseline may be too wide or too thin to judge) — or when a child
    erred. An erring span, or one missing a child, is explained by any abnormal span below it.
    """
    n = len(parent)
    has_parent = parent >= 0

    def per_parent(mask: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        rows = mask & has_parent
        return np.bincount(parent[rows], weights=None if weights is None else weights[rows], minlength=n)

    excess = np.nan_to_num(duration - model.median[group], nan=0.0)
    child_excess = per_parent(critical, np.maximum(excess, 0.0))
    below = _abnormal_below(parent, abnormal)
    latency_only = latency & ~error & ~miss
    by_children = ((child_excess >= options.explain_share * excess) & below) | (per_parent(error) > 0)
    return np.where(latency_only, by_children, below)


def _abnormal_below(parent: np.ndarray, abnormal: np.ndarray) -> np.ndarray:
    """bool per row: some descendant is abnormal (one pass per tree level, each row lifted once)."""
    below = np.zeros(len(parent), dtype=bool)
    lifted = np.zeros(len(parent), dtype=bool)
    frontier = np.flatnonzero(abnormal & (parent >= 0))
    lifted[frontier] = True
    while len(frontier):
        ups = unique_ints(parent[frontier])
        below[ups] = True
        ups = ups[(parent[ups] >= 0) & ~lifted[ups]]
        lifted[ups] = True
        frontier = ups
    return below


def _first_cause(
    table: SpanTable,
    tree: _Tree,
    flags: _Flags,
    options: AnalysisOptions,
    group: np.ndarray | None = None,
    lead: list[list[_Lead]] | None = None,
) -> int | None:
    """The earliest material cause (any cause when none is material); see the module doc for ties. With
    ``lead`` (tiers of the pairs the ranking puts first: the top suspect's, then every suspect's evidence
    comparable with the strongest), the material causes of the first tier that has any: a slowdown elsewhere
    that began earlier (decode under a flood, before the queue grew; the healthy replica taking the slow one's
    load) does not outrank the deviation the ranking puts first."""
    rows = np.flatnonzero(flags.material)
    if len(rows) and group is not None and lead:
        for tier in lead:
            picked = _in_lead(table, tree, group, rows, tier)
            if len(picked):
                rows = picked
                break
    if not len(rows):
        rows = np.flatnonzero(flags.cause)
    if not len(rows):
        return None
    onset = flags.onset[rows]
    near = rows[onset <= onset.min() + int(options.onset_tolerance_ms * 1e6)]
    deepest = near[tree.depth[near] == tree.depth[near].max()]
    earliest = deepest[flags.onset[deepest] == flags.onset[deepest].min()]
    return min(earliest.tolist(), key=lambda r: (table.trace_id[r], table.span_id[r]))


@dataclass(frozen=True)
class _Lead:
    """A pair the ranking's evidence points at; for a slow link's callee, only the calls into ``callee``."""

    pair: int
    callee: str | None = None


def _in_lead(table: SpanTable, tree: _Tree, group: np.ndarray, rows: np.ndarray, tier: list[_Lead]) -> np.ndarray:
    """The ``rows`` of the tier's pairs (a link's: those calling its callee, by child span or peer attribute)."""
    keep = np.zeros(len(rows), dtype=bool)
    for lead in tier:
        mine = group[rows] == lead.pair
        if lead.callee is not None and mine.any():
            mine[mine] = [_calls(table, tree, int(r), lead.callee) for r in rows[mine].tolist()]
        keep |= mine
    return rows[keep]


def _calls(table: SpanTable, tree: _Tree, row: int, callee: str) -> bool:
    children = np.flatnonzero(tree.parent == row)
    if len(children):
        return any(table.services[table.service[c]] == callee for c in children.tolist())
    peer = _peer(table.attributes[row]) or ""
    host = peer.split("://")[-1].split("/")[0].split(":")[0]
    return host == callee or host.split(".")[0] == callee


# -- reporting ------------------------------------------------------------------------------------


def _ms(ns: float) -> str:
    ms = ns / 1e6
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    if ms >= 10:
        return f"{ms:.0f} ms"
    return f"{ms:.3g} ms"


def _ratio(x: float) -> str:
    return f"{x:.0f}x" if x >= 10 else f"{x:.1f}x"


def _pct(x: float) -> str:
    if x == 0:
        return "0%"
    return f"{x * 100:.0f}%" if x >= 0.1 else f"{x * 100:.2g}%"


def _pair_label(
    table: SpanTable, names: tuple[str, ...], pair_service: np.ndarray, pair_name: np.ndarray, pair: int
) -> str:
    return f"{table.services[pair_service[pair]]}/{names[pair_name[pair]]}"


@dataclass(frozen=True)
class _Context:
    table: SpanTable
    tree: _Tree
    group: np.ndarray
    pair_service: np.ndarray
    pair_name: np.ndarray  # codes into names
    names: tuple[str, ...]  # the operations' names (span names, or templates of names with ids)
    model: _Model
    flags: _Flags
    missing: _Missing
    win: _Windows
    options: AnalysisOptions

    def label(self, pair: int) -> str:
        return _pair_label(self.table, self.names, self.pair_service, self.pair_name, pair)


def _deviations(ctx: _Context, row: int) -> tuple[Deviation, ...]:
    g = ctx.group[row]
    out = []
    if ctx.flags.latency[row]:
        duration = float(ctx.table.duration_ns[row])
        p99 = float(ctx.model.p99[g])
        ratio = duration / p99 if p99 > 0 else math.inf
        out.append(
            Deviation(
                "latency",
                f"{_ratio(ratio)} baseline p99 ({_ms(duration)} vs p99 {_ms(p99)}, "
                f"median {_ms(float(ctx.model.median[g]))})",
                round(ratio, 3),
                round(p99 / 1e6, 6),
            )
        )
    if ctx.flags.error[row]:
        message = ctx.table.status_message[row]
        rate = ctx.model.error_rate[g]
        base = "pair not in baseline" if np.isnan(rate) else f"baseline error rate {_pct(float(rate))}"
        out.append(
            Deviation(
                "error",
                f"error{f' ({message})' if message else ''}, {base}",
                None,
                None if np.isnan(rate) else round(float(rate), 6),
            )
        )
    if ctx.flags.missing[row]:
        at = np.flatnonzero(ctx.missing.rows == row)
        for child, presence in zip(ctx.missing.child[at], ctx.missing.presence[at]):
            out.append(
                Deviation(
                    "missing_child",
                    f"missing child {ctx.label(int(child))} (under {_pct(float(presence))} of baseline parents)",
                    None,
                    round(float(presence), 6),
                )
            )
    if ctx.flags.fast[row]:
        duration, median = float(ctx.table.duration_ns[row]), float(ctx.model.median[g])
        out.append(
            Deviation(
                "failed_fast",
                f"failed fast ({_ms(duration)} vs median {_ms(median)})"
                + (", a caller's work stopped after it" if ctx.flags.stopped[row] else ", fewer calls than usual"),
                round(duration / median, 3) if median > 0 else None,
                round(median / 1e6, 6),
            )
        )
    return tuple(out)


def _short_deviation(ctx: _Context, row: int) -> str:
    if not ctx.flags.abnormal[row]:
        return ""
    return "; ".join(d.text for d in _deviations(ctx, row))


def _key_attributes(attributes: dict) -> dict[str, Any]:
    def wanted(value: Any) -> bool:
        if isinstance(value, (str, int, float, bool)):
            return True
        return (
            isinstance(value, list) and len(value) <= 8 and all(isinstance(v, (str, int, float, bool)) for v in value)
        )

    keys = sorted((k for k, v in attributes.items() if wanted(v)), key=lambda k: (not k.startswith(_KEY_PREFIXES), k))[
        :_MAX_ATTRIBUTES
    ]
    return {k: (attributes[k][:200] if isinstance(attributes[k], str) else attributes[k]) for k in keys}


def _context_attributes(ctx: _Context, row: int) -> dict[str, Any]:
    """Key attributes (the preferred prefixes only) the span's same-service ancestors carry and it does not."""
    table = ctx.table
    out: dict[str, Any] = {}
    own = table.attributes[row]
    service = table.service[row]
    up = int(ctx.tree.parent[row])
    while up >= 0 and table.service[up] == service:
        for key, value in _key_attributes(table.attributes[up]).items():
            if key.startswith(_KEY_PREFIXES) and key not in own:
                out.setdefault(key, value)
        up = int(ctx.tree.parent[up])
    return out


def _peer(attributes: dict) -> str | None:
    host = attributes.get("server.address") or attributes.get("net.peer.name") or attributes.get("peer.service")
    if host is None:
        url = attributes.get("url.full") or attributes.get("http.url")
        return str(url) if url else None
    port = attributes.get("server.port") or attributes.get("net.peer.port")
    return f"{host}:{port}" if port else str(host)


def _link(ctx: _Context, row: int) -> Link | None:
    table, tree = ctx.table, ctx.tree
    if table.kind[row] != _CLIENT or not ctx.flags.latency[row]:
        return None
    children = np.flatnonzero(tree.parent == row)
    servers = children[table.kind[children] == _SERVER]
    if len(servers) and not _outside(ctx, row, servers):
        return None
    client = table.services[table.service[row]]
    peer = _peer(table.attributes[row])
    if len(servers):
        server = int(servers[0])
        name = table.services[table.service[server]]
        text = (
            f"slow link {client} → {name}{f' ({peer})' if peer else ''}: the CLIENT span is slow, "
            f"its SERVER span {_ms(float(table.duration_ns[server]))} is normal"
        )
        return Link(client, name, peer, table.span_id[server], text)
    if len(children):
        return None
    text = f"slow link {client} → {peer or 'its peer'}: the CLIENT span is slow and no SERVER span answered it"
    return Link(client, None, peer, None, text)


def _outside(ctx: _Context, client: int, servers: np.ndarray) -> bool:
    """Whether the CLIENT span's excess went outside its SERVER spans (network, proxy, connection set-up):
    the servers are judged, none is slow, and their excess leaves ``explain_share`` of the client's."""
    model, duration = ctx.model, ctx.table.duration_ns
    g = ctx.group[servers]
    if ctx.flags.slow_raw[servers].any() or not np.isfinite(model.threshold[g]).all():
        return False  # the server was slow too, or its latency cannot be judged: no claim about the link
    client_excess = duration[client] - model.median[ctx.group[client]]
    server_excess = np.maximum(duration[servers] - model.median[g], 0).sum()
    return bool(client_excess - server_excess >= ctx.options.explain_share * client_excess)


def _chain(ctx: _Context, row: int) -> tuple[ChainSpan, ...]:
    table, out = ctx.table, []
    while row >= 0:
        out.append(
            ChainSpan(
                table.span_id[row],
                table.services[table.service[row]],
                table.names[table.name[row]],
                KIND_NAMES[int(table.kind[row])],
                STATUS_NAMES[int(table.status[row])],
                round(float(table.duration_ns[row]) / 1e6, 3),
                _short_deviation(ctx, row),
            )
        )
        row = int(ctx.tree.parent[row])
    return tuple(out)


def _abnormal_span(ctx: _Context, row: int) -> AbnormalSpan:
    table = ctx.table
    span = table.span(row)
    top = int(ctx.tree.top[row])
    onset = int(ctx.flags.onset[row])
    reference = ctx.win.reference_ns
    return AbnormalSpan(
        trace_id=span.trace_id,
        span_id=span.span_id,
        parent_id=span.parent_id,
        service=span.service,
        name=span.name,
        kind=span.kind,
        status=span.status,
        start_ns=span.start_ns,
        duration_ms=round(span.duration_ms, 3),
        depth=int(ctx.tree.depth[row]),
        deviations=_deviations(ctx, row),
        onset_ns=onset,
        onset_s=None if reference is None else round((onset - reference) / 1e9, 3),
        impact=None if np.isnan(ctx.flags.impact[row]) else round(float(ctx.flags.impact[row]), 4),
        material=bool(ctx.flags.material[row]),
        attributes=_key_attributes(span.attributes),
        context_attributes=_context_attributes(ctx, row),
        chain=_chain(ctx, row),
        root_missing=bool(_lost_parent(table, np.array([top]))[0]),
        link=_link(ctx, row),
    )


@dataclass(frozen=True)
class _PairCounts:
    """Per pair (index = pair code): fault-window spans and how many were flagged how."""

    spans: np.ndarray
    flagged: np.ndarray
    causes: np.ndarray
    material: np.ndarray
    latency: np.ndarray
    errors: np.ndarray
    missing: np.ndarray
    fast: np.ndarray
    flagged_median: np.ndarray  # ns, of the flagged spans


def _pair_counts(ctx: _Context, groups: int) -> _PairCounts:
    flags = ctx.flags

    def count(mask: np.ndarray) -> np.ndarray:
        return np.bincount(ctx.group[mask], minlength=groups)

    duration = ctx.table.duration_ns[flags.abnormal]
    _, (flagged_median,) = _group_quantiles(duration, ctx.group[flags.abnormal], groups, (0.5,))
    return _PairCounts(
        count(ctx.win.fault),
        count(flags.abnormal),
        count(flags.cause),
        count(flags.material),
        count(flags.latency),
        count(flags.error),
        count(flags.missing),
        count(flags.fast),
        flagged_median,
    )


def _pairs(ctx: _Context, groups: int, top: int) -> tuple[AbnormalPair, ...]:
    c = _pair_counts(ctx, groups)
    tier = np.where(c.material > 0, 0, np.where(c.causes > 0, 1, 2))
    flags = ctx.flags
    first_onset = _earliest(ctx.group, flags.onset, [flags.material, flags.cause, flags.abnormal], tier, groups)
    order = sorted(
        np.flatnonzero(c.flagged > 0).tolist(), key=lambda g: (tier[g], first_onset[g], -c.flagged[g], ctx.label(g))
    )[:top]
    return tuple(_pair(ctx, c, g) for g in order)


def _pair(ctx: _Context, c: _PairCounts, g: int) -> AbnormalPair:
    model, flags, mine = ctx.model, ctx.flags, ctx.group == g
    median = model.median[g]

    def ms(value: float) -> float | None:
        return None if np.isnan(value) else round(float(value) / 1e6, 3)

    judged = ctx.win.baseline | ctx.win.fault
    return AbnormalPair(
        service=ctx.table.services[ctx.pair_service[g]],
        name=ctx.names[ctx.pair_name[g]],
        spans=int(c.spans[g]),
        flagged=int(c.flagged[g]),
        share=round(float(c.flagged[g] / c.spans[g]), 4),
        root_causes=int(c.causes[g]),
        material=int(c.material[g]),
        latency=int(c.latency[g]),
        errors=int(c.errors[g]),
        missing_child=int(c.missing[g]),
        median_ratio=round(float(c.flagged_median[g] / median), 3) if median > 0 else None,
        baseline_spans=int(model.count[g]),
        baseline_median_ms=ms(median),
        baseline_p99_ms=ms(model.p99[g]),
        baseline_error_rate=None if np.isnan(model.error_rate[g]) else round(float(model.error_rate[g]), 4),
        failed_fast=int(c.fast[g]),
        deviation=_pair_deviation(ctx, c, g),
        attributes=_attribute_skew(
            ctx.table, np.flatnonzero(flags.abnormal & mine), np.flatnonzero(judged & ~flags.abnormal & mine)
        ),
    )


def _pair_deviation(ctx: _Context, c: _PairCounts, g: int) -> str:
    model, parts = ctx.model, []
    if c.latency[g]:
        slow = ctx.table.duration_ns[ctx.flags.latency & (ctx.group == g)]
        parts.append(f"{c.latency[g]} slow (median {_ratio(float(np.median(slow)) / model.p99[g])} baseline p99)")
    if c.errors[g]:
        rate = model.error_rate[g]
        base = "not in baseline" if np.isnan(rate) else f"baseline {_pct(float(rate))}"
        parts.append(f"{c.errors[g]} errors ({_pct(c.errors[g] / c.spans[g])} vs {base})")
    if c.missing[g]:
        children = sorted({ctx.label(int(x)) for x in ctx.missing.child[ctx.group[ctx.missing.rows] == g]})
        parts.append(f"{c.missing[g]} missing {', '.join(children)}")
    if c.fast[g]:
        parts.append(f"{c.fast[g]} failed fast (median {_ms(float(model.median[g]))}), their callers' work stopped")
    return "; ".join(parts)


def _earliest(
    group: np.ndarray, onset: np.ndarray, masks: list[np.ndarray], tier: np.ndarray, groups: int
) -> np.ndarray:
    """Per pair, the earliest onset among its rows in ``masks[tier[pair]]``."""
    out = np.full(groups, _NEVER, dtype=np.int64)
    for level, mask in enumerate(masks):
        rows = np.flatnonzero(mask & (tier[group] == level))
        np.minimum.at(out, group[rows], onset[rows])
    return out


#: Spans per side looked at for attribute skew, the values a key may take there, and what counts as telling.
_SKEW_SAMPLE, _SKEW_MAX_VALUES, _SKEW_MIN_SHARE, _SKEW_MIN_LIFT, _SKEW_KEPT = 1000, 12, 0.5, 0.25, 3


def _sample(rows: np.ndarray) -> np.ndarray:
    if len(rows) <= _SKEW_SAMPLE:
        return rows
    return rows[np.linspace(0, len(rows) - 1, _SKEW_SAMPLE).astype(np.int64)]


def _value_counts(attributes: np.ndarray) -> tuple[dict[tuple[str, Any], int], dict[str, set]]:
    counts: dict[tuple[str, Any], int] = {}
    values: dict[str, set] = {}
    for attrs in attributes:
        for key, value in attrs.items():
            if isinstance(value, (str, int, float, bool)):
                counts[(key, value)] = counts.get((key, value), 0) + 1
                values.setdefault(key, set()).add(value)
    return counts, values


def _attribute_skew(table: SpanTable, flagged: np.ndarray, others: np.ndarray) -> tuple[AttributeSkew, ...]:
    """Low-cardinality attribute values on at least half of the flagged spans and 25 points rarer elsewhere."""
    flagged, others = _sample(flagged), _sample(others)
    if not len(flagged) or not len(others):
        return ()
    in_flagged, values = _value_counts(table.attributes[flagged])
    in_others, other_values = _value_counts(table.attributes[others])
    distinct = {key: len(seen | other_values.get(key, set())) for key, seen in values.items()}
    out = []
    for (key, value), n in in_flagged.items():
        if distinct[key] > _SKEW_MAX_VALUES:
            continue  # an id, a measurement: not a dimension
        share, elsewhere = n / len(flagged), in_others.get((key, value), 0) / len(others)
        if share >= _SKEW_MIN_SHARE and share - elsewhere >= _SKEW_MIN_LIFT:
            out.append(AttributeSkew(key, value, round(share, 4), round(elsewhere, 4)))
    out.sort(key=lambda a: (a.others_share - a.flagged_share, a.key, str(a.value)))
    return tuple(out[:_SKEW_KEPT])


def _coverage(ctx: _Context, groups: int, options: AnalysisOptions) -> tuple[int, tuple[str, ...], tuple[str, ...]]:
    in_fault = np.bincount(ctx.group[ctx.win.fault], minlength=groups) > 0
    base = ctx.model.count
    judged = int((in_fault & (base >= options.min_baseline_spans)).sum())
    thin = tuple(ctx.label(int(g)) for g in np.flatnonzero(in_fault & (base > 0) & (base < options.min_baseline_spans)))
    new = tuple(ctx.label(int(g)) for g in np.flatnonzero(in_fault & (base == 0)))
    return judged, thin, new


def _lost_parent(table: SpanTable, rows: np.ndarray) -> np.ndarray:
    """Whether each of the parentless-in-table ``rows`` had a parent that was lost.

    A SERVER or CONSUMER span whose parent is not here is a root: its parent is the remote caller (a load
    client's ``traceparent``), which exports no spans. Any other kind had its parent lost.
    """
    kind = table.kind[rows]
    return (table.parent_id[rows] != "") & (kind != _SERVER) & (kind != _CONSUMER)


def _empty_report(rule: str, options: AnalysisOptions) -> AbnormalReport:
    return AbnormalReport(None, (), 0, 0, 0, rule, None, "fault injection", 0, 0, 0, (), (), options)


def find_abnormal(
    table: SpanTable,
    *,
    baseline: np.ndarray | None = None,
    baseline_until_ns: int | None = None,
    baseline_from_ns: int | None = None,
    fault_start_ns: int | None = None,
    fault_end_ns: int | None = None,
    top: int = 10,
    options: AnalysisOptions | None = None,
    rank: bool = True,
) -> AbnormalReport:
    """Find the first abnormal span of the fault window and rank the abnormal (service, span name) pairs.

    The baseline is ``baseline`` (a bool mask over the table's rows), else the traces starting in
    ``[baseline_from_ns, baseline_until_ns)``, else the first third of the table's time range. The
    fault window is the traces starting at or after ``fault_start_ns`` (up to ``fault_end_ns``), else
    every trace not in the baseline (after ``baseline_until_ns`` when given); onsets are reported
    relative to ``fault_start_ns``, else to the baseline's end. ``top`` bounds the ranked pairs and
    suspects; ``rank`` False skips the suspects' ranking (:mod:`drill.traces.suspects`).
    """
    options = options or AnalysisOptions()
    if not len(table):
        return _empty_report("no spans", options)
    table, kinds = with_inferred_kinds(table) if options.infer_kinds else (table, None)
    tree = _tree(table)
    win = _windows(table, tree, baseline, baseline_from_ns, baseline_until_ns, fault_start_ns, fault_end_ns)
    operations = _operations(table, options)
    group, pair_service, pair_name = _group_codes(table, operations)
    groups = len(pair_service)
    model = _model(table.duration_ns, table.status, group, groups, win.baseline, options)
    missing = _missing_children(table, tree, group, groups, win, model, options)
    flags = _flags(table, tree, group, groups, win, model, missing, options)
    ctx = _Context(table, tree, group, pair_service, pair_name, operations.names, model, flags, missing, win, options)
    ranking = _ranking(ctx, groups, top) if rank else None
    lead = _lead_pairs(ctx, ranking)
    first = _first_cause(table, tree, flags, options, group if lead else None, lead)
    judged, thin, new = _coverage(ctx, groups, options)
    orphans = int(_lost_parent(table, np.flatnonzero(tree.parent < 0)).sum())
    return AbnormalReport(
        first=None if first is None else _abnormal_span(ctx, first),
        pairs=_pairs(ctx, groups, top),
        spans=len(table),
        baseline_spans=int(win.baseline.sum()),
        fault_spans=int(win.fault.sum()),
        baseline_rule=win.rule,
        reference_ns=win.reference_ns,
        reference=win.reference,
        orphans=orphans,
        candidates=int(flags.cause.sum()),
        judged_pairs=judged,
        thin_pairs=thin,
        new_pairs=new,
        options=options,
        ranking=ranking,
        merged_names=operations.merged,
        inferred_kinds=None if kinds is None else kinds.text(),
    )


def _lead_pairs(ctx: _Context, ranking: Ranking | None) -> list[list[_Lead]]:
    """Where the first abnormal span is looked for, so the onset rule and the ranking agree: first the top
    suspects' evidence (those scoring ``_TIED`` of the first's or more: a near tie is decided by the onsets)
    comparable with its strongest piece, then every suspect's evidence comparable with
    the strongest of all (at least ``_COMPARABLE`` of its score). A piece is its pair (a link without a CLIENT
    span: its caller's pair; a slow link's callee: the calls into that callee only)."""
    if ranking is None or not ranking.suspects:
        return []
    table = ctx.table
    codes = {
        (table.services[s], ctx.names[n]): g
        for g, (s, n) in enumerate(zip(ctx.pair_service.tolist(), ctx.pair_name.tolist()))
    }

    def tier(pieces: list[tuple[str, PairEvidence]]) -> list[_Lead]:
        strongest = max((e.score for _, e in pieces), default=0.0)
        out: list[_Lead] = []
        for suspect, e in pieces:
            code = codes.get((e.service, e.name))
            if code is None:  # a link split per callee or without a CLIENT span: "caller span name → callee"
                code = codes.get((e.service, e.name.rsplit(" → ", 1)[0]))
            lead = _Lead(code, suspect if e.role == CALLEE else None) if code is not None else None
            if lead is not None and e.score >= _COMPARABLE * strongest and lead not in out:
                out.append(lead)
        return out

    leaders = [s for s in ranking.suspects if s.score >= _TIED * ranking.suspects[0].score]
    return [
        tier([(s.service, e) for s in leaders for e in s.evidence]),
        tier([(s.service, e) for s in ranking.suspects for e in s.evidence]),
    ]


def _ranking(ctx: _Context, groups: int, top: int) -> Ranking:
    flags = ctx.flags
    inputs = SuspectInputs(
        ctx.table,
        ctx.tree.parent,
        ctx.group,
        ctx.pair_service,
        ctx.pair_name,
        ctx.names,
        ctx.win.baseline,
        ctx.win.fault,
        flags.cause & (flags.error | flags.missing | flags.fast),
    )
    return rank_suspects(inputs, groups, ctx.options.thresholds(), top)
