"""Where Locust and gevent may be imported: only in the load-generator child, and the docs say which modules.

Locust monkey-patches the process at import, so the harness must never import it. That rule is two import-linter
contracts in ``pyproject.toml`` (``tests/test_import_contracts.py``): only ``drill.load.child`` imports
locust/gevent/geventhttpclient, and nothing outside ``drill.load.child`` imports it. Checked here from the source
(AST) what a contract cannot: the load driver's page (``docs/load.md``, where the README's section moved) names every
module that imports Locust itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _module(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _graph() -> dict[str, set[str]]:
    return {_module(p): _imports(p) for p in (REPO / "drill").rglob("*.py")}


def _importers_of(graph: dict[str, set[str]], roots: tuple[str, ...]) -> set[str]:
    return {m for m, imports in graph.items() if any(i == r or i.startswith(r + ".") for i in imports for r in roots)}


def test_the_load_driver_docs_name_every_module_that_imports_locust() -> None:
    importers = _importers_of(_graph(), ("locust",))
    text = (REPO / "docs" / "load.md").read_text()
    section = text[text.index("## The load driver") :]
    end = section.find("\n## ", 3)
    section = section if end < 0 else section[:end]
    assert importers, "no module imports locust: the check would pass on nothing"
    for module in sorted(importers):
        assert f"{module.replace('.', '/')}.py" in section, f"docs/load.md's load driver section does not name {module}"
