"""``drill drills list|copy`` and name resolution against the catalogue: a ``drills/`` folder in the working
directory first, then the packaged catalogue (here: the checkout's root folders, as an editable install has)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from drill.catalogue import catalogue_root, copy_plan
from drill.cli.drills import _trace_files
from drill.cli.main import cli
from drill.spec.listing import catalogue_drills
from drill.spec.loader import load_drill, resolve_drill_path

REPO = Path(__file__).resolve().parents[2]
CATALOGUE = sorted(p.stem for p in (REPO / "drills").glob("*.yaml"))


def _invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_the_checkout_is_the_catalogue() -> None:
    assert catalogue_root() == REPO


def test_list_shows_every_catalogue_drill_with_its_hypothesis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = _invoke("drills", "list")
    assert result.exit_code == 0, result.output
    for name in CATALOGUE:
        hypothesis = " ".join(yaml.safe_load((REPO / "drills" / f"{name}.yaml").read_text())["hypothesis"].split())
        assert f"{name:<26} (packaged: " in result.output
        assert f"hypothesis: {hypothesis}" in result.output
    assert "(none stated)" not in result.output


def test_a_bare_name_resolves_from_any_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("unbounded-queue", "unbounded-queue.yaml", "drills/unbounded-queue.yaml"):
        assert resolve_drill_path(name) == REPO / "drills" / "unbounded-queue.yaml", name
    assert resolve_drill_path("no-such-drill") == Path("no-such-drill")
    result = _invoke("validate", "unbounded-queue.yaml")
    assert result.exit_code == 0, result.output


def test_copy_makes_an_editable_copy_that_takes_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = _invoke("drills", "copy", "unbounded-queue")
    assert result.exit_code == 0, result.output
    copied = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()}
    assert copied == {
        "drills/unbounded-queue.yaml",
        "scenarios/mixed-interactive-batch.yaml",
        "runbooks/unbounded-queue.md",
    }
    drill = tmp_path / "drills" / "unbounded-queue.yaml"
    drill.write_text(drill.read_text().replace("hypothesis: >-", "hypothesis: >-\n  EDITED"))
    loaded = load_drill("unbounded-queue")
    assert loaded.path == Path("drills/unbounded-queue.yaml")
    assert loaded.scenario_path == Path("scenarios/mixed-interactive-batch.yaml")  # the copy's, not the catalogue's
    assert loaded.runbook_path is not None and loaded.runbook_path.resolve().parent == tmp_path / "runbooks"
    listed = _invoke("drills", "list").output
    assert f"unbounded-queue            (local: {drill})" in listed and "hypothesis: EDITED" in listed


def test_copy_refuses_to_overwrite_without_force(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert _invoke("drills", "copy", "replica-crash").exit_code == 0
    (tmp_path / "runbooks" / "replica-crash.md").write_text("mine")
    again = CliRunner().invoke(cli, ["drills", "copy", "replica-crash"])
    assert again.exit_code == 2 and "would overwrite" in again.output
    assert (tmp_path / "runbooks" / "replica-crash.md").read_text() == "mine"
    assert _invoke("drills", "copy", "replica-crash", "--force").exit_code == 0
    assert (tmp_path / "runbooks" / "replica-crash.md").read_text() == (REPO / "runbooks/replica-crash.md").read_text()


@pytest.mark.parametrize("name", ["no-such-drill", "../drills/gpu-oom", "scenarios/mixed-interactive-batch.yaml"])
def test_copy_of_something_not_a_catalogue_drill_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["drills", "copy", name])
    assert result.exit_code == 2 and "no drill" in result.output, result.output
    assert not list(tmp_path.iterdir())


def test_copy_into_the_catalogue_itself_exits_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    result = CliRunner().invoke(cli, ["drills", "copy", "gpu-oom"])
    assert result.exit_code == 2 and "the catalogue itself" in result.output


def test_a_scenarios_trace_excerpts_are_copied_with_it(tmp_path: Path) -> None:
    scenario = REPO / "scenarios" / "azure-conv-replay.yaml"
    traces = _trace_files(scenario)
    assert traces == [REPO / "scenarios" / "data" / "azure2023_conv_first10min.csv"]
    plan = copy_plan(REPO / "drills" / "gpu-oom.yaml", scenario, None, traces, tmp_path)
    assert [dest.relative_to(tmp_path).as_posix() for _, dest in plan.files] == [
        "drills/gpu-oom.yaml",
        "scenarios/azure-conv-replay.yaml",
        "scenarios/data/azure2023_conv_first10min.csv",
    ]


def test_an_unreadable_local_drill_is_listed_with_why(tmp_path: Path) -> None:
    (tmp_path / "drills").mkdir()
    (tmp_path / "drills" / "broken.yaml").write_text("name: [unclosed\n")
    [broken] = [d for d in catalogue_drills(tmp_path) if d.name == "broken"]
    assert broken.source == "local" and broken.problem
