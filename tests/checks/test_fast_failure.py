"""fast_failure on hand-built run directories: refused fast, timed out, left to wait, too little overload."""

from __future__ import annotations

from pathlib import Path

import pytest

from drill.api import EvidenceKind, Status
from drill.checks.failures import FastFailureCheck, FastFailureParams
from drill.runner.verdicts import judge_one
from tests.checks.rundir_kit import RunKit


def _kit(tmp_path: Path) -> RunKit:
    kit = RunKit(tmp_path / "run")
    kit.phases(baseline=(0, 60), fault=(60, 150), recovery=(150, 240))
    kit.fault("flood", injected=70, reverted=130)
    kit.pool("interactive", timeout="10s", slo={"ttft_p95": 1.0, "tpot_p95": 0.075})
    kit.pool("batch", timeout="300s", slo={"e2e_p95": 120.0}, stream=False)
    return kit


def _judge(kit: RunKit, **params):
    return FastFailureCheck(FastFailureParams(**params)).evaluate(kit.evidence())


def test_overload_refused_quickly_passes(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    for i in range(40):
        kit.request(75 + i, status=503, error="refused", headers_ms=15 + i, e2e_ms=16 + i, retry_after_s=1.0)
        kit.request(75 + i, ttft_ms=300)
    verdict = _judge(kit)
    assert verdict.status is Status.PASS, verdict.message
    assert verdict.observed["refused"] == 40 and verdict.observed["waited_share"] == 0.0
    assert verdict.observed["refusal_ttf_p99_ms"] == pytest.approx(54.61, abs=0.01)
    assert verdict.observed["refusals_with_retry_after"] == 40
    assert verdict.units["refusal_ttf_p99_ms"] == "ms" and verdict.units["waited_share"] == "ratio"


def test_refusals_in_a_200_stream_count_and_retry_after_is_optional(tmp_path: Path) -> None:
    """vLLM: a refused stream is either HTTP 503 or HTTP 200 + an error event with code 503; neither has
    Retry-After. Both forms are refusals; the verdict counts how many carried Retry-After and came in the stream."""
    kit = _kit(tmp_path)
    for i in range(20):
        kit.request(75 + i, status=503, error="refused", headers_ms=15, e2e_ms=16)
        kit.request(75 + i, status=200, error="refused", stream_error_code=503, headers_ms=12, e2e_ms=14)
        kit.request(75 + i, ttft_ms=300)
    verdict = _judge(kit)
    assert verdict.status is Status.PASS, verdict.message
    assert verdict.observed["refused"] == 40 and verdict.observed["other_error"] == 0
    assert verdict.observed["refusals_with_retry_after"] == 0 and verdict.observed["refusals_in_stream"] == 20
    assert "0 of 40 refusal(s) carried Retry-After" in verdict.notes
    assert any(note.startswith("20 of 40 refusal(s) came as HTTP 200") for note in verdict.notes)


def test_requests_outside_the_fault_window_do_not_count(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    for i in range(40):
        kit.request(10 + i, status=None, error="timeout", e2e_ms=10_000)  # baseline: not judged
        kit.request(135 + i * 0.1, status=None, error="timeout", e2e_ms=10_000)  # after the revert
        kit.request(75 + i, status=503, error="refused", headers_ms=20, e2e_ms=20)
    verdict = _judge(kit)
    assert verdict.status is Status.PASS, verdict.message
    assert verdict.observed["timeout"] == 0 and verdict.observed["attempts"] == 40


def test_timeouts_fail_and_name_the_slowest(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    for i in range(30):
        kit.request(75 + i, status=503, error="refused", headers_ms=20, e2e_ms=20)
    for i in range(5):
        kit.request(80 + i, status=None, error="timeout", e2e_ms=10_000 + i, request_id=f"slow-{i}")
    verdict = _judge(kit, max_timeout_share=0.1, max_wait_share=0.5)
    assert verdict.status is Status.FAIL, verdict.message
    assert "of the failures were timeouts or slow" in verdict.message
    assert verdict.observed["timeout"] == 5 and verdict.observed["timeout_share"] == pytest.approx(5 / 35, abs=1e-4)
    requests = [e.value for e in verdict.evidence if e.kind is EvidenceKind.REQUEST]
    assert requests[:5] == [f"slow-{i}" for i in (4, 3, 2, 1, 0)]
    assert any(e.kind is EvidenceKind.TRACE for e in verdict.evidence)
    # the same run with looser budgets passes: the thresholds are what decide
    assert _judge(kit, max_timeout_share=0.2, max_wait_share=0.5).status is Status.PASS
    verdict = _judge(kit, max_timeout_share=0.2, max_wait_share=0.1)
    assert verdict.status is Status.FAIL and "waited instead of being refused" in verdict.message


def test_a_slow_error_near_the_deadline_is_a_slow_failure(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    for i in range(25):
        kit.request(75 + i, status=500, error="server_error", headers_ms=9_500, e2e_ms=9_500)  # 95% of 10s
    verdict = _judge(kit)
    assert verdict.status is Status.FAIL
    assert verdict.observed["slow_failure"] == 25 and verdict.observed["other_error"] == 0
    # below slow_fraction of the deadline the same errors are explicit (not waits): nothing waited
    verdict = _judge(kit, slow_fraction=0.99)
    assert verdict.status is Status.PASS and verdict.observed["other_error"] == 25


def test_success_after_a_long_wait_fails_as_left_to_wait(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    for i in range(30):
        kit.request(75 + i, ttft_ms=4_000 + i, e2e_ms=6_000)  # past the 1 s TTFT SLO
        kit.request(75 + i, ttft_ms=200)
        kit.request(75 + i, pool="batch", status=200, ttft_ms=None, e2e_ms=30_000)  # within its 120 s
    verdict = _judge(kit)
    assert verdict.status is Status.FAIL, verdict.message
    assert verdict.observed["left_to_wait"] == 30 and verdict.observed["on_time"] == 60
    assert "waited instead of being refused" in verdict.message
    assert verdict.observed["failures"] == 0 and verdict.observed["timeout_share"] is None


def test_admission_control_with_a_short_queue_fill_passes(tmp_path: Path) -> None:
    """The shape of the unbounded-queue drill with max_num_queued_reqs set: a few waits while the queue fills,
    then refusals (measured: about 4% of the excess load waited 1-2 s)."""
    kit = _kit(tmp_path)
    for i in range(4):
        kit.request(71 + i * 0.1, ttft_ms=1_500)
    for i in range(100):
        kit.request(72 + i * 0.5, status=503, error="refused", headers_ms=8, e2e_ms=8)
        kit.request(72 + i * 0.5, ttft_ms=400)
    verdict = _judge(kit, refusal_p99="500ms", max_timeout_share=0.01)
    assert verdict.status is Status.PASS, verdict.message
    assert verdict.observed["waited_share"] == pytest.approx(4 / 104, abs=1e-4)
    assert verdict.observed["timeout_share"] == 0.0


def test_slow_refusals_fail_on_the_refusal_budget(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    for i in range(30):
        kit.request(75 + i, status=429, error="refused", headers_ms=800 + i, e2e_ms=800 + i)
    verdict = _judge(kit, refusal_p99="500ms")
    assert verdict.status is Status.FAIL and "refusals took" in verdict.message
    assert verdict.expected["refusal_ttf_p99_ms"] == "<= 500"
    assert _judge(kit, refusal_p99="1s").status is Status.PASS


def test_too_little_overload_is_inconclusive_not_pass(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    for i in range(50):
        kit.request(75 + i, ttft_ms=200)
    kit.request(80, status=503, error="refused", headers_ms=10, e2e_ms=10)
    verdict = _judge(kit)
    assert verdict.status is Status.INCONCLUSIVE
    assert "not overloaded enough" in verdict.message and verdict.observed["not_on_time"] == 1


def test_cancelled_at_stop_counts_as_left_to_wait_and_client_drops_are_not_judged(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    for i in range(25):
        kit.request(75 + i, status=None, error="cancelled", e2e_ms=None)
        kit.request(75 + i, status=None, error="client_drop", e2e_ms=None)
    verdict = _judge(kit)
    assert verdict.status is Status.FAIL
    assert verdict.observed["left_to_wait"] == 25 and verdict.observed["client_drops"] == 25
    assert any("cancelled" in n for n in verdict.notes)


def test_pools_filter_and_unreadable_records_make_it_inconclusive(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    for i in range(30):
        kit.request(75 + i, status=None, error="timeout", e2e_ms=10_000)
        kit.request(75 + i, pool="batch", status=503, error="refused", headers_ms=10, e2e_ms=10)
    assert _judge(kit, pools=["batch"]).status is Status.PASS
    kit.raw_line("requests.jsonl", "{not json\n")
    check = FastFailureCheck(FastFailureParams(pools=["batch"]))
    verdict = judge_one("fast_failure", "fast_failure", check.params, kit.evidence())
    assert verdict.status is Status.INCONCLUSIVE and "requests.jsonl" in verdict.message


def test_params_take_durations_with_units() -> None:
    params = FastFailureParams.model_validate({"refusal_p99": "250ms", "max_timeout_share": 0.01})
    assert params.refusal_p99 == pytest.approx(0.25)
    with pytest.raises(ValueError):
        FastFailureParams.model_validate({"refusal_p99": 500})


def test_a_gateway_timeout_is_a_timeout_whatever_the_client_deadline(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    for i in range(25):
        kit.request(75 + i, pool="batch", status=504, error="server_error", headers_ms=30_000, e2e_ms=30_000)
    verdict = _judge(kit)
    assert verdict.status is Status.FAIL
    assert verdict.observed["timeout"] == 25 and verdict.observed["other_error"] == 0


def _late_flood(kit: RunKit, lag_ms: float, refusal_ms: float = 300.0) -> None:
    """40 refusals and 40 successes whose attempts the generator sent ``lag_ms`` late (every latency is from the
    intended start, so the lag is in each): ``refusal_ms`` and a 300 ms TTFT from the send."""
    for i in range(40):
        kit.request(
            75 + i,
            status=503,
            error="refused",
            headers_ms=lag_ms + refusal_ms,
            e2e_ms=lag_ms + refusal_ms,
            schedule_lag_ms=lag_ms,
            sent_ts=75 + i + lag_ms / 1000,
        )
        kit.request(75 + i, ttft_ms=lag_ms + 300, e2e_ms=lag_ms + 900, schedule_lag_ms=lag_ms, sent_ts=75 + i)


def test_a_fail_that_only_the_load_generator_s_lateness_made_is_inconclusive_with_the_figures_from_the_send(
    tmp_path: Path,
) -> None:
    """Real vLLM on a saturated 2-core machine: its queue cap refused within 1.5 s of each send, but the generator
    sent up to 1.7 s late, so the refusals took 2.6 s from their intended starts and the check blamed the target."""
    kit = _kit(tmp_path)
    _late_flood(kit, lag_ms=1500)
    verdict = _judge(kit, refusal_p99="1s")
    assert verdict.status is Status.INCONCLUSIVE, verdict.message
    assert verdict.message.startswith("the load generator sent late, not the target: 50.0% of the attempts not served")
    assert "refusals took 1800ms at p99 (budget 1000ms)" in verdict.message
    assert "measured from the sends, overload was refused quickly, p99 300ms" in verdict.message
    assert "went out 1500 ms late at p99" in verdict.message
    assert verdict.observed["refusal_ttf_p99_ms"] == 1800 and verdict.observed["from_send.refusal_ttf_p99_ms"] == 300
    assert verdict.observed["left_to_wait"] == 40 and verdict.observed["from_send.waited_share"] == 0.0
    assert verdict.observed["schedule_lag_p99_ms"] == 1500 and verdict.units["from_send.refusal_ttf_p99_ms"] == "ms"


def test_a_fail_that_holds_from_the_send_or_a_lateness_too_small_to_matter_stays_the_target_s(tmp_path: Path) -> None:
    slow = _kit(tmp_path / "slow")
    _late_flood(slow, lag_ms=1500, refusal_ms=1200)  # slow to refuse even from the send
    verdict = _judge(slow, refusal_p99="1s")
    assert verdict.status is Status.FAIL and "from_send.refusal_ttf_p99_ms" not in verdict.observed, verdict.message
    on_time = _kit(tmp_path / "on-time")
    _late_flood(on_time, lag_ms=40, refusal_ms=980)  # 40 ms late: within HARNESS_LAG_MS, the breach is the target's
    verdict = _judge(on_time, refusal_p99="1s")
    assert verdict.status is Status.FAIL and verdict.message.startswith("refusals took 1020ms"), verdict.message
