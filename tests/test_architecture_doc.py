"""``docs/architecture.md`` matches the tree: every path, module and entry-point group it names exists.

Read from the source, not by importing (``drill.load.child`` must not be imported into the test process): a
dotted name is a module when ``drill/x/y.py`` or ``drill/x/y/__init__.py`` exists, and ``module.Name`` is a name
that module defines at its top level.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"
TOP = ("drill", "faults", "tests", "docs", "scripts", "bench", "drills", "scenarios", "runbooks")
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(TOP) + r")/[\w./-]*)")
DOTTED = re.compile(r"`((?:drill|faults)(?:\.\w+)+)`")
CODE_SPAN = re.compile(r"`([^`]+)`")


def _text() -> str:
    return DOC.read_text()


def _entry_point_groups() -> set[str]:
    return set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"])


def _module_file(dotted: str) -> Path | None:
    base = REPO.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _top_level_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _resolves(dotted: str) -> bool:
    """A module, or a module and one name it defines (``drill.api.Fault``)."""
    if _module_file(dotted):
        return True
    module, _, name = dotted.rpartition(".")
    path = _module_file(module)
    return path is not None and name in _top_level_names(path)


def _named_paths() -> list[str]:
    found = {m.rstrip(".") for span in CODE_SPAN.findall(_text()) for m in PATH.findall(span)}
    found |= {m.rstrip(".") for m in PATH.findall(re.sub(r"```.*?```", "", _text(), flags=re.S))}
    return sorted(found)


def _named_modules() -> list[str]:
    return sorted(set(DOTTED.findall(_text())) - _entry_point_groups())


def test_the_doc_names_paths_and_modules() -> None:
    assert len(_named_paths()) >= 30 and len(_named_modules()) >= 30


@pytest.mark.parametrize("path", _named_paths())
def test_every_path_the_doc_names_exists(path: str) -> None:
    assert (REPO / path).exists(), f"docs/architecture.md names {path}, which is not in the tree"


@pytest.mark.parametrize("dotted", _named_modules())
def test_every_module_the_doc_names_exists(dotted: str) -> None:
    assert _resolves(dotted), f"docs/architecture.md names {dotted}, which is no module (or name in one)"


def test_every_entry_point_group_the_doc_names_is_declared() -> None:
    named = {g for g in DOTTED.findall(_text()) if g.count(".") == 1 and not _module_file(g)}
    named |= set(re.findall(r'entry-points\."([\w.]+)"', _text()))
    groups = _entry_point_groups()
    assert named <= groups, sorted(named - groups)
    assert {"drill.faults", "drill.checks", "drill.targets", "drill.traces"} <= set(DOTTED.findall(_text()))


def test_the_layers_the_doc_describes_are_the_import_contracts() -> None:
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layered = [c for c in contracts if c["type"] == "layers"]
    assert layered, "pyproject.toml has no layers contract for the stack"
    for layer in layered[0]["layers"]:
        for module in re.split(r"[|:]", layer):
            path = module.strip().replace(".", "/")
            assert path in _text(), f"docs/architecture.md does not name the stack layer {module.strip()}"
