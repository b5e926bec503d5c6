"""Contract tests for check plugins, shipped for plugin authors (every built-in check passes them).

A check must do what ``drill.api`` promises (:mod:`drill.api.check_sdk`), on run directories alone:

1. **it is registered and verified**: the registry loads it by its kind (so register yours, e.g. with
   ``DRILL_EXTRA_PLUGINS``), it is a ``drill.api.Check`` and its ``Params`` a ``drill.api.CheckParams``;
2. **its params are a contract**: the case's params validate, an unknown key is refused, the model is frozen,
   and ``reads`` names files inside the run directory;
3. **thin evidence is INCONCLUSIVE, never a crash and never PASS**: on an empty run directory and on a minimal
   run (a journal with the run's start, three empty phases and its end; no request) ``evaluate`` returns an
   INCONCLUSIVE verdict of its kind and name;
4. **every verdict serialises**: ``to_json`` is strict JSON (no NaN, no infinity, no object JSON cannot hold)
   and ``Verdict.from_json`` reads it back to the same verdict;
5. **it is a pure function of the run directory**: judged twice from fresh evidence it gives the same verdict,
   it writes nothing into the directory, and every run file it read is one it declares in ``reads`` (an
   unreadable line in a declared file is what makes the engine call a verdict INCONCLUSIVE);
6. **the runs the author built give the statuses the author expects** (``CheckCase.runs``).

Usage, in a pytest test::

    from drill.api import Status
    from drill.testing import CheckCase, run_check_contract

    def test_my_check(tmp_path):
        case = CheckCase("my_check", {"max_error_share": 0.05}, runs=[(passing_run_dir, Status.PASS)])
        print(run_check_contract(case, tmp_path).lines())

Each clause is also a function of its own (``check_*``). Failures raise
:class:`~drill.testing.ContractViolation` (an AssertionError) naming the clause.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ValidationError

from drill import registry
from drill.api import Check, CheckParams, RunEvidence, Status, Verdict
from drill.rundir.journal import Event, Journal
from drill.testing.fault_contract import ContractViolation

__all__ = [
    "CheckCase",
    "CheckContractReport",
    "check_params_contract",
    "check_pure",
    "check_registered",
    "check_statuses",
    "check_thin_evidence",
    "check_verdict_serialises",
    "run_check_contract",
    "write_minimal_run",
]

#: The phases of the minimal run, one second each, no request in any.
MINIMAL_PHASES = ("baseline", "fault", "recovery")


@dataclass
class CheckCase:
    """One check under contract: its kind, the params a drill would give it, and runs with expected statuses.

    ``runs``: run directories the author built (with a kit like ``tests/checks/rundir_kit.py``, or real ones)
    and the status the check must give on each; clauses 4 and 5 are checked on them too. ``incidental_reads``:
    files :class:`~drill.api.RunEvidence` reads on the check's behalf though its verdict does not depend on them
    (``evidence.traces`` joins ``requests.jsonl`` to the spans), so they need not be in ``reads``.
    """

    kind: str
    params: dict[str, Any] = field(default_factory=dict)
    name: str | None = None
    runs: Sequence[tuple[Path, Status]] = ()
    incidental_reads: tuple[str, ...] = ()

    def check(self) -> Check:
        cls = registry.checks.get(self.kind)
        return cls(cls.Params.model_validate(self.params), self.name)


@dataclass
class CheckContractReport:
    """What the contract checked for one check (one line per clause held)."""

    kind: str
    clauses: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        return [f"{self.kind}: {c}" for c in self.clauses]


def write_minimal_run(run_dir: Path) -> Path:
    """A run directory with the least a finished run has: its journal (start, empty phases, end) and no request."""
    run_dir.mkdir(parents=True, exist_ok=True)
    journal = Journal(run_dir / "journal.jsonl")
    journal.write(Event.RUN_STARTED, run_id=run_dir.name, drill="contract", pid=0, pid_start=None)
    for phase in MINIMAL_PHASES:
        journal.write(Event.PHASE_STARTED, phase=phase, planned_s=1.0)
        journal.write(Event.PHASE_ENDED, phase=phase, elapsed_s=1.0, planned_s=1.0)
    journal.write(Event.RUN_FINISHED, status="completed", exit_code=0)
    journal.close()
    (run_dir / "requests.jsonl").write_bytes(b"")
    return run_dir


# -- the clauses -----------------------------------------------------------------------------------


def check_registered(case: CheckCase, report: CheckContractReport) -> None:
    """Clause 1: the registry loads and verifies it; it is a Check whose Params is a CheckParams."""
    cls = registry.checks.get(case.kind)
    if not issubclass(cls, Check):
        raise ContractViolation(f"registered: {cls.__qualname__} is not a drill.api.Check")
    if not issubclass(cls.Params, CheckParams):
        raise ContractViolation(f"registered: {cls.__qualname__}.Params is not a drill.api.CheckParams")
    report.clauses.append("registered and verified, a drill.api.Check with CheckParams")


def check_params_contract(case: CheckCase, report: CheckContractReport) -> None:
    """Clause 2: params validate, an unknown key is refused, the model is frozen, ``reads`` stays in the run."""
    cls = registry.checks.get(case.kind)
    params = cls.Params.model_validate(case.params)
    try:
        cls.Params.model_validate({**case.params, "no_such_param_of_any_check": 1})
    except ValidationError:
        pass
    else:
        raise ContractViolation("params: an unknown key was accepted (Params must forbid extra keys)")
    _refuses_assignment(params)
    check = case.check()
    for name in check.reads:
        path = PurePosixPath(name)
        if not name or path.is_absolute() or ".." in path.parts or "\\" in name:
            raise ContractViolation(f"params: reads names {name!r}, which is not a file inside the run directory")
    report.clauses.append("params validate, unknown keys refused, frozen; reads stay in the run directory")


def _refuses_assignment(params: BaseModel) -> None:
    field_name = next(iter(type(params).model_fields), None)
    if field_name is None:
        return
    try:
        setattr(params, field_name, getattr(params, field_name))
    except ValidationError:
        return
    raise ContractViolation(f"params: {type(params).__qualname__} is not frozen ({field_name} could be assigned)")


def check_thin_evidence(case: CheckCase, report: CheckContractReport, tmp_path: Path) -> None:
    """Clause 3: an empty run directory and a minimal run are INCONCLUSIVE, not a crash, not a PASS."""
    empty = tmp_path / f"check-contract-{case.kind}-empty"
    empty.mkdir(parents=True, exist_ok=True)
    minimal = write_minimal_run(tmp_path / f"check-contract-{case.kind}-minimal")
    for what, run_dir in (("an empty run directory", empty), ("a minimal run", minimal)):
        verdict = _evaluate(case, run_dir, what)
        if verdict.status is not Status.INCONCLUSIVE:
            raise ContractViolation(
                f"thin evidence: on {what} the verdict is {verdict.status.value}, not INCONCLUSIVE: {verdict.message}"
            )
        check_verdict_serialises(verdict, what)
    report.clauses.append("an empty run directory and a minimal run are INCONCLUSIVE")


def _evaluate(case: CheckCase, run_dir: Path, what: str) -> Verdict:
    check = case.check()
    try:
        verdict = check.evaluate(RunEvidence(run_dir))
    except Exception as exc:  # noqa: BLE001 -- any exception is the breach this clause names
        raise ContractViolation(f"evaluate raised on {what}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(verdict, Verdict) or (verdict.kind, verdict.name) != (check.kind, check.name):
        raise ContractViolation(f"evaluate on {what} returned {verdict!r}, not a Verdict of {check.kind}/{check.name}")
    return verdict


def check_verdict_serialises(verdict: Verdict, what: str = "a run") -> None:
    """Clause 4: strict JSON, and read back to the same verdict."""
    try:
        text = json.dumps(verdict.to_json(), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ContractViolation(f"serialises: the verdict on {what} is not strict JSON: {exc}") from exc
    data = json.loads(text)
    again = Verdict.from_json(data)
    if json.loads(json.dumps(again.to_json(), allow_nan=False)) != data or again.status is not verdict.status:
        raise ContractViolation(f"serialises: Verdict.from_json does not read back the verdict on {what}")


def check_pure(case: CheckCase, run_dir: Path, what: str = "a run") -> Verdict:
    """Clause 5: the same verdict twice, nothing written, every run file it read declared in ``reads``."""
    before = _snapshot(run_dir)
    check = case.check()
    evidence = RunEvidence(run_dir)
    first = _evaluate(case, run_dir, what)
    second = check.evaluate(evidence)
    if _comparable(first) != _comparable(second):
        raise ContractViolation(f"pure: two judgements of {what} differ: {first.message!r} vs {second.message!r}")
    if _snapshot(run_dir) != before:
        raise ContractViolation(f"pure: judging {what} changed the run directory")
    undeclared = sorted(set(evidence.reports) - set(check.reads) - set(case.incidental_reads))
    if undeclared:
        raise ContractViolation(
            f"pure: on {what} it read {', '.join(undeclared)} without declaring it in reads "
            "(an unreadable line there would go unnoticed)"
        )
    return first


def _comparable(verdict: Verdict) -> str:
    return json.dumps(verdict.to_json(), sort_keys=True, default=str)


def _snapshot(run_dir: Path) -> dict[str, tuple[int, bytes]]:
    return {
        str(p.relative_to(run_dir)): (p.stat().st_mtime_ns, p.read_bytes() if p.is_file() else b"")
        for p in sorted(run_dir.rglob("*"))
    }


def check_statuses(case: CheckCase, report: CheckContractReport) -> None:
    """Clause 6: each of the case's runs gives the status expected of it (and keeps clauses 4 and 5)."""
    for run_dir, expected in case.runs:
        verdict = check_pure(case, Path(run_dir), str(run_dir))
        check_verdict_serialises(verdict, str(run_dir))
        if verdict.status is not expected:
            raise ContractViolation(
                f"statuses: on {run_dir} the verdict is {verdict.status.value}, expected {expected.value}: "
                f"{verdict.message}"
            )
    if case.runs:
        report.clauses.append(f"{len(case.runs)} run(s) give the expected status, purely, serialisably")


def run_check_contract(case: CheckCase, tmp_path: Path) -> CheckContractReport:
    """Every clause, in order. Raises ContractViolation on the first breach."""
    report = CheckContractReport(case.kind)
    check_registered(case, report)
    check_params_contract(case, report)
    check_thin_evidence(case, report, tmp_path)
    check_pure(case, write_minimal_run(tmp_path / f"check-contract-{case.kind}-pure"), "a minimal run")
    report.clauses.append("pure: the same verdict twice, nothing written, every file read declared in reads")
    check_statuses(case, report)
    return report
