"""The check contract kit (``drill.testing``): every built-in check keeps it, and it catches each breach.

The built-in checks are llm-drill's own ``drill.checks`` entry points (no hand-kept list); the breaches are the
test plugins of ``tests/plugins/checks.py``, registered the way a plugin author would (``DRILL_EXTRA_PLUGINS``).
"""

from __future__ import annotations

import importlib
import inspect
import os
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import drill.api
import drill.checks
import drill.runner.judge
from drill import registry
from drill.api import Check, RunEvidence, Status
from drill.testing import CheckCase, ContractViolation, run_check_contract, write_minimal_run
from tests.checks.rundir_kit import RunKit

BUILT_IN = sorted(
    ep.name for ep in entry_points(group="drill.checks") if ep.dist is not None and ep.dist.name == "llm-drill"
)
#: Files RunEvidence reads for a check though its verdict does not depend on them, and why.
INCIDENTAL = {"first_abnormal_span": ("requests.jsonl",)}  # evidence.traces joins the client records to the spans

BROKEN = {
    "test_raises_on_thin_run": "evaluate raised on an empty run directory: IndexError",
    "test_passes_on_nothing": "on an empty run directory the verdict is PASS, not INCONCLUSIVE",
    "test_nan_figure": "is not strict JSON",
    "test_writes_into_the_run": "judging a minimal run changed the run directory",
    "test_reads_undeclared": "it read requests.jsonl without declaring it in reads",
    "test_loose_params": "Params is not a drill.api.CheckParams",
    "test_open_params": "an unknown key was accepted",
    "test_reads_outside": "reads names '../requests.jsonl'",
}


@pytest.fixture
def broken_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    extra = ";".join(f"drill.checks:{kind}=tests.plugins.checks:{_class(kind)}" for kind in BROKEN)
    monkeypatch.setenv("DRILL_EXTRA_PLUGINS", os.environ["DRILL_EXTRA_PLUGINS"] + ";" + extra)


def _class(kind: str) -> str:
    module = importlib.import_module("tests.plugins.checks")
    return next(name for name, cls in vars(module).items() if getattr(cls, "kind", None) == kind)


def test_every_check_class_of_llm_drill_has_an_entry_point() -> None:
    stems = [p.stem for p in Path(drill.checks.__file__).parent.glob("*.py")]
    modules = [importlib.import_module(f"drill.checks.{stem}") for stem in stems]
    classes = {
        cls.kind: f"{module.__name__}:{name}"
        for module in modules + [importlib.import_module(f"drill.sweeps.{m}") for m in ("tp_scaling", "pd_ratio")]
        for name, cls in vars(module).items()
        if inspect.isclass(cls) and issubclass(cls, Check) and cls.__module__ == module.__name__
        if not inspect.isabstract(cls)
    }
    assert len(BUILT_IN) >= 10 and sorted(classes) == BUILT_IN
    assert {kind: registry.checks.info(kind).value for kind in BUILT_IN} == classes


@pytest.mark.parametrize("kind", BUILT_IN)
def test_every_built_in_check_keeps_the_contract(kind: str, tmp_path: Path) -> None:
    report = run_check_contract(CheckCase(kind, incidental_reads=INCIDENTAL.get(kind, ())), tmp_path)
    assert len(report.clauses) == 4 and all(line.startswith(f"{kind}: ") for line in report.lines())


def test_the_runs_a_case_brings_are_judged_to_their_expected_status(tmp_path: Path) -> None:
    landed, lost = RunKit(tmp_path / "landed"), RunKit(tmp_path / "lost")
    for kit, ok in ((landed, True), (lost, False)):
        kit.phases(baseline=(0, 30), fault=(30, 60), recovery=(60, 90))
        kit.fault("flood-0", injected=31, reverted=59, landed=ok)
    runs = [(landed.write(), Status.PASS), (lost.write(), Status.FAIL)]
    report = run_check_contract(CheckCase("fault_landed", runs=runs), tmp_path)
    assert report.clauses[-1] == "2 run(s) give the expected status, purely, serialisably"
    with pytest.raises(ContractViolation, match=r"the verdict is FAIL, expected PASS"):
        run_check_contract(CheckCase("fault_landed", runs=[(runs[1][0], Status.PASS)]), tmp_path)


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_the_kit_catches_each_breach(kind: str, broken_checks: None, tmp_path: Path) -> None:
    with pytest.raises(ContractViolation) as caught:
        run_check_contract(CheckCase(kind), tmp_path)
    assert BROKEN[kind] in str(caught.value)


def test_the_minimal_run_reads_as_a_finished_run_with_three_empty_phases(tmp_path: Path) -> None:
    evidence = RunEvidence(write_minimal_run(tmp_path / "run"))
    assert sorted(evidence.phases) == ["baseline", "fault", "recovery"] and evidence.requests == []
    assert [e.event for e in evidence.journal][::7] == ["run_started", "run_finished"]
    assert all(report.clean for report in evidence.reports.values())


def test_drill_api_gives_a_check_everything_it_needs() -> None:
    assert drill.api.RunEvidence is drill.runner.judge.RunEvidence  # the very class `drill judge` reads runs with
    assert {"Check", "CheckParams", "EvidenceKind", "EvidenceRef", "RunEvidence", "Status", "Verdict"} <= set(
        drill.api.__all__
    )
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        drill.api.NoSuchName  # noqa: B018 -- the module's __getattr__ refuses what it does not export
