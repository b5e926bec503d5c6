"""The slo check on hand-built run directories: percentiles per pool, goodput per phase and pool,
and the measurement truth when the run's spans join the client records."""

from __future__ import annotations

from pathlib import Path

import pytest

from drill.api import EvidenceKind, Status
from drill.checks.builtin import SloCheck, SloParams
from tests.checks.rundir_kit import RunKit


def _kit(tmp_path: Path) -> RunKit:
    kit = RunKit(tmp_path / "run")
    kit.phases(baseline=(0, 50), fault=(50, 100), recovery=(100, 150))
    kit.pool("interactive", slo={"ttft_p95": 1.0})
    kit.pool("batch", slo={"e2e_p95": 10.0}, stream=False)
    return kit


def _judge(kit: RunKit, **params):
    return SloCheck(SloParams(**params)).evaluate(kit.evidence())


def test_percentiles_within_the_slo_pass_with_numbers_and_units(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    for i in range(40):
        kit.request(i, ttft_ms=100 + i)
        kit.request(i, pool="batch", ttft_ms=None, e2e_ms=2_000)
    verdict = _judge(kit)
    assert verdict.status is Status.PASS, verdict.message
    assert verdict.observed["interactive.ttft_p95"] == pytest.approx(137.05)
    assert verdict.units["interactive.ttft_p95"] == "ms" and verdict.expected["interactive.ttft_p95"] == "<= 1000"


def test_a_breached_percentile_fails_and_names_the_slowest(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    for i in range(40):
        kit.request(i, ttft_ms=2_000 if i >= 30 else 100, request_id=f"r{i}")
    verdict = _judge(kit, pools=["interactive"])
    assert verdict.status is Status.FAIL and "interactive ttft_p95" in verdict.message
    assert [e.value for e in verdict.evidence if e.kind is EvidenceKind.REQUEST][0] in {f"r{i}" for i in range(30, 40)}


def test_too_few_samples_is_inconclusive(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    for i in range(5):
        kit.request(i, ttft_ms=100)
    assert _judge(kit, pools=["interactive"]).status is Status.INCONCLUSIVE


def test_goodput_per_phase_and_pool(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    for i in range(50):
        kit.request(i, ttft_ms=100, completion_tokens=20)  # baseline: all good
        kit.request(50 + i, ttft_ms=3_000 if i % 2 else 100, completion_tokens=20)  # fault: half too slow
        if i % 5 == 0:
            kit.request(50 + i, status=503, error="refused", headers_ms=5, e2e_ms=5)  # and some refused
        kit.request(50 + i, pool="batch", ttft_ms=None, e2e_ms=20_000)  # batch past its 10 s
    verdict = _judge(kit)
    observed = verdict.observed
    assert observed["goodput.baseline.interactive.share"] == 1.0
    assert observed["goodput.baseline.interactive.requests_per_s"] == 1.0
    assert observed["goodput.baseline.interactive.tokens_per_s"] == 20.0
    assert observed["goodput.fault.interactive.requests"] == 60
    assert observed["goodput.fault.interactive.share"] == round(25 / 60, 4)
    assert observed["goodput.fault.interactive.tokens_per_s"] == 10.0
    assert observed["goodput.fault.batch.share"] == 0.0
    assert observed["goodput.recovery.interactive.share"] is None  # no requests in recovery
    assert verdict.units["goodput.fault.interactive.share"] == "ratio"
    assert verdict.units["goodput.fault.interactive.tokens_per_s"] == "tokens/s"
    # the verdict itself still judges the baseline percentiles only...
    assert verdict.status is Status.INCONCLUSIVE  # batch has no baseline sample
    assert _judge(kit, pools=["interactive"]).status is Status.PASS
    # ...unless min_goodput asks for goodput in the judged phase too
    verdict = _judge(kit, pools=["interactive"], phase="fault", min_goodput=0.9)
    assert verdict.status is Status.FAIL and "goodput in fault" in verdict.message


def test_measurement_truth_is_added_when_spans_join(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    for i in range(30):
        record = kit.request(i, ttft_ms=150, e2e_ms=600)
        trace = record.trace_id
        kit.span(
            trace_id=trace,
            span_id=f"{i:08x}00000001",
            name="POST /v1/chat/completions",
            service="drill-replica-0",
            kind="SERVER",
            start=i + 0.01,
            end=i + 0.51,
        )
        kit.span(
            trace_id=trace,
            span_id=f"{i:08x}00000002",
            parent_id=f"{i:08x}00000001",
            name="llm_request",
            service="drill-replica-0",
            start=i + 0.01,
            end=i + 0.5,
            attributes={"gen_ai.latency.time_to_first_token": 0.12},
        )
    verdict = _judge(kit, pools=["interactive"])
    assert verdict.status is Status.PASS, verdict.message
    assert verdict.observed["measurement_truth.joined"] == 30
    assert verdict.observed["measurement_truth.ttft_diff_ms.p50"] == pytest.approx(30.0, abs=0.01)
    assert verdict.observed["measurement_truth.e2e_diff_ms.p99"] == pytest.approx(100.0, abs=0.01)
    assert any("measurement truth" in n for n in verdict.notes)
    assert any(e.kind is EvidenceKind.MEASUREMENT for e in verdict.evidence)


def test_no_spans_means_no_measurement_truth(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    for i in range(30):
        kit.request(i, ttft_ms=150)
    verdict = _judge(kit, pools=["interactive"])
    assert not any(k.startswith("measurement_truth") for k in verdict.observed)


def _late_run(tmp_path: Path, late_ttft_ms: float, lag_ms: float) -> RunKit:
    """40 interactive requests in the baseline: 30 quick ones, and 10 whose TTFT from the intended start is
    ``late_ttft_ms``, ``lag_ms`` of it before the load generator began sending them."""
    kit = _kit(tmp_path)
    for i in range(40):
        late = i >= 30
        kit.request(
            i,
            ttft_ms=late_ttft_ms if late else 100,
            schedule_lag_ms=lag_ms if late else 0.0,
            sent_ts=kit.ts(i + (lag_ms / 1000 if late else 0.0)),
            request_id=f"r{i}",
        )
    return kit


def test_a_breach_the_load_generators_own_lateness_made_is_inconclusive_not_the_targets(tmp_path: Path) -> None:
    verdict = _judge(_late_run(tmp_path, late_ttft_ms=2_000, lag_ms=1_900), pools=["interactive"])
    assert verdict.status is Status.INCONCLUSIVE, verdict.message
    assert "load generator sent late" in verdict.message and "100ms from the send" in verdict.message
    assert "(its own lateness moved the percentile by more than 50 ms: a busy" in verdict.message
    assert verdict.observed["interactive.ttft_p95"] == 2_000.0
    assert verdict.observed["interactive.ttft_p95.from_send"] == 100.0
    assert verdict.units["interactive.ttft_p95.from_send"] == "ms"
    assert {e.value for e in verdict.evidence if e.kind is EvidenceKind.REQUEST} <= {f"r{i}" for i in range(30, 40)}


@pytest.mark.parametrize(
    ("late_ttft_ms", "lag_ms"),
    [
        (2_000, 500),  # 1.5 s from the send too: the target's
        (1_020, 30),  # within the SLO from the send, but 30 ms of lateness is the machine's noise, not a stall
    ],
)
def test_a_breach_that_holds_from_the_send_or_a_small_lateness_still_fails(
    tmp_path: Path, late_ttft_ms: float, lag_ms: float
) -> None:
    verdict = _judge(_late_run(tmp_path, late_ttft_ms, lag_ms), pools=["interactive"])
    assert verdict.status is Status.FAIL, verdict.message
    assert "interactive.ttft_p95.from_send" not in verdict.observed


def test_a_late_breach_beside_the_targets_own_is_a_failure_with_a_note(tmp_path: Path) -> None:
    kit = _late_run(tmp_path, late_ttft_ms=2_000, lag_ms=1_900)
    for i in range(40):
        kit.request(i, pool="batch", ttft_ms=None, e2e_ms=20_000)  # batch past its 10 s, sent on time
    verdict = _judge(kit)
    assert verdict.status is Status.FAIL and "batch e2e_p95" in verdict.message
    assert "interactive" not in verdict.message
    assert any(note.startswith("not the target's: interactive ttft_p95") for note in verdict.notes)
