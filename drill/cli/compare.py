"""``drill compare DRILL --set KEY=VALUE`` (or ``--baseline A.yaml --candidate B.yaml``): one change, two runs.

The baseline is the drill as written (or ``--baseline``), the candidate the same drill with the ``--set``
change (or ``--candidate``, with any ``--set`` on top); ``--set-both`` applies to both sides (a shortened
timeline, say) and is no change. The two resolved drills must differ in exactly one variable, or nothing is
started (exit 2). Exit codes: :mod:`drill.compare.comparison`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from drill.cli.common import allow_host_option, console, err_console, handle_errors, out_option, time_scale_option

if TYPE_CHECKING:
    from drill.cli.progress import PhaseProgress
    from drill.compare.comparison import ComparisonResult
    from drill.compare.decision import ComparisonOutcome

#: The phases whose headline figures the command prints (comparison.md has every loaded phase).
PRINTED_PHASES = ("baseline", "fault")


@click.command("compare")
@click.argument("drill_file", required=False)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="The candidate's one change, by key path (e.g. target.config.engine.max_num_queued_reqs=128).",
)
@click.option(
    "--set-both", "shared", multiple=True, metavar="KEY=VALUE", help="Override a field on both sides (not a change)."
)
@click.option("--baseline", "baseline_file", metavar="DRILL", help="The baseline drill file (with --candidate).")
@click.option("--candidate", "candidate_file", metavar="DRILL", help="The candidate drill file (with --baseline).")
@time_scale_option("Multiply both sides' timeline durations (0.1 = ten times shorter, for smoke runs).")
@out_option("Reports folder: the comparison goes to OUT/comparisons/<drill>/<timestamp>/.")
@allow_host_option()
@click.option(
    "--workers", type=int, default=0, show_default=True, help="Locust worker processes (0: one local runner)."
)
@click.option("--progress/--no-progress", default=None, help="Live status line (default: on a terminal).")
def compare(
    drill_file: str | None,
    overrides: tuple[str, ...],
    shared: tuple[str, ...],
    baseline_file: str | None,
    candidate_file: str | None,
    time_scale: float,
    out_dir: str,
    allow_hosts: tuple[str, ...],
    workers: int,
    progress: bool | None,
) -> None:
    """Run a baseline and a candidate that differ in exactly one variable, on the same request set; compare.

    \b
    Exit codes: 0 the candidate passed every check and met every acceptance item the drill sets;
    1 it did not; 2 bad input, or not exactly one variable changed (nothing started);
    3 a run could not run; 4 a revert failed (run `drill cleanup`); 130 interrupted.
    """
    from drill.cli.run import preflight
    from drill.compare.comparison import plan_comparison, run_comparison
    from drill.runner.run import RunOptions
    from drill.runner.safety import check_hosts
    from drill.spec.loader import load_drill

    files = _files(drill_file, baseline_file, candidate_file, overrides)
    with handle_errors():
        baseline = load_drill(files[0], overrides=shared, time_scale=time_scale)
        candidate = load_drill(files[1], overrides=(*shared, *overrides), time_scale=time_scale)
        plan = plan_comparison(baseline, candidate)
        for loaded in (baseline, candidate):
            check_hosts(loaded, allow_hosts)
        preflight()
        console.print(f"one change: {plan.change.describe()}", markup=False)
        for label in plan.labels:
            console.print(f"  a label differs (not a variable): {label.describe()}", markup=False)
        show = sys.stderr.isatty() if progress is None else progress
        options = RunOptions(workers=workers, progress=show, argv=tuple(sys.argv))
        result = run_comparison(
            plan,
            Path(out_dir),
            options,
            listeners=lambda _label: [_progress_listener()] if show else [],
            say=lambda line: console.print(line, markup=False),
        )
    _report(result)
    sys.exit(result.exit_code)


def _files(
    drill_file: str | None, baseline: str | None, candidate: str | None, overrides: tuple[str, ...]
) -> tuple[str, str]:
    """(baseline file, candidate file): DRILL twice, or --baseline and --candidate; anything else is a usage error."""
    if drill_file is not None:
        if baseline is not None or candidate is not None:
            raise click.UsageError("give either DRILL (with --set) or --baseline and --candidate, not both")
        if not overrides:
            raise click.UsageError("DRILL needs the candidate's change: --set KEY=VALUE")
        return drill_file, drill_file
    if baseline is None or candidate is None:
        raise click.UsageError("give DRILL with --set KEY=VALUE, or both --baseline and --candidate")
    return baseline, candidate


def _progress_listener() -> PhaseProgress:
    from drill.cli.progress import PhaseProgress

    return PhaseProgress(err_console)


def _report(result: ComparisonResult) -> None:
    """Verdicts side by side, the headline figures, acceptance, the request set, then the documents' paths."""
    for side in result.sides:
        if side.result.message:
            err_console.print(f"{side.label}: {side.result.message}", markup=False)
        for line in side.result.revert_failures:
            err_console.print(f"{side.label}: REVERT FAILED — {line} (run `drill cleanup`)", markup=False)
    if result.message:
        err_console.print(result.message, markup=False)
    outcome = result.outcome
    if outcome is not None:
        _print_outcome(outcome)
    console.print(f"comparison folder: {result.folder}", markup=False)
    for path in result.files:
        console.print(f"wrote {path}", markup=False)


def _print_outcome(outcome: ComparisonOutcome) -> None:
    from drill.report.formatting import format_value

    console.print("verdicts (baseline -> candidate):")
    width = max(len(v.name) for v in outcome.verdicts)
    for v in outcome.verdicts:
        mark = "  changed" if v.changed else ""
        console.print(f"  {v.name:<{width}}  {v.baseline:<12} -> {v.candidate:<12}{mark}".rstrip(), markup=False)
    for phase in PRINTED_PHASES:
        rows = [r for r in outcome.headline.rows if r.phase == phase]
        if not rows:
            continue
        console.print(f"{phase} phase (baseline -> candidate, delta):")
        for r in rows:
            delta = format_value(r.delta, r.unit)
            sign = "+" if isinstance(r.delta, (int, float)) and r.delta > 0 else ""
            console.print(
                f"  {r.figure:<16} {format_value(r.baseline, r.unit):>10} -> {format_value(r.candidate, r.unit):>10}"
                f"  ({sign}{delta})",
                markup=False,
            )
    if outcome.headline.cost_note:
        console.print(outcome.headline.cost_note, markup=False)
    console.print("acceptance (decision.acceptance):")
    for item in outcome.acceptance:
        console.print(f"  {item.name:<24} {item.met.value:<14} {item.observed}", markup=False)
    console.print(outcome.requests.describe(), markup=False)
    verdict = "ACCEPTED" if outcome.exit_code == 0 else "NOT ACCEPTED"
    console.print(f"candidate {verdict}: {outcome.record.observed}", markup=False)
