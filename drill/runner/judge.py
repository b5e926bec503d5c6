"""Re-judge a past run from its run directory alone: ``drill judge RUN_DIR``.

The checks, their params and the SLOs come from the run's ``resolved.json``; the
evidence from the files beside it. Checks are pure functions of the directory,
so re-judging a finished run gives the verdicts the run gave (and a run judged
after a checks upgrade gives the new verdicts on the old evidence). Nothing in
the run directory is changed: it is append-only evidence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ValidationError

from drill import registry
from drill.api import Verdict
from drill.errors import InputError
from drill.rundir.evidence import RunEvidence
from drill.rundir.files import check_run_dir
from drill.rundir.journal import Event, RunStatus
from drill.runner.verdicts import PlannedCheck, judge_one, plan_checks, verdicts_document

__all__ = ["Judgement", "SweepJudge", "rejudge"]


@dataclass(frozen=True)
class Judgement:
    run_dir: Path
    run_id: str
    drill: str
    status: str  # how the run ended, from its journal: a RunStatus value
    stopped_by: str | None
    verdicts: list[Verdict]
    evidence: RunEvidence

    def document(self) -> dict:
        """The ``verdicts.json`` document these verdicts make."""
        return verdicts_document(self.run_id, self.drill, self.status, self.stopped_by, self.verdicts, self.evidence)


#: How a sweep's run directory is judged (``drill.sweeps.sweeper.judge_sweep``, given by the CLI: sweeps sit above
#: the engine): the run directory and how to judge each variant's directory again, to the sweep's verdicts.
SweepJudge = Callable[[Path, Callable[[Path], list[Verdict] | None]], list[Verdict]]


def rejudge(run_dir: Path, *, sweep_judge: SweepJudge) -> Judgement:
    """Evaluate the run's checks again; InputError (exit 2) when ``run_dir`` is not a run directory or its
    ``resolved.json`` is damaged. A run with no check has no verdicts (a sweep's variant may have none)."""
    evidence = _evidence(run_dir)
    drill = evidence.resolved.get("drill") or {}
    if (run_dir / "sweep.json").is_file():  # a sweep: its checks over the whole, each variant judged again
        verdicts = sweep_judge(run_dir, lambda variant_dir: rejudge(variant_dir, sweep_judge=sweep_judge).verdicts)
        status, stopped_by = _how_it_ended(evidence)
        return Judgement(run_dir, run_dir.name, str(drill.get("name", "?")), status, stopped_by, verdicts, evidence)
    planned = planned_checks(run_dir, evidence.resolved)
    verdicts = [judge_one(c.kind, c.name, c.params, evidence) for c in planned]
    status, stopped_by = _how_it_ended(evidence)
    return Judgement(run_dir, run_dir.name, str(drill.get("name", "?")), status, stopped_by, verdicts, evidence)


def planned_checks(run_dir: Path, resolved: dict) -> list[PlannedCheck]:
    """The checks ``resolved.json`` lists, with their params validated again; InputError (exit 2) naming the check
    when the params recorded there do not fit (the run directory was altered, or comes from another version)."""
    drill = resolved.get("drill") or {}
    specs = drill.get("checks") or []
    dumps = resolved.get("check_params") or [{} for _ in specs]
    params = [_params(spec["kind"], dump, i, run_dir) for i, (spec, dump) in enumerate(zip(specs, dumps))]
    return plan_checks([(s["kind"], s.get("name")) for s in specs], params, bool(drill.get("faults")))


def _evidence(run_dir: Path) -> RunEvidence:
    """The run's evidence, its ``resolved.json`` read and checked (InputError when it is missing or damaged)."""
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: no such run directory", hint="pass a directory such as reports/<drill>/<run id>")
    check_run_dir(run_dir)  # a received run directory: no link or special file in it is read
    if not (run_dir / "resolved.json").exists():
        raise InputError(
            f"{run_dir}: not a run directory (it has no resolved.json)",
            hint="pass a directory that `drill run` created, such as reports/<drill>/<run id>",
        )
    evidence = RunEvidence(run_dir)
    _ = evidence.resolved  # read and checked now: a damaged file is exit 2 before any check runs
    return evidence


def _params(kind: str, dump: dict | None, index: int, run_dir: Path) -> BaseModel:
    """Check ``index``'s params as resolved.json holds them; InputError naming the check when they do not fit."""
    try:
        return registry.checks.get(kind).Params.model_validate(dump or {})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(params)'}: {e['msg']}" for e in exc.errors()[:5])
        raise InputError(
            f"{run_dir / 'resolved.json'}: check_params[{index}] ({kind}) do not fit the check: {problems}",
            hint="the run directory is damaged, or was written by a version whose check params differ",
        ) from None


def _how_it_ended(evidence: RunEvidence) -> tuple[str, str | None]:
    finished = [e for e in evidence.journal if e.event == Event.RUN_FINISHED.value]
    if not finished:
        return RunStatus.UNFINISHED, None
    last = finished[-1]
    return str(last.get("status", "?")), last.get("stopped_by")
