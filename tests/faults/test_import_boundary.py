"""The fault library depends on the plugin SDK only: ``faults/`` imports nothing from ``drill`` but ``drill.api``.

Checked twice: statically (every import statement of every module, including imports inside
functions) and at run time (importing every fault module in a fresh interpreter loads no ``drill``
module beyond ``drill.api`` and what ``drill.api`` itself needs).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODULES = sorted((REPO / "faults").glob("*.py"))


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, "." * node.level + (node.module or "")))
    return found


def test_every_fault_module_imports_only_drill_api_from_drill() -> None:
    assert len(MODULES) >= 8
    offending = [
        f"{path.relative_to(REPO)}:{line}: {name}"
        for path in MODULES
        for line, name in _imports(path)
        if (name == "drill" or name.startswith("drill.")) and name != "drill.api"
    ]
    assert offending == [], "faults/ may import only drill.api from drill:\n" + "\n".join(offending)


def test_no_relative_import_escapes_the_package() -> None:
    relative = [f"{p.name}: {n}" for p in MODULES for _, n in _imports(p) if n.startswith("..")]
    assert relative == []


def test_importing_every_fault_loads_only_the_sdk_and_registers_nothing() -> None:
    code = (
        "import importlib, json, sys; import faults; before = set(sys.modules); "
        f"[importlib.import_module('faults.' + m) for m in {[p.stem for p in MODULES if p.stem != '__init__']!r}]; "
        "print(json.dumps({'drill': sorted(m for m in sys.modules if m == 'drill' or m.startswith('drill.')), "
        "'package_alone': sorted(m for m in before if m.startswith('faults.'))}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, timeout=60)
    loaded = json.loads(out.stdout)
    assert set(loaded["drill"]) <= {"drill", "drill.api", "drill.errors", "drill.units"}, loaded["drill"]
    assert loaded["package_alone"] == [], "importing faults must not import (or register) any fault"
