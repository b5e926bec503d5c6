"""``drill run DRILL``: run a drill end to end and judge it. Exit codes in :mod:`drill.cli.common`."""

from __future__ import annotations

import importlib.util
import sys
from typing import TYPE_CHECKING

import click

from drill.cli.common import (
    allow_host_option,
    console,
    err_console,
    handle_errors,
    out_option,
    print_verdicts,
    say,
    time_scale_option,
)
from drill.errors import NotAvailableError
from drill.runner.safety import check_hosts
from drill.spec.loader import load_drill

if TYPE_CHECKING:
    from drill.cli.progress import PhaseProgress
    from drill.runner.listeners import RunListener
    from drill.runner.run import RunOptions, RunResult
    from drill.spec.loader import LoadedDrill
    from drill.sweeps.sweeper import SweepRunResult


def preflight() -> None:
    """Refuse, before touching anything, when a part the run needs is not built."""
    if importlib.util.find_spec("drill.load.driver") is None:
        raise NotAvailableError("the load driver (drill/load/driver.py, issue 4) is not built yet; nothing was started")


@click.command("run")
@click.argument("drill_file")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override any field by its key path.")
@time_scale_option()
@out_option()
@allow_host_option()
@click.option(
    "--workers", type=int, default=0, show_default=True, help="Locust worker processes (0: one local runner)."
)
@click.option("--progress/--no-progress", default=None, help="Live status line (default: on a terminal).")
def run(
    drill_file: str,
    overrides: tuple[str, ...],
    time_scale: float,
    out_dir: str,
    allow_hosts: tuple[str, ...],
    workers: int,
    progress: bool | None,
) -> None:
    """Run a drill: start the target, drive load, inject faults, revert them, judge the evidence."""
    from pathlib import Path

    from drill.runner.run import Runner, RunOptions

    with handle_errors() as crash:
        if time_scale <= 0:
            raise click.BadParameter("must be positive", param_hint="--time-scale")
        loaded = load_drill(drill_file, overrides=overrides, time_scale=time_scale)
        check_hosts(loaded, allow_hosts)
        preflight()
        show = sys.stderr.isatty() if progress is None else progress
        options = RunOptions(out_dir=Path(out_dir), workers=workers, progress=show, argv=tuple(sys.argv))
        listeners: list[RunListener] = [_progress_listener()] if show else []
        result: RunResult | SweepRunResult
        if loaded.drill.sweep is not None:
            result = _run_sweep(loaded, allow_hosts, options, listeners)
        else:
            runner = Runner(loaded, options, listeners)
            crash.run_dir = lambda: getattr(getattr(runner, "rundir", None), "path", None)  # once the run has one
            result = runner.run()
    _report(result)
    sys.exit(result.exit_code)


def _run_sweep(
    loaded: LoadedDrill, allow_hosts: tuple[str, ...], options: RunOptions, listeners: list[RunListener]
) -> SweepRunResult:
    """A drill with a ``sweep``: every variant resolved and its hosts checked before the first one starts."""
    from drill.sweeps.resolve import resolve_sweep
    from drill.sweeps.sweeper import run_sweep

    plan = resolve_sweep(loaded)
    for variant in plan.variants:
        check_hosts(variant.loaded, allow_hosts)
    result = run_sweep(plan, options, listeners)
    for outcome in result.outcomes:
        run = outcome.result
        where = f"exit {run.exit_code}, run directory {run.run_dir}" if run is not None else "not run"
        console.print(f"variant {outcome.variant.label} (--set {outcome.variant.assignment}): {where}")
    return result


def _progress_listener() -> PhaseProgress:
    from drill.cli.progress import PhaseProgress

    return PhaseProgress(err_console)


def _report(result: RunResult | SweepRunResult) -> None:
    """What went wrong first; the verdicts, the run directory and the report's paths are the last lines."""
    if result.message:
        err_console.print(result.message)
    if result.revert_failures:
        say(("REVERT FAILED — the target may still be faulted:", "bold red"), err=True)
        for line in result.revert_failures:
            err_console.print(f"  {line}")
        err_console.print(
            "  run `drill cleanup` to retry the reverts from the journal; "
            "if it fails again, undo them by hand as the journal's revert records describe."
        )
    if result.stopped_by:
        console.print(f"the fault phase ended early: stop condition '{result.stopped_by}' fired")
    print_verdicts(result.verdicts)
    if result.run_dir:
        console.print(f"run directory: {result.run_dir}")
    for path in result.reports:
        console.print(f"report: {path}")
