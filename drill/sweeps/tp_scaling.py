"""``tp_scaling``: does tensor parallelism pay on healthy links, and what does a degraded link do to the gain?

Judges a sweep over ``target.config.engine.tensor_parallel_size`` from its figures
(:func:`drill.sweeps.scaling.measure_sweep`): the speedup of ``candidate`` (TP=2) over ``baseline`` (TP=1) is
the baseline's TPOT p50 over the candidate's, in each link state.

- PASS: on healthy links the speedup is at least ``min_speedup``, and — when ``degraded`` is set — the degraded
  links do what it says: ``shrinks`` (the degraded speedup is lower than the healthy one) or ``reverses`` (below
  1: the candidate is slower than the baseline, communication overhead cancelled the gain).
- FAIL: either does not hold.
- INCONCLUSIVE: a variant is missing or did not complete, or a state has fewer than ``min_requests`` requests.

The message states the speedups and whether the gain shrank or reversed, whatever ``degraded`` asks.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from drill.api import CheckParams, EvidenceKind, EvidenceRef, Status, Verdict
from drill.rundir.evidence import RunEvidence
from drill.sweeps.resolve import SweepCheck
from drill.sweeps.scaling import ScalingTable, VariantFigures, measure_sweep

__all__ = ["TpScalingCheck", "TpScalingParams", "degraded_effect"]


class TpScalingParams(CheckParams):
    baseline: Any = Field(1, description="the sweep value the speedups are over (TP=1)")
    candidate: Any = Field(2, description="the sweep value that must beat it on healthy links (TP=2)")
    min_speedup: float = Field(1.05, gt=0, description="healthy speedup the candidate needs (TPOT p50 ratio)")
    degraded: Literal["shrinks", "reverses"] | None = Field(
        None, description="what the degraded links must do to the gain (unset: only reported)"
    )
    min_requests: int = Field(5, ge=1, description="requests each variant needs in each state")


def degraded_effect(healthy: float, degraded: float) -> str:
    """``reverses`` (degraded speedup below 1), ``shrinks`` (below the healthy one) or ``holds``."""
    if degraded < 1.0:
        return "reverses"
    return "shrinks" if degraded < healthy else "holds"


class TpScalingCheck(SweepCheck):
    kind = "tp_scaling"
    Params = TpScalingParams
    params: TpScalingParams

    def evaluate(self, evidence: RunEvidence) -> Verdict:
        outside = self.outside_a_sweep(evidence)
        if outside is not None:
            return outside
        table = measure_sweep(evidence.run_dir)
        p = self.params
        pair = table.find(p.baseline), table.find(p.candidate)
        problem = _unusable(pair, p)
        if problem:
            return self.verdict(Status.INCONCLUSIVE, problem, notes=table.notes)
        baseline, candidate = pair
        assert baseline is not None and candidate is not None  # _unusable said so
        return self._judge(table, baseline, candidate)

    def _judge(self, table: ScalingTable, baseline: VariantFigures, candidate: VariantFigures) -> Verdict:
        p = self.params
        ratio = _speedups(baseline, candidate)
        if ratio is None:
            return self.verdict(Status.INCONCLUSIVE, "no TPOT in a state to compare", notes=table.notes)
        healthy, degraded = ratio
        effect = degraded_effect(healthy, degraded)
        pays = healthy >= p.min_speedup
        # a gain that reverses has shrunk too
        expected_effect = p.degraded in (None, effect) or (p.degraded == "shrinks" and effect == "reverses")
        status = Status.PASS if pays and expected_effect else Status.FAIL
        label = f"{candidate.label} over {baseline.label}"
        message = (
            f"{label}: {healthy:.2f}x on healthy links (needs >= {p.min_speedup:g}x), {degraded:.2f}x on degraded "
            f"links — the gain {_effect_words(effect)}"
            f" (TPOT p50 {baseline.healthy.tpot_p50_ms:g} -> {candidate.healthy.tpot_p50_ms:g} ms healthy, "
            f"{baseline.degraded.tpot_p50_ms:g} -> {candidate.degraded.tpot_p50_ms:g} ms degraded)"
        )
        if p.degraded is not None and not expected_effect:
            message += f"; expected it to {p.degraded[:-1]}"
        return self.verdict(
            status,
            message,
            observed={
                "healthy_speedup": round(healthy, 3),
                "degraded_speedup": round(degraded, 3),
                "degraded_effect": effect,
                **_tpots(table),
            },
            expected={"healthy_speedup": f">= {p.min_speedup:g}", "degraded_effect": p.degraded or "(reported)"},
            units={"healthy_speedup": "x", "degraded_speedup": "x"},
            evidence=[
                EvidenceRef(EvidenceKind.FILE, f"{v.run_dir}/requests.jsonl", v.label) for v in (baseline, candidate)
            ],
            notes=table.notes,
        )


def _unusable(pair: tuple[VariantFigures | None, VariantFigures | None], p: TpScalingParams) -> str | None:
    for value, variant in zip((p.baseline, p.candidate), pair):
        if variant is None:
            return f"no measured variant with the value {value!r} in the sweep"
        if variant.status != "completed":
            return f"variant {variant.label} did not complete ({variant.status})"
        for state in (variant.healthy, variant.degraded):
            if state.requests < p.min_requests:
                return (
                    f"too few requests in {variant.label}'s {state.state} window: {state.requests} "
                    f"(min_requests {p.min_requests})"
                )
    return None


def _speedups(baseline: VariantFigures, candidate: VariantFigures) -> tuple[float, float] | None:
    values = []
    for state in ("healthy", "degraded"):
        base, mine = baseline.state(state).tpot_p50_ms, candidate.state(state).tpot_p50_ms
        if not base or not mine:
            return None
        values.append(base / mine)
    return values[0], values[1]


def _tpots(table: ScalingTable) -> dict[str, float | None]:
    return {
        f"{v.label}.{state}.tpot_p50_ms": v.state(state).tpot_p50_ms
        for v in table.variants
        for state in ("healthy", "degraded")
    }


def _effect_words(effect: str) -> str:
    return {
        "reverses": "reverses (slower than the baseline: communication overhead cancels the parallel gain)",
        "shrinks": "shrinks",
        "holds": "holds",
    }[effect]
