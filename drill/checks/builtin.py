"""Built-in checks over client records and the journal: ``fault_landed``, ``slo``, ``error_rate``.

Each is registered through the ``drill.checks`` entry point like any plugin.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from drill.checks.base import Check, CheckParams, Evidence, Status, Verdict
from drill.load.records import ErrorClass, latency_values
from drill.spec.scenario import Slo, parse_slo_key
from drill.stats import percentile

__all__ = ["ErrorRateCheck", "FaultLandedCheck", "SloCheck"]

PhaseName = Literal["warmup", "baseline", "fault", "recovery"]


class FaultLandedCheck(Check):
    """Every fault of the drill was injected and ``verify`` proved it took effect.

    A drill whose fault did not land tested nothing: that is a FAIL, never a pass.
    """

    kind = "fault_landed"
    Params = CheckParams

    def evaluate(self, evidence: Evidence) -> Verdict:
        faults = evidence.faults
        if not faults:
            return self.verdict(Status.INCONCLUSIVE, "the run injected no fault")
        missing = [f for f in faults if not f.landed]
        observed = {f.fault_id: ("landed" if f.landed else f"not landed: {f.error or 'never verified'}")
                    for f in faults}
        if missing:
            names = ", ".join(f.fault_id for f in missing)
            return self.verdict(Status.FAIL, f"fault(s) did not land: {names}", observed=observed,
                                expected={"all": "landed"}, window="fault")
        return self.verdict(Status.PASS, f"all {len(faults)} fault(s) landed and were verified",
                            observed=observed, expected={"all": "landed"}, window="fault")


class SloParams(CheckParams):
    phase: PhaseName = "baseline"
    pools: list[str] | None = None            # default: every pool with an SLO
    slo: Slo = Field(default_factory=dict)     # overrides the pools' and the drill's SLO
    min_requests: int = Field(20, ge=1)


class SloCheck(Check):
    """Client-side latency percentiles of each pool in one phase are within its SLO.

    Percentiles are exact, over successful requests, measured from the intended
    start (queueing in the client counts). Too few requests is INCONCLUSIVE.
    """

    kind = "slo"
    Params = SloParams

    def evaluate(self, evidence: Evidence) -> Verdict:
        p: SloParams = self.params
        records = evidence.requests_in(p.phase)
        targets = {pool: (p.slo or slo) for pool, slo in evidence.slo_by_pool.items()
                   if (p.pools is None or pool in p.pools) and (p.slo or slo)}
        if not targets:
            return self.verdict(Status.INCONCLUSIVE, "no pool has an SLO to check", window=p.phase)
        observed, expected, breaches, thin = {}, {}, [], []
        for pool, slo in targets.items():
            mine = [r for r in records if r.pool == pool and r.ok]
            for key, bound_s in slo.items():
                metric, pct = parse_slo_key(key)
                values = latency_values(mine, metric)
                expected[f"{pool}.{key}"] = f"<= {bound_s * 1000:.0f}ms"
                if len(values) < p.min_requests:
                    thin.append(f"{pool}.{key} ({len(values)} samples)")
                    continue
                value = percentile(values, pct)
                observed[f"{pool}.{key}"] = f"{value:.1f}ms"
                if value > bound_s * 1000:
                    breaches.append(f"{pool} {key} = {value:.0f}ms > {bound_s * 1000:.0f}ms")
        return self._judge(breaches, thin, observed, expected, p.phase)

    def _judge(self, breaches, thin, observed, expected, phase) -> Verdict:
        if breaches:
            return self.verdict(Status.FAIL, "; ".join(breaches), observed=observed, expected=expected, window=phase)
        if thin:
            return self.verdict(Status.INCONCLUSIVE, f"too few samples for {', '.join(thin)}",
                                observed=observed, expected=expected, window=phase)
        return self.verdict(Status.PASS, f"every SLO held in {phase}", observed=observed, expected=expected, window=phase)


class ErrorRateParams(CheckParams):
    phase: PhaseName = "fault"
    max: float = Field(0.01, ge=0, le=1)
    pools: list[str] | None = None
    classes: list[ErrorClass] | None = None   # default: every error class
    min_requests: int = Field(20, ge=1)


class ErrorRateCheck(Check):
    """The share of failed requests in a phase stays at or below ``max``."""

    kind = "error_rate"
    Params = ErrorRateParams

    def evaluate(self, evidence: Evidence) -> Verdict:
        p: ErrorRateParams = self.params
        records = [r for r in evidence.requests_in(p.phase) if p.pools is None or r.pool in p.pools]
        if len(records) < p.min_requests:
            return self.verdict(Status.INCONCLUSIVE, f"only {len(records)} requests in {p.phase}", window=p.phase)
        counted = [r for r in records if r.error is not None and (p.classes is None or r.error in p.classes)]
        by_class: dict[str, int] = {}
        for r in counted:
            by_class[r.error.value] = by_class.get(r.error.value, 0) + 1
        share = len(counted) / len(records)
        observed = {"error_rate": round(share, 4), "requests": len(records), **by_class}
        expected = {"error_rate": f"<= {p.max:g}"}
        status = Status.PASS if share <= p.max else Status.FAIL
        message = f"error rate {share:.2%} in {p.phase} ({len(counted)}/{len(records)})"
        return self.verdict(status, message, observed=observed, expected=expected, window=p.phase)
