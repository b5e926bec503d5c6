"""``drill drills list|copy`` — the drill catalogue that ships with the package.

``list`` shows every drill ``drill run NAME`` can find: those of a ``drills/`` folder in the working directory
(which take precedence) and the packaged ones, each with its hypothesis. ``copy NAME`` writes an editable
copy of a packaged drill into the working directory — the drill, its scenario file, the trace excerpts that
scenario reads, and its runbook, each in the folder it has in the catalogue (``drills/``, ``scenarios/``,
``scenarios/data/``, ``runbooks/``), so the copy's relative references keep working unchanged.
"""

from __future__ import annotations

from pathlib import Path

import click

from drill.cli.common import console, handle_errors

__all__ = ["drills"]


@click.group("drills")
def drills() -> None:
    """The drill catalogue: list the drills and copy one to edit."""


@drills.command("list")
def list_drills() -> None:
    """Every drill `drill run NAME` finds (./drills first, then the packaged catalogue), with its hypothesis."""
    from drill.spec.listing import catalogue_drills

    with handle_errors():
        entries = catalogue_drills(Path.cwd())
        if not entries:
            console.print("no drills: neither ./drills nor a packaged catalogue was found", markup=False)
            return
        for entry in entries:
            console.print(f"{entry.name:<26} ({entry.source}: {entry.path})", markup=False, soft_wrap=True)
            if entry.problem:
                console.print(f"{'':<4}unreadable: {entry.problem}", markup=False, soft_wrap=True)
                continue
            if entry.title:
                console.print(f"{'':<4}{entry.title}", markup=False, soft_wrap=True)
            console.print(f"{'':<4}hypothesis: {entry.hypothesis or '(none stated)'}", markup=False, soft_wrap=True)


@drills.command("copy")
@click.argument("name")
@click.option("--force", is_flag=True, help="Overwrite files the copy would replace.")
def copy(name: str, force: bool) -> None:
    """Copy packaged drill NAME (with its scenario, trace excerpts and runbook) into the working directory."""
    with handle_errors():
        written = _copy(name, Path.cwd(), force)
        for path in written:
            console.print(f"wrote {path}", markup=False, soft_wrap=True)
        console.print(
            f"`drill run {name}` now runs {written[0]} (./drills takes precedence over the catalogue)",
            markup=False,
            soft_wrap=True,
        )


def _copy(name: str, cwd: Path, force: bool) -> list[Path]:
    from drill.catalogue import catalogue_root, copy_plan, packaged_path
    from drill.errors import InputError
    from drill.spec.loader import load_drill

    root = catalogue_root()
    source = packaged_path(Path(name)) if len(Path(name).parts) == 1 else None
    if root is None or source is None or source.parent.name != "drills":
        raise InputError(f"no drill {name!r} in the packaged catalogue", hint="'drill drills list' shows them")
    if root.resolve() == cwd.resolve():
        raise InputError(
            "the working directory is the catalogue itself: its drills/ are already editable here",
            hint="run 'drill drills copy' from another directory",
        )
    drill = load_drill(source, allow_missing=True).drill  # a drill the catalogue cannot read is a SpecError
    # the catalogue's own files, not those the loader would find first in the working directory
    scenario = _in_catalogue(root, source, f"scenarios/{drill.scenario}") if isinstance(drill.scenario, str) else None
    runbook = _in_catalogue(root, source, drill.runbook) if drill.runbook else None
    plan = copy_plan(source, scenario, runbook, _trace_files(scenario), cwd)
    existing = plan.existing()
    if existing and not force:
        raise InputError(
            f"would overwrite {', '.join(str(p) for p in existing)}",
            hint="pass --force to overwrite, or move them away first",
        )
    return plan.write()


def _in_catalogue(root: Path, drill_file: Path, relative: str) -> Path | None:
    """A file the drill names, as the loader looks for it (beside the drill, then the root), in the catalogue."""
    candidates = [drill_file.parent / relative, root / relative]
    candidates += [c.with_name(f"{c.name}.yaml") for c in candidates if not c.suffix]
    return next((c for c in candidates if c.is_file()), None)


def _trace_files(scenario_file: Path | None) -> list[Path]:
    """The trace CSVs a scenario file replays (the loader makes their paths absolute, from the scenario file)."""
    from drill.spec.loader import load_scenario

    scenario = load_scenario(scenario_file)[0] if scenario_file is not None else None
    if scenario is None:
        return []
    arrivals = [scenario.arrival] + [pool.arrival for pool in scenario.pools]
    return [Path(a.trace.file) for a in arrivals if a is not None and a.trace is not None]
