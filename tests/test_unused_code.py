"""No dead code: every name defined in drill/ and faults/ is used somewhere besides its definition.

A name counts as used when it appears (as a word) anywhere in drill/, faults/, tests/, bench/, scripts/ or
pyproject.toml more often than its definition and its ``__all__`` entry. Checked: module-level functions,
classes and constants, and plain methods and properties of classes. Not checked: decorated functions
(click commands, validators: the decorator uses them) and the framework callbacks listed below, which
the framework calls by name.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: Called by a framework, never by our code: asyncio.Protocol, an OpenTelemetry SpanProcessor, click.Group.
FRAMEWORK_CALLBACKS = {"eof_received", "on_start", "list_commands", "get_command"}
_PLAIN_DECORATORS = {"property", "staticmethod", "classmethod", "cached_property"}


def _word_counts(root: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    sources = [p for d in ("drill", "faults", "tests", "bench", "scripts") for p in (root / d).rglob("*.py")]
    for text in [p.read_text() for p in sources] + [(root / "pyproject.toml").read_text()]:
        for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text):
            counts[word] = counts.get(word, 0) + 1
    return counts


def _plain(node: ast.AST) -> bool:
    return all(isinstance(d, ast.Name) and d.id in _PLAIN_DECORATORS for d in getattr(node, "decorator_list", []))


def _defined(tree: ast.Module):
    """(line, name) of what a module defines at its top level and in its classes."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _plain(node):
            yield node.lineno, node.name
        elif isinstance(node, ast.Assign):
            yield from ((node.lineno, t.id) for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            yield node.lineno, node.target.id
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if (
                    isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and not member.name.startswith("_")
                    and _plain(member)
                ):
                    yield member.lineno, member.name


def unused_names(root: Path) -> list[str]:
    counts = _word_counts(root)
    found = []
    for path in sorted(p for d in ("drill", "faults") for p in (root / d).rglob("*.py")):
        text = path.read_text()
        for line, name in _defined(ast.parse(text)):
            if name.startswith("__") or name in FRAMEWORK_CALLBACKS:
                continue
            exported = 1 if f'"{name}"' in text else 0
            if counts.get(name, 0) - exported <= 1:
                found.append(f"{path.relative_to(root)}:{line}: {name}")
    return found


def test_every_defined_name_is_used() -> None:
    assert unused_names(REPO) == []


def test_the_check_finds_an_unused_function_constant_and_property(tmp_path: Path) -> None:
    for folder in ("drill", "faults", "tests", "bench", "scripts"):
        (tmp_path / folder).mkdir()
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "drill" / "m.py").write_text(
        '__all__ = ["helper", "used"]\nLIMIT = 3\n\ndef helper():\n    return 1\n\ndef used():\n    return LIMIT\n\n'
        "class Thing:\n    @property\n    def spare(self):\n        return 2\n\nused()\nThing()\n"
    )
    assert unused_names(tmp_path) == ["drill/m.py:4: helper", "drill/m.py:12: spare"]
