"""Every reader of an input file opens it through ``drill.rundir.files`` (issue 21): read from the source, the
modules that read drill files, scenarios, trace-replay CSVs, span files and run directories call no ``open``,
``Path.open``, ``read_text``, ``read_bytes``, ``json.load`` or ``json.loads`` of their own, unless listed below
with the reason (a file the running harness writes for itself)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

READERS = [
    "drill/checks",
    "drill/report",
    "drill/traces",
    "drill/spec",
    "drill/catalogue",
    "drill/rundir/jsonl.py",
    "drill/runner/judge.py",
    "drill/runner/cleanup.py",
    "drill/rundir/journal.py",
    "drill/sweeps/scaling.py",
    "drill/sweeps/scaling_report.py",
    "drill/spec/azure_trace.py",
    "drill/rundir/records.py",
    "drill/rundir/samples.py",
    "drill/capacity/reporting.py",
    "drill/cli/traces.py",
    "drill/cli/report.py",
    "drill/cli/judge.py",
    "drill/cli/cleanup.py",
    "drill/cli/validate.py",
    "drill/cli/plan.py",
    "drill/cli/drills.py",
]

# (module, call) -> why it does not read an input file
ALLOWED = {
    ("drill/report/junit.py", "open"): "writes junit.xml once ('x') into the run directory the run just created",
    ("drill/rundir/redact.py", "read_text"): "scrubs the logs the run's own processes wrote, when the run ends",
    ("drill/rundir/redact.py", "open"): "rewrites those logs in place",
    ("drill/rundir/journal.py", "read_text"): "reads /proc/<pid>/stat for RUN_STARTED's pid_start",
    ("drill/rundir/records.py", "open"): "RecordTail: tails the requests.jsonl this run's load generator writes",
    ("drill/rundir/records.py", "loads"): "RecordTail: its lines, skipped when bad; read after the run, counted",
    ("drill/traces/receiver.py", "open"): "appends the spans the run's receiver is given to its new spans.jsonl",
    (
        "drill/traces/compressed.py",
        "open",
    ): "creates ('x') a span file's decompressed copy in its own new temporary folder",
}
FORBIDDEN = {"open", "read_text", "read_bytes", "load", "loads"}


def _sources() -> list[Path]:
    out: list[Path] = []
    for entry in READERS:
        path = REPO / entry
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return out


def _calls(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "open":
            found.append((node.lineno, "open"))
        elif isinstance(func, ast.Attribute) and func.attr in FORBIDDEN:
            owner = func.value.id if isinstance(func.value, ast.Name) else None
            if func.attr in ("load", "loads") and owner != "json":
                continue  # yaml's own loaders and the like are not file reads
            if owner in ("os", "self", "tarfile"):
                continue  # os.open with explicit flags; a class's own method named open
            found.append((node.lineno, func.attr))
    return sorted(found)


def test_readers_open_files_only_through_drill_rundir_files() -> None:
    offending = [
        f"{path.relative_to(REPO)}:{line}: {call}()"
        for path in _sources()
        for line, call in _calls(path)
        if (str(path.relative_to(REPO)), call) not in ALLOWED
    ]
    assert not offending, "read through drill.rundir.files instead:\n" + "\n".join(offending)


def test_the_scan_sees_a_planted_read(tmp_path: Path) -> None:
    planted = tmp_path / "reader.py"
    planted.write_text("import json\nfrom pathlib import Path\nx = json.loads(Path('a').read_text())\nopen('b')\n")
    assert _calls(planted) == [(3, "loads"), (3, "read_text"), (4, "open")]
