"""The drills one can name: those of ``./drills`` and of the packaged catalogue (:mod:`drill.catalogue`), each
read for its title and hypothesis as ``drill drills list`` shows them (read, not validated).

Here and not in :mod:`drill.catalogue`, which sits below the spec loader (``resolve_drill_path`` looks a name up
in it): reading a drill file's YAML is the spec's job.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from drill.catalogue import DRILL_SUFFIXES, catalogue_root
from drill.rundir.files import MAX_INPUT_BYTES, UnsafeFileError, read_bytes
from drill.spec.yamlio import load_located

__all__ = ["CatalogueDrill", "catalogue_drills"]


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
