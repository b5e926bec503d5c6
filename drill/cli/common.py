"""Shared CLI plumbing: one error handler mapping the exception tree to exit codes, and the console."""

from __future__ import annotations

import sys
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import click
from rich.console import Console

from drill.errors import DrillError, SpecError

__all__ = ["console", "err_console", "handle_errors", "parse_duration_option", "print_verdicts"]

console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


@contextmanager
def handle_errors() -> Iterator[None]:
    """Exit codes by class: 2 bad input, 3 internal, 4 revert failed, 130 interrupted (pre-commit's error_handler)."""
    try:
        yield
    except SpecError as exc:
        click.echo(exc.render(), err=True)
        sys.exit(exc.exit_code)
    except DrillError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", markup=True, highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted (^C)")
        sys.exit(130)
    except (click.exceptions.Exit, click.ClickException, SystemExit):
        raise
    except Exception as exc:  # noqa: BLE001 - last resort: keep a report a maintainer can use
        log = Path("drill-crash.log")
        log.write_text("".join(traceback.format_exception(exc)))
        err_console.print(f"[bold red]internal error:[/] {type(exc).__name__}: {exc} (traceback in {log})")
        sys.exit(3)


def parse_duration_option(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    from drill.units import parse_duration

    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def print_verdicts(verdicts) -> None:
    """One line per verdict, as ``drill run`` and ``drill judge`` print them."""
    for v in verdicts:
        colour = {"PASS": "green", "FAIL": "red"}.get(v.status.value, "yellow")
        console.print(f"[{colour}]{v.status.value:<12}[/] {v.name}: {v.message}")
