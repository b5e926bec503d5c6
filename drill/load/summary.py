"""Latency, throughput, error and goodput figures computed exactly from raw request records.

Called by ``drill load`` at the end of a run and by the runner and reports with
the drill's phase windows. Everything comes from ``requests.jsonl`` records,
never from Locust's rounded statistics, and every percentile from
:mod:`drill.stats` (exact, numpy's interpolation).

Definitions (``docs/serving-facts.md`` §5.1, vLLM bench): TTFT is the first
content chunk, TPOT ``(last chunk - TTFT) / (completion_tokens - 1)`` (first
token excluded), ITL every gap between successive content chunks, E2E the last
byte; all measured from the **intended** start (``drill/rundir/records.py``).
Latencies are over successful attempts. Throughput divides by the phase window. Attempts
cancelled when the run stopped (``cancelled``) are listed with the errors but left out of the
error rate: they have no outcome.
Goodput counts successful requests/s whose own latencies meet every SLO of
their pool (DistServe's definition, as ``vllm bench --goodput``): for
``ttft_pNN``, ``tpot_pNN`` and ``e2e_pNN`` the request's value must be within
the bound; for ``itl_pNN`` the request's own NN-th percentile gap. The
pool-level SLO verdict (``slo``) compares the phase's percentile with the bound.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

from drill.rundir.records import ErrorClass, RequestRecord, latency_values
from drill.spec.scenario import parse_slo_key
from drill.stats import percentiles

__all__ = [
    "MetricStats",
    "SloResult",
    "GroupSummary",
    "LoadReport",
    "summarize",
    "render_text",
    "ALL_POOLS",
    "WHOLE_RUN",
    "PROMPT_TOKENS_TOLERANCE",
    "prompt_tokens_ratio",
]

ALL_POOLS = "*"
WHOLE_RUN = "run"
#: Achieved prompt tokens more than this fraction off the planned ones are warned about (token-exact prompts).
PROMPT_TOKENS_TOLERANCE = 0.02


@dataclass(frozen=True)
class MetricStats:
    """Exact statistics of one latency metric, in ms."""

    count: int
    mean: float | None
    min: float | None
    max: float | None
    percentiles: dict[str, float | None]

    @classmethod
    def from_values(cls, values: list[float]) -> MetricStats:
        if not values:
            return cls(0, None, None, None, percentiles([]))
        return cls(len(values), sum(values) / len(values), min(values), max(values), percentiles(values))

    def percentile(self, pct: float) -> float | None:
        return self.percentiles.get(f"p{pct:g}")


@dataclass(frozen=True)
class SloResult:
    """One SLO of a pool in one phase: the bound, the observed percentile, and whether it holds."""

    key: str  # e.g. ttft_p95
    bound_ms: float
    observed_ms: float | None
    met: bool


@dataclass(frozen=True)
class GroupSummary:
    """Figures of one pool (or ``*`` for all) in one phase (or ``run``)."""

    phase: str
    pool: str
    window_s: float
    attempts: int  # attempts, client drops included
    logical: int  # distinct logical requests
    ok: int  # successful attempts
    client_drops: int
    errors: dict[str, int]  # attempts by error class
    error_rate: float  # failed attempts / attempts, both without those cancelled at stop
    requests_per_s: float  # successful attempts per second of the window
    output_tokens_per_s: float
    goodput_per_s: float  # successful attempts meeting every SLO of their pool, per second
    goodput_share: float  # of the successful attempts
    ttft: MetricStats
    tpot: MetricStats
    itl: MetricStats
    e2e: MetricStats
    schedule_lag: MetricStats
    slo: tuple[SloResult, ...] = ()
    #: Sum of the server's ``usage.prompt_tokens`` over the planned input tokens, over successful attempts
    #: that carry both (burst requests left out: their prompts are not fitted); None without any.
    prompt_tokens_ratio: float | None = None

    @property
    def prompt_tokens_off(self) -> bool:
        """Whether the achieved prompt tokens are more than :data:`PROMPT_TOKENS_TOLERANCE` off the planned."""
        return self.prompt_tokens_ratio is not None and abs(self.prompt_tokens_ratio - 1) > PROMPT_TOKENS_TOLERANCE

    def metric(self, name: str) -> MetricStats:
        return getattr(self, name)


@dataclass(frozen=True)
class LoadReport:
    groups: tuple[GroupSummary, ...]
    phases: dict[str, tuple[float, float]] = field(default_factory=dict)

    def group(self, phase: str = WHOLE_RUN, pool: str = ALL_POOLS) -> GroupSummary:
        """The group of ``phase`` and ``pool``; raises KeyError naming what exists."""
        for g in self.groups:
            if g.phase == phase and g.pool == pool:
                return g
        raise KeyError(
            f"no figures for phase {phase!r}, pool {pool!r}; have {sorted({(g.phase, g.pool) for g in self.groups})}"
        )

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(
    records: Iterable[RequestRecord],
    *,
    phases: Mapping[str, tuple[float, float]] | None = None,
    slos: Mapping[str, Mapping[str, float]] | None = None,
    duration_s: float | None = None,
    start_ts: float | None = None,
) -> LoadReport:
    """Figures per phase and pool from raw ``records``.

    ``phases`` maps a phase name to its ``(start_ts, end_ts)`` window (UNIX s); a
    record belongs to the phase in which it was intended to start. Without
    phases there is one window, ``run``: ``[start_ts, start_ts + duration_s)``
    when given, else the span of the records' intended starts. ``slos`` maps a
    pool to its SLO (``{"ttft_p95": 2.0}``, bounds in seconds, as in the scenario).
    """
    records = list(records)
    windows = dict(phases) if phases else {WHOLE_RUN: _run_window(records, duration_s, start_ts)}
    slos = slos or {}
    groups = []
    for phase, (start, end) in windows.items():
        inside = [r for r in records if start <= r.intended_ts < end]
        pools = sorted({r.pool for r in inside} | set(slos))
        groups.append(_group(phase, ALL_POOLS, inside, end - start, {}))
        groups.extend(
            _group(phase, pool, [r for r in inside if r.pool == pool], end - start, slos.get(pool, {}))
            for pool in pools
        )
    return LoadReport(tuple(groups), windows)


def _run_window(records: list[RequestRecord], duration_s: float | None, start_ts: float | None) -> tuple[float, float]:
    starts = [r.intended_ts for r in records]
    start = start_ts if start_ts is not None else (min(starts) if starts else 0.0)
    if duration_s is not None:
        return start, start + duration_s
    end = max(starts) if starts else start
    return start, max(end + 1e-6, start + 1e-6)


def _group(
    phase: str, pool: str, records: list[RequestRecord], window_s: float, slo: Mapping[str, float]
) -> GroupSummary:
    ok = [r for r in records if r.ok]
    errors = Counter(r.error.value for r in records if r.error is not None)
    window = max(window_s, 1e-9)
    good = [r for r in ok if _meets(r, slo)] if slo else ok
    stats = {name: MetricStats.from_values(latency_values(ok, name)) for name in ("ttft", "tpot", "itl", "e2e")}
    lag = MetricStats.from_values([r.schedule_lag_ms for r in records if r.schedule_lag_ms is not None])
    return GroupSummary(
        phase=phase,
        pool=pool,
        window_s=window_s,
        attempts=len(records),
        logical=len({r.logical_id for r in records}),
        ok=len(ok),
        client_drops=errors.get(ErrorClass.CLIENT_DROP.value, 0),
        errors=dict(errors),
        error_rate=_error_rate(errors, len(records)),
        requests_per_s=len(ok) / window,
        output_tokens_per_s=sum(r.completion_tokens or 0 for r in ok) / window,
        goodput_per_s=len(good) / window,
        goodput_share=(len(good) / len(ok)) if ok else 0.0,
        schedule_lag=lag,
        slo=tuple(_slo_results(slo, stats)),
        prompt_tokens_ratio=prompt_tokens_ratio(ok),
        **stats,
    )


def prompt_tokens_ratio(records: Iterable[RequestRecord]) -> float | None:
    """Achieved over planned prompt tokens of the successful ``records`` that carry both (bursts left out)."""
    pairs = [
        (r.prompt_tokens, r.planned_input_tokens)
        for r in records
        if r.ok and r.burst is None and r.prompt_tokens is not None and r.planned_input_tokens
    ]
    planned = sum(p for _, p in pairs)
    return sum(a for a, _ in pairs) / planned if planned else None


def _error_rate(errors: Counter, attempts: int) -> float:
    """Failed attempts over attempts; those cancelled when the run stopped have no outcome and count in neither."""
    cancelled = errors.get(ErrorClass.CANCELLED.value, 0)
    judged = attempts - cancelled
    return (sum(errors.values()) - cancelled) / judged if judged > 0 else 0.0


def _meets(record: RequestRecord, slo: Mapping[str, float]) -> bool:
    for key, bound_s in slo.items():
        parsed = parse_slo_key(key)
        if parsed is None:
            continue
        value = record.metric_ms(*parsed)
        if value is not None and value > bound_s * 1000.0:
            return False
    return True


def _slo_results(slo: Mapping[str, float], stats: dict[str, MetricStats]) -> list[SloResult]:
    out = []
    for key, bound_s in sorted(slo.items()):
        parsed = parse_slo_key(key)
        if parsed is None:
            continue
        observed = stats[parsed[0]].percentile(parsed[1])
        bound_ms = bound_s * 1000.0
        out.append(SloResult(key, bound_ms, observed, observed is not None and observed <= bound_ms))
    return out


def render_text(report: LoadReport) -> str:
    """A plain-text table per phase: one row per pool, latencies in ms."""
    lines = []
    pcts = ("p50", "p90", "p99")
    for phase in report.phases:
        groups = [g for g in report.groups if g.phase == phase]
        if not groups:
            continue
        lines.append(f"phase {phase} ({groups[0].window_s:.1f}s)")
        lines.append(
            f"  {'pool':<14}{'attempts':>9}{'ok':>7}{'err%':>7}{'req/s':>8}{'tok/s':>9}{'good/s':>8}"
            + "".join(f"{m + ' ' + '/'.join(pcts):>24}" for m in ("TTFT", "TPOT", "ITL", "E2E"))
        )
        for g in groups:
            cells = "".join(f"{_triple(g.metric(m), pcts):>24}" for m in ("ttft", "tpot", "itl", "e2e"))
            lines.append(
                f"  {g.pool:<14}{g.attempts:>9}{g.ok:>7}{g.error_rate * 100:>6.1f}%{g.requests_per_s:>8.2f}"
                f"{g.output_tokens_per_s:>9.1f}{g.goodput_per_s:>8.2f}{cells}"
            )
        for g in groups:
            if g.errors:
                lines.append(f"  errors {g.pool}: " + ", ".join(f"{k} {v}" for k, v in sorted(g.errors.items())))
            for s in g.slo:
                seen = "-" if s.observed_ms is None else f"{s.observed_ms:.1f}ms"
                lines.append(f"  SLO {g.pool} {s.key} <= {s.bound_ms:g}ms: {seen} {'met' if s.met else 'MISSED'}")
        lines.extend(_prompt_token_lines(groups))
    return "\n".join(lines)


def _prompt_token_lines(groups: list[GroupSummary]) -> list[str]:
    lines = []
    for g in groups:
        if g.prompt_tokens_ratio is None:
            continue
        lines.append(f"  prompt tokens achieved/planned {g.pool}: {g.prompt_tokens_ratio:.3f}")
        if g.pool != ALL_POOLS and g.prompt_tokens_off:
            lines.append(
                f"  WARNING: pool {g.pool}'s prompts are {g.prompt_tokens_ratio:.3f} times the planned tokens "
                f"(more than {PROMPT_TOKENS_TOLERANCE:.0%} off): the request set is not the planned length "
                f"distribution; prompts made one token per word: fit them to the target's tokenizer (tokenizer: "
                f"server or file:<path>); fitted prompts: the 'prompts:' line names those that could not be made "
                f"exact (a planned length below the chat template's own tokens cannot be met)"
            )
    return lines


def _triple(stats: MetricStats, pcts: tuple[str, ...]) -> str:
    vals = [stats.percentiles.get(p) for p in pcts]
    return "/".join("-" if v is None else f"{v:.0f}" for v in vals)
