"""Revert what a dead run left in place, from its journal alone.

Used by the watchdog (when its runner dies or hangs) and by ``drill cleanup``
(for every run whose runner is gone). Faults are reverted most recent first,
then targets the run started are torn down. Every outcome is appended to the
run's journal, so a second cleanup finds nothing to do.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from drill import registry
from drill.rundir.files import UnsafeFileError
from drill.rundir.journal import Event, Journal, read_journal
from drill.runner import active
from drill.runner.reverts import RevertRecord, pending_reverts, pending_teardowns, revert_from_record, run_bounded

__all__ = ["CleanupReport", "clean_run", "dead_runs", "teardown_target"]

log = logging.getLogger(__name__)


@dataclass
class CleanupReport:
    run_dir: Path
    reverted: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    torn_down: list[str] = field(default_factory=list)

    @property
    def nothing_to_do(self) -> bool:
        return not (self.reverted or self.failed or self.torn_down)


def clean_run(run_dir: Path, *, by: str, only: set[str] | None = None, teardown: bool = True) -> CleanupReport:
    """Revert the run's pending faults (all, or those in ``only``) and tear down its targets."""
    path = run_dir / "journal.jsonl"
    entries = list(read_journal(path))
    report = CleanupReport(run_dir)
    records = [r for r in pending_reverts(entries) if only is None or r.fault_id in only]
    teardowns = pending_teardowns(entries) if teardown else []
    if not records and not teardowns:
        return report
    journal = Journal(path, by=by)
    try:
        for record in reversed(records):
            _revert_one(record, journal, report, by)
        for data in teardowns:
            _teardown_one(data, journal, report, by)
    finally:
        journal.close()
    return report


def _revert_one(record: RevertRecord, journal: Journal, report: CleanupReport, by: str) -> None:
    try:
        run_bounded(lambda: revert_from_record(record), record.timeout_s * 3, f"revert of {record.fault_id}")
    except BaseException as exc:  # noqa: BLE001 - recorded; the next fault is still reverted
        error = f"{type(exc).__name__}: {exc}"
        journal.write(Event.REVERT_FAILED, fault_id=record.fault_id, kind=record.kind, reason=by, error=error)
        report.failed.append((record.fault_id, error))
        return
    journal.write(Event.FAULT_REVERTED, fault_id=record.fault_id, kind=record.kind, reason=by)
    report.reverted.append(record.fault_id)


def _teardown_one(data: dict, journal: Journal, report: CleanupReport, by: str) -> None:
    target_id = data.get("target_id", "?")
    try:
        teardown_target(data)
    except BaseException as exc:  # noqa: BLE001
        error = f"{type(exc).__name__}: {exc}"
        journal.write(Event.NOTE, message=f"teardown of target {target_id} failed: {error}")
        report.failed.append((f"target {target_id}", error))
        return
    journal.write(Event.TARGET_STOPPED, target_id=target_id, reason=by)
    report.torn_down.append(target_id)


def teardown_target(data: dict) -> None:
    """Stop a target a dead run started, through its plugin's ``teardown`` classmethod."""
    target_cls = registry.targets.get(data["target_kind"])
    run_bounded(lambda: target_cls.teardown(data["teardown"]), 60.0, f"teardown of {data.get('target_id')}")


def dead_runs(reports_dir: Path | None = None) -> list[Path]:
    """Run directories whose runner is gone and whose journal has something pending.

    Looks at the registry of active runs and, when given, every journal under ``reports_dir``.
    """
    candidates: dict[Path, bool] = {}
    for run in active.list_active():
        candidates[run.run_dir] = run.alive
    if reports_dir is not None and reports_dir.is_dir():
        for journal in reports_dir.glob("**/journal.jsonl"):
            try:
                candidates.setdefault(journal.parent.resolve(), _runner_alive(journal))
            except UnsafeFileError as exc:  # one damaged run directory must not stop the cleanup of the others
                log.warning("skipping %s: %s", journal.parent, exc.reason)
    return [d for d, alive in sorted(candidates.items()) if not alive and _pending_or_skipped(d)]


def _pending_or_skipped(run_dir: Path) -> bool:
    try:
        return _has_pending(run_dir)
    except UnsafeFileError as exc:
        log.warning("skipping %s: %s", run_dir, exc.reason)
        return False


def _runner_alive(journal: Path) -> bool:
    for entry in read_journal(journal):
        if entry.event == Event.RUN_STARTED.value:
            return active.process_alive(int(entry.get("pid", 0)), entry.get("pid_start"))
    return False


def _has_pending(run_dir: Path) -> bool:
    entries = list(read_journal(run_dir / "journal.jsonl"))
    return bool(pending_reverts(entries) or pending_teardowns(entries))
