"""CI runs the README's test command, which runs the linters before the first test; the pre-commit hooks are the
same checks, offline, and the linters fail on what they are for (a ruff finding, a type error planted in a copy of
the tree)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def _commands(script: str) -> list[str]:
    return [line.strip() for line in script.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_ci_runs_the_readmes_test_command_which_lints_before_the_first_test() -> None:
    """``.ci/run`` is the README's test command; ``./dev test`` without arguments starts the linters once the project
    is installed, beside the rest of the set-up, and waits for them before the suite."""
    commands = _commands((REPO / ".ci" / "run").read_text())
    assert commands[-1] == "exec ./dev test" and not any("pytest" in c or "lint" in c for c in commands)
    dev = (REPO / "dev").read_text()
    case = dev[dev.index("\n  test)") : dev.index(";;", dev.index("\n  test)"))]
    assert case.index("setup_python") < case.index("start_lint") < case.index("wait_lint; whole_suite")
    assert "`./dev test`" in (REPO / "README.md").read_text()


@pytest.mark.parametrize("finding", [False, True])
def test_a_linter_finding_stops_the_whole_suite_before_its_first_test(tmp_path: Path, finding: bool) -> None:
    """scripts/lint.sh's start_lint/wait_lint (what ``./dev test`` runs) with a stand-in ``lint`` that finds
    something or not: its output is shown either way, and a finding stops what comes after."""
    script = (
        f'log() {{ printf "%s\\n" "$*" >&2; }}; VENV={tmp_path}; source scripts/lint.sh; '
        f"lint() {{ echo linted; return {int(finding)}; }}; start_lint; wait_lint && echo the-tests-start"
    )
    done = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert "linted" in done.stderr
    assert ("the-tests-start" in done.stdout) is not finding
    if finding:
        assert done.returncode == 1 and "the tests do not start" in done.stderr


def _collected(*args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {line.split("::")[0] for line in done.stdout.splitlines() if "::" in line}


def test_the_whole_suite_runs_in_two_parts_that_split_it_by_its_marks() -> None:
    """``./dev test`` without arguments runs ``--part serial`` and, beside it at nice 19 on one worker, ``--part
    parallel``: a test marked integration (here the vLLM folder's, marked as its conftest moves it last) runs only in
    the serial part, as does a realtime test (one that uses a fixture serving the reference stack, one marked by
    hand), a plain unit test only in the parallel one, and both parts always run."""
    dev = (REPO / "dev").read_text()
    assert "whole_suite" in dev
    parallel = dev.index('nice -n 19 "$VENV/bin/python" -m pytest --part parallel -n 1 ')
    started = dev.index("&", parallel)  # in the background ...
    serial = dev.index("--part serial ||")
    assert started < serial < dev.index('wait "$pid"')  # ... while the serial part runs, and waited for
    files = (
        "tests/vllm/test_vllm_server.py",
        "tests/e2e/test_abandoned_work.py",
        "tests/stack/inference/test_engine_timing.py",
        "tests/load/test_reactor.py",
        "tests/spec/test_bad_drills.py",
    )
    assert _collected("--part", "parallel", *files) == {"tests/spec/test_bad_drills.py"}
    assert _collected("--part", "serial", *files) == set(files[:-1])
    assert _collected(*files) == set(files)


def test_dev_lint_runs_every_linter_and_fails_on_a_finding() -> None:
    lint = (REPO / "scripts" / "lint.sh").read_text()
    for tool in ('ruff" check', 'ruff" format --check', 'mypy"', 'lint-imports"'):
        assert tool in lint, tool
    assert re.search(r"return 1", lint), "lint must fail when a check fails"


def test_pre_commit_hooks_are_local_and_offline() -> None:
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    assert all(repo["repo"] == "local" for repo in config["repos"])
    assert all(hook["language"] == "system" and hook["entry"].startswith(".venv/bin/") for hook in hooks)
    assert {h["id"] for h in hooks} == {"ruff-check", "ruff-format", "mypy", "import-linter"}


# --- the linters catch what they are for: a finding planted in a copy of the tree fails `./dev lint` ---------------

_LINTED = ("pyproject.toml", "drill", "faults", "tests", "bench", "scripts")  # what scripts/lint.sh reads
_PLANTED_IN = Path("drill") / "units.py"


def _tree_copy(tmp_path: Path) -> Path:
    """The files lint reads, and mypy's cache (so mypy re-checks only the planted module), copied."""
    tree = tmp_path / "tree"
    tree.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in _LINTED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=skip)
        else:
            shutil.copy2(source, tree / name)
    if (REPO / ".mypy_cache").is_dir():
        shutil.copytree(REPO / ".mypy_cache", tree / ".mypy_cache")
    return tree


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    """``./dev lint`` without its set-up step: scripts/lint.sh's ``lint``, in ``tree``, with this virtualenv.

    (``./dev`` would first run ``setup_python``, which may ``pip install -e`` the copy into the shared virtualenv.)
    """
    script = 'log() { printf "%s\\n" "$*" >&2; }; source scripts/lint.sh; lint'
    env = {**os.environ, "VENV": str(Path(sys.prefix))}
    return subprocess.run(["bash", "-c", script], cwd=tree, env=env, capture_output=True, text=True, timeout=600)


def _failed_steps(result: subprocess.CompletedProcess[str]) -> str:
    match = re.search(r"lint failed in \d+ s: (.*)", result.stderr)
    assert match, result.stdout + result.stderr
    return match.group(1).split(" (fix:")[0]


def test_dev_lint_fails_on_a_planted_ruff_finding_and_a_planted_type_error(tmp_path: Path) -> None:
    """One copy, two findings (lint runs every step even after one fails, so one run shows both fail; one full lint
    of a copy costs about 16 s on the shared two-core machine, CONTRIBUTING.md's CI time budget)."""
    tree = _tree_copy(tmp_path)
    planted = tree / _PLANTED_IN
    planted.write_text(
        planted.read_text()
        + "\n\ndef _planted_import() -> None:\n    import os  # unused: F401\n"
        + '\n\ndef _planted_type() -> int:\n    return "not an int"\n'
    )
    result = _lint(tree)
    assert result.returncode == 1, result.stdout + result.stderr
    # the rest of the copy is clean: only the planted findings fail, each in its own linter
    assert _failed_steps(result) == "ruff check mypy"
    assert "F401" in result.stdout
    assert "drill/units.py" in result.stdout and "[return-value]" in result.stdout


def test_mypy_checks_every_module_and_every_def() -> None:
    """No module is excused from mypy, and every function in drill/ and faults/ is annotated."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["files"] == ["drill", "faults"]
    assert config["disallow_untyped_defs"] is True
    assert not any(o.get("ignore_errors") for o in config.get("overrides", []))
