"""``drill cleanup``: revert whatever the journals of dead runs left in place."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from drill.cli.common import console, handle_errors, say
from drill.runner import active
from drill.runner.cleanup import clean_run, dead_runs


@click.command("cleanup")
@click.option(
    "--run-dir",
    "run_dirs",
    multiple=True,
    type=click.Path(file_okay=False, exists=True),
    help="Clean this run directory (repeatable); default: every dead run found.",
)
@click.option(
    "--reports",
    "reports_dir",
    type=click.Path(file_okay=False),
    default="reports",
    show_default=True,
    help="Also look for dead runs' journals under this directory.",
)
@click.option("--dry-run", is_flag=True, help="Only list what would be reverted.")
def cleanup(run_dirs: tuple[str, ...], reports_dir: str, dry_run: bool) -> None:
    """Find runs whose runner is gone and revert their faults and targets from the journal."""
    with handle_errors():
        dirs = [Path(d).resolve() for d in run_dirs] or dead_runs(Path(reports_dir))
        if not dirs:
            console.print("nothing to clean up")
            sys.exit(0)
        failed = sum(_clean(d, dry_run) for d in dirs)
    sys.exit(4 if failed else 0)


def _teardown_lines(data: dict) -> list[str]:
    """What tearing the target down would remove (its plugin's ``describe_teardown``), or why that is unknown."""
    from drill import registry

    try:
        lines = registry.targets.get(data["target_kind"]).describe_teardown(data["teardown"])
    except Exception as exc:  # noqa: BLE001 - a dry run lists what it can, and says what it cannot
        return [f"cannot say what: its journaled teardown data does not read ({type(exc).__name__}: {exc})"]
    return [f"would {line}" for line in lines]


def _clean(run_dir: Path, dry_run: bool) -> int:
    from drill.rundir.journal import read_journal
    from drill.rundir.jsonl import ReadReport
    from drill.runner.reverts import pending_reverts, pending_teardowns

    read = ReadReport(run_dir / "journal.jsonl", root=run_dir)
    entries = list(read_journal(read.path, read))
    if not read.clean or read.torn_last_line is not None or read.nul_bytes:
        console.print(f"{run_dir}: skipped in the journal: {read.describe()}", highlight=False, markup=False)
    if dry_run:
        for record in pending_reverts(entries):
            console.print(f"{run_dir}: would revert {record.fault_id} ({record.kind})")
        for data in pending_teardowns(entries):
            console.print(f"{run_dir}: would tear down target {data.get('target_id')} ({data.get('target_kind')})")
            for line in _teardown_lines(data):
                console.print(f"{run_dir}:   {line}", highlight=False, markup=False)
        return 0
    report = clean_run(run_dir, by="cleanup")
    for fid in report.reverted:
        console.print(f"{run_dir}: reverted {fid}")
    for target in report.torn_down:
        console.print(f"{run_dir}: tore down target {target}")
    for what, error in report.failed:
        say((f"{run_dir}: FAILED to revert {what}: {error}", "red"))
    if report.nothing_to_do:
        console.print(f"{run_dir}: nothing to do")
    if not report.failed:
        active.unregister(run_dir.name)
    return len(report.failed)
