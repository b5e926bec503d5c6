"""Measurement truth per phase: how far the client's latencies can be trusted, phase by phase, and which hops the
difference between the client's and the server's figures spans.

The client measures TTFT and E2E from the send; the server's figures come from the replica's spans (the
``llm_request`` span's TTFT attribute and the replica SERVER span around it, :mod:`drill.traces.join`), else from
the server's own per-request timings (llama.cpp's ``timings``). Client minus server is what the hops in between add
— the network, a router, the client itself — so it is measured over each phase on its own: a figure taken over the
whole run mixes the flood's queueing in the router into the baseline's.

The hops are read from each joined request's trace: the services from the trace's root down to the span that
carries the server's figures, after the load client (``load client → drill-router → drill-replica``; a replica's
index is left out, so the replicas of one stack are one hop). A phase's hops are its most common chain.

``verdicts.json`` carries the section as ``measurement_truth`` and the report shows it; a verdict judged over one
window (``slo`` over its phase, ``fast_failure`` over the fault window) carries that window's figures.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from drill.api import EvidenceKind, EvidenceRef
from drill.checks.judging import records_in, usable_traces
from drill.rundir.evidence import RunEvidence
from drill.traces.join import LLM_REQUEST, MeasurementTruth, TruthRow, timings_truth

__all__ = [
    "CLIENT_HOP",
    "MeasurementTruthSection",
    "PhaseTruth",
    "measured_truth",
    "measurement_truth_by_phase",
    "measurement_truth_figures",
    "measurement_truth_units",
]

CLIENT_HOP = "load client"
#: What the server-side figures are, by source.
SERVER_FIGURES = {
    "spans": "server TTFT from the llm_request span (gen_ai.latency.time_to_first_token, else its prefill's end); "
    "server E2E the replica SERVER span's duration",
    "server_timings": "the server's own timings (prompt_ms, prompt_ms + predicted_ms), which leave out the time a "
    "request waited for a free slot: the difference also holds the server's own queueing",
}
_INDEX = re.compile(r"-\d+$")


@dataclass(frozen=True)
class PhaseTruth:
    """Client minus server TTFT and E2E (ms) of the requests joined in one phase."""

    phase: str
    requests: int  # client records whose intended start falls in the phase
    joined: int
    with_server_ttft: int
    with_server_e2e: int
    ttft_diff_ms: dict[str, float] | None  # p50/p95/p99
    e2e_diff_ms: dict[str, float] | None
    hops: tuple[str, ...]  # the chain the difference spans, client first; () when nothing was joined
    other_chains: int  # joined requests whose trace took another chain

    @property
    def spans(self) -> str:
        return " → ".join(self.hops)

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "requests": self.requests,
            "joined": self.joined,
            "with_server_ttft": self.with_server_ttft,
            "with_server_e2e": self.with_server_e2e,
            "ttft_diff_ms": _rounded(self.ttft_diff_ms),
            "e2e_diff_ms": _rounded(self.e2e_diff_ms),
            "hops": list(self.hops),
            "spans": self.spans,
            "other_chains": self.other_chains,
        }


@dataclass(frozen=True)
class MeasurementTruthSection:
    """Measurement truth per phase, in run order."""

    source: str  # "spans", "server_timings", or "none"
    server_figures: str  # what the server side of the difference is
    phases: tuple[PhaseTruth, ...]
    note: str  # why there is nothing to compare (or a failure), else ""

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "server_figures": self.server_figures,
            "phases": [p.to_json() for p in self.phases],
            "note": self.note,
        }


def measured_truth(evidence: RunEvidence) -> tuple[MeasurementTruth | None, str]:
    """The run's client-vs-server rows: from the server spans, else from the server's own per-request timings
    (llama.cpp); None with neither. The second value is a note when computing it failed."""
    truth = None
    if (evidence.run_dir / "spans.jsonl").exists():
        traces, _ = usable_traces(evidence)
        try:
            truth = traces.joined.measurement_truth() if traces is not None else None
        except Exception as exc:  # noqa: BLE001 - an extra figure: its failure is a note, not the verdict
            return None, f"measurement truth not computed: {type(exc).__name__}: {exc}"
    if truth is None or not truth.joined:
        truth = timings_truth(evidence.requests)  # no spans: the server's own timings, where it reports them
    return (truth if truth.joined else None), ""


def measurement_truth_by_phase(evidence: RunEvidence) -> MeasurementTruthSection:
    """Measurement truth of every phase that has client records, in run order."""
    truth, failed = measured_truth(evidence)
    if truth is None:
        note = failed or (
            "no client record was joined to a server figure: the target exported no spans joined to the requests "
            "and reports no per-request timings"
        )
        return MeasurementTruthSection("none", "", (), note)
    hops = _hops_by_request(evidence) if truth.source == "spans" else {}
    windows = sorted(evidence.phases.values(), key=lambda w: w.start_ts)
    phases = []
    for window in windows:
        records = [r for r in evidence.requests if window.contains(r.intended_ts)]
        if not records:
            continue
        ids = {r.request_id for r in records}
        mine = truth.only(ids)
        chains = _chains(mine.rows, hops, truth.source)
        chain = min(chains.items(), key=lambda item: (-item[1], item[0]))[0] if chains else ()
        phases.append(
            PhaseTruth(
                phase=window.phase,
                requests=len(records),
                joined=mine.joined,
                with_server_ttft=sum(1 for r in mine.rows if r.ttft_diff_ms is not None),
                with_server_e2e=sum(1 for r in mine.rows if r.e2e_diff_ms is not None),
                ttft_diff_ms=mine.ttft_diff_ms,
                e2e_diff_ms=mine.e2e_diff_ms,
                hops=chain,
                other_chains=sum(chains.values()) - chains.get(chain, 0),
            )
        )
    return MeasurementTruthSection(truth.source, SERVER_FIGURES.get(truth.source, ""), tuple(phases), failed)


def _chains(rows: tuple[TruthRow, ...], hops: dict[str, tuple[str, ...]], source: str) -> Counter[tuple[str, ...]]:
    """How many of a phase's joined requests took each chain. From spans, a request without an ``llm_request``
    span (refused before a replica took it: a 503 of admission control, the router's 504) has no chain and is
    not counted: a flood of refusals must not hide the chain the figures were measured over."""
    if source != "spans":
        return Counter({(CLIENT_HOP, "server"): len(rows)}) if rows else Counter()
    return Counter(hops[row.request_id] for row in rows if row.request_id in hops)


def _hops_by_request(evidence: RunEvidence) -> dict[str, tuple[str, ...]]:
    """Each joined request's chain: the load client, then the services from its trace's root down to its last
    ``llm_request`` span (the one the server figures come from), a replica's index left out."""
    traces, _ = usable_traces(evidence)
    if traces is None:
        return {}
    table, joined = traces.table, traces.joined
    llm = table.name_code(LLM_REQUEST)
    if llm is None:
        return {}
    parents = table.parent_row
    out: dict[str, tuple[str, ...]] = {}
    for record in joined.joined:
        rows = joined.rows_by_trace.get(record.trace_id.lower())
        if rows is None:
            continue
        llm_rows = rows[table.name[rows] == llm]
        if not len(llm_rows):
            continue
        out[record.request_id] = (CLIENT_HOP, *_chain(table, parents, int(llm_rows[-1])))
    return out


def _chain(table: Any, parents: np.ndarray, row: int) -> tuple[str, ...]:
    services: list[str] = []
    seen = set()
    while row >= 0 and row not in seen:  # a cycle of parents ends the walk
        seen.add(row)
        name = _INDEX.sub("", table.services[int(table.service[row])])
        if not services or services[-1] != name:
            services.append(name)
        row = int(parents[row])
    return tuple(reversed(services))


def _rounded(values: dict[str, float] | None) -> dict[str, float] | None:
    return None if values is None else {k: round(v, 3) for k, v in values.items()}


def measurement_truth_figures(
    evidence: RunEvidence, window: tuple[float, float] | None = None
) -> tuple[dict, list[str], list[EvidenceRef]]:
    """Client-vs-server TTFT/E2E difference percentiles for verdicts: from the server spans, else from the
    server's own per-request timings (llama.cpp); empty with neither. Over the requests whose intended start falls
    in ``window`` (UNIX s; the verdict's own window), else over the whole run.

    Returns (observed figures ``measurement_truth.ttft_diff_ms.p50``..., notes, evidence refs).
    """
    truth, failed = measured_truth(evidence)
    if failed:
        return {}, [failed], []
    if truth is not None and window is not None:
        truth = truth.only({r.request_id for r in records_in(evidence, window)})
    if truth is None or not truth.joined:
        return {}, [], []
    observed: dict[str, float] = {"measurement_truth.joined": truth.joined}
    for name in ("ttft_diff_ms", "e2e_diff_ms"):
        for pct, value in (getattr(truth, name) or {}).items():
            observed[f"measurement_truth.{name}.{pct}"] = round(value, 3)
    ttft = truth.ttft_diff_ms or {}
    against = "joined to server spans" if truth.source == "spans" else "with the server's own timings"
    over = "in this verdict's window" if window is not None else "over the whole run"
    note = f"measurement truth ({over}): {truth.joined} request(s) {against}; client - server TTFT " + (
        ", ".join(f"{k} {v:.1f}ms" for k, v in ttft.items()) or "not measured"
    )
    refs = [EvidenceRef(EvidenceKind.MEASUREMENT, f"{k}={v:.3f}ms", "client - server TTFT") for k, v in ttft.items()]
    return observed, [note], refs


def measurement_truth_units(figures: dict) -> dict[str, str]:
    """Units of :func:`measurement_truth_figures`' figures."""
    return {k: ("requests" if k.endswith(".joined") else "ms") for k in figures}
