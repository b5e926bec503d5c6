"""Whether one rate point met each pool's SLO: the attainment rule, over the point's measured requests (pure).

Every attempt intended inside the point's measurement window counts, failures included:

- a successful attempt contributes its own TTFT, TPOT, E2E (ms from its intended start, as
  :mod:`drill.rundir.records` measures them) and, for ``itl_pNN``, its own NN-th percentile gap;
- an attempt that failed (refused, timed out, reset, dropped by the client) is over every bound (``inf``): leaving
  it out would make an overloaded point look healthy;
- an attempt still in flight when the point ended (``cancelled``) is censored: its TTFT counts when its first
  token came, its TPOT and ITL from the chunks it got (one token per chunk), its E2E and anything it never showed
  are over the bound.

Rules (``--attainment``): ``percentile`` (default) holds when, for every SLO ``<metric>_p<NN>`` of the pool, the
NN-th percentile of those values is within the bound; ``goodput:S`` holds when at least the share ``S`` of the
measured attempts met every SLO of their pool (DistServe's SLO attainment). Goodput per second counts the
successful attempts that met every SLO of their pool (DistServe; ``vllm bench --goodput``), over the window; an
attempt cut off by the point's end counts when its censored values met every bound (it was on time so far).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from drill.errors import InputError
from drill.rundir.records import ErrorClass, RequestRecord
from drill.spec.scenario import parse_slo_key
from drill.stats import percentile

__all__ = ["AttainmentRule", "PoolOutcome", "SloOutcome", "judge_pool", "request_value"]

_INF_MS = 1e15  # stands in for inf inside percentile interpolation


@dataclass(frozen=True)
class AttainmentRule:
    """``percentile``, or ``goodput`` with the share of attempts that must meet every SLO."""

    kind: str = "percentile"
    share: float = 0.9

    @classmethod
    def parse(cls, text: str) -> AttainmentRule:
        """``percentile`` or ``goodput:0.9`` (also ``goodput:90%``); raises InputError otherwise."""
        name, _, value = text.strip().partition(":")
        if name == "percentile" and not value:
            return cls("percentile")
        if name == "goodput":
            try:
                share = float(value[:-1]) / 100 if value.endswith("%") else float(value or "0.9")
            except ValueError:
                share = -1.0
            if 0 < share < 1:
                return cls("goodput", share)
        raise InputError(
            f"--attainment: expected 'percentile' or 'goodput:S' with 0 < S < 1 (e.g. goodput:0.9), got {text!r}"
        )

    def describe(self) -> str:
        if self.kind == "percentile":
            return "each SLO's percentile over the point's measured attempts (failures over every bound)"
        return f"at least {self.share:.0%} of the point's measured attempts meet every SLO of their pool"


@dataclass(frozen=True)
class SloOutcome:
    """One SLO of one pool at one point: the percentile observed, its bound and their ratio."""

    pool: str
    key: str  # e.g. ttft_p95
    bound_ms: float
    observed_ms: float  # math.inf when failed attempts reach the percentile
    holds: bool

    @property
    def ratio(self) -> float:
        return self.observed_ms / self.bound_ms if self.bound_ms > 0 else math.inf


@dataclass(frozen=True)
class PoolOutcome:
    """One pool at one point."""

    pool: str
    attempts: int  # measured attempts (intended inside the window)
    ok: int
    failed: int  # errors other than cancelled
    cancelled: int
    good: int  # successful attempts that met every SLO of the pool
    goodput_per_s: float
    good_share: float  # good / attempts
    holds: bool
    ratio: float  # the rule's binding ratio (<= 1 holds); for goodput: bad share / allowed bad share
    slos: tuple[SloOutcome, ...]
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    tpot_p50_ms: float | None
    tpot_p95_ms: float | None

    @property
    def binding(self) -> SloOutcome | None:
        """The SLO closest to (or furthest past) its bound."""
        return max(self.slos, key=lambda s: s.ratio, default=None)


def request_value(record: RequestRecord, metric: str, pct: float) -> float | None:
    """The attempt's own value of ``metric`` in ms (``math.inf``: over any bound; None: it has none, e.g. the TPOT
    of a one-token answer)."""
    if record.ok:
        return record.metric_ms(metric, pct)
    if record.error is not ErrorClass.CANCELLED:
        return math.inf
    return _censored(record, metric, pct)


def _censored(record: RequestRecord, metric: str, pct: float) -> float:
    chunks = record.chunk_offsets_ms
    if metric == "ttft":
        return record.ttft_ms if record.ttft_ms is not None else math.inf
    if metric == "tpot" and len(chunks) >= 3:
        return (chunks[-1] - chunks[0]) / (len(chunks) - 1)
    if metric == "itl" and len(chunks) >= 3:
        return percentile(record.itl_ms(), pct) or math.inf
    return math.inf


def judge_pool(
    pool: str,
    slo: Mapping[str, float],
    records: Sequence[RequestRecord],
    window_s: float,
    rule: AttainmentRule,
) -> PoolOutcome:
    """Judge ``records`` (the pool's attempts intended inside the window) against ``slo`` (bounds in seconds)."""
    bounds = [(key, parsed, seconds * 1000.0) for key, seconds in sorted(slo.items()) if (parsed := parse_slo_key(key))]
    values = {key: [request_value(r, *parsed) for r in records] for key, parsed, _ in bounds}
    slos = tuple(_outcome(pool, key, pct, bound, values[key]) for key, (_, pct), bound in bounds)
    good = sum(1 for i, r in enumerate(records) if _judged(r) and all(_within(values[k][i], b) for k, _, b in bounds))
    share = good / len(records) if records else 0.0
    failed = sum(1 for r in records if r.error is not None and r.error is not ErrorClass.CANCELLED)
    ok = [r for r in records if r.ok]
    if rule.kind == "goodput":
        ratio = (1.0 - share) / (1.0 - rule.share) if records else 0.0
    else:
        ratio = max((s.ratio for s in slos), default=0.0) if records else 0.0
    ttft = [v for r in ok if (v := r.ttft_ms) is not None]
    tpot = [v for r in ok if (v := r.tpot_ms) is not None]
    return PoolOutcome(
        pool=pool,
        attempts=len(records),
        ok=len(ok),
        failed=failed,
        cancelled=sum(1 for r in records if r.error is ErrorClass.CANCELLED),
        good=good,
        goodput_per_s=good / window_s if window_s > 0 else 0.0,
        good_share=share,
        holds=ratio <= 1.0,  # a pool with no measured attempt is not judged (the point notes it)
        ratio=ratio,
        slos=slos,
        ttft_p50_ms=percentile(ttft, 50),
        ttft_p95_ms=percentile(ttft, 95),
        tpot_p50_ms=percentile(tpot, 50),
        tpot_p95_ms=percentile(tpot, 95),
    )


def _judged(record: RequestRecord) -> bool:
    """Successful, or cut off by the point's end (its censored values then decide whether it was good)."""
    return record.ok or record.error is ErrorClass.CANCELLED


def _within(value: float | None, bound_ms: float) -> bool:
    return value is None or value <= bound_ms


def _outcome(pool: str, key: str, pct: float, bound_ms: float, values: list[float | None]) -> SloOutcome:
    present = [min(v, _INF_MS) for v in values if v is not None]
    observed = percentile(present, pct)
    if observed is None or observed >= _INF_MS / 10:
        observed = math.inf if present else 0.0
    return SloOutcome(pool, key, bound_ms, observed, observed <= bound_ms)
