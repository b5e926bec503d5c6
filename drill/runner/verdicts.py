"""Evaluate a run's checks and write ``verdicts.json``, ``junit.xml`` and ``summary.md``.

Every check listed in the drill runs, plus ``fault_landed`` whenever the drill
has faults and does not list it: a fault that did not land must never let a
drill pass. A check that raises becomes an ERROR verdict; the others still run.
A check that read a file with unreadable lines (other than a torn last line,
which a crash leaves and which is only noted) is INCONCLUSIVE, with the file
and line in its message: evidence that could not be read must not pass.

``verdicts.json``::

    {"schema": "llm-drill/verdicts/v1", "run_id": ..., "drill": ..., "status": ..., "stopped_by": ...,
     "reads": {"requests.jsonl": {"lines_read": .., "bad_count": .., ...}, ...},
     "checks": [{"name", "kind", "status", "message", "observed", "expected", "units", "evidence": [...],
                 "window", "notes"}],
     "measurement_truth": {"source", "server_figures", "note",
                           "phases": [{"phase", "requests", "joined", "ttft_diff_ms": {"p50", "p95", "p99"},
                                       "e2e_diff_ms": {...}, "hops": [...], "spans": "load client → ...", ...}]}}

``measurement_truth`` (:mod:`drill.checks.truth`) is client minus server TTFT and E2E per phase and the hops it
spans; it is written when the run's evidence is at hand (not for a sweep's roll-up).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from pydantic import BaseModel

from drill import registry
from drill.api import Check, Status, Verdict
from drill.checks.truth import measurement_truth_by_phase
from drill.report.junit import write_junit
from drill.rundir.directory import RunDir
from drill.rundir.evidence import RunEvidence
from drill.rundir.journal import RunStatus
from drill.rundir.jsonl import ReadReport
from drill.rundir.redact import Redactor
from drill.spec.loader import LoadedDrill

__all__ = [
    "VERDICTS_SCHEMA",
    "PlannedCheck",
    "evaluate_checks",
    "judge_one",
    "plan_checks",
    "verdicts_document",
    "write_verdicts",
]

VERDICTS_SCHEMA = "llm-drill/verdicts/v1"


class FinishedRun(Protocol):
    """What the verdict files need of a finished run: the runner's ``RunResult``."""

    status: RunStatus
    stopped_by: str | None
    verdicts: list[Verdict]


@dataclass(frozen=True)
class PlannedCheck:
    kind: str
    name: str
    params: BaseModel


def plan_checks(
    kinds_and_names: list[tuple[str, str | None]], params: list[BaseModel], has_faults: bool
) -> list[PlannedCheck]:
    """The drill's checks in order, with ``fault_landed`` first when the drill has faults and lacks it."""
    planned = [PlannedCheck(kind, name or kind, p) for (kind, name), p in zip(kinds_and_names, params)]
    if has_faults and not any(c.kind == "fault_landed" for c in planned):
        planned.insert(0, PlannedCheck("fault_landed", "fault_landed", registry.checks.get("fault_landed").Params()))
    return planned


def evaluate_checks(loaded: LoadedDrill, evidence: RunEvidence) -> list[Verdict]:
    planned = plan_checks(
        [(c.kind, c.name) for c in loaded.drill.checks], list(loaded.check_params), bool(loaded.drill.faults)
    )
    return [judge_one(c.kind, c.name, c.params, evidence) for c in planned]


def judge_one(kind: str, name: str, params: BaseModel, evidence: RunEvidence) -> Verdict:
    """One check's verdict; never raises."""
    try:
        check: Check = registry.checks.get(kind)(params, name)
        verdict = check.evaluate(evidence)
    except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
        return Verdict(kind, name, Status.ERROR, f"check raised {type(exc).__name__}: {exc}")
    return _account_for_reads(verdict, check.reads, evidence)


def _account_for_reads(verdict: Verdict, reads: tuple[str, ...], evidence: RunEvidence) -> Verdict:
    """INCONCLUSIVE when a file the check depends on is missing or had unreadable lines (a PASS or FAIL on part of
    the evidence, or on none, is not a verdict); a torn last line is a note."""
    reports = [evidence.reports[name] for name in reads if name in evidence.reports]
    missing = [m for name in reads if name in evidence.reports and (m := _missing(name, evidence.reports[name]))]
    notes = missing + [r.describe() for r in reports if not r.clean or r.torn_last_line is not None]
    if not notes:
        return verdict
    damaged = missing + [r.describe() for r in reports if not r.clean]
    if damaged and verdict.status in (Status.PASS, Status.FAIL):
        was = verdict.status.value
        read = f"on what could be read: {was}: {verdict.message}"
        message = f"evidence could not be read in full — {'; '.join(damaged)}; {read}"
        return replace(verdict, status=Status.INCONCLUSIVE, message=message, notes=verdict.notes + tuple(notes))
    return replace(verdict, notes=verdict.notes + tuple(notes))


def _missing(name: str, report: ReadReport) -> str | None:
    """Why a file a check read is no evidence at all: absent, or the journal with no event in it (every run
    journals its start), else None."""
    if not report.exists:
        return f"{name} is missing"
    if name == "journal.jsonl" and report.lines_read == 0:
        return f"{name} holds no event"
    return None


def verdicts_document(
    run_id: str,
    drill_name: str,
    status: str,
    stopped_by: str | None,
    verdicts: list[Verdict],
    evidence: RunEvidence | None,
) -> dict:
    reads = {name: r.to_json() for name, r in sorted(evidence.reports.items())} if evidence is not None else {}
    document = {
        "schema": VERDICTS_SCHEMA,
        "run_id": run_id,
        "drill": drill_name,
        "status": status,
        "stopped_by": stopped_by,
        "reads": reads,
        "checks": [v.to_json() for v in verdicts],
    }
    if evidence is not None:
        document["measurement_truth"] = _measurement_truth(evidence)
    return document


def _measurement_truth(evidence: RunEvidence) -> dict:
    """The run's measurement truth per phase; a failure to compute it is its note, never a lost verdicts.json."""
    try:
        return measurement_truth_by_phase(evidence).to_json()
    except Exception as exc:  # noqa: BLE001 - an extra section: its failure must not cost the verdicts
        note = f"not computed: {type(exc).__name__}: {exc}"
        return {"source": "none", "server_figures": "", "phases": [], "note": note}


def write_verdicts(
    rundir: RunDir, loaded: LoadedDrill, result: FinishedRun, evidence: RunEvidence | None = None
) -> None:
    rundir.write_json(
        "verdicts.json",
        verdicts_document(
            rundir.run_id, loaded.drill.name, result.status, result.stopped_by, result.verdicts, evidence
        ),
    )
    write_junit(rundir.file("junit.xml"), rundir.run_id, loaded.drill.name, result.verdicts)  # for CI systems
    rundir.write_text("summary.md", Redactor().value(render_summary(rundir, loaded, result)))


def render_summary(rundir: RunDir, loaded: LoadedDrill, result: FinishedRun) -> str:
    drill = loaded.drill
    lines = [f"# Drill `{drill.name}` — run {rundir.run_id}", ""]
    if drill.title:
        lines += [drill.title, ""]
    if result.stopped_by:
        lines += [f"**The fault phase ended early: stop condition `{result.stopped_by}` fired.**", ""]
    lines += ["| check | status | message |", "|---|---|---|"]
    for v in result.verdicts:
        lines.append(f"| {v.name} | {v.status.value} | {v.message.replace('|', '/')} |")
    lines += [
        "",
        "Raw evidence in this directory: `journal.jsonl`, `requests.jsonl`, `spans.jsonl`, "
        "`metrics.jsonl`, `failing_samples.jsonl`, `replay.jsonl`.",
        "",
    ]
    return "\n".join(lines)
