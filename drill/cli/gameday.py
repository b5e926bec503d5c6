"""``drill gameday GAMEDAY.yaml``: run a game day's drills in order, then write its index and trend pages.

Exit codes: 0 every drill passed, 1 a drill had a FAIL or INCONCLUSIVE verdict, 2 bad input (nothing was started),
3 a drill could not run, 4 a revert failed (the game day stopped at once; run ``drill cleanup``), 130 interrupted.
``drill gameday FOLDER`` on a finished game day's folder re-renders its pages (after ``drill report``, say).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from drill.cli.common import allow_host_option, console, err_console, handle_errors, out_option, say, time_scale_option

if TYPE_CHECKING:
    from drill.gameday.definition import LoadedGameDay
    from drill.gameday.record import GameDayRecord


@click.command("gameday")
@click.argument("gameday_file")
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a field of the game-day file by its key path (e.g. cooldown=5s, drills[0].time_scale=0.5).",
)
@time_scale_option("Multiply every drill's timeline and the cooldown (0.1 = ten times shorter, for smoke runs).")
@out_option("Reports folder: the game day goes to OUT/gamedays/<name>/<timestamp>/.")
@allow_host_option()
@click.option("--dry-run", is_flag=True, help="Validate the game day and every drill in it, list them, start nothing.")
def gameday(
    gameday_file: str,
    overrides: tuple[str, ...],
    time_scale: float,
    out_dir: str,
    allow_hosts: tuple[str, ...],
    dry_run: bool,
) -> None:
    """Run a game day: its drills in order with a cooldown, stopping on a failed revert; index and trend pages."""
    with handle_errors():
        if (Path(gameday_file) / "gameday.json").is_file():
            _render(Path(gameday_file))
            sys.exit(0)
        from drill.gameday.conductor import GameDayOptions, GameDayRunner
        from drill.gameday.definition import load_gameday

        loaded = load_gameday(gameday_file, overrides=overrides, time_scale=time_scale, allow_hosts=allow_hosts)
        if dry_run:
            _list(loaded)
            sys.exit(0)
        runner = GameDayRunner(
            loaded,
            GameDayOptions(out_dir=Path(out_dir), allow_hosts=allow_hosts),
            say=lambda line: console.print(line, markup=False, highlight=False),
        )
        record = runner.run()
    _report(runner.folder, record)
    sys.exit(record.exit_code if record.exit_code is not None else 3)


def _list(loaded: LoadedGameDay) -> None:
    day = loaded.gameday
    console.print(
        f"{loaded.path}: ok — game day {day.name}, {len(loaded.drills)} drill(s), "
        f"cooldown {loaded.cooldown_s:g}s, on_first_fail {str(day.abort.on_first_fail).lower()}",
        markup=False,
    )
    for planned in loaded.drills:
        sets = " ".join(f"--set {s}" for s in planned.overrides)
        console.print(
            f"  {planned.number}. {planned.label}: {planned.path} --time-scale {planned.time_scale:g} {sets}".rstrip(),
            markup=False,
        )


def _render(folder: Path) -> None:
    from drill.gameday.pages import write_pages
    from drill.gameday.record import GameDayRecord
    from drill.rundir.files import read_json

    record = GameDayRecord.from_json(read_json(folder / "gameday.json", root=folder))
    for path in write_pages(folder, record):
        console.print(f"wrote {path}", markup=False)


def _report(folder: Path | None, record: GameDayRecord) -> None:
    width = max((len(d.label) for d in record.drills), default=0)
    for d in record.drills:
        colour = {"PASS": "green", "FAIL": "red", "REVERT FAILED": "bold red", "ERROR": "red"}.get(
            d.result.value, "yellow"
        )
        say((f"{d.result.value:<13}", colour), f" {d.label:<{width}}  exit {d.exit_code}")
    if record.stopped_by:
        err_console.print(f"game day stopped early: {record.stopped_by}", markup=False)
    if folder is not None:
        console.print(f"index: {folder / 'index.md'} ({folder / 'index.html'})", markup=False)
        console.print(f"trend: {folder / 'trend.md'} ({folder / 'trend.html'})", markup=False)
