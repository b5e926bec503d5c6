"""Checks that break one clause each of the check contract kit (``drill.testing.check_contract``), to prove the
kit catches it. They use only :mod:`drill.api`, like any plugin; ``tests/checks/test_check_contract.py`` registers
them with ``DRILL_EXTRA_PLUGINS``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from drill.api import Check, CheckParams, RunEvidence, Status, Verdict


class _Judged(Check):
    """INCONCLUSIVE when the run has no request, PASS otherwise: what the contract asks on thin evidence."""

    reads = ("journal.jsonl", "requests.jsonl")

    def evaluate(self, evidence: RunEvidence) -> Verdict:
        if not evidence.requests:
            return self.verdict(Status.INCONCLUSIVE, "no request in the run")
        return self.verdict(Status.PASS, f"{len(evidence.requests)} requests", observed={"requests": 1})


class RaisesOnThinRun(_Judged):
    kind = "test_raises_on_thin_run"

    def evaluate(self, evidence: RunEvidence) -> Verdict:
        return self.verdict(Status.PASS, f"first request {evidence.requests[0].request_id}")


class PassesOnNothing(_Judged):
    kind = "test_passes_on_nothing"

    def evaluate(self, evidence: RunEvidence) -> Verdict:
        return self.verdict(Status.PASS, "nothing went wrong (nothing happened)")


class NanFigure(_Judged):
    kind = "test_nan_figure"

    def evaluate(self, evidence: RunEvidence) -> Verdict:
        return self.verdict(Status.INCONCLUSIVE, "no data", observed={"p95_ms": float("nan")})


class WritesIntoTheRun(_Judged):
    kind = "test_writes_into_the_run"

    def evaluate(self, evidence: RunEvidence) -> Verdict:
        (evidence.run_dir / "scratch.txt").write_text("judged")
        return super().evaluate(evidence)


class ReadsUndeclared(_Judged):
    kind = "test_reads_undeclared"
    reads = ("journal.jsonl",)


class _LooseParams(BaseModel):
    model_config = ConfigDict(extra="allow")


class LooseParams(_Judged):
    kind = "test_loose_params"
    Params = _LooseParams


class _OpenParams(CheckParams):
    model_config = ConfigDict(extra="allow")


class OpenParams(_Judged):
    kind = "test_open_params"
    Params = _OpenParams


class ReadsOutside(_Judged):
    kind = "test_reads_outside"
    reads = ("journal.jsonl", "../requests.jsonl")
