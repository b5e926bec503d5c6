"""Run a sweep: every variant into its own run directory under the sweep's, then judge and report the whole.

The sweep's run directory (``reports/<drill>/<run id>/``, like any run's) holds::

    drill.yaml, resolved.json     the sweep drill as given and as resolved, with each variant's one assignment
    journal.jsonl                 run_started, one note per variant started and finished, run_finished
    variants/<label>/<drill>/<run id>/   each variant's own, complete run directory (drill.runner.variants)
    sweep.json                    the variable and each variant's value, run directory, status, exit code and
                                  skipped faults (what the sweep's checks and figures read)
    scaling.json                  the figures (drill.sweeps.scaling)
    pd_ratio.json                 a sweep of P/D splits: each split's figures and model (drill.sweeps.pd_figures)
    verdicts.json, junit.xml      the sweep's checks, and each run-level check rolled up over the variants
    scaling.md, scaling.html      the report (drill.sweeps.scaling_report)

Variants run one after the other, with the same seed and request set. A variant that is interrupted or leaves a
revert undone stops the sweep (the rest would run on a target that may still be faulted). The exit code is the
worst of the variants' and the sweep's verdicts': 4 a revert failed, 3 a variant could not run, 130 interrupted,
1 a verdict is not PASS, 0 all PASS.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drill.api import Status, Verdict
from drill.report.junit import write_junit
from drill.report.render import load_verdicts
from drill.rundir.directory import RunDir, open_run
from drill.rundir.evidence import RunEvidence
from drill.rundir.files import inside
from drill.rundir.journal import Event, Journal, RunStatus
from drill.rundir.redact import Redactor, secret_environment_values
from drill.runner.judge import planned_checks
from drill.runner.listeners import RunListener
from drill.runner.run import RunOptions, RunResult
from drill.runner.variants import run_variant
from drill.runner.verdicts import judge_one, verdicts_document
from drill.sweeps.pd_figures import is_pd_sweep, measure_pd_sweep
from drill.sweeps.resolve import SweepPlan, SweepVariant, is_sweep_check
from drill.sweeps.scaling import ScalingTable, measure_sweep, read_sweep_record
from drill.sweeps.scaling_report import write_scaling_reports

__all__ = [
    "SWEEP_SCHEMA",
    "SweepRunResult",
    "VariantOutcome",
    "VariantVerdicts",
    "judge_sweep",
    "rolled_up",
    "run_sweep",
]

log = logging.getLogger(__name__)

SWEEP_SCHEMA = "llm-drill/sweep/v1"
#: How bad a status is when rolled up over the variants (the worst wins).
_SEVERITY = {Status.PASS: 0, Status.INCONCLUSIVE: 1, Status.FAIL: 2, Status.ERROR: 3}


@dataclass(frozen=True)
class VariantOutcome:
    variant: SweepVariant
    result: RunResult | None  # None: not run (an earlier variant stopped the sweep)


@dataclass
class SweepRunResult:
    run_dir: Path | None
    exit_code: int = 3
    verdicts: list[Verdict] = field(default_factory=list)
    outcomes: list[VariantOutcome] = field(default_factory=list)
    table: ScalingTable | None = None
    reports: list[Path] = field(default_factory=list)
    message: str = ""
    revert_failures: list[str] = field(default_factory=list)  # "<variant>: <fault>: <error>"
    stopped_by: str | None = None  # a sweep has no fault phase of its own (its variants' reports say)


def run_sweep(
    plan: SweepPlan, options: RunOptions | None = None, listeners: Sequence[RunListener] = ()
) -> SweepRunResult:
    """Run every variant of ``plan``, then measure, judge and report the sweep (see the module docstring)."""
    options = options or RunOptions()
    redactor = Redactor(secrets=secret_environment_values())
    argv = [redactor.value(a) for a in options.argv]
    rundir, journal = open_run(options.out_dir, plan.base.drill.name, argv, time_scale=plan.base.time_scale)
    result = SweepRunResult(rundir.path)
    _write_inputs(rundir, plan, redactor)
    status = RunStatus.COMPLETED
    try:
        result.outcomes = _run_variants(plan, rundir, options, listeners, journal)
    except KeyboardInterrupt:
        status, result.message = RunStatus.INTERRUPTED, "the sweep was interrupted between variants"
        journal.write(Event.NOTE, message=result.message)
    _write_sweep_record(rundir, plan, result.outcomes)
    result.revert_failures = [
        f"{o.variant.label}: {line}" for o in result.outcomes for line in (o.result.revert_failures if o.result else [])
    ]
    result.table = measure_sweep(rundir.path)
    rundir.write_json("scaling.json", result.table.to_json())
    if is_pd_sweep(rundir.path):
        rundir.write_json("pd_ratio.json", measure_pd_sweep(rundir.path).to_json())
    result.verdicts = judge_sweep(rundir.path)
    result.exit_code = _exit_code(result, status)
    rundir.write_json(
        "verdicts.json",
        verdicts_document(rundir.run_id, plan.base.drill.name, status, None, result.verdicts, None),
    )
    write_junit(rundir.file("junit.xml"), rundir.run_id, plan.base.drill.name, result.verdicts)
    journal.write(Event.RUN_FINISHED, status=status, exit_code=result.exit_code)
    result.reports = _render(rundir, journal)
    journal.close()
    return result


def _write_inputs(rundir: RunDir, plan: SweepPlan, redactor: Redactor) -> None:
    base = plan.base
    rundir.write_text("drill.yaml", redactor.value(base.text))
    rundir.write_json(
        "resolved.json",
        redactor.data(
            {
                "drill_file": str(base.path),
                "overrides": list(base.overrides),
                "time_scale": base.time_scale,
                "drill": base.drill.model_dump(mode="json", by_alias=True),
                "check_params": [p.model_dump(mode="json", by_alias=True) for p in base.check_params],
                "variants": [
                    {"label": v.label, "value": v.value, "set": v.assignment, "skipped_faults": list(v.skipped_faults)}
                    for v in plan.variants
                ],
            }
        ),
    )


def _run_variants(
    plan: SweepPlan, rundir: RunDir, options: RunOptions, listeners: Sequence[RunListener], journal: Journal
) -> list[VariantOutcome]:
    outcomes = []
    stopped = ""
    for variant in plan.variants:
        if stopped:
            journal.write(Event.NOTE, message=f"variant {variant.label} not run: {stopped}")
            outcomes.append(VariantOutcome(variant, None))
            continue
        journal.write(Event.NOTE, message=f"variant {variant.label} started: --set {variant.assignment}")
        for line in variant.skipped_faults:
            journal.write(Event.NOTE, message=f"variant {variant.label} runs without a fault its target lacks: {line}")
        run = run_variant(variant.loaded, rundir.path / "variants" / variant.label, options, listeners)
        journal.write(
            Event.NOTE,
            message=f"variant {variant.label} finished: {run.status}, exit {run.exit_code}",
            files=[str(run.run_dir.relative_to(rundir.path))] if run.run_dir else None,
        )
        outcomes.append(VariantOutcome(variant, run))
        if run.revert_failures:
            stopped = f"variant {variant.label} left a revert undone"
        elif run.status is RunStatus.INTERRUPTED:
            stopped = f"variant {variant.label} was interrupted"
    return outcomes


def _write_sweep_record(rundir: RunDir, plan: SweepPlan, outcomes: list[VariantOutcome]) -> None:
    rundir.write_json(
        "sweep.json",
        {
            "schema": SWEEP_SCHEMA,
            "variable": plan.sweep.variable,
            "values": list(plan.sweep.values),
            "variants": [_variant_record(rundir, o) for o in outcomes],
        },
    )


def _variant_record(rundir: RunDir, outcome: VariantOutcome) -> dict[str, Any]:
    variant, run = outcome.variant, outcome.result
    record: dict[str, Any] = {
        "label": variant.label,
        "value": variant.value,
        "set": variant.assignment,
        "skipped_faults": list(variant.skipped_faults),
        "run_dir": None,
        "status": "not run",
        "exit_code": None,
        "verdicts": {},
    }
    if run is not None:
        record.update(
            run_dir=str(run.run_dir.relative_to(rundir.path)) if run.run_dir else None,
            status=str(run.status),
            exit_code=run.exit_code,
            verdicts={v.name: v.status.value for v in run.verdicts},
        )
    return record


# --- verdicts -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VariantVerdicts:
    """One variant's verdicts as the sweep rolls them up (None: it has none, ``why_not`` says why)."""

    label: str
    verdicts: list[Verdict] | None
    why_not: str = ""


def judge_sweep(run_dir: Path, variant_verdicts: Callable[[Path], list[Verdict] | None] | None = None) -> list[Verdict]:
    """The sweep's verdicts from its run directory alone, in the drill's check order: a sweep check judged over the
    sweep, a run-level one rolled up over the variants' verdicts (their ``verdicts.json``, or ``variant_verdicts``
    of each variant's run directory: ``drill judge`` judges them again)."""
    read = variant_verdicts or _recorded_verdicts

    planned = planned_checks(run_dir, RunEvidence(run_dir).resolved)
    entries = [
        _variant_verdicts(run_dir, item, read) for item in (read_sweep_record(run_dir) or {}).get("variants", [])
    ]
    evidence = RunEvidence(run_dir)
    return [
        judge_one(c.kind, c.name, c.params, evidence) if is_sweep_check(c.kind) else rolled_up(c.name, entries)
        for c in planned
    ]


def _variant_verdicts(run_dir: Path, item: dict, read: Callable[[Path], list[Verdict] | None]) -> VariantVerdicts:
    if not item.get("run_dir"):
        return VariantVerdicts(item["label"], None, "not run")
    verdicts = read(inside(run_dir, str(item["run_dir"])))
    if item.get("skipped_faults"):
        why = "it ran without the fault its target lacks"
    else:
        why = f"the run ended {item.get('status', '?')}"
    return VariantVerdicts(item["label"], verdicts, why)


def _recorded_verdicts(variant_dir: Path) -> list[Verdict] | None:
    if not (variant_dir / "verdicts.json").is_file():
        return None
    return load_verdicts(variant_dir)


def rolled_up(name: str, variants: list[VariantVerdicts]) -> Verdict:
    """Check ``name`` over the variants: the worst of their verdicts, each variant's status in the message."""
    found: list[tuple[str, Verdict]] = []
    parts = []
    for variant in variants:
        verdict = next((v for v in variant.verdicts or [] if v.name == name), None)
        if verdict is None:
            parts.append(f"{variant.label}: not judged ({variant.why_not})")
            continue
        found.append((variant.label, verdict))
        parts.append(f"{variant.label}: {verdict.status.value}")
    if not found:
        return Verdict(name, name, Status.INCONCLUSIVE, "no variant judged it — " + "; ".join(parts))
    worst = max((v.status for _, v in found), key=_SEVERITY.__getitem__)
    kind = found[0][1].kind
    first_bad = next((f"{label}: {v.message}" for label, v in found if v.status is worst), "")
    message = "; ".join(parts) + (f" — {first_bad}" if worst is not Status.PASS else "")
    observed = {label: v.status.value for label, v in found}
    return Verdict(kind, name, worst, message, observed=observed, notes=tuple(parts))


def _exit_code(result: SweepRunResult, status: RunStatus) -> int:
    runs = [o.result for o in result.outcomes if o.result is not None]
    if any(r.revert_failures for r in runs):
        return 4
    if status is RunStatus.INTERRUPTED or any(r.status is RunStatus.INTERRUPTED for r in runs):
        return next((r.exit_code for r in runs if r.status is RunStatus.INTERRUPTED), 130)
    if any(r.exit_code not in (0, 1) for r in runs):
        return 3
    return 1 if any(v.status is not Status.PASS for v in result.verdicts) else 0


def _render(rundir: RunDir, journal: Journal) -> list[Path]:
    """``scaling.md`` and ``scaling.html``; a broken report never breaks the sweep (the evidence stands)."""
    try:
        return write_scaling_reports(rundir.path)
    except Exception as exc:  # noqa: BLE001 - the verdicts and figures are written already
        log.error("rendering the scaling report failed: %s", exc)
        journal.write(Event.NOTE, message=f"scaling report not rendered: {type(exc).__name__}: {exc}")
        return []
