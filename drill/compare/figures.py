"""Side by side: each check's verdict and each headline figure of the baseline and the candidate, with deltas.

Both sides are read from their run directories through the report model (:func:`drill.report.render.
report_for`), so a comparison shows exactly the figures each run's own report shows: per loaded phase the
p50/p95/p99 of TTFT, TPOT and E2E (successful requests, ms), the error rate, the share refused (429/503), the
goodput share (requests within every bound of their pool's SLO), and the cost per successful request when the
drill's ``report.gpu_hour_price`` is set (unset, no cost row is made up: :attr:`HeadlineTable.cost_note`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from drill.report.model import UNSET, PhaseMetrics, Report

__all__ = ["HEADLINE", "HeadlineRow", "HeadlineTable", "VerdictChange", "headline_table", "verdict_changes"]


@dataclass(frozen=True)
class VerdictChange:
    """One check's verdict on each side (``"-"`` where a side has no such check)."""

    name: str
    baseline: str
    candidate: str

    @property
    def changed(self) -> bool:
        return self.baseline != self.candidate


def verdict_changes(baseline: Report, candidate: Report) -> tuple[VerdictChange, ...]:
    """Every check of either side, in the baseline's order, then the candidate's own."""
    a = {v.name: v.status for v in baseline.verdicts}
    b = {v.name: v.status for v in candidate.verdicts}
    names = [*a, *(n for n in b if n not in a)]
    return tuple(VerdictChange(n, a.get(n, "-"), b.get(n, "-")) for n in names)


#: (figure, unit, how to read it from a phase's metrics), in the order a table shows them.
HEADLINE: tuple[tuple[str, str, Callable[[PhaseMetrics], float | None]], ...] = (
    ("ttft_p50", "ms", lambda m: m.ttft_ms.p50),
    ("ttft_p95", "ms", lambda m: m.ttft_ms.p95),
    ("ttft_p99", "ms", lambda m: m.ttft_ms.p99),
    ("tpot_p50", "ms", lambda m: m.tpot_ms.p50),
    ("tpot_p95", "ms", lambda m: m.tpot_ms.p95),
    ("tpot_p99", "ms", lambda m: m.tpot_ms.p99),
    ("e2e_p50", "ms", lambda m: m.e2e_ms.p50),
    ("e2e_p95", "ms", lambda m: m.e2e_ms.p95),
    ("e2e_p99", "ms", lambda m: m.e2e_ms.p99),
    ("error_rate", "ratio", lambda m: m.error_rate),
    ("refused", "ratio", lambda m: dict(m.errors_by_class).get("refused", 0.0 if m.requests else None)),
    ("goodput", "ratio", lambda m: m.goodput_share),
)


@dataclass(frozen=True)
class HeadlineRow:
    phase: str  # a loaded phase, or "run" for the whole run's cost
    figure: str
    unit: str  # ms, ratio, or the currency
    baseline: float | None
    candidate: float | None

    @property
    def delta(self) -> float | None:
        if self.baseline is None or self.candidate is None:
            return None
        return round(self.candidate - self.baseline, 8)

    @property
    def relative(self) -> float | None:
        """The delta as a share of the baseline (None when the baseline is 0 or a side has no value)."""
        delta = self.delta
        return None if delta is None or not self.baseline else round(delta / abs(self.baseline), 4)

    def to_json(self) -> dict[str, object]:
        return {
            "phase": self.phase,
            "figure": self.figure,
            "unit": self.unit,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "delta": self.delta,
            "relative": self.relative,
        }


@dataclass(frozen=True)
class HeadlineTable:
    rows: tuple[HeadlineRow, ...]
    cost_note: str  # why there is no cost row ("" when there is one)

    def row(self, phase: str, figure: str) -> HeadlineRow | None:
        return next((r for r in self.rows if r.phase == phase and r.figure == figure), None)


def headline_table(baseline: Report, candidate: Report) -> HeadlineTable:
    """The headline figures of every loaded phase both runs have, and the whole run's cost per success."""
    b_phases = {m.phase: m for m in candidate.metrics}
    rows = []
    for a in baseline.metrics:
        b = b_phases.get(a.phase)
        if b is None:
            continue
        rows += [HeadlineRow(a.phase, name, unit, read(a), read(b)) for name, unit, read in HEADLINE]
        if a.cost_note != UNSET:
            rows.append(
                HeadlineRow(a.phase, "cost_per_success", baseline.cost.currency, a.cost_per_success, b.cost_per_success)
            )
    note = ""
    if baseline.cost.gpu_hour_price is None or candidate.cost.gpu_hour_price is None:
        note = "cost per success: unset (the drill sets no report.gpu_hour_price)"
    else:
        rows.append(
            HeadlineRow(
                "run",
                "cost_per_success",
                baseline.cost.currency,
                baseline.cost.cost_per_success,
                candidate.cost.cost_per_success,
            )
        )
    return HeadlineTable(tuple(rows), note)
