"""Serving quantities by name, mapped to the metric names of vLLM, SGLang, TGI and llama.cpp's server.

One mapping for the whole harness: the reports (:mod:`drill.report.quantities`) read a run's ``metrics.jsonl``
through it, and ``metric`` stop conditions (:mod:`drill.runner.stopconditions`) read the live scrape through
it. The sources of each name are in ``docs/metrics-map.md``.

A quantity a target does not export is **not available** (``None``), never 0: a zero would claim an empty queue
that was never measured. :func:`resolve` finds the first server (in :data:`SERVERS` order) whose metrics the
target exported; :func:`live_value` turns the latest two scrapes of each endpoint into the quantity's value now.
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "METRIC_NAMES",
    "QUANTITIES",
    "SERVERS",
    "Across",
    "MetricKind",
    "PhaseStat",
    "Quantity",
    "Reading",
    "Resolved",
    "live_value",
    "metric_name_problem",
    "resolve",
    "wanted_sample_names",
]

#: The serving stacks whose metric names are known, in the order they are tried.
SERVERS = ("vllm", "sglang", "tgi", "llamacpp")


class MetricKind(enum.Enum):
    GAUGE = "gauge"
    COUNTER = "counter"
    RATIO = "ratio"  # two counters: Δnumerator / Δdenominator
    HISTOGRAM_MEAN = "histogram"  # <name>_sum / <name>_count


class Across(enum.Enum):
    SUM = "sum"  # counts of requests: add the endpoints
    MAX = "max"  # shares: the fullest endpoint


class PhaseStat(enum.Enum):
    MEAN = "mean"
    MAX = "max"
    TOTAL = "total"  # counter: increments in the phase
    PER_SECOND = "per_second"  # counter: increments / phase length
    RATIO = "ratio"
    MEAN_OBSERVED = "mean_observed"  # histogram: Δsum / Δcount


@dataclass(frozen=True)
class Quantity:
    kind: MetricKind
    across: Across
    stat: PhaseStat
    names: dict[str, tuple[str, ...]]  # server -> metric name(s); a RATIO has (numerator, denominator)


_Q = Quantity
_K, _A, _S = MetricKind, Across, PhaseStat
_QUANTITY_TABLE: dict[str, Quantity] = {
    "queue_depth": _Q(
        _K.GAUGE,
        _A.SUM,
        _S.MAX,
        {
            "vllm": ("vllm:num_requests_waiting",),
            "sglang": ("sglang:num_queue_reqs",),
            "tgi": ("tgi_queue_size",),
            "llamacpp": ("llamacpp:requests_deferred",),
        },
    ),
    "running": _Q(
        _K.GAUGE,
        _A.SUM,
        _S.MEAN,
        {
            "vllm": ("vllm:num_requests_running",),
            "sglang": ("sglang:num_running_reqs",),
            "tgi": ("tgi_batch_current_size",),
            "llamacpp": ("llamacpp:requests_processing",),
        },
    ),
    "kv_cache_usage": _Q(
        _K.GAUGE,
        _A.MAX,
        _S.MAX,
        {
            "vllm": ("vllm:kv_cache_usage_perc",),
            "sglang": ("sglang:token_usage",),
            "llamacpp": ("llamacpp:kv_cache_usage_ratio",),
        },
    ),
    "prefix_cache_hit_rate": _Q(
        _K.RATIO,
        _A.SUM,
        _S.RATIO,
        {"vllm": ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")},
    ),
    "preemptions": _Q(
        _K.COUNTER,
        _A.SUM,
        _S.TOTAL,
        {"vllm": ("vllm:num_preemptions_total",), "sglang": ("sglang:num_retracted_requests_total",)},
    ),
    "ttft_seconds": _Q(
        _K.HISTOGRAM_MEAN,
        _A.SUM,
        _S.MEAN_OBSERVED,
        {"vllm": ("vllm:time_to_first_token_seconds",), "sglang": ("sglang:time_to_first_token_seconds",)},
    ),
    "admission_rejections": _Q(
        _K.COUNTER,
        _A.SUM,
        _S.TOTAL,
        {"vllm": ("vllm:admission_rejections_total",)},
    ),
    "queue_time_seconds": _Q(
        _K.HISTOGRAM_MEAN,
        _A.SUM,
        _S.MEAN_OBSERVED,
        {"vllm": ("vllm:request_queue_time_seconds",), "tgi": ("tgi_request_queue_duration",)},
    ),
    "generation_tokens_per_s": _Q(
        _K.COUNTER,
        _A.SUM,
        _S.PER_SECOND,
        {
            "vllm": ("vllm:generation_tokens_total",),
            "sglang": ("sglang:generation_tokens_total",),
            "llamacpp": ("llamacpp:tokens_predicted_total",),
        },
    ),
    # KV transfers between prefill and decode workers (disaggregated serving; docs/disaggregated.md, "Metrics")
    "kv_transfer_seconds": _Q(
        _K.HISTOGRAM_MEAN,
        _A.SUM,
        _S.MEAN_OBSERVED,
        {"vllm": ("vllm:nixl_xfer_time_seconds",)},
    ),
    "kv_transfer_bytes": _Q(
        _K.COUNTER,  # the byte histogram's _sum: bytes moved
        _A.SUM,
        _S.TOTAL,
        {"vllm": ("vllm:nixl_bytes_transferred_sum",)},
    ),
    "kv_transfer_failures": _Q(
        _K.COUNTER,
        _A.SUM,
        _S.TOTAL,
        {"vllm": ("vllm:nixl_num_failed_transfers_total",), "sglang": ("sglang:num_transfer_failed_reqs_total",)},
    ),
    "kv_transfers_pending": _Q(
        _K.GAUGE,
        _A.SUM,
        _S.MAX,
        # vLLM exports no gauge of transfers under way: the embedded stack's own name stands in its column
        {"vllm": ("drill:kv_transfers_in_flight",), "sglang": ("sglang:num_decode_transfer_queue_reqs",)},
    ),
}
#: SGLang exports its prefix-cache hit rate as a gauge (a share already), not as two counters.
_SGLANG_HIT_RATE = _Q(_K.GAUGE, _A.MAX, _S.MEAN, {"sglang": ("sglang:cache_hit_rate",)})

#: The quantities a report shows and a stop condition may name, in order.
QUANTITIES: tuple[str, ...] = tuple(_QUANTITY_TABLE)

#: quantity -> {server: metric name} ("" where the server exports no such metric); a ratio reads
#: "hits / queries", a histogram its family name.
METRIC_NAMES: dict[str, dict[str, str]] = {
    quantity: {server: " / ".join(spec.names.get(server, ())) for server in SERVERS}
    for quantity, spec in _QUANTITY_TABLE.items()
}
METRIC_NAMES["prefix_cache_hit_rate"]["sglang"] = "sglang:cache_hit_rate"


@dataclass(frozen=True)
class Resolved:
    """A quantity as one server exports it: how to read it, and the sample names (a histogram's _sum, _count)."""

    quantity: Quantity
    samples: tuple[str, ...]

    @property
    def metric(self) -> str:
        """The metric's name as a reader would look it up (a histogram's family, a ratio's "hits / queries")."""
        if self.quantity.kind is MetricKind.HISTOGRAM_MEAN:
            return self.samples[0].removesuffix("_sum")
        return " / ".join(self.samples)


def _sample_names(spec: Quantity, server: str) -> tuple[str, ...]:
    names = spec.names.get(server, ())
    if spec.kind is MetricKind.HISTOGRAM_MEAN:
        return tuple(f"{names[0]}{suffix}" for suffix in ("_sum", "_count")) if names else ()
    return names


def _candidates(quantity: str) -> list[tuple[Quantity, str]]:
    candidates = [(_QUANTITY_TABLE[quantity], server) for server in SERVERS]
    if quantity == "prefix_cache_hit_rate":
        candidates.insert(1, (_SGLANG_HIT_RATE, "sglang"))
    return candidates


def resolve(exported: Iterable[str], quantity: str) -> Resolved | None:
    """The first server whose sample names for ``quantity`` are all in ``exported``; None: not available."""
    if quantity not in _QUANTITY_TABLE:
        raise KeyError(f"unknown quantity {quantity!r} (known: {', '.join(QUANTITIES)})")
    have = set(exported)
    for spec, server in _candidates(quantity):
        names = _sample_names(spec, server)
        if names and all(name in have for name in names):
            return Resolved(spec, names)
    return None


def wanted_sample_names() -> tuple[str, ...]:
    """Every sample name any quantity may be read from, for a metrics source that must ask for names."""
    names = {n for q in QUANTITIES for spec, server in _candidates(q) for n in _sample_names(spec, server)}
    return tuple(sorted(names))


# --- names in a drill file ------------------------------------------------------------------------

_PROMETHEUS_NAME = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:]*$")


def metric_name_problem(name: str) -> str | None:
    """Why ``name`` is neither a quantity nor a plausible raw metric name, with a did-you-mean; None if fine.

    A raw name is plausible when it is a Prometheus metric name and, unless it has a vendor's ``:`` prefix, is
    not a near miss of a quantity's name (``queue_dpeth`` is a typo and ``ttft`` a quantity cut short, while
    ``my_queue_length`` is a metric of one's own).
    """
    if name in _QUANTITY_TABLE:
        return None
    known = sorted({n for q in QUANTITIES for spec, s in _candidates(q) for n in spec.names.get(s, ())})
    close = [q for q in QUANTITIES if q.startswith(f"{name}_")]  # ``kv_cache``, ``ttft``: a quantity cut short
    close = close or difflib.get_close_matches(name, list(QUANTITIES) + known, n=1, cutoff=0.75)
    valid = bool(_PROMETHEUS_NAME.match(name))
    if valid and (":" in name or name in known or not (close and close[0] in _QUANTITY_TABLE)):
        return None
    hint = f" — did you mean {close[0]!r}?" if close else ""
    if not valid:
        return f"{name!r} is neither a quantity ({', '.join(QUANTITIES)}) nor a Prometheus metric name{hint}"
    return f"{name!r} is not a quantity ({', '.join(QUANTITIES)}){hint}"


# --- live values ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reading:
    """One endpoint's latest good scrape (each metric summed over its label sets) and the one before it."""

    ts: float
    totals: Mapping[str, float]
    previous: Reading | None = None


def _increase(reading: Reading, name: str) -> tuple[float, float] | None:
    """(increase, seconds) of a counter between the endpoint's last two scrapes; a drop is a reset."""
    before = reading.previous
    if before is None or name not in reading.totals or name not in before.totals:
        return None
    delta = reading.totals[name] - before.totals[name]
    return (delta if delta >= 0 else reading.totals[name]), reading.ts - before.ts


def live_value(readings: Mapping[str, Reading], resolved: Resolved) -> float | None:
    """The quantity now, from each endpoint's last two scrapes: a gauge's value (summed over endpoints or the
    fullest one), a counter's rate per second, a ratio or histogram mean over the last interval. None when
    nothing was measured in it (one scrape only, no queries)."""
    spec, names = resolved.quantity, resolved.samples
    if spec.kind is MetricKind.GAUGE:
        values = [r.totals[names[0]] for r in readings.values() if names[0] in r.totals]
        if not values:
            return None
        return sum(values) if spec.across is Across.SUM else max(values)
    if spec.kind is MetricKind.COUNTER:
        rates = [d / dt for d, dt in (_increase(r, names[0]) or (0.0, 0.0) for r in readings.values()) if dt > 0]
        return sum(rates) if rates else None
    numerator = [i[0] for r in readings.values() if (i := _increase(r, names[0])) is not None]
    denominator = [i[0] for r in readings.values() if (i := _increase(r, names[1])) is not None]
    return sum(numerator) / sum(denominator) if sum(denominator) > 0 else None
