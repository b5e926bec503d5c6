"""The architecture's layer rules are import-linter contracts in ``pyproject.toml``; ``lint-imports`` keeps them.

One test runs the contracts over the tree as it is; the others plant one forbidden import each in a copy of the
tree and check that the contract meant to catch it breaks (a contract that cannot break guards nothing).
What the contracts cannot see (imports made by name at run time, the README's list of Locust modules) is checked
in ``tests/test_architecture.py``, ``tests/faults/test_import_boundary.py`` and ``tests/load/test_locust_boundary.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
CONTRACTS = {
    c["name"]: c for c in tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
}


def _lint_imports(root: Path) -> tuple[int, dict[str, str]]:
    """Run lint-imports in ``root``; its exit code and each contract's line (KEPT / BROKEN) by name."""
    env = {**os.environ, "COLUMNS": "400", "PYTHONPATH": str(root)}
    result = subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )
    lines = {name: line for line in result.stdout.splitlines() for name in CONTRACTS if line.startswith(name + " ")}
    return result.returncode, lines


def _copy_of_the_tree(tmp_path: Path) -> Path:
    for name in ("drill", "faults"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _contract(fragment: str) -> str:
    (name,) = [n for n in CONTRACTS if fragment in n]
    return name


def _drill_children() -> set[str]:
    """Every top-level module and package of drill/, read from the tree (``drill.api``, ``drill.runner``, ...)."""
    found = {f"drill.{p.stem}" for p in (REPO / "drill").glob("*.py") if p.name != "__init__.py"}
    return found | {f"drill.{p.name}" for p in (REPO / "drill").iterdir() if (p / "__init__.py").is_file()}


def test_the_fault_contract_is_an_allow_list_of_drill_api() -> None:
    """import-linter has no allow-list contract; this one forbids everything of drill but drill.api, so the list
    must be every top-level part of drill/ as the tree has it now: a new package not on it fails here."""
    contract = CONTRACTS[_contract("fault library imports only")]
    assert contract["source_modules"] == ["faults"]
    assert set(contract["forbidden_modules"]) == _drill_children() - {"drill.api"}


def test_the_layers_contract_places_every_part_of_drill() -> None:
    """Exhaustive: lint-imports breaks it for a part of drill/ it does not name; this says which part is missing."""
    contract = CONTRACTS[_contract("drill's layers")]
    assert contract["containers"] == ["drill"] and contract["exhaustive"] is True
    placed = {f"drill.{name.strip()}" for layer in contract["layers"] for name in layer.replace(":", "|").split("|")}
    assert placed == _drill_children()


def test_every_contract_has_a_planted_violation() -> None:
    planted = {_contract(contract) for _, _, contract in VIOLATIONS}
    assert planted == set(CONTRACTS), sorted(set(CONTRACTS) - planted)


def test_the_tree_keeps_every_contract() -> None:
    assert len(CONTRACTS) >= 6
    rc, lines = _lint_imports(REPO)
    assert set(lines) == set(CONTRACTS), "lint-imports did not report every contract"
    assert rc == 0, "\n".join(line for line in lines.values() if "BROKEN" in line)
    assert all(" KEPT" in line for line in lines.values())


# (module of the copy, the import planted in it, the contract that must break)
VIOLATIONS = [
    ("faults/load.py", "from drill.runner import run", "fault library imports only"),
    ("faults/network.py", "import drill.units", "fault library imports only"),
    ("drill/rundir/journal.py", "import gevent", "Locust and gevent"),
    ("drill/load/driver.py", "from drill.load.child import locustfile", "Nothing outside the load child"),
    ("drill/stack/http/server.py", "import drill.runner.run", "stack never imports the runner"),
    ("drill/stack/replica/ledger.py", "from drill.traces import table", "stack never imports the runner"),
    ("drill/checks/judging.py", "from drill.load.child import streaming", "never import the load driver's child"),
    ("drill/stack/inference/core.py", "from drill.stack.replica import ledger", "The stack's layers"),
    ("drill/stack/config.py", "from drill.stack.http import server", "The stack's layers"),
    ("drill/stack/router/gateway.py", "from drill.stack.replica import ledger", "The stack's layers"),
    ("drill/rundir/files.py", "from drill.checks import builtin", "drill.rundir imports only the root"),
    ("faults/load.py", "from drill.capacity import planner", "fault library imports only"),
    ("faults/network.py", "import drill.fieldtypes", "fault library imports only"),
    ("drill/runner/timeline.py", "import faults.network", "drill never imports the fault library"),
    ("drill/api/__init__.py", "from drill.spec import models", "drill's layers"),
    ("drill/errors.py", "import drill.units", "drill's layers"),
    ("drill/spec/scenario.py", "from drill.load import rates", "drill's layers"),
    ("drill/load/rates.py", "from drill.traces import table", "drill's layers"),
    ("drill/compare/diff.py", "from drill.sweeps import resolve", "drill's layers"),
    ("drill/checks/truth.py", "def _planted() -> None:\n    from drill.report import model", "drill's layers"),
    ("drill/units.py", "import typing\nif typing.TYPE_CHECKING:\n    from drill.api import Fault", "drill's layers"),
    ("drill/report/charts.py", "from drill.capacity import planner", "Only the CLI imports drill.capacity"),
    ("drill/capacity/naive.py", "from drill.stack.inference import core", "capacity never imports the embedded stack"),
    ("drill/capacity/point.py", "from drill.load.child import streaming", "capacity never imports the embedded stack"),
    ("drill/capacity/planner.py", "from drill.load import driver", "knee planner and the SLO-attainment rule"),
    ("drill/capacity/attainment.py", "import httpx", "knee planner and the SLO-attainment rule"),
]


@pytest.mark.parametrize(("module", "statement", "contract"), VIOLATIONS, ids=[f"{v[0]}: {v[1]}" for v in VIOLATIONS])
def test_a_planted_forbidden_import_breaks_its_contract(
    tmp_path: Path, module: str, statement: str, contract: str
) -> None:
    root = _copy_of_the_tree(tmp_path)
    with (root / module).open("a") as source:
        source.write(f"\n{statement}  # planted by the test\n")
    rc, lines = _lint_imports(root)
    assert rc != 0
    assert "BROKEN" in lines[_contract(contract)], lines[_contract(contract)]
