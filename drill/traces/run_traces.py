"""A run's traces as the checks see them: one table, how complete it is, and the client join.

:func:`run_traces` gives a judged run's :class:`RunTraces`, made once per run (through
:meth:`drill.rundir.evidence.RunEvidence.derived`). The run's ``spans.jsonl`` is read through the ``receiver``
source; its
:class:`~drill.rundir.jsonl.ReadReport` goes into ``evidence.reports["spans.jsonl"]`` like every other file
of the run, so a check that lists ``spans.jsonl`` in ``reads`` becomes INCONCLUSIVE when lines of it
could not be read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from drill.rundir.evidence import RunEvidence
from drill.traces.completeness import NO_SPANS, Completeness, measure_completeness
from drill.traces.join import JoinedRequests
from drill.traces.sources import ReceiverParams, ReceiverSource
from drill.traces.table import SpanTable

__all__ = ["NO_SPANS", "SPANS_FILE", "RunTraces", "run_traces", "traces_of"]

SPANS_FILE = "spans.jsonl"


@dataclass(frozen=True)
class RunTraces:
    table: SpanTable
    completeness: Completeness
    source: str  # what was read, e.g. "receiver: spans.jsonl"
    no_spans_reason: str | None  # "the target exported no spans" when the run has no span at all
    joined: JoinedRequests

    def thin_reason(self, min_spans: int) -> str | None:
        """Why the spans are too thin to judge (``no_spans_reason`` first), or None."""
        return self.no_spans_reason or self.completeness.thin_reason(min_spans)


def traces_of(
    table: SpanTable, records: Iterable[object] = (), *, source: str, unreadable: int = 0, where: tuple[str, ...] = ()
) -> RunTraces:
    """RunTraces of an already-read table (any source) and client records."""
    records = list(records)
    completeness = measure_completeness(table, records, unreadable=unreadable, where=where)
    reason = None
    if len(table) == 0:
        reason = NO_SPANS if not unreadable else f"no span could be read ({unreadable} unreadable record(s))"
    return RunTraces(
        table=table,
        completeness=completeness,
        source=source,
        no_spans_reason=reason,
        joined=JoinedRequests(table, records),
    )


def run_traces(evidence: RunEvidence) -> RunTraces:
    """The run's traces, read once per run (every later call gives the same :class:`RunTraces`)."""
    return evidence.derived(_read_run_traces)


def _read_run_traces(evidence: RunEvidence) -> RunTraces:
    """The run's ``spans.jsonl`` (receiver source) joined to ``evidence.requests``, with its completeness."""
    source = ReceiverSource(ReceiverParams(file=SPANS_FILE), str(evidence.run_dir))
    table = source.table()
    (report,) = source.report.files
    evidence.reports[SPANS_FILE] = report
    return traces_of(
        table,
        evidence.requests,
        source=f"receiver: {SPANS_FILE}",
        unreadable=source.report.unreadable,
        where=source.report.where,
    )
