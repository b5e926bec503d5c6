"""The sweep's figures, the ``tp_scaling`` check and the scaling report, on sweep directories written by hand
(``sweep_kit``): no stack, no load. The real sweep is ``test_tp_scaling.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from drill.api import Status, Verdict
from drill.cli.main import cli
from drill.rundir.evidence import RunEvidence
from drill.sweeps.scaling import measure_sweep
from drill.sweeps.scaling_report import findings, write_scaling_reports
from drill.sweeps.sweeper import VariantVerdicts, rolled_up
from drill.sweeps.tp_scaling import TpScalingCheck, TpScalingParams
from tests.sweeps.sweep_kit import LINK_FAULT, PHASE_S, TOKENS, write_sweep

#: TP -> (healthy, degraded) TPOT p50 in ms: the gain of TP=2 (2x) reverses on degraded links (80/120 = 0.67x).
REVERSES = {1: (80.0, 80.0), 2: (40.0, 120.0), 4: (25.0, 110.0)}


def _judge(root: Path, **params) -> object:
    return TpScalingCheck(TpScalingParams(**params)).evaluate(RunEvidence(root))


def test_the_figures_of_each_variant_and_link_state(tmp_path: Path) -> None:
    table = measure_sweep(write_sweep(tmp_path / "sweep", REVERSES))
    tp1, tp2, tp4 = table.variants
    assert (tp2.healthy.tpot_p50_ms, tp2.degraded.tpot_p50_ms) == (40.0, 120.0)
    assert tp2.healthy.requests == tp2.degraded.requests == 8
    assert tp2.healthy.stream_tokens_per_s == 25.0  # 1000 / 40 ms
    assert tp2.healthy.output_tokens_per_s == pytest.approx(8 * TOKENS / PHASE_S)  # every chunk inside the window
    assert tp2.healthy.goodput_rps == pytest.approx(0.8) and tp2.degraded.goodput_rps == 0  # TPOT SLO 100 ms
    assert tp1.degraded.link.startswith("no link to degrade (tp-links: fault 'nccl_degradation' needs")
    assert tp2.degraded.link == "degraded: tp-links (nccl_degradation)"
    assert table.speedup("healthy", tp2) == 2.0 and table.speedup("degraded", tp2) == pytest.approx(2 / 3)
    assert table.speedup("healthy", tp4) == 3.2
    assert table.same_request_set and table.request_set.startswith("the same 16 requests (ids and payload bytes")


def test_the_prediction_follows_the_stacks_cost_model(tmp_path: Path) -> None:
    """L4, Llama-3-8B, a batch of ~1 at ~404 tokens: the decode step halves at TP=2 and pays 64 all-reduces;
    1 ms a round on the degraded link adds 64 ms a step; TP=1 has no link and no increase."""
    tp1, tp2, tp4 = measure_sweep(write_sweep(tmp_path / "sweep", REVERSES)).variants
    assert tp1.prediction.comm_ms == 0 and tp1.prediction.link_increase_ms is None
    assert tp2.prediction.stage_ms == pytest.approx(tp1.prediction.stage_ms / 2, rel=0.02)
    assert tp4.prediction.stage_ms == pytest.approx(tp1.prediction.stage_ms / 4, rel=0.02)
    assert tp2.prediction.comm_ms == pytest.approx(64 * 0.030, rel=0.05)  # L4: alpha 30 us, 64 rounds
    assert tp2.prediction.link_increase_ms == tp4.prediction.link_increase_ms == 64.0
    assert 65 < tp1.prediction.step_ms < 75  # 16.1 GB of weights at 300 GB/s x 0.78


def test_tp_scaling_passes_when_tp2_beats_tp1_and_the_gain_reverses_on_degraded_links(tmp_path: Path) -> None:
    verdict = _judge(write_sweep(tmp_path / "sweep", REVERSES), min_speedup=1.3, degraded="reverses")
    assert verdict.status is Status.PASS, verdict.message
    assert verdict.observed["healthy_speedup"] == 2.0 and verdict.observed["degraded_effect"] == "reverses"
    assert "2.00x on healthy links" in verdict.message and "0.67x on degraded links" in verdict.message
    assert "reverses" in verdict.message


def test_tp_scaling_fails_when_tp2_does_not_beat_tp1(tmp_path: Path) -> None:
    root = write_sweep(tmp_path / "sweep", {1: (80.0, 80.0), 2: (76.0, 120.0)})
    verdict = _judge(root, min_speedup=1.3)
    assert verdict.status is Status.FAIL and "1.05x on healthy links (needs >= 1.3x)" in verdict.message


def test_tp_scaling_judges_the_degraded_effect_it_is_asked_for(tmp_path: Path) -> None:
    shrinks = write_sweep(tmp_path / "sweep", {1: (80.0, 80.0), 2: (40.0, 60.0)})  # 2x -> 1.33x: shrinks, no reversal
    assert _judge(shrinks, degraded="shrinks").status is Status.PASS
    failed = _judge(shrinks, degraded="reverses")
    assert failed.status is Status.FAIL and "expected it to reverse" in failed.message
    assert _judge(shrinks).status is Status.PASS  # unset: only reported
    assert "the gain shrinks" in _judge(shrinks).message


def test_tp_scaling_is_inconclusive_without_enough_evidence(tmp_path: Path) -> None:
    assert _judge(tmp_path).status is Status.INCONCLUSIVE  # not a sweep directory
    thin = write_sweep(tmp_path / "thin", REVERSES, per_state=3)
    assert "too few requests" in _judge(thin).message and _judge(thin).status is Status.INCONCLUSIVE
    missing = _judge(write_sweep(tmp_path / "no-tp2", {1: (80.0, 80.0), 4: (25.0, 110.0)}))
    assert missing.status is Status.INCONCLUSIVE and "no measured variant with the value 2" in missing.message


def test_the_report_says_where_the_gain_reverses_and_draws_the_chart(tmp_path: Path) -> None:
    root = write_sweep(tmp_path / "sweep", REVERSES)
    (root / "resolved.json").write_text('{"drill": {"name": "tp-scaling", "seed": 17, "faults": []}}')
    lines = findings(measure_sweep(root))
    assert lines[0].startswith("tp-2 over tp-1: 2.00x on healthy links, 0.67x on degraded links — the gain reverses")
    assert "Where parallelism stops paying: on degraded links from tp-2 on (tp-2, tp-4 slower than tp-1)" in lines[-1]
    md, html = write_scaling_reports(root)
    text = md.read_text()
    assert "| tp-2 | degraded | 8 | 0 | 120 |" in text and "![TPOT" in text
    assert "| tp-2 | 37" in text  # the modelled decode step of TP=2 on an L4 (~37 ms) in the per-step split
    svg = (root / "scaling.svg").read_text()
    assert svg.startswith("<svg") and 'role="img"' in svg
    assert "<figure><svg" in html.read_text()
    write_scaling_reports(root)
    assert (root / "scaling.svg").read_text() == svg  # deterministic


def _verdicts(label: str, status: Status | None, why: str = "") -> VariantVerdicts:
    verdicts = None if status is None else [Verdict("error_rate", "no-errors", status, "m")]
    return VariantVerdicts(label, verdicts, why)


def test_a_run_level_check_rolls_up_to_the_worst_variant() -> None:
    variants = [_verdicts("tp-1", Status.PASS), _verdicts("tp-2", Status.FAIL), _verdicts("tp-4", None, "not run")]
    verdict = rolled_up("no-errors", variants)
    assert verdict.status is Status.FAIL and verdict.kind == "error_rate"
    assert verdict.message.startswith("tp-1: PASS; tp-2: FAIL; tp-4: not judged (not run) — tp-2: m")
    landed = rolled_up("fault_landed", [_verdicts("tp-1", Status.PASS, "it ran without the fault its target lacks")])
    assert landed.status is Status.INCONCLUSIVE and "tp-1: not judged (it ran without the fault" in landed.message


def test_drill_judge_and_drill_report_take_a_sweep_directory(tmp_path: Path) -> None:
    root = write_sweep(tmp_path / "sweep", REVERSES)
    checks = [{"kind": "tp_scaling", "params": {"degraded": "reverses"}}]
    drill = {"name": "tp-scaling", "seed": 17, "faults": [LINK_FAULT], "checks": checks}
    resolved = {"drill": drill, "check_params": [TpScalingParams(degraded="reverses").model_dump(mode="json")]}
    (root / "resolved.json").write_text(json.dumps(resolved))
    judged = CliRunner().invoke(cli, ["judge", str(root), "--json"])
    assert judged.exit_code == 0, judged.output
    verdicts = {c["name"]: c for c in json.loads(judged.output)["checks"]}
    assert list(verdicts) == ["fault_landed", "tp_scaling"]
    assert verdicts["tp_scaling"]["status"] == "PASS" and verdicts["tp_scaling"]["expected"]["degraded_effect"] == (
        "reverses"
    )
    assert verdicts["fault_landed"]["message"].startswith("tp-1: not judged (it ran without the fault its target")
    reported = CliRunner().invoke(cli, ["report", str(root)])
    assert reported.exit_code == 0 and f"report: {root / 'scaling.md'}" in reported.output, reported.output
    as_json = CliRunner().invoke(cli, ["report", str(root), "--format", "json"])
    assert json.loads(as_json.output)["variants"][1]["speedup"] == {"healthy": 2.0, "degraded": 0.667}
