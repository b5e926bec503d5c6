"""The fault library depends on the plugin SDK only: ``faults/`` imports nothing from ``drill`` but ``drill.api``.

The import statements are an import-linter contract in ``pyproject.toml`` (``tests/test_import_contracts.py``).
Checked here what a contract cannot see: at run time, importing every fault module in a fresh interpreter loads
no ``drill`` module beyond ``drill.api`` and what ``drill.api`` itself needs at import (its backends are lazy),
and importing the package alone imports (so registers) no fault.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODULES = sorted((REPO / "faults").glob("*.py"))


def test_importing_every_fault_loads_only_the_sdk_and_registers_nothing() -> None:
    code = (
        "import importlib, json, sys; import faults; before = set(sys.modules); "
        f"[importlib.import_module('faults.' + m) for m in {[p.stem for p in MODULES if p.stem != '__init__']!r}]; "
        "print(json.dumps({'drill': sorted(m for m in sys.modules if m == 'drill' or m.startswith('drill.')), "
        "'package_alone': sorted(m for m in before if m.startswith('faults.'))}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, timeout=60)
    loaded = json.loads(out.stdout)
    sdk = {"drill", "drill.api", "drill.api.check_sdk", "drill.errors", "drill.units"}
    assert set(loaded["drill"]) <= sdk, loaded["drill"]
    assert loaded["package_alone"] == [], "importing faults must not import (or register) any fault"
