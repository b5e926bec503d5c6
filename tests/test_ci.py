"""CI runs the linters before the README's test command, and the pre-commit hooks are the same checks, offline."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def _commands(script: str) -> list[str]:
    return [line.strip() for line in script.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_ci_lints_then_runs_the_readmes_test_command() -> None:
    commands = _commands((REPO / ".ci" / "run").read_text())
    assert "./dev lint" in commands and "exec ./dev test" in commands
    assert commands.index("./dev lint") < commands.index("exec ./dev test")
    assert "`./dev test`" in (REPO / "README.md").read_text()


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
