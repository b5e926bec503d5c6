"""``health_truth``: while a component is broken its health endpoint says so, and says healthy again after recovery.

A load balancer, a Kubernetes readiness probe or the stack's own router trust ``GET /health``; one that answers
200 from a worker whose engine is dead (fixed in vLLM #24897, which made it 503) or whose KV link is broken keeps
traffic flowing to it. The run's ``health.jsonl`` (:mod:`drill.runner.health_probes`: the runner probes the
router and each replica when the drill names this check) is the evidence; a fault's injection and revert in the
journal say when each of the drill's ``components`` (probe sources: ``replica-0``, ``router``) was broken.

For every injected fault and every component:

- **says broken**: a probe between the injection and ``detect_within`` later (or the revert, if sooner) was not
  healthy (not 200, or no answer);
- **says healthy again**: after the revert, a healthy probe within ``recover_within``, and every later probe
  healthy.

FAIL when a component said healthy all along while broken, or did not say healthy again in time. INCONCLUSIVE,
never PASS: no component named, no fault injected, or no probe of a component in a window it is judged on.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from drill.api import Check, CheckParams, EvidenceKind, EvidenceRef, Status, Verdict
from drill.rundir.evidence import FaultOutcome, RunEvidence
from drill.rundir.jsonl import ReadReport, read_jsonl
from drill.units import Duration

__all__ = ["HEALTH_FILE", "HealthProbe", "HealthTruthCheck", "HealthTruthParams", "read_health"]

HEALTH_FILE = "health.jsonl"


@dataclass(frozen=True)
class HealthProbe:
    """One probe of one component's health endpoint."""

    ts: float  # UNIX s, when the probe was sent
    source: str  # the component: "router", "replica-0", ...
    healthy: bool  # HTTP 200
    status: int | None = None  # None: no answer (refused, reset, timed out)
    error: str | None = None

    @classmethod
    def from_dict(cls, data: dict) -> HealthProbe:
        ts, source, healthy, status = data.get("ts"), data.get("source"), data.get("healthy"), data.get("status")
        if not isinstance(ts, (int, float)) or isinstance(ts, bool):
            raise ValueError("ts: expected a number")
        if not isinstance(source, str) or not isinstance(healthy, bool):
            raise ValueError("source and healthy: expected a string and a boolean")
        if status is not None and (not isinstance(status, int) or isinstance(status, bool)):
            raise ValueError("status: expected an integer or null")
        error = data.get("error")
        return cls(float(ts), source, healthy, status, error if isinstance(error, str) else None)


def read_health(path: Path, report: ReadReport | None = None) -> Iterator[HealthProbe]:
    """The probes of a ``health.jsonl``; unreadable lines are counted in ``report``."""
    return read_jsonl(path, HealthProbe.from_dict, report)


class HealthTruthParams(CheckParams):
    components: tuple[str, ...] = Field(
        (), description="the probe sources the drill's faults break (replica-0, router); none: INCONCLUSIVE"
    )
    detect_within: Duration = Field(5.0, description="a broken component's health says so this soon (s), at most")
    recover_within: Duration = Field(30.0, description="after the revert, it says healthy this soon (s), at most")


@dataclass(frozen=True)
class _Finding:
    """One (fault, component) pair judged: a problem, or a gap in the evidence, or neither."""

    fault_id: str
    component: str
    problem: str | None = None  # FAIL
    gap: str | None = None  # INCONCLUSIVE
    detected_s: float | None = None  # from injection to the first unhealthy probe
    recovered_s: float | None = None  # from revert to the healthy probe it stayed healthy from


class HealthTruthCheck(Check):
    """A broken component's health endpoint says so within a bound, and says healthy again after recovery."""

    kind = "health_truth"
    Params = HealthTruthParams
    params: HealthTruthParams
    reads = ("journal.jsonl", HEALTH_FILE)

    def evaluate(self, evidence: RunEvidence) -> Verdict:
        p = self.params
        faults = [f for f in evidence.faults if f.injected and f.injected_ts is not None]
        if not p.components:
            return self.verdict(Status.INCONCLUSIVE, "no component named: say which probe sources the faults break")
        if not faults:
            return self.verdict(Status.INCONCLUSIVE, "no fault was injected: nothing was broken to judge")
        probes = evidence.read(HEALTH_FILE, read_health)
        by_source: dict[str, list[HealthProbe]] = {}
        for probe in sorted(probes, key=lambda x: x.ts):
            by_source.setdefault(probe.source, []).append(probe)
        end = max((pr.ts for pr in probes), default=0.0)
        findings = [
            self._judge_one(fault, c, by_source.get(c, []), _revert_ts(evidence, fault, end))
            for fault in faults
            for c in p.components
        ]
        return self._verdict(findings)

    def _judge_one(self, fault: FaultOutcome, component: str, probes: list[HealthProbe], reverted: float) -> _Finding:
        p = self.params
        injected = fault.injected_ts or 0.0
        name = (fault.fault_id, component)
        window_end = min(reverted, injected + p.detect_within)
        during = [pr for pr in probes if injected <= pr.ts <= window_end]
        if not during:
            return _Finding(*name, gap=f"no probe of {component} in the {window_end - injected:.1f}s after injection")
        unhealthy = next((pr for pr in during if not pr.healthy), None)
        if unhealthy is None:
            return _Finding(
                *name,
                problem=f"{component} said healthy in all {len(during)} probe(s) of the "
                f"{window_end - injected:.1f}s after {fault.fault_id} broke it",
            )
        detected = unhealthy.ts - injected
        after = [pr for pr in probes if pr.ts >= reverted]
        if not after:
            return _Finding(*name, gap=f"no probe of {component} after the revert", detected_s=detected)
        stays = _healthy_from(after)
        if stays is None:
            return _Finding(
                *name, problem=f"{component} never said healthy again after the revert", detected_s=detected
            )
        recovered = stays.ts - reverted
        if recovered > p.recover_within:
            return _Finding(
                *name,
                problem=f"{component} said healthy again {recovered:.1f}s after the revert "
                f"(at most {p.recover_within:g}s)",
                detected_s=detected,
                recovered_s=recovered,
            )
        return _Finding(*name, detected_s=detected, recovered_s=recovered)

    def _verdict(self, findings: list[_Finding]) -> Verdict:
        p = self.params
        problems = [f for f in findings if f.problem]
        gaps = [f for f in findings if f.gap]
        observed: dict[str, Any] = {
            f"{f.fault_id}.{f.component}": {"detected_s": f.detected_s, "recovered_s": f.recovered_s} for f in findings
        }
        observed.update(judged=len(findings), lied=len(problems), unjudged=len(gaps))
        units = {"judged": "component faults", "lied": "component faults", "unjudged": "component faults"}
        units.update({k: "s (detected, recovered)" for k in observed if "." in k})
        common: dict[str, Any] = dict(
            observed=observed,
            expected={
                "detected_s": f"<= {p.detect_within:g}",
                "recovered_s": f"<= {p.recover_within:g}, healthy from then on",
            },
            units=units,
            window="fault",
            notes=tuple(f"{f.fault_id}: {f.gap}" for f in gaps),
            evidence=[EvidenceRef(EvidenceKind.FILE, HEALTH_FILE, f"{f.fault_id}: {f.problem}") for f in problems],
        )
        if problems:
            return self.verdict(Status.FAIL, "; ".join(f"{f.fault_id}: {f.problem}" for f in problems), **common)
        if gaps:
            return self.verdict(Status.INCONCLUSIVE, "; ".join(f"{f.fault_id}: {f.gap}" for f in gaps), **common)
        worst = max(findings, key=lambda f: f.detected_s or 0.0)
        return self.verdict(
            Status.PASS,
            f"every named component's health said broken within {worst.detected_s:.1f}s of its fault "
            f"(at most {p.detect_within:g}s) and healthy again after the revert",
            **common,
        )


def _revert_ts(evidence: RunEvidence, fault: FaultOutcome, last_probe: float) -> float:
    """When the fault was reverted; a fault never reverted is broken to the fault phase's end (or the last probe)."""
    if fault.reverted_ts is not None:
        return fault.reverted_ts
    window = evidence.phases.get("fault")
    return window.end_ts if window else last_probe


def _healthy_from(probes: list[HealthProbe]) -> HealthProbe | None:
    """The first probe from which every probe is healthy; None when the last one is not."""
    start = None
    for probe in probes:
        if not probe.healthy:
            start = None
        elif start is None:
            start = probe
    return start
