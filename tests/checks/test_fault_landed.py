"""``fault_landed`` judges the drill's planned faults, not only the ones the journal mentions."""

from __future__ import annotations

import json
from pathlib import Path

from drill.api import EvidenceKind, Status
from drill.checks.builtin import FaultLandedCheck
from drill.rundir.evidence import RunEvidence
from tests.checks.rundir_kit import RunKit


def _judge(kit: RunKit, faults: list[dict] | None):
    """Write the run, with the drill's planned ``faults`` in resolved.json (None: no drill section)."""
    run_dir = kit.write()
    if faults is not None:
        resolved = json.loads((run_dir / "resolved.json").read_text())
        resolved["drill"] = {**resolved.get("drill", {}), "faults": faults}
        (run_dir / "resolved.json").write_text(json.dumps(resolved))
    return FaultLandedCheck(FaultLandedCheck.Params()).evaluate(RunEvidence(run_dir))


def _seqs(kit: RunKit, event: str, fault_id: str) -> set[str]:
    return {str(e["seq"]) for e in kit.journal if e["event"] == event and e.get("fault_id") == fault_id}


def test_a_fault_cut_off_by_a_stop_condition_is_a_fail(tmp_path: Path) -> None:
    kit = RunKit(tmp_path)
    kit.phase("baseline", 0, 30)
    kit.event("phase_started", 30, phase="fault", planned_s=60)
    kit.fault("slow", injected=31, reverted=40, kind="slow_replica")
    kit.event("stop_condition", 40, condition="error_rate > 50%", kind="error_rate", observed=0.8)
    kit.event("phase_ended", 40, phase="fault", elapsed_s=10, stopped_by="error_rate > 50%", planned_s=60)
    verdict = _judge(
        kit,
        [{"name": "slow", "kind": "slow_replica", "start": 1.0}, {"name": None, "kind": "replica_kill", "start": 45.0}],
    )
    assert verdict.status is Status.FAIL
    assert "never injected: replica_kill-1" in verdict.message and "error_rate > 50%" in verdict.message
    assert verdict.observed["slow"] == "landed" and verdict.observed["replica_kill-1"] == "never injected"
    assert verdict.observed["planned"] == 2 and verdict.observed["injected"] == 1
    journal = {e.value for e in verdict.evidence if e.kind is EvidenceKind.JOURNAL}
    assert _seqs(kit, "fault_injected", "slow") | _seqs(kit, "fault_verified", "slow") <= journal


def test_max_duration_before_the_fault_phase_fails_every_planned_fault(tmp_path: Path) -> None:
    kit = RunKit(tmp_path)
    kit.phase("baseline", 0, 30)
    kit.event("stop_condition", 20, condition="max_duration 20s", kind="max_duration", observed=20)
    verdict = _judge(kit, [{"kind": "queue_flood"}])
    assert verdict.status is Status.FAIL and "queue_flood-0" in verdict.message
    assert "max_duration" in verdict.message


def test_every_planned_fault_injected_and_verified_passes(tmp_path: Path) -> None:
    kit = RunKit(tmp_path)
    kit.phase("fault", 30, 90)
    kit.fault("queue_flood-0", injected=31, reverted=60)
    kit.fault("pause", injected=61, reverted=80, kind="replica_pause")
    verdict = _judge(kit, [{"kind": "queue_flood"}, {"name": "pause", "kind": "replica_pause"}])
    assert verdict.status is Status.PASS, verdict.message
    assert verdict.observed["landed"] == 2
    journal = {e.value for e in verdict.evidence if e.kind is EvidenceKind.JOURNAL}
    assert _seqs(kit, "fault_verified", "pause") <= journal


def test_a_fault_that_was_injected_but_did_not_land_fails(tmp_path: Path) -> None:
    kit = RunKit(tmp_path)
    kit.phase("fault", 30, 90)
    kit.fault("queue_flood-0", injected=31, reverted=60, landed=False)
    verdict = _judge(kit, [{"kind": "queue_flood"}])
    assert verdict.status is Status.FAIL and "did not land: queue_flood-0" in verdict.message
    assert "never injected" not in verdict.message


def test_no_fault_planned_or_injected_is_inconclusive(tmp_path: Path) -> None:
    kit = RunKit(tmp_path)
    kit.phase("baseline", 0, 30)
    assert _judge(kit, []).status is Status.INCONCLUSIVE


def test_without_the_plan_the_journal_is_judged_and_that_is_noted(tmp_path: Path) -> None:
    kit = RunKit(tmp_path)
    kit.phase("fault", 30, 90)
    kit.fault("f", injected=31, reverted=60)
    verdict = _judge(kit, None)
    assert verdict.status is Status.PASS and any("planned faults are unknown" in n for n in verdict.notes)
