"""Evaluate a run's checks and write ``verdicts.json`` and ``summary.md``.

Every check listed in the drill runs, plus ``fault_landed`` whenever the drill
has faults and does not list it: a fault that did not land must never let a
drill pass. A check that raises becomes an ERROR verdict; the others still run.
"""

from __future__ import annotations

from drill import registry
from drill.checks.base import Evidence, Status, Verdict
from drill.engine.rundir import RunDir
from drill.spec.loader import LoadedDrill

__all__ = ["evaluate_checks", "write_verdicts"]


def evaluate_checks(loaded: LoadedDrill, evidence: Evidence) -> list[Verdict]:
    verdicts = []
    specs = list(zip(loaded.drill.checks, loaded.check_params))
    if loaded.drill.faults and not any(spec.kind == "fault_landed" for spec, _ in specs):
        fault_landed = registry.checks.get("fault_landed")
        specs.insert(0, (None, fault_landed.Params()))
    for spec, params in specs:
        kind = spec.kind if spec is not None else "fault_landed"
        name = (spec.name if spec is not None else None) or kind
        try:
            check = registry.checks.get(kind)(params, name)
            verdicts.append(check.evaluate(evidence))
        except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
            verdicts.append(Verdict(kind, name, Status.ERROR, f"check raised {type(exc).__name__}: {exc}"))
    return verdicts


def write_verdicts(rundir: RunDir, loaded: LoadedDrill, result) -> None:
    rundir.write_json("verdicts.json", {
        "run_id": rundir.run_id,
        "drill": loaded.drill.name,
        "status": result.status,
        "stopped_by": result.stopped_by,
        "verdicts": [v.to_json() for v in result.verdicts],
    })
    rundir.write_text("summary.md", render_summary(rundir, loaded, result))


def render_summary(rundir: RunDir, loaded: LoadedDrill, result) -> str:
    drill = loaded.drill
    lines = [f"# Drill `{drill.name}` — run {rundir.run_id}", ""]
    if drill.title:
        lines += [drill.title, ""]
    if result.stopped_by:
        lines += [f"**The fault phase ended early: stop condition `{result.stopped_by}` fired.**", ""]
    lines += ["| check | status | message |", "|---|---|---|"]
    for v in result.verdicts:
        lines.append(f"| {v.name} | {v.status.value} | {v.message.replace('|', '/')} |")
    lines += ["", "Raw evidence in this directory: `journal.jsonl`, `requests.jsonl`, `spans.jsonl`, "
              "`metrics.jsonl`, `failing_samples.jsonl`, `replay.jsonl`.", ""]
    return "\n".join(lines)
