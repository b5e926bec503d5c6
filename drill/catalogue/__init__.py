"""The drill catalogue: the drills, scenarios and runbooks that travel with the package.

In git they live once, at the repository's root (``drills/``, ``scenarios/`` with its ``data/`` excerpts,
``runbooks/``); the wheel maps those folders into this package (``setup.py``: ``drill.catalogue.drills`` is
``drills/``, and so on), so an installed package has them under ``drill/catalogue/``. A source checkout
(``pip install -e .`` or none) reads them at the repository's root. Either way the three folders keep their
layout side by side, so a drill's ``scenario: mixed-interactive-batch.yaml`` and ``runbook: runbooks/x.md``
resolve the way they do in the repository.

Lookup order (:func:`drill.spec.loader.resolve_drill_path`): the path as given, a ``drills/`` folder in the
working directory, then this catalogue. ``drill drills copy NAME`` makes an editable copy in the working
directory, which from then on takes precedence.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DRILL_SUFFIXES", "CopyPlan", "catalogue_root", "copy_plan", "packaged_path"]

DRILL_SUFFIXES = (".yaml", ".yml")


def catalogue_root() -> Path | None:
    """The folder holding the packaged ``drills/``, ``scenarios/`` and ``runbooks/``; None when there is none."""
    here = Path(__file__).resolve().parent
    if (here / "drills").is_dir():  # an installed wheel
        return here
    source = here.parents[1]  # a source checkout: the repository's root
    if (source / "drills").is_dir() and (source / "pyproject.toml").is_file():
        return source
    return None


def packaged_path(path: Path) -> Path | None:
    """``path`` (relative) in the packaged catalogue: as given (``drills/x.yaml``), or a bare drill name or file
    name inside its ``drills/`` (``x``, ``x.yaml``); None when the catalogue has no such file."""
    root = catalogue_root()
    if root is None or path.is_absolute() or ".." in path.parts:
        return None
    candidates = [root / path]
    if len(path.parts) == 1:
        candidates += [root / "drills" / path] + [root / "drills" / f"{path}{s}" for s in DRILL_SUFFIXES]
    return next((c for c in candidates if _is_file(c)), None)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


@dataclass(frozen=True)
class CopyPlan:
    """The files ``drill drills copy`` writes: catalogue file -> destination, keeping the catalogue's layout."""

    files: tuple[tuple[Path, Path], ...]

    def existing(self) -> list[Path]:
        return [dest for _, dest in self.files if dest.exists()]

    def write(self) -> list[Path]:
        for source, dest in self.files:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, dest)
        return [dest for _, dest in self.files]


def copy_plan(
    drill_file: Path, scenario_file: Path | None, runbook_file: Path | None, trace_files: list[Path], dest_root: Path
) -> CopyPlan:
    """What to copy for one packaged drill: the drill, and the scenario, runbook and trace files it uses that
    live in the catalogue. Each keeps its path relative to the catalogue's root, so the copy's relative
    references (``scenario:``, ``runbook:``, a trace's ``file:``) resolve as they did."""
    root = catalogue_root()
    files: list[tuple[Path, Path]] = []
    for source in [drill_file, scenario_file, runbook_file, *trace_files]:
        if source is None or root is None:
            continue
        relative = _inside(source, root)
        if relative is not None and all(source != s for s, _ in files):
            files.append((source, dest_root / relative))
    return CopyPlan(tuple(files))


def _inside(path: Path, root: Path) -> Path | None:
    try:
        return path.resolve().relative_to(root.resolve())
    except ValueError:
        return None
