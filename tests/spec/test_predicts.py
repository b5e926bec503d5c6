"""A drill's ``hypothesis`` and ``predicts``: each predicted name is one of the drill's checks, or a located
error naming the checks it could have meant."""

from __future__ import annotations

from pathlib import Path

import pytest

from drill.errors import SpecError
from drill.spec.loader import load_drill
from tests.minimal_drill import minimal_drill

DRILL = minimal_drill(
    "predicting", "checks:\n  - {kind: slo, name: baseline-slo}\n  - {kind: error_rate}\nhypothesis: the SLO holds\n"
)


def _write(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "drill.yaml"
    path.write_text(DRILL + extra)
    return path


def test_predicts_names_checks_by_name_or_kind(tmp_path: Path) -> None:
    loaded = load_drill(_write(tmp_path, "predicts: {baseline-slo: PASS, error_rate: FAIL}\n"))
    assert loaded.drill.hypothesis == "the SLO holds"
    assert loaded.drill.predicts == {"baseline-slo": "PASS", "error_rate": "FAIL"}


def test_an_unknown_check_name_is_a_located_error_with_a_suggestion(tmp_path: Path) -> None:
    path = _write(tmp_path, "predicts:\n  baseline-slo: PASS\n  baseline_slo: FAIL\n")
    with pytest.raises(SpecError) as raised:
        load_drill(path)
    [problem] = raised.value.diagnostics
    assert problem.path == ("predicts", "baseline_slo")
    assert (problem.position.source, problem.position.line) == (str(path), 16)
    assert "did you mean 'baseline-slo'" in problem.message and "checks: baseline-slo, error_rate" in problem.message


def test_fault_landed_is_a_check_only_in_a_drill_with_faults(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as raised:
        load_drill(_write(tmp_path, "predicts: {fault_landed: PASS}\n"))
    assert raised.value.diagnostics[0].path == ("predicts", "fault_landed")
    faulted = "faults: [{kind: queue_flood, params: {rate_multiplier: 2}}]\npredicts: {fault_landed: PASS}\n"
    assert load_drill(_write(tmp_path, faulted)).drill.predicts == {"fault_landed": "PASS"}


@pytest.mark.parametrize("status", ["ERROR", "pass", "MAYBE"])
def test_only_pass_fail_inconclusive_can_be_predicted(tmp_path: Path, status: str) -> None:
    with pytest.raises(SpecError) as raised:
        load_drill(_write(tmp_path, f"predicts: {{baseline-slo: {status}}}\n"))
    assert raised.value.diagnostics[0].path == ("predicts", "baseline-slo")
