"""Golden-file tests: every kind of mistake in a drill file gets a located error; nothing is created.

Each ``tests/fixtures/bad_drills/NN-*.yaml`` has a ``.expected.txt`` with the exact diagnostics
``drill validate`` prints. Regenerate after an intended wording change with
``DRILL_REGENERATE_GOLDEN=1 ./dev test tests/spec/test_bad_drills.py`` and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from drill.cli.main import cli

REPO = Path(__file__).resolve().parents[2]
BAD = sorted((REPO / "tests/fixtures/bad_drills").glob("*.yaml"))


def test_there_are_at_least_twelve_kinds_of_mistake() -> None:
    assert len(BAD) >= 12


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_validate_prints_located_errors_and_exits_2(
    path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(REPO)
    before = set(REPO.glob("reports/**/*"))
    relative = path.relative_to(REPO)
    result = CliRunner().invoke(cli, ["validate", str(relative)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    expected = path.with_suffix(".expected.txt")
    if os.environ.get("DRILL_REGENERATE_GOLDEN"):
        expected.write_text(result.output)
    assert result.output == expected.read_text()
    for line in result.output.splitlines():
        if ": error: " in line:
            assert line.startswith(f"{relative}:"), line
    assert set(REPO.glob("reports/**/*")) == before, "validation must create nothing"


def test_all_bad_files_in_one_call_report_every_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    result = CliRunner().invoke(cli, ["validate", "tests/fixtures/bad_drills"])
    assert result.exit_code == 2
    for path in BAD:
        assert f"{path.relative_to(REPO)}:" in result.output


def test_run_refuses_a_bad_drill_before_touching_anything(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(REPO)
    result = CliRunner().invoke(cli, ["run", str(BAD[0].relative_to(REPO)), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert not (tmp_path / "out").exists()
