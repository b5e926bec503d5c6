"""drill.rundir sits under every reader: its import-linter contract forbids every part of drill but the root modules.

The contract in ``pyproject.toml`` is a list of forbidden modules; a list falls behind when a package is added. This
test reads the tree and the contract and fails when a module of ``drill`` (or ``faults``) is neither forbidden nor
one of the root modules drill.rundir may import.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: What drill.rundir may import from drill: the root modules below everything (and drill.rundir itself).
ALLOWED = {"drill.errors", "drill.fieldtypes", "drill.stats", "drill.units", "drill.rundir"}


def _rundir_contract() -> dict:
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c.get("source_modules") == ["drill.rundir"]]
    return contract


def _top_level_modules() -> set[str]:
    found = {"faults"}
    for path in (REPO / "drill").iterdir():
        if path.name.startswith(("_", ".")):
            continue
        if path.is_dir() and (path / "__init__.py").exists():
            found.add(f"drill.{path.name}")
        elif path.suffix == ".py":
            found.add(f"drill.{path.stem}")
    return found


def test_the_rundir_contract_forbids_every_module_but_the_root_ones() -> None:
    forbidden = set(_rundir_contract()["forbidden_modules"])
    assert forbidden == _top_level_modules() - ALLOWED


def test_the_root_modules_rundir_may_import_import_nothing_from_drill_above_them() -> None:
    for module in ALLOWED - {"drill.rundir"}:
        source = (REPO / (module.replace(".", "/") + ".py")).read_text()
        imports = [line for line in source.splitlines() if line.startswith(("from drill", "import drill"))]
        assert all(line.startswith(tuple(f"from {m}" for m in ALLOWED)) for line in imports), (module, imports)
