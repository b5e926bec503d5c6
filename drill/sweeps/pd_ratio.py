"""``pd_ratio``: which prefill:decode split of the same workers serves the drill's length mix best?

Judges a sweep over ``target.config.topology.ratio`` (e.g. 1P:3D, 2P:2D, 3P:1D) from its figures
(:func:`drill.sweeps.pd_figures.measure_pd_sweep`). The winner is the split with the highest goodput (requests
within the SLO per second, at the drill's offered rate); splits within ``margin`` of the best goodput are tied, and
the tie goes to the one with the most SLO headroom (the lowest worst-percentile-over-bound).

- PASS: the winner is ``best`` — a split such as ``3P:1D``, or ``predicted``: the split the stack's cost model
  loads least on its busier side at the measured rate and lengths (embedded stack only).
- FAIL: another split wins.
- INCONCLUSIVE: the evidence is thin — a variant is missing, did not complete or has fewer than ``min_requests``
  requests, the splits do not share one total of workers (not one variable), no split met the SLO at all, or
  ``best: predicted`` without a model (another target).

The message names the winner, every split's goodput, the bottleneck side and why.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from drill.api import CheckParams, EvidenceKind, EvidenceRef, Status, Verdict
from drill.rundir.evidence import RunEvidence
from drill.stack.topology import format_ratio, parse_ratio
from drill.sweeps.pd_figures import PdRatioTable, PdVariant, measure_pd_sweep
from drill.sweeps.resolve import SweepCheck

__all__ = ["PREDICTED", "PdRatioCheck", "PdRatioParams", "rank", "winner"]

PREDICTED = "predicted"


class PdRatioParams(CheckParams):
    best: str = Field(PREDICTED, description="the split that must win (e.g. 3P:1D), or 'predicted' (the cost model's)")
    margin: float = Field(0.1, ge=0, lt=1, description="goodput within this share of the best's is a tie")
    min_requests: int = Field(10, ge=1, description="requests each split needs in its baseline phase")

    @field_validator("best")
    @classmethod
    def _a_split(cls, value: str) -> str:
        if value == PREDICTED:
            return value
        try:
            return format_ratio(*parse_ratio(value))
        except ValueError as exc:
            raise ValueError(f"{exc}, or '{PREDICTED}'") from None


def rank(table: PdRatioTable) -> list[PdVariant]:
    """The splits best first: goodput, then SLO headroom (the lower worst ratio to its bound)."""
    return sorted(table.variants, key=lambda v: (-(v.goodput_rps or 0.0), _headroom_key(v)))


def winner(table: PdRatioTable, margin: float) -> tuple[PdVariant, bool]:
    """The winning split, and whether it won on goodput alone (False: tied within ``margin``, headroom decided)."""
    ranked = rank(table)
    top = ranked[0].goodput_rps or 0.0
    tied = [v for v in ranked if (v.goodput_rps or 0.0) >= top * (1 - margin)]
    if len(tied) == 1:
        return tied[0], True
    return min(tied, key=_headroom_key), False


def _headroom_key(v: PdVariant) -> float:
    return v.slo_ratio if v.slo_ratio is not None else float("inf")


class PdRatioCheck(SweepCheck):
    kind = "pd_ratio"
    Params = PdRatioParams
    params: PdRatioParams

    def evaluate(self, evidence: RunEvidence) -> Verdict:
        outside = self.outside_a_sweep(evidence)
        if outside is not None:
            return outside
        table = measure_pd_sweep(evidence.run_dir)
        problem = self._thin(table)
        if problem:
            return self.verdict(Status.INCONCLUSIVE, problem, notes=table.notes)
        expected = self._expected(table)
        if expected is None:
            return self.verdict(
                Status.INCONCLUSIVE,
                "best: predicted needs the stack's cost model and the requests' lengths; name the split instead, "
                "e.g. best: 3P:1D",
                notes=table.notes,
            )
        return self._judge(table, expected)

    def _thin(self, table: PdRatioTable) -> str | None:
        if len(table.variants) < 2:
            return f"{len(table.variants)} measured split(s): nothing to compare ({'; '.join(table.notes) or 'none'})"
        totals = {v.prefill + v.decode for v in table.variants}
        if len(totals) > 1:
            splits = ", ".join(v.split for v in table.variants)
            return f"the splits do not share one total of workers ({splits}): more than one variable changed"
        for v in table.variants:
            if v.status != "completed":
                return f"variant {v.label} did not complete ({v.status})"
            if v.requests < self.params.min_requests:
                least = self.params.min_requests
                return f"too few requests in {v.label}'s baseline: {v.requests} (min_requests {least})"
        if not any(v.goodput_rps for v in table.variants):
            return "no split met the SLO at all: the offered rate is beyond every split's knee (lower the rate)"
        return None

    def _expected(self, table: PdRatioTable) -> str | None:
        if self.params.best != PREDICTED:
            return self.params.best
        predicted = table.predicted
        return predicted.split if predicted else None

    def _judge(self, table: PdRatioTable, expected: str) -> Verdict:
        best, clear = winner(table, self.params.margin)
        status = Status.PASS if best.split == expected else Status.FAIL
        how = "" if clear else f" (tied on goodput within {self.params.margin:.0%}; the most SLO headroom decided)"
        source = " (the cost model's prediction)" if self.params.best == PREDICTED else ""
        message = (
            f"{best.split} wins{how}: goodput {_goodputs(table)} req/s in SLO at {best.offered_rps:g} req/s offered; "
            f"{_why(table, best)}; expected {expected}{source}"
        )
        return self.verdict(
            status,
            message,
            observed={
                "winner": best.split,
                **{f"{v.split}.goodput_rps": v.goodput_rps for v in table.variants},
                **{f"{v.split}.ttft_p95_ms": v.ttft_p95_ms for v in table.variants},
            },
            expected={"winner": expected},
            units={f"{v.split}.goodput_rps": "req/s" for v in table.variants},
            evidence=[EvidenceRef(EvidenceKind.FILE, f"{v.run_dir}/requests.jsonl", v.label) for v in table.variants],
            notes=table.notes,
        )


def _goodputs(table: PdRatioTable) -> str:
    return ", ".join(f"{v.split} {v.goodput_rps or 0:g}" for v in rank(table))


def _why(table: PdRatioTable, best: PdVariant) -> str:
    """Which side is the bottleneck, from the model's loads where there is one, else from TTFT."""
    if best.model is None:
        return f"TTFT p95 {best.ttft_p95_ms:g} ms, TPOT p95 {best.tpot_p95_ms:g} ms"
    side = best.model.bottleneck
    loads = ", ".join(
        f"{v.split} {(v.model.prefill_load if side == 'prefill' else v.model.decode_load):.2f}"
        for v in table.variants
        if v.model is not None
    )
    what = "prefill is compute-bound on the prompt" if side == "prefill" else "each request holds a decode slot"
    return f"the {side} side is the bottleneck ({what}; modelled {side} load {loads})"
