"""``drill traces analyze``'s text for the ranked suspects, what could not be judged, and weak findings.

Printed the project's one way (:mod:`drill.cli.terminal`): names from a trace file are literal text, never markup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from drill.cli.terminal import console, say, styled

if TYPE_CHECKING:
    from rich.text import Text

    from drill.traces.analysis import AbnormalReport
    from drill.traces.suspects import PairEvidence, Ranking

__all__ = ["SHOWN_SUSPECTS", "print_coverage", "print_suspects", "verdict_line"]

#: Suspects shown (the first_abnormal_span verdict and the report show as many).
SHOWN_SUSPECTS = 5
_EVIDENCE_SHOWN = 3


def verdict_line(report: AbnormalReport) -> Text | None:
    """The headline when there is no first abnormal span, or when it is too weak to be a finding."""
    reason = report.inconclusive_reason
    if reason is not None:
        return styled(("INCONCLUSIVE:", "bold"), f" most of the fault window could not be judged: {reason}")
    ranking = report.ranking
    if report.fault_spans == 0:
        return styled(("no abnormal span:", "bold"), " the fault window holds no span")
    if report.first is None and not report.suspects:
        judged = "" if ranking is None else f" in the {ranking.judged} judged (service, span name) pairs"
        return styled(("no abnormal span:", "bold"), f" no deviation from the baseline{judged}")
    if report.first is not None and not report.first.material:
        return styled(("nothing material deviated", "bold"), "; weakest signals: " + _weakest(report))
    return None


def _weakest(report: AbnormalReport) -> str:
    """The immaterial first span, then the suspects (or, without any, the largest effects judged)."""
    ranking = report.ranking
    signals = [f"{s.service} (suspect, score {s.score:.2f})" for s in report.suspects[:3]]
    if not signals and ranking is not None:
        signals = [e.text for e in ranking.weakest[:3]]
    if report.first is not None:
        signals.insert(0, f"{report.first.service}/{report.first.name}: {report.first.deviation}")
    return "; ".join(signals) or "none"


def print_suspects(report: AbnormalReport) -> None:
    if not report.suspects:
        return
    console.print()
    say(("suspects", "bold"), f" (services ranked by pooled evidence, top {SHOWN_SUSPECTS}):")
    for rank, suspect in enumerate(report.suspects[:SHOWN_SUSPECTS], 1):
        say(f"  {rank}. ", (suspect.service, "bold"), f" score {suspect.score:.2f}: {suspect.why}")
        for evidence in suspect.evidence[:_EVIDENCE_SHOWN]:
            say(f"       {_evidence_text(evidence)}")


def _evidence_text(evidence: PairEvidence) -> str:
    return f"{evidence.text}, rank-test z {evidence.z:.1f}"


def print_coverage(ranking: Ranking | None) -> None:
    """How much of the fault window was judged, and how thinly."""
    if ranking is None:
        return
    line = f"judged {ranking.judged} of {ranking.pairs} (service, span name) pairs of the fault window"
    if ranking.thin:
        line += f" ({ranking.thin} on thin baselines: rank test on fewer spans than min_baseline_spans)"
    say((line, "dim"))
    if ranking.not_judged:
        shown = ", ".join(f"{x.pair} ({x.baseline_spans}/{x.fault_spans})" for x in ranking.not_judged[:5])
        say((f"not judged: {ranking.unjudged_reason}; e.g. (baseline/fault spans) {shown}", "dim"))
