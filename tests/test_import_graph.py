"""The package import graph, computed from the source: every import statement counts, at module level, inside a
function and under ``TYPE_CHECKING`` (a type a module names is a dependency all the same, and a circle through
annotations is still a circle).

The layers are those of the layers contract in ``pyproject.toml`` (``lint-imports`` enforces the same order in
``./dev lint``; docs/architecture.md draws it): no arrow from a lower layer to a higher one, none between two
parts of a layer written ``a | b``, and no circle between packages (a package is a folder of drill/ with an
``__init__.py``; each top-level module of drill/ counts as one of its own). ``faults/`` imports ``drill.api``
and nothing else of drill, and drill never imports ``faults``. Between modules, no circle through the imports
that run at import time. And an import inside a function (outside the CLI) says why it is there.
"""

from __future__ import annotations

import ast
import re
import shutil
import tomllib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONTRACTS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
(LAYERS_CONTRACT,) = [c for c in CONTRACTS if c["type"] == "layers" and c.get("containers") == ["drill"]]

# Arrows let through against the layers, each with its reason; the same as the layers contract's ignore_imports.
# None today: every arrow follows the layers.
EXCEPTIONS: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Arrow:
    importer: str  # module
    imported: str  # module
    where: str  # path:line
    at_import: bool = True  # runs when the importer is imported: neither inside a function nor under TYPE_CHECKING


def _modules(root: Path = REPO) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top in ("drill", "faults"):
        for path in (root / top).rglob("*.py"):
            dotted = ".".join(path.relative_to(root).with_suffix("").parts)
            found[dotted.removesuffix(".__init__")] = path
    return found


def _imported_names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    for alias in node.names:
        yield f"{base}.{alias.name}"  # a module of the package, or a name in it: resolved below
        yield base


@cache
def arrows(root: Path = REPO) -> list[Arrow]:
    """Every import of one module of drill/ or faults/ by another, wherever the statement is."""
    modules = _modules(root)

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    found: set[Arrow] = set()
    for module, path in modules.items():
        for node, at_import in _import_statements(ast.parse(path.read_text(), str(path))):
            names = set(_imported_names(node, module, path.name == "__init__.py"))
            targets = {resolve(n) for n in names if n.split(".")[0] in ("drill", "faults")}
            if isinstance(node, ast.ImportFrom):  # `from drill.x import y`: y when it is a module, else drill.x
                targets = {
                    t for t in targets if not (t is not None and any(o != t and o.startswith(t + ".") for o in targets))
                }
            where = f"{path.relative_to(root)}:{node.lineno}"
            found |= {Arrow(module, t, where, at_import) for t in targets if t is not None and t != module}
    return sorted(found, key=lambda a: (a.where, a.imported))


def _import_statements(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement, and whether it runs at import time (not in a function, not under TYPE_CHECKING)."""

    def visit(node: ast.AST, at_import: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, at_import
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield from visit(child, False)
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                yield from (item for body in child.body for item in visit(ast.Module([body], []), False))
                yield from (item for body in child.orelse for item in visit(ast.Module([body], []), at_import))
            else:
                yield from visit(child, at_import)

    yield from visit(tree, True)


def _part(module: str) -> str:
    """The top-level part of drill a module belongs to (``drill.runner.run`` -> ``drill.runner``)."""
    return "faults" if module.split(".")[0] == "faults" else ".".join(module.split(".")[:2])


def _package(module: str, modules: dict[str, Path]) -> str:
    """The package a module is in; a top-level module of drill/ is a package of its own."""
    if modules[module].name == "__init__.py" or module.count(".") == 1:
        return module
    return module.rpartition(".")[0]


def _layer_of() -> dict[str, tuple[int, bool]]:
    """Each part of drill: its layer's rank from the top, and whether its layer's parts are independent."""
    ranks: dict[str, tuple[int, bool]] = {}
    for rank, layer in enumerate(LAYERS_CONTRACT["layers"]):
        independent = "|" in layer
        for name in layer.replace(":", "|").split("|"):
            ranks[f"drill.{name.strip()}"] = (rank, independent)
    return ranks


def _kept(all_arrows: list[Arrow]) -> list[Arrow]:
    return [a for a in all_arrows if (a.importer, a.imported) not in EXCEPTIONS]


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))
    return circles


def package_graph(all_arrows: list[Arrow], modules: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for arrow in all_arrows:
        a, b = _package(arrow.importer, modules), _package(arrow.imported, modules)
        if a != b:
            graph[a].add(b)
    return graph


def test_the_graph_sees_imports_inside_functions_and_under_type_checking() -> None:
    found = {(a.importer, a.imported) for a in arrows()}
    assert ("drill.runner.run", "drill.report.render") in found  # inside Runner's report step
    assert ("drill.api", "drill.backends.docker") in found  # under TYPE_CHECKING, and inside a method
    assert len(found) > 500


def up_arrows(root: Path = REPO) -> list[str]:
    """The arrows from a lower layer to a higher one, or between independent parts of one layer."""
    ranks = _layer_of()
    wrong = []
    for arrow in _kept(arrows(root)):
        a, b = _part(arrow.importer), _part(arrow.imported)
        if a == b or "faults" in (a, b) or "drill" in (a, b):
            continue
        (rank_a, independent), (rank_b, _) = ranks[a], ranks[b]
        if rank_a > rank_b or (rank_a == rank_b and independent):
            wrong.append(f"{arrow.where}: {arrow.importer} -> {arrow.imported}")
    return wrong


def package_circles(root: Path = REPO) -> list[list[str]]:
    return _circles(package_graph(_kept(arrows(root)), _modules(root)))


def test_no_arrow_runs_up_a_layer_or_across_independent_parts() -> None:
    wrong = up_arrows()
    assert not wrong, "\n".join(wrong)


def test_no_circle_between_packages() -> None:
    circles = package_circles()
    assert not circles, circles


def module_circles_at_import(root: Path = REPO) -> list[list[str]]:
    """Circles between modules through the imports that run when a module is imported: each is an import order
    away from a half-initialised module."""
    graph: dict[str, set[str]] = defaultdict(set)
    for arrow in arrows(root):
        if arrow.at_import:
            graph[arrow.importer].add(arrow.imported)
    return _circles(graph)


def test_no_circle_between_modules_at_import_time() -> None:
    circles = module_circles_at_import()
    assert not circles, circles


def _planted(tmp_path: Path, module: str, code: str) -> Path:
    for name in ("drill", "faults"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    with (tmp_path / module).open("a") as source:
        source.write(f"\n{code}\n")
    return tmp_path


def test_an_up_arrow_inside_a_function_is_found(tmp_path: Path) -> None:
    root = _planted(tmp_path, "drill/spec/scenario.py", "def _planted() -> None:\n    from drill.runner import run")
    line = _last_line(root / "drill/spec/scenario.py")
    assert up_arrows(root) == [f"drill/spec/scenario.py:{line}: drill.spec.scenario -> drill.runner.run"]


def test_a_circle_between_modules_at_import_time_is_found(tmp_path: Path) -> None:
    root = _planted(tmp_path, "drill/report/model.py", "from drill.report.build import assemble")
    assert any({"drill.report.build", "drill.report.model"} <= set(c) for c in module_circles_at_import(root))
    lazy = _planted(tmp_path / "lazy", "drill/report/model.py", "def f():\n    import drill.report.build")
    assert module_circles_at_import(lazy) == []  # not at import time (the lazy-import rule sees it instead)


def test_a_circle_through_a_type_checking_import_is_found(tmp_path: Path) -> None:
    code = "import typing\nif typing.TYPE_CHECKING:\n    from drill.stack.replica import ledger"
    root = _planted(tmp_path, "drill/stack/inference/core.py", code)  # replica imports inference
    assert ["drill.stack.inference", "drill.stack.replica"] in package_circles(root)


def _last_line(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_the_fault_library_imports_drill_api_and_nothing_else_of_drill() -> None:
    wrong = [a for a in arrows() if a.importer.startswith("faults") and a.imported.split(".")[0] == "drill"]
    assert [a for a in wrong if a.imported != "drill.api"] == []
    assert wrong, "the fault library imports drill.api"


def test_drill_never_imports_the_fault_library() -> None:
    assert [a for a in arrows() if a.importer.startswith("drill") and a.imported.startswith("faults")] == []


def test_every_exception_is_still_an_import_of_the_tree() -> None:
    """An exception whose import is gone is deleted with it (the layers contract's ignore_imports likewise)."""
    assert {(a.importer, a.imported) for a in arrows()} >= EXCEPTIONS
    ignored = {tuple(line.split(" -> ")) for line in LAYERS_CONTRACT.get("ignore_imports", [])}
    assert ignored == EXCEPTIONS


def test_the_circle_finder_finds_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


# --- imports inside functions ------------------------------------------------------------------------------------

#: What a reason looks like: ``# lazy: <why>`` on the import's line, or on the line above the block of imports it
#: opens (one comment for the imports that follow it back to back).
LAZY = re.compile(r"#\s*lazy:\s*\S")
#: The CLI imports a subcommand's modules when that subcommand runs, so `drill --help` loads no engine: its
#: imports inside functions are that one reason, not listed one by one.
LAZY_EVERYWHERE = ("drill/cli/",)
#: In-function imports let through without a reason (none today: each one states why it is lazy).
UNEXPLAINED: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class LazyImport:
    path: str
    line: int
    module: str  # what it imports (``from X import y``: X)
    reason: str | None


def lazy_imports(root: Path = REPO) -> list[LazyImport]:
    """Every import statement inside a function of drill/ and faults/ (outside the CLI), with its reason."""
    found = []
    for path in sorted(_modules(root).values()):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(LAZY_EVERYWHERE):
            continue
        lines = path.read_text().splitlines()
        for node, block_start in _imports_in_functions(ast.parse("\n".join(lines), relative)):
            module = (node.module or "") if isinstance(node, ast.ImportFrom) else node.names[0].name
            candidates = [lines[node.lineno - 1], lines[block_start - 2] if block_start >= 2 else ""]
            reason = next((c.split("lazy:", 1)[1].strip() for c in candidates if LAZY.search(c)), None)
            found.append(LazyImport(relative, node.lineno, module, reason))
    return found


def _imports_in_functions(tree: ast.Module) -> Iterator[tuple[ast.Import | ast.ImportFrom, int]]:
    """Each import inside a function, with the first line of the run of imports it belongs to."""

    def visit(node: ast.AST, in_function: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, int]]:
        block_start = 0
        previous_end = -1
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                block_start = block_start if child.lineno == previous_end + 1 else child.lineno
                previous_end = child.end_lineno or child.lineno
                if in_function:
                    yield child, block_start
                continue
            previous_end = -1
            yield from visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    yield from visit(tree, False)


def test_every_import_inside_a_function_says_why_it_is_lazy() -> None:
    unexplained = [
        f"{i.path}:{i.line}: {i.module}"
        for i in lazy_imports()
        if i.reason is None and (i.path, i.module) not in UNEXPLAINED
    ]
    assert not unexplained, "an import inside a function needs `# lazy: <reason>` (or move it up):\n" + "\n".join(
        unexplained
    )


def test_the_lazy_imports_are_the_heavy_or_optional_ones() -> None:
    """What may stay lazy: a backend behind the plugin SDK or a module that loads a slow third-party package, and
    such packages themselves; an import of drill's own modules inside a function hides an arrow, so each is listed
    here to be seen."""
    modules = {i.module.split(".")[0] if not i.module.startswith("drill") else i.module for i in lazy_imports()}
    own = {m for m in modules if m.startswith("drill")} - {m for _, m in UNEXPLAINED}
    assert own == {
        "drill.backends.docker",
        "drill.backends.kubernetes",
        "drill.backends.nccl",
        "drill.backends.nvidia",
        "drill.backends.process",
        "drill.backends.stack_admin",
        "drill.backends.toxiproxy",
        "drill.stack.http.span_export",  # the OpenTelemetry SDK
        "drill.stack.supervision.docker_runtime",  # the Docker SDK
    }
    assert {m for m in modules if not m.startswith("drill")} <= {
        "cycler",
        "docker",
        "kubernetes",
        "markdown_it",
        "matplotlib",
        "opentelemetry",
        "requests",
        "tokenizers",
        "uvloop",
    }


def test_every_unexplained_exception_is_still_in_the_tree() -> None:
    assert {(i.path, i.module) for i in lazy_imports() if i.reason is None} == UNEXPLAINED


def test_a_new_import_inside_a_function_without_a_reason_is_found(tmp_path: Path) -> None:
    code = "def _planted() -> None:\n    import json\n\n    from drill.units import parse_duration  # lazy: a test\n"
    root = _planted(tmp_path, "drill/stack/launch.py", code)
    found = [i for i in lazy_imports(root) if i.path == "drill/stack/launch.py"]
    assert [(i.module, i.reason) for i in found] == [("json", None), ("drill.units", "a test")]
