"""``drill validate DRILL...``: report every problem in drill files; start nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from drill.cli.common import echo, handle_errors
from drill.errors import SpecError
from drill.spec.loader import load_drill, resolve_drill_path


def _expand(paths: tuple[str, ...]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        path = resolve_drill_path(raw)
        if _is_dir(path):
            files += sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml"))
        else:
            files.append(path)
    return files


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):  # e.g. a name too long: validation reports it as unreadable
        return False


@click.command("validate")
@click.argument("drills", nargs=-1, required=True)
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a field by its key path.")
def validate(drills: tuple[str, ...], overrides: tuple[str, ...]) -> None:
    """Validate drill files (or every *.yaml in a folder). Exit 2 if any is invalid."""
    bad = 0
    with handle_errors():  # a bug shows as 'internal error' with a crash log, never as a traceback
        for path in _expand(drills):
            try:
                load_drill(path, overrides=overrides)
            except SpecError as exc:
                bad += 1
                echo(exc.render(), err=True)
                continue
            echo(f"{path}: ok")
    sys.exit(2 if bad else 0)
