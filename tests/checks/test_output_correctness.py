"""``output_correctness`` on hand-built run directories: golden answers from the baseline or a golden file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from drill.api import EvidenceKind, Status
from drill.checks.answers import OutputCorrectnessCheck, OutputCorrectnessParams, first_difference
from drill.testing import CheckCase, run_check_contract
from tests.checks.rundir_kit import RunKit

RIGHT = ["The", " river", " runs", " east"]
WRONG = ["The", " river", " sound", " east"]


def _check(**params) -> OutputCorrectnessCheck:
    return OutputCorrectnessCheck(OutputCorrectnessParams(**params))


def _answer(kit: RunKit, at: float, body: str, head: list[str], **fields) -> None:
    kit.request(
        at,
        payload_digest=f"sha256:{body}",
        output_digest="sha256:" + "".join(head).replace(" ", "_"),
        output_head=head,
        **fields,
    )


def _run(tmp_path: Path, *, corrupt: tuple[str, ...] = (), name: str = "run") -> RunKit:
    """Five prompts answered in the baseline, then the same five bodies again in the fault phase."""
    kit = RunKit(tmp_path / name)
    kit.phases(baseline=(0, 30), fault=(30, 60), recovery=(60, 90))
    for i in range(5):
        _answer(kit, 1 + i, f"p{i}", RIGHT, request_id=f"base-{i}")
    for i in range(5):
        rid = f"fault-{i}"
        _answer(kit, 31 + i, f"p{i}", WRONG if rid in corrupt else RIGHT, request_id=rid)
    return kit


def test_answers_equal_to_the_baseline_pass(tmp_path: Path) -> None:
    verdict = _check().evaluate(_run(tmp_path).evidence())
    assert verdict.status is Status.PASS, verdict.message
    assert verdict.observed["compared"] == 5 and verdict.observed["matched"] == 5


def test_http_200_with_other_tokens_fails_naming_the_requests_and_the_first_differing_token(tmp_path: Path) -> None:
    verdict = _check().evaluate(_run(tmp_path, corrupt=("fault-1", "fault-3")).evidence())
    assert verdict.status is Status.FAIL
    assert verdict.observed["mismatched_request_ids"] == ["fault-1", "fault-3"]
    assert verdict.observed["mismatched_http_200"] == 2
    assert "first differing token #2" in verdict.message and "base-1" in verdict.message
    assert " sound" not in verdict.message  # the text is redacted unless the drill includes text
    requests = [e.value for e in verdict.evidence if e.kind is EvidenceKind.REQUEST]
    assert requests == ["fault-1", "fault-3"]


def test_the_token_is_shown_when_the_drill_includes_text(tmp_path: Path) -> None:
    kit = _run(tmp_path, corrupt=("fault-0",))
    run = kit.write()
    resolved = json.loads((run / "resolved.json").read_text())
    resolved["drill"] = {"report": {"include_text": True}}
    (run / "resolved.json").write_text(json.dumps(resolved))
    from drill.rundir.evidence import RunEvidence

    verdict = _check().evaluate(RunEvidence(run))
    assert '" sound", golden " runs"' in verdict.message


def test_max_mismatches_tolerates_that_many(tmp_path: Path) -> None:
    evidence = _run(tmp_path, corrupt=("fault-2",)).evidence()
    assert _check(max_mismatches=1).evaluate(evidence).status is Status.PASS


def test_no_digested_answer_is_inconclusive_never_pass(tmp_path: Path) -> None:
    kit = RunKit(tmp_path / "run")
    kit.phases(baseline=(0, 30), fault=(30, 60), recovery=(60, 90))
    kit.request(1)
    kit.request(31)
    verdict = _check().evaluate(kit.evidence())
    assert verdict.status is Status.INCONCLUSIVE and "digested" in verdict.message


def test_a_body_without_a_golden_answer_is_counted_not_judged(tmp_path: Path) -> None:
    kit = RunKit(tmp_path / "run")
    kit.phases(baseline=(0, 30), fault=(30, 60), recovery=(60, 90))
    _answer(kit, 1, "p0", RIGHT)
    _answer(kit, 31, "other", WRONG)
    verdict = _check().evaluate(kit.evidence())
    assert verdict.status is Status.INCONCLUSIVE and verdict.observed["no_golden"] == 1


def test_a_baseline_that_disagrees_with_itself_gives_no_golden_answer(tmp_path: Path) -> None:
    kit = _run(tmp_path)
    _answer(kit, 10, "p0", WRONG, request_id="base-again")
    verdict = _check().evaluate(kit.evidence())
    assert verdict.status is Status.PASS and verdict.observed["ambiguous_golden"] == 1
    assert verdict.observed["compared"] == 4 and any("not deterministic" in n for n in verdict.notes)


def test_pools_above_temperature_zero_are_not_judged(tmp_path: Path) -> None:
    kit = _run(tmp_path, corrupt=("fault-0",))
    run = kit.write()
    resolved = json.loads((run / "resolved.json").read_text())
    resolved["scenario"]["pools"] = [{"name": "interactive", "sampling": {"temperature": 0.7}}]
    (run / "resolved.json").write_text(json.dumps(resolved))
    from drill.rundir.evidence import RunEvidence

    verdict = _check().evaluate(RunEvidence(run))
    assert verdict.status is Status.INCONCLUSIVE and "temperature" in " ".join(verdict.notes)


def test_a_golden_file_inside_the_run_directory(tmp_path: Path) -> None:
    clean = _run(tmp_path, name="clean").write()
    kit = _run(tmp_path, corrupt=("fault-4",))
    kit.raw_line("golden.jsonl", (clean / "requests.jsonl").read_text())  # a clean run's records are golden
    check = _check(golden_file="golden.jsonl", judged_phases=("baseline", "fault"))
    assert check.reads[-1] == "golden.jsonl"
    verdict = check.evaluate(kit.evidence())
    assert verdict.status is Status.FAIL and verdict.observed["mismatched_request_ids"] == ["fault-4"]
    assert verdict.observed["compared"] == 10


@pytest.mark.parametrize("path", ["/etc/golden.jsonl", "../other/requests.jsonl", ""])
def test_a_golden_file_outside_the_run_directory_is_refused(path: str) -> None:
    with pytest.raises(ValidationError, match="inside the run directory"):
        OutputCorrectnessParams(golden_file=path)


def test_first_difference() -> None:
    assert first_difference(("a", "b"), ("a", "c")) == (1, "b", "c")
    assert first_difference(("a",), ("a", "c")) == (1, "", "c")
    assert first_difference(("a",), ("a",)) is None and first_difference(None, ("a",)) is None


def test_output_correctness_keeps_the_contract(tmp_path: Path) -> None:
    runs = [(_run(tmp_path, name="ok").write(), Status.PASS)]
    runs.append((_run(tmp_path, corrupt=("fault-0",), name="bad").write(), Status.FAIL))
    print(run_check_contract(CheckCase("output_correctness", runs=runs), tmp_path / "contract").lines())
    golden = CheckCase("output_correctness", {"golden_file": "golden.jsonl"}, runs=[(runs[0][0], Status.INCONCLUSIVE)])
    run_check_contract(golden, tmp_path / "contract-golden")  # the golden file missing: INCONCLUSIVE


def test_first_tokens_kept_as_digests_still_locate_the_difference(tmp_path: Path) -> None:
    from drill.load.output import token_digest

    kit = RunKit(tmp_path / "run")
    kit.phases(baseline=(0, 30), fault=(30, 60), recovery=(60, 90))
    _answer(kit, 1, "p0", [token_digest(t) for t in RIGHT], request_id="base")
    _answer(kit, 31, "p0", [token_digest(t) for t in WRONG], request_id="bad")
    verdict = _check().evaluate(kit.evidence())
    assert verdict.status is Status.FAIL
    assert f"first differing token #2: {token_digest(' sound')}, golden {token_digest(' runs')}" in verdict.message
