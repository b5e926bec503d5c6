"""``bounded_completion``: every request reaches a terminal status — an answer, an error, a refusal — within a bound.

A request that waits until the client's own timeout (``timeout`` in ``requests.jsonl``) never got an answer from
the target: it is a **hang**, whatever the bound, and so is one still in flight when the run's drain period ran out
(``cancelled``). A request that ended, but later than ``bound`` after it was sent, is **late**. Both count against
``max_hangs``. These are the failures of a decode worker that waits for a KV transfer that never completes
(vLLM #50754, #55181; NIXL #2047; SGLang #36108 with its 300 s default wait; ``docs/disaggregated.md``): a lease
that gives up in time turns them into fast errors or recomputes, and this check tells the two apart.

For each hung or late request the verdict names **where it waited**, from its trace's spans
(``spans.jsonl``): from the longest root span down, the child that covers at least half of its parent's time,
as deep as that goes (the router's request span, its decode attempt, the decode worker's ``kv_transfer``). A run
without spans still gets its verdict from the client records; the spans only locate the wait, so a missing
``spans.jsonl`` is a note, not INCONCLUSIVE (it is not in ``reads``).

Never-sent requests (``client_drop``: the load generator's in-flight cap) are not judged. INCONCLUSIVE, never
PASS: no request was sent in the judged phases.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from drill.api import Check, CheckParams, EvidenceKind, EvidenceRef, Status, Verdict
from drill.rundir.evidence import RunEvidence
from drill.rundir.records import ErrorClass, RequestRecord
from drill.traces.run_traces import run_traces
from drill.traces.table import Span
from drill.units import Duration

__all__ = ["BoundedCompletionCheck", "BoundedCompletionParams", "where_it_waited"]

#: Errors that are not a terminal status: the client gave up, or the run stopped first.
_HANGS = {ErrorClass.TIMEOUT: "waited until the client's timeout", ErrorClass.CANCELLED: "still in flight at stop"}


class BoundedCompletionParams(CheckParams):
    bound: Duration | None = Field(
        None, description="a request must end this long after it was sent, at most (s); None: only hangs count"
    )
    phases: tuple[str, ...] = Field(
        ("baseline", "fault", "recovery"), min_length=1, description="phases whose requests are judged"
    )
    max_hangs: int = Field(0, ge=0, description="requests that may hang or end late, at most")


@dataclass(frozen=True)
class _Unbounded:
    """One request that did not reach a terminal status in time, and where it waited."""

    record: RequestRecord
    why: str
    waited: Span | None  # the span it waited in (None: its trace has no span)

    def describe(self) -> str:
        where = (
            f"waited in {self.waited.name} ({self.waited.service}, {self.waited.duration_ms / 1000:.1f}s)"
            if self.waited is not None
            else "no span of its trace"
        )
        return f"{self.why}; {where}"


def where_it_waited(spans: list[Span]) -> Span | None:
    """From the longest root span down, the child that covers at least half its parent's time, as deep as that
    goes; None without spans. A span whose parent is not among ``spans`` counts as a root."""
    if not spans:
        return None
    ids = {s.span_id for s in spans}
    children: dict[str, list[Span]] = {}
    for span in spans:
        children.setdefault(span.parent_id if span.parent_id in ids else "", []).append(span)
    here = max(children.get("", spans), key=lambda s: (s.duration_ms, -s.start_ns))
    while True:
        longest = max(children.get(here.span_id, []), key=lambda s: (s.duration_ms, -s.start_ns), default=None)
        if longest is None or longest.duration_ms < 0.5 * here.duration_ms:
            return here
        here = longest


class BoundedCompletionCheck(Check):
    """Every request reaches a terminal status within the bound; none waits until the client gives up."""

    kind = "bounded_completion"
    Params = BoundedCompletionParams
    params: BoundedCompletionParams
    reads = ("journal.jsonl", "requests.jsonl")

    def evaluate(self, evidence: RunEvidence) -> Verdict:
        p = self.params
        judged = [r for phase in p.phases for r in evidence.requests_in(phase) if r.sent_ts is not None]
        if not judged:
            return self.verdict(
                Status.INCONCLUSIVE, f"no request was sent in the {'/'.join(p.phases)} phase(s)", window=p.phases[0]
            )
        unbounded = []
        for record in judged:
            why = self._why(record)
            if why is not None:
                unbounded.append(self._locate(evidence, record, why))
        return self._judge(evidence, judged, unbounded)

    def _why(self, record: RequestRecord) -> str | None:
        """Why this request did not end in time; None when it did."""
        if record.error in _HANGS:
            return _HANGS[record.error]
        bound = self.params.bound
        if bound is None or record.e2e_ms is None:
            return None
        took_s = (record.e2e_ms - (record.schedule_lag_ms or 0.0)) / 1000.0
        return f"ended {took_s:.1f}s after it was sent (bound {bound:g}s)" if took_s > bound else None

    def _locate(self, evidence: RunEvidence, record: RequestRecord, why: str) -> _Unbounded:
        traces = run_traces(evidence)
        spans = [traces.table.span(row) for row in traces.joined.server_spans(record.request_id)]
        return _Unbounded(record, why, where_it_waited(spans))

    def _judge(self, evidence: RunEvidence, judged: list[RequestRecord], unbounded: list[_Unbounded]) -> Verdict:
        p = self.params
        hangs = [u for u in unbounded if u.record.error in _HANGS]
        places = Counter(u.waited.name for u in unbounded if u.waited is not None)
        observed: dict[str, Any] = {
            "requests": len(judged),
            "hangs": len(hangs),
            "late": len(unbounded) - len(hangs),
            "terminal_in_time": len(judged) - len(unbounded),
            "waited_in": dict(places.most_common()),
        }
        units = {"requests": "requests", "hangs": "requests", "late": "requests", "terminal_in_time": "requests"}
        bound = "" if p.bound is None else f", within {p.bound:g}s of its send"
        notes = []
        if unbounded and not len(run_traces(evidence).table):
            notes.append(
                run_traces(evidence).no_spans_reason or "the run has no spans: where each request waited is unknown"
            )
        common: dict[str, Any] = dict(
            observed=observed,
            expected={"hangs + late": f"<= {p.max_hangs}", "each request": f"a terminal status{bound}"},
            units=units,
            window="/".join(p.phases),
            notes=tuple(notes),
        )
        if len(unbounded) > p.max_hangs:
            first = unbounded[0]
            where = f"; they waited in {', '.join(f'{n} ({c})' for n, c in places.most_common())}" if places else ""
            return self.verdict(
                Status.FAIL,
                f"{len(unbounded)} of {len(judged)} request(s) reached no terminal status in time "
                f"({len(hangs)} hung, {len(unbounded) - len(hangs)} late; at most {p.max_hangs} allowed){where}; "
                f"first: {first.record.request_id} {first.describe()}",
                evidence=_refs(unbounded),
                **common,
            )
        return self.verdict(
            Status.PASS,
            f"{len(judged) - len(unbounded)}/{len(judged)} request(s) reached a terminal status{bound}; "
            f"{len(unbounded)} did not (at most {p.max_hangs} allowed)",
            evidence=_refs(unbounded),
            **common,
        )


def _refs(unbounded: list[_Unbounded]) -> list[EvidenceRef]:
    refs = []
    for u in unbounded:
        refs.append(EvidenceRef(EvidenceKind.REQUEST, u.record.request_id, u.describe()))
        if u.waited is not None:
            refs.append(EvidenceRef(EvidenceKind.SPAN, u.waited.span_id, f"{u.waited.name}: where it waited"))
    return refs
