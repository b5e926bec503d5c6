"""Did the baseline and the candidate see the same requests? Checked from what each run actually sent.

The load driver builds every body from the scenario, the seed, the model and the request's logical id
(:mod:`drill.load.payload`), so with one seed both runs send byte-identical bodies; each record carries the
``payload_digest`` (sha256 of the bytes sent). This compares the first attempts of both ``requests.jsonl``
by logical id: the scheduled requests (the seed's request set) and, apart, the ``queue_flood`` burst requests,
whose count depends on timing (each burst's bodies are seeded, its arrivals are Poisson in wall time).
Requests only one run sent (the load stops at a stop condition, a burst ran a little longer) are counted,
never hidden; so are lines either file could not read.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path

from drill.rundir.evidence import RunEvidence

__all__ = ["RequestSetCheck", "SetCounts", "compare_request_sets"]


@dataclass(frozen=True)
class SetCounts:
    both: int  # logical ids both runs sent
    identical: int  # of those, with the same payload digest
    only_baseline: int
    only_candidate: int

    @property
    def differing(self) -> int:
        return self.both - self.identical


@dataclass(frozen=True)
class RequestSetCheck:
    scheduled: SetCounts
    bursts: SetCounts
    digest: str  # sha256 over the (logical id, payload digest) pairs of the scheduled requests both sent
    unreadable: tuple[str, ...]  # read problems of either requests.jsonl

    @property
    def identical(self) -> bool:
        """Every request both runs sent had the same bytes, and they sent some."""
        counts = (self.scheduled, self.bursts)
        return self.scheduled.both > 0 and all(c.differing == 0 for c in counts)

    def describe(self) -> str:
        s, b = self.scheduled, self.bursts
        verdict = "identical" if self.identical else "NOT identical"
        text = (
            f"request set {verdict}: {s.identical}/{s.both} scheduled requests with the same payload digest "
            f"(only baseline {s.only_baseline}, only candidate {s.only_candidate}); "
            f"burst requests {b.identical}/{b.both} "
            f"(only baseline {b.only_baseline}, only candidate {b.only_candidate})"
        )
        return text + "".join(f"; {problem}" for problem in self.unreadable)

    def to_json(self) -> dict[str, object]:
        return {
            "identical": self.identical,
            "scheduled": asdict(self.scheduled),
            "bursts": asdict(self.bursts),
            "digest": self.digest,
            "unreadable": list(self.unreadable),
        }


def _first_attempts(evidence: RunEvidence) -> tuple[dict[str, str], dict[str, str]]:
    """logical id -> payload digest of each first attempt that has one: (scheduled, bursts)."""
    scheduled: dict[str, str] = {}
    bursts: dict[str, str] = {}
    for r in evidence.requests:
        if r.attempt == 1 and r.payload_digest:
            (bursts if r.burst else scheduled)[r.logical_id] = r.payload_digest
    return scheduled, bursts


def _counts(a: dict[str, str], b: dict[str, str]) -> SetCounts:
    both = a.keys() & b.keys()
    return SetCounts(len(both), sum(a[k] == b[k] for k in both), len(a.keys() - b.keys()), len(b.keys() - a.keys()))


def compare_request_sets(baseline_dir: Path, candidate_dir: Path) -> RequestSetCheck:
    runs = (RunEvidence(baseline_dir), RunEvidence(candidate_dir))
    (a_scheduled, a_bursts), (b_scheduled, b_bursts) = (_first_attempts(e) for e in runs)
    common = sorted(a_scheduled.keys() & b_scheduled.keys())
    digest = hashlib.sha256("\n".join(f"{k} {a_scheduled[k]}" for k in common).encode()).hexdigest()
    unreadable = tuple(
        f"{side} {report.describe()}"
        for side, e in zip(("baseline", "candidate"), runs)
        for report in e.reports.values()
        if not report.clean or report.torn_last_line is not None
    )
    return RequestSetCheck(
        _counts(a_scheduled, b_scheduled), _counts(a_bursts, b_bursts), "sha256:" + digest, unreadable
    )
