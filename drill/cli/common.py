"""Shared CLI plumbing: one error handler mapping the exception tree to exit codes, and the console."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from drill.cli.terminal import console, echo, err_console, literal, say
from drill.errors import DrillError, SpecError

if TYPE_CHECKING:
    from drill.api import Verdict
    from drill.spec.scenario import Scenario

_Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]  # a click option

__all__ = [
    "allow_host_option",
    "interrupts_kept",
    "is_file",
    "load_scenario_argument",
    "console",
    "echo",
    "err_console",
    "handle_errors",
    "out_option",
    "parse_duration_option",
    "print_verdicts",
    "say",
    "time_scale_option",
]


@dataclass
class CrashSite:
    """Where a crash log goes: the run directory once a command has one, else the state directory."""

    run_dir: Callable[[], Path | None] | Path | None = None

    def folder(self) -> Path:
        found = self.run_dir() if callable(self.run_dir) else self.run_dir
        if found is not None and Path(found).is_dir():
            return Path(found)
        from drill.runner.active import state_dir

        return state_dir() / "crash"

    def write(self, exc: BaseException) -> Path | None:
        """Write the traceback to a new file; None when even that fails (then it goes to stderr)."""
        text = "".join(traceback.format_exception(exc))
        try:
            folder = self.folder()
            folder.mkdir(parents=True, exist_ok=True)
            log = folder / f"drill-crash-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"
            log.write_text(text, encoding="utf-8")
            return log
        except OSError:
            sys.stderr.write(literal(text))
            return None


@contextmanager
def handle_errors() -> Iterator[CrashSite]:
    """Exit codes by class: 2 bad input, 3 internal, 4 revert failed, 130 interrupted (pre-commit's error_handler).

    A closed output pipe (``drill plan ... | head -2``) is a normal end: it goes up to click, which exits
    quietly. An internal error writes its traceback into the run directory (set ``site.run_dir`` once a
    command has one) or else the state directory, and says where.
    """
    site = CrashSite()
    try:
        yield site
    except SpecError as exc:
        echo(exc.render(), err=True)
        sys.exit(exc.exit_code)
    except DrillError as exc:
        say(("error:", "bold red"), f" {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        say("interrupted (^C)", err=True)
        sys.exit(130)
    except (click.exceptions.Exit, click.ClickException, SystemExit, BrokenPipeError):
        raise
    except Exception as exc:  # noqa: BLE001 - last resort: keep a report a maintainer can use
        log = site.write(exc)
        where = f"traceback in {log}" if log else "traceback above"
        say(("internal error:", "bold red"), f" {type(exc).__name__}: {exc} ({where})", err=True)
        sys.exit(3)


@contextmanager
def interrupts_kept() -> Iterator[None]:
    """A Ctrl-C is never lost: SIGINT is remembered as it raises KeyboardInterrupt, and if code the command
    called swallowed that (an exception in a finalizer or a C callback, such as the import system's module-lock
    callback, is only handed to ``sys.unraisablehook``), KeyboardInterrupt is raised again when the block ends, so
    the command exits 130, never 0. Such a swallowed KeyboardInterrupt is not printed either ("Exception ignored
    in ...", a traceback): the command's "interrupted (^C)" says it. Outside the main thread it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen: list[int] = []

    def interrupted(signum: int, frame: object) -> None:
        seen.append(signum)
        raise KeyboardInterrupt

    def unraisable(info: sys.UnraisableHookArgs) -> None:
        if not (seen and isinstance(info.exc_value, KeyboardInterrupt)):
            previous_hook(info)

    previous = signal.signal(signal.SIGINT, interrupted)
    previous_hook, sys.unraisablehook = sys.unraisablehook, unraisable
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = previous_hook
    if seen:
        raise KeyboardInterrupt


def time_scale_option(
    help_text: str = "Multiply every timeline duration (0.1 = ten times shorter, for smoke runs).",
) -> _Decorator:
    """``--time-scale F`` (float, default 1.0), as ``drill run``, ``compare`` and ``gameday`` declare it."""
    return click.option("--time-scale", type=float, default=1.0, show_default=True, help=help_text)


def out_option(help_text: str = "Base directory for run directories.") -> _Decorator:
    """``--out DIR`` (``out_dir``, default ``reports``)."""
    return click.option(
        "--out",
        "out_dir",
        type=click.Path(file_okay=False),
        default="reports",
        show_default=True,
        help=help_text,
    )


def allow_host_option(help_text: str = "Allow a non-loopback host (repeatable).") -> _Decorator:
    """``--allow-host HOST`` (``allow_hosts``, repeatable)."""
    return click.option("--allow-host", "allow_hosts", multiple=True, help=help_text)


def parse_duration_option(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    from drill.units import parse_duration

    if value is None:
        return None
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if seconds < 0:
        raise click.BadParameter(f"a duration cannot be negative, got {value!r}")
    return seconds


def print_verdicts(verdicts: Iterable[Verdict]) -> None:
    """One line per verdict, as ``drill run`` and ``drill judge`` print them."""
    for v in verdicts:
        colour = {"PASS": "green", "FAIL": "red"}.get(v.status.value, "yellow")
        say((f"{v.status.value:<12}", colour), f" {v.name}: {v.message}")


def is_file(path: Path) -> bool:
    """``path.is_file()``, False for a name the OS cannot look up (too long, NUL); the loader then reports it."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def load_scenario_argument(name: str) -> tuple[Scenario, Path]:  # spec imported lazily
    """A scenario named on the command line: a path, or a bare name looked up in ``scenarios/`` (``chat`` finds
    ``scenarios/chat.yaml``). Invalid YAML or fields raise :class:`SpecError` with located diagnostics."""
    from drill.spec.loader import load_scenario

    path = Path(name)
    if not is_file(path) and len(path.parts) == 1:
        for candidate in (Path("scenarios") / name, Path("scenarios") / f"{name}.yaml"):
            if is_file(candidate):
                path = candidate
                break
    scenario, diagnostics = load_scenario(path)
    if scenario is None:
        raise SpecError(diagnostics)
    return scenario, path
