"""One name per concept: the modules and classes of ``drill/`` and ``faults/`` do not share names.

A newcomer should tell from a name which thing it is. Read from the source (paths and AST), not by importing:

- no two modules or packages share a basename, unless the allow-list below says why both are one concept;
- no two top-level classes share a name. Nested classes are not compared: every check and fault declares its
  parameters as a nested ``Params`` class (the plugin convention of ``drill.api``), which is one concept.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("drill", "faults")

# Basenames every package may hold: the package itself and its ``python -m`` entry.
EVERYWHERE = {"__init__", "__main__"}

# basename -> the layers (see ``_layer``) whose modules share it because they are one concept, and why.
SAME_CONCEPT: dict[str, tuple[tuple[str, ...], str]] = {
    # ``drill/cli/<command>.py`` is named after its command, which fronts the module of the same name.
    "cleanup": (("drill/cli", "drill/runner"), "`drill cleanup` runs the runner's cleanup of dead runs"),
    "judge": (("drill/cli", "drill/runner"), "`drill judge` runs the runner's judging of a run directory"),
    "run": (("drill/cli", "drill/runner"), "`drill run` runs a drill with the runner's `drill.runner.run`"),
    "faults": (("", "drill/cli"), "`drill faults list|describe` shows the fault library, the `faults` package"),
    "stack": (("drill", "drill/cli"), "`drill stack up|down|status` runs the embedded stack, `drill.stack`"),
    "traces": (("drill", "drill/cli"), "`drill traces analyze` reads a run's spans with `drill.traces`"),
    "gameday": (("drill", "drill/cli"), "`drill gameday` runs a game-day file with `drill.gameday`"),
    "compare": (("drill", "drill/cli"), "`drill compare` runs a one-variable comparison with `drill.compare`"),
    "capacity": (("drill", "drill/cli"), "`drill capacity` sweeps a scenario's rate with `drill.capacity`"),
    "report": (("drill", "drill/cli"), "`drill report` renders a run's reports with `drill.report`"),
    # ``faults/<component>.py`` holds the faults that act on that component of the target.
    "gpu": (("drill/stack", "faults"), "the stack's simulated GPU, and the faults that act on it"),
    "interconnect": (("drill/stack", "faults"), "the stack's TP/PP interconnect, and the faults that act on it"),
    "router": (("drill/stack", "faults"), "the stack's router, and the faults that act on it"),
    "kubernetes": (
        ("drill/backends", "drill/targets", "faults"),
        "the Kubernetes API's client, the target on a cluster, and the faults that act through that API",
    ),
    "load": (
        ("drill", "drill/cli", "faults"),
        "the load driver, `drill load` that runs it, and `queue_flood` that adds load through it",
    ),
    # A record the stack or the load driver writes, and the check that judges it.
    "ledger": (("drill/rundir", "drill/stack"), "a replica's side-effect ledger, and the run directory's copy of it"),
    "replay": (("drill/checks", "drill/load"), "the replay phase, and the check that judges it"),
}


def _sources(repo: Path) -> list[Path]:
    return sorted(p for root in ROOTS for p in (repo / root).rglob("*.py"))


def _layer(parts: tuple[str, ...]) -> str:
    """The package a module belongs to at the granularity of the architecture: ``drill/<package>`` or a root."""
    if len(parts) == 1:
        return ""
    return "/".join(parts[:2]) if parts[0] == "drill" and len(parts) > 2 else parts[0]


def _modules(repo: Path) -> dict[str, list[str]]:
    """basename -> the paths (``drill/load/replay.py``, packages as ``drill/load/``) that carry it."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in _sources(repo):
        parts = path.relative_to(repo).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts[-1] in EVERYWHERE or parts == ("drill",):
            continue
        found[parts[-1]].append("/".join(parts) + ("/" if path.stem == "__init__" else ".py"))
    return found


def _module_layers(paths: list[str]) -> tuple[str, ...]:
    return tuple(sorted(_layer(tuple(p.removesuffix(".py").rstrip("/").split("/"))) for p in paths))


def module_clashes(repo: Path = REPO) -> list[str]:
    clashes = []
    for name, paths in sorted(_modules(repo).items()):
        if len(paths) < 2:
            continue
        allowed = SAME_CONCEPT.get(name)
        if allowed is None or tuple(sorted(allowed[0])) != _module_layers(paths):
            clashes.append(f"{name}: {', '.join(sorted(paths))}")
    return clashes


def class_clashes(repo: Path = REPO) -> list[str]:
    found: dict[str, list[str]] = defaultdict(list)
    for path in _sources(repo):
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ClassDef):
                found[node.name].append(f"{path.relative_to(repo)}:{node.lineno}")
    return [f"{name}: {', '.join(where)}" for name, where in sorted(found.items()) if len(where) > 1]


def test_the_name_census_reads_the_whole_tree() -> None:
    modules = _modules(REPO)
    assert {"api", "runner", "rundir", "load"} <= set(modules)
    assert len(_sources(REPO)) > 100


def test_no_two_modules_share_a_basename_for_different_concepts() -> None:
    clashes = module_clashes()
    assert clashes == [], (
        "modules that share a basename (rename one, or say in SAME_CONCEPT why both are one "
        "concept):\n" + "\n".join(clashes)
    )


def test_every_same_concept_entry_is_still_needed() -> None:
    modules = _modules(REPO)
    stale = [name for name in SAME_CONCEPT if len(modules.get(name, [])) < 2]
    assert stale == [], f"SAME_CONCEPT allows names no longer shared: {stale}"


def test_no_two_top_level_classes_share_a_name() -> None:
    clashes = class_clashes()
    assert clashes == [], "top-level classes that share a name:\n" + "\n".join(clashes)


def test_the_census_finds_planted_clashes(tmp_path: Path) -> None:
    """The census itself can fail: a package and a module of one name in other layers, a class twice."""
    for name, text in {
        "drill/__init__.py": "",
        "drill/runner/__init__.py": "",
        "drill/runner/judge.py": "",
        "drill/cli/judge.py": "class Outcome: ...\n",
        "drill/stack/runner.py": "class Outcome: ...\n",
        "drill/stack/__main__.py": "",
        "faults/__init__.py": "",
        "faults/judge.py": "",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert module_clashes(tmp_path) == [
        "judge: drill/cli/judge.py, drill/runner/judge.py, faults/judge.py",
        "runner: drill/runner/, drill/stack/runner.py",
    ]
    assert class_clashes(tmp_path) == ["Outcome: drill/cli/judge.py:1, drill/stack/runner.py:1"]
