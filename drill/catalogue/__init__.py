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

__all__ = ["CatalogueDrill", "CopyPlan", "catalogue_drills", "catalogue_root", "copy_plan", "packaged_path"]

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
class CatalogueDrill:
    """One drill file of a catalogue, as ``drill drills list`` shows it (read, not validated)."""

    name: str
    path: Path
    source: str  # "local" (./drills) or "packaged"
    title: str | None = None
    hypothesis: str | None = None
    problem: str | None = None  # why the file could not be read as a drill, when it could not


def catalogue_drills(cwd: Path) -> list[CatalogueDrill]:
    """The drills of ``cwd/drills`` and of the packaged catalogue, by name; a local drill shadows a packaged
    one of the same file name. When ``cwd`` is the source checkout, its drills are the packaged ones."""
    found: dict[str, CatalogueDrill] = {}
    root = catalogue_root()
    local = cwd / "drills"
    if root is not None and (root / "drills").resolve() != local.resolve():
        for path in _drill_files(root / "drills"):
            found[path.stem] = _read_entry(path, "packaged")
    for path in _drill_files(local):
        found[path.stem] = _read_entry(path, "local" if root is None or root.resolve() != cwd.resolve() else "packaged")
    return [found[name] for name in sorted(found)]


def _drill_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.suffix in DRILL_SUFFIXES and p.is_file())


def _read_entry(path: Path, source: str) -> CatalogueDrill:
    from drill.rundir.files import MAX_INPUT_BYTES, UnsafeFileError, read_bytes
    from drill.spec.yamlio import load_located

    try:
        doc = load_located(read_bytes(path, limit=MAX_INPUT_BYTES, what="drill").decode("utf-8"), str(path))
    except UnsafeFileError as exc:
        return CatalogueDrill(path.stem, path, source, problem=exc.reason)
    except (OSError, UnicodeDecodeError) as exc:
        return CatalogueDrill(path.stem, path, source, problem=f"cannot read: {exc}")
    data = doc.data
    if doc.diagnostics or not isinstance(data, dict):
        why = doc.diagnostics[0].message if doc.diagnostics else "not a mapping of drill keys"
        return CatalogueDrill(path.stem, path, source, problem=why)
    return CatalogueDrill(
        str(data.get("name") or path.stem), path, source, _text(data.get("title")), _text(data.get("hypothesis"))
    )


def _text(value: object) -> str | None:
    return " ".join(value.split()) if isinstance(value, str) and value.strip() else None


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
