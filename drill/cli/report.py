"""``drill report RUN_DIR [--format md|html|json]``: render a run's report again from its directory."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from drill.cli.common import console, err_console, handle_errors, interrupts_kept
from drill.cli.terminal import literal, literal_json

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

__all__ = ["report"]


@click.command("report")
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["md", "html", "json"]),
    default=None,
    help="Print the report in this format instead of writing report.md and report.html.",
)
@click.option("--progress/--no-progress", default=None, help="Show progress on stderr (default: on a terminal).")
def report(run_dir: Path, fmt: str | None, progress: bool | None) -> None:
    """Render the report of a finished run from RUN_DIR alone (re-renderable any time).

    Without --format, writes report.md and report.html into RUN_DIR (replacing earlier renders) and prints their
    paths; with it, prints the report to stdout and writes nothing. Exit 2 when RUN_DIR is not a run directory.
    """
    with handle_errors(), interrupts_kept():  # a Ctrl-C is exit 130, whatever it interrupts
        _report(run_dir, fmt, progress)


def _report(run_dir: Path, fmt: str | None, progress: bool | None) -> None:
    from drill.errors import InputError
    from drill.report.render import render_html, render_json, render_markdown, report_for, write_reports
    from drill.rundir.files import check_run_dir

    check_run_dir(run_dir)  # a received run directory: no link or special file in it is read
    _private_matplotlib_cache()
    if (run_dir / "capacity.json").is_file():  # a `drill capacity` run: its own report
        from drill.capacity.reporting import render_capacity

        _write(render_capacity(run_dir, fmt), fmt)
        return
    if (run_dir / "sweep.json").is_file():  # a sweep (a drill with `sweep:`): the scaling report
        _sweep_report(run_dir, fmt)
        return
    if not (run_dir / "resolved.json").is_file():
        raise InputError(
            f"{run_dir}: not a run directory (it has no resolved.json)",
            hint="pass a directory that `drill run` created, such as reports/<drill>/<run id>",
        )
    show = sys.stderr.isatty() if progress is None else progress
    with _ReportProgress(show) as step:
        if fmt is None:
            paths = _writing(run_dir, lambda: write_reports(run_dir, progress=step))
        else:
            model = report_for(run_dir, progress=step)
            text = {"md": render_markdown, "html": render_html, "json": render_json}[fmt](model)
    if fmt is None:
        for path in paths:
            console.print(f"report: {path}")
    else:
        _write(text, fmt)


def _private_matplotlib_cache() -> None:
    """Give matplotlib a temporary config and cache directory for this process, removed at exit, unless
    ``MPLCONFIGDIR`` is set: by default it writes its font cache under ``~/.cache/matplotlib``, and a report of a
    run directory creates no file but its report files (rebuilding the font list costs about 0.4 s)."""
    if os.environ.get("MPLCONFIGDIR") or "matplotlib" in sys.modules:
        return
    folder = tempfile.mkdtemp(prefix="drill-matplotlib-")
    os.environ["MPLCONFIGDIR"] = folder
    atexit.register(shutil.rmtree, folder, True)


def _sweep_report(run_dir: Path, fmt: str | None) -> None:
    """Write scaling.md and scaling.html again (and print their paths), or print one format of it."""
    import json

    from drill.sweeps.scaling import measure_sweep
    from drill.sweeps.scaling_report import write_scaling_reports

    if fmt == "json":  # the figures measured again from the run directory, as scaling.json holds them
        _write(json.dumps(measure_sweep(run_dir).to_json(), indent=2) + "\n", fmt)
        return
    paths = _writing(run_dir, lambda: write_scaling_reports(run_dir))
    if fmt is None:
        for path in paths:
            console.print(f"report: {path}")
    else:
        from drill.rundir.files import read_bytes

        _write(read_bytes(paths[0 if fmt == "md" else 1], root=run_dir).decode("utf-8"), fmt)


def _writing(run_dir: Path, write: Callable[[], list[Path]]) -> list[Path]:
    """``write()``'s paths; a run directory that cannot be written (read-only, full, a directory where a report
    file goes) is exit 2 with the reason, not an internal error."""
    from drill.errors import InputError

    try:
        return write()
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        raise InputError(
            f"{run_dir}: cannot write the report: {exc.strerror or exc}{where}",
            hint="render it elsewhere with `drill report RUN_DIR --format md|html > FILE`, or make RUN_DIR writable",
        ) from None


def _write(text: str, fmt: str | None) -> None:
    """A report printed to stdout: no control character reaches the terminal raw (JSON keeps parsing)."""
    sys.stdout.write(literal_json(text) if fmt == "json" else literal(text))


class _ReportProgress:
    """A rich progress bar on stderr over the report's sections (nothing when ``show`` is false)."""

    def __init__(self, show: bool) -> None:
        self.show = show
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._done = 0

    def __enter__(self) -> Callable[[str], None]:
        if not self.show:
            return lambda _name: None
        from rich.progress import Progress

        from drill.report.build import SECTIONS

        self._bar = Progress(console=err_console, transient=True)
        self._bar.start()
        self._task = self._bar.add_task("report", total=len(SECTIONS))
        return self._step

    def _step(self, name: str) -> None:
        """``name`` is starting: the sections before it are done."""
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=self._done, description=f"report: {name}")
            self._done += 1

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
