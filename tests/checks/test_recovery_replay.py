"""``recovery_replay`` on hand-built run directories: originals, controls, digests, the noise floor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drill.api import EvidenceKind, Status
from drill.checks.replay import RecoveryReplayCheck, above_noise
from drill.rundir.samples import FailingSample
from tests.checks.rundir_kit import RunKit

POOL = "interactive"


def _check(**params) -> RecoveryReplayCheck:
    return RecoveryReplayCheck(RecoveryReplayCheck.Params(**params))


class ReplayRun:
    """A drill that failed ``failed`` requests in the fault phase and kept ``baseline`` controls' outputs."""

    def __init__(self, tmp_path: Path, *, failed: int = 3, baseline: int = 10, replay_ran: bool = True) -> None:
        self.kit = RunKit(tmp_path)
        self.kit.pool(POOL, slo={"ttft_p95": 1.0, "e2e_p95": 2.0})
        windows = {"baseline": (0, 60), "fault": (60, 120), "recovery": (120, 180)}
        if replay_ran:
            windows["replay"] = (180, 200)
        self.kit.phases(**windows)
        self.baseline = [
            self.kit.request(
                at=1 + i * 5,
                pool=POOL,
                ttft_ms=100,
                e2e_ms=500,
                payload_digest=f"sha256:body-b{i}",
                output_digest=f"sha256:out-b{i}",
            )
            for i in range(baseline)
        ]
        self.failed = []
        for i in range(failed):
            record = self.kit.request(
                at=70 + i, pool=POOL, status=503, error="refused", payload_digest=f"sha256:body-f{i}"
            )
            self.failed.append(record)
            self.kit.raw_line("failing_samples.jsonl", _sample(record).to_json() + "\n")
        self._n = 0

    def replay(
        self,
        original,
        *,
        set: str = "original",
        repetition: int = 1,
        status: int = 200,
        error: str | None = None,
        ttft_ms: float | None = 150.0,
        e2e_ms: float | None = 600.0,
        output: str | None = "same",
        digest: str | None = None,
        deterministic: bool = True,
        completion_tokens: int = 10,
    ) -> str:
        """One replay.jsonl line for ``original`` (a record); ``output="same"`` repeats the baseline's digest."""
        self._n += 1
        request_id = original.request_id + ("-replay" if repetition == 1 else f"-replay-{repetition}")
        output_digest = original.output_digest if output == "same" else output
        line = {
            "request_id": request_id,
            "original_request_id": original.request_id,
            "logical_id": original.logical_id,
            "pool": original.pool,
            "trace_id": f"{self._n:032x}"[::-1],
            "original_trace_id": original.trace_id,
            "idempotency_key": original.idempotency_key + "-replay",
            "original_error": original.error.value if original.error else None,
            "original_status": original.status,
            "payload_digest": digest or original.payload_digest,
            "sent_ts": self.kit.ts(181 + self._n * 0.2),
            "planned_ts": self.kit.ts(181 + self._n * 0.2),
            "set": set,
            "repetition": repetition,
            "deterministic": deterministic,
            "status": status,
            "error": error,
            "ttft_ms": None if error else ttft_ms,
            "e2e_ms": e2e_ms,
            "chunks": 10,
            "completion_tokens": None if error else completion_tokens,
            "output_digest": None if error else output_digest,
        }
        self.kit.raw_line("replay.jsonl", json.dumps(line) + "\n")
        return request_id

    def replay_all(self, *, controls: int = 4) -> None:
        for record in self.failed:
            self.replay(record)
        for record in self.baseline[:controls]:
            for rep in (1, 2):
                self.replay(record, set="control", repetition=rep)

    def judge(self, **params):
        return _check(**params).evaluate(self.kit.evidence())


def _sample(record) -> FailingSample:
    return FailingSample(
        request_id=record.request_id,
        logical_id=record.logical_id,
        pool=record.pool,
        attempt=record.attempt,
        trace_id=record.trace_id,
        idempotency_key=record.idempotency_key,
        payload_digest=record.payload_digest,
        method="POST",
        endpoint="/v1/chat/completions",
        body_b64=FailingSample.encode_body(b"{}"),
        error=record.error.value,
        status=record.status,
        intended_ts=record.intended_ts,
    )


def _refs(verdict, kind: EvidenceKind) -> set[str]:
    return {e.value for e in verdict.evidence if e.kind is kind}


def test_originals_that_now_pass_and_unchanged_controls_pass(tmp_path: Path) -> None:
    run = ReplayRun(tmp_path)
    run.replay_all()
    verdict = run.judge()
    assert verdict.status is Status.PASS, verdict.message
    assert verdict.observed["originals_replayed"] == verdict.observed["originals_passed"] == 3
    assert verdict.observed["controls_replayed"] == verdict.observed["controls_passed"] == 4
    assert verdict.observed["control_sends"] == 8
    assert verdict.observed["output_mismatches"] == verdict.observed["not_identical"] == 0
    assert verdict.observed["reproduced_failures"] == 0 and verdict.units["originals_passed"] == "requests"
    assert verdict.observed["failing_samples"] == verdict.observed["failed_requests"] == 3
    assert _refs(verdict, EvidenceKind.REQUEST) == {r.request_id for r in run.failed}


def test_an_original_that_still_fails_is_a_fail_with_its_ids(tmp_path: Path) -> None:
    run = ReplayRun(tmp_path)
    run.replay_all()
    still = run.failed[1]
    bad = run.replay(still, status=503, error="refused", e2e_ms=5.0)
    verdict = run.judge(min_success=1.0)
    assert verdict.status is Status.FAIL and "still fail" in verdict.message
    assert verdict.observed["reproduced_failures"] == 1
    assert bad in _refs(verdict, EvidenceKind.REPLAY)
    assert still.request_id in _refs(verdict, EvidenceKind.REQUEST)
    assert _refs(verdict, EvidenceKind.TRACE)


def test_an_original_that_succeeds_past_its_slo_does_not_pass(tmp_path: Path) -> None:
    run = ReplayRun(tmp_path, failed=1)
    run.replay(run.failed[0], ttft_ms=1500.0, e2e_ms=1800.0)  # TTFT SLO 1 s
    for record in run.baseline[:3]:
        run.replay(record, set="control")
        run.replay(record, set="control", repetition=2)
    verdict = run.judge()
    assert verdict.status is Status.FAIL and verdict.observed["originals_passed"] == 0


def test_a_control_whose_deterministic_output_changed_fails(tmp_path: Path) -> None:
    run = ReplayRun(tmp_path)
    run.replay_all(controls=3)
    changed = run.baseline[5]
    run.replay(changed, set="control")
    bad = run.replay(changed, set="control", repetition=2, output="sha256:something-else")
    verdict = run.judge()
    assert verdict.status is Status.FAIL and "deterministic" in verdict.message
    assert verdict.observed["output_mismatches"] == 1
    assert bad in _refs(verdict, EvidenceKind.REPLAY)


def test_controls_whose_greedy_answer_changed_are_allowed_up_to_max_output_mismatches(tmp_path: Path) -> None:
    """vLLM is not batch-invariant by default: a few greedy answers may change with the batch they were computed in."""
    run = ReplayRun(tmp_path)
    run.replay_all(controls=3)
    for changed in run.baseline[5:7]:  # two controls, each answering otherwise on both sends
        bad = [run.replay(changed, set="control", repetition=rep, output=f"sha256:other-{rep}") for rep in (1, 2)]
    allowed = run.judge(max_output_mismatches=2)
    assert allowed.status is Status.PASS, allowed.message
    assert allowed.observed["controls_with_other_output"] == 2 and allowed.observed["output_mismatches"] == 4
    assert any("2 deterministic control(s) answered other" in note for note in allowed.notes)
    strict = run.judge(max_output_mismatches=1)
    assert strict.status is Status.FAIL and "2 deterministic control(s)" in strict.message
    assert "batch-invariant" in strict.message and set(bad) <= _refs(strict, EvidenceKind.REPLAY)


def test_a_slow_control_is_a_regression(tmp_path: Path) -> None:
    run = ReplayRun(tmp_path)
    run.replay_all(controls=3)
    slow = run.baseline[6]
    for rep in (1, 2):
        run.replay(slow, set="control", repetition=rep, ttft_ms=400.0, e2e_ms=2000.0)  # band: 1.5 x 500 ms E2E
    verdict = run.judge(min_success=1.0)
    assert verdict.status is Status.FAIL and "regressed" in verdict.message
    assert verdict.observed["controls_passed"] == 3 and verdict.observed["controls_replayed"] == 4


def test_nondeterministic_outputs_that_differ_only_as_much_as_the_noise_pass(tmp_path: Path) -> None:
    run = ReplayRun(tmp_path)
    for record in run.failed:
        run.replay(record)
    for i, record in enumerate(run.baseline):
        run.replay(record, set="control", deterministic=False, output=f"sha256:a{i}")  # != baseline
        run.replay(record, set="control", repetition=2, deterministic=False, output=f"sha256:b{i}")  # != rep 1
    verdict = run.judge()
    assert verdict.status is Status.PASS, verdict.message
    assert verdict.observed["nondeterministic.output"] == {"raw": 10, "noise": 10, "total": 10}


def test_nondeterministic_outputs_that_changed_above_the_noise_floor_fail(tmp_path: Path) -> None:
    run = ReplayRun(tmp_path)
    for record in run.failed:
        run.replay(record)
    for i, record in enumerate(run.baseline):
        noisy = i < 2  # the replays disagree on 2 of 10; 8 of 10 differ from the baseline
        first = f"sha256:new{i}" if i < 8 else "same"
        run.replay(record, set="control", deterministic=False, output=first)
        second = f"sha256:other{i}" if noisy else first
        run.replay(record, set="control", repetition=2, deterministic=False, output=second)
    verdict = run.judge()
    assert verdict.status is Status.FAIL and "noise floor" in verdict.message
    assert verdict.observed["nondeterministic.output"] == {"raw": 8, "noise": 2, "total": 10}


def test_diffy_thresholds() -> None:
    assert not above_noise(5, 5, 10)  # no more than the noise
    assert not above_noise(11, 10, 100)  # relative 4.8% <= 20%
    assert above_noise(8, 2, 10)  # relative 60%, absolute 60%
    assert not above_noise(3, 0, 100_000)  # absolute 0.003% <= 0.03%
    assert above_noise(1, 0, 1000)  # relative 100%, absolute 0.1%
    assert not above_noise(0, 0, 0)


def test_no_failing_samples_is_inconclusive_never_pass(tmp_path: Path) -> None:
    run = ReplayRun(tmp_path, failed=0)
    for record in run.baseline[:4]:
        run.replay(record, set="control")
        run.replay(record, set="control", repetition=2)
    verdict = run.judge()
    assert verdict.status is Status.INCONCLUSIVE and "no failing samples" in verdict.message


def test_a_replay_phase_that_did_not_run_is_inconclusive(tmp_path: Path) -> None:
    run = ReplayRun(tmp_path, replay_ran=False)
    run.kit.event("stop_condition", 150, condition="max_duration 150s", kind="max_duration", observed=150)
    verdict = run.judge()
    assert verdict.status is Status.INCONCLUSIVE and "did not run" in verdict.message
    assert "max_duration" in verdict.message


@pytest.mark.parametrize("which", ["original", "control"])
def test_replayed_bytes_that_are_not_the_originals_are_not_a_pass(tmp_path: Path, which: str) -> None:
    run = ReplayRun(tmp_path)
    run.replay_all()
    if which == "original":
        bad = run.replay(run.failed[0], digest="sha256:some-new-request")
    else:
        bad = run.replay(run.baseline[7], set="control", digest="sha256:some-new-request")
    verdict = run.judge()
    assert verdict.status is Status.FAIL and "original bytes" in verdict.message
    assert verdict.observed["not_identical"] == 1 and bad in _refs(verdict, EvidenceKind.REPLAY)


def test_a_replay_of_requests_that_were_never_failing_samples_does_not_pass(tmp_path: Path) -> None:
    run = ReplayRun(tmp_path)
    for record in run.baseline[:4]:  # "originals" that the run never failed
        run.replay(record)
    verdict = run.judge()
    assert verdict.status is Status.FAIL and verdict.observed["not_identical"] == 4
    assert verdict.observed["originals_replayed"] == 0


def test_originals_without_controls_are_inconclusive(tmp_path: Path) -> None:
    run = ReplayRun(tmp_path)
    for record in run.failed:
        run.replay(record)
    verdict = run.judge()
    assert verdict.status is Status.INCONCLUSIVE and "no control" in verdict.message
    assert verdict.observed["originals_passed"] == 3


def test_failing_samples_but_nothing_replayed_is_inconclusive(tmp_path: Path) -> None:
    run = ReplayRun(tmp_path)
    verdict = run.judge()
    assert verdict.status is Status.INCONCLUSIVE and "no original was replayed" in verdict.message


def test_unreadable_replay_lines_are_counted(tmp_path: Path) -> None:
    run = ReplayRun(tmp_path)
    run.replay_all()
    run.kit.raw_line("replay.jsonl", '{"request_id": "torn')
    evidence = run.kit.evidence()
    _check().evaluate(evidence)
    report = evidence.reports["replay.jsonl"]
    assert report.torn_last_line is not None and report.lines_read == 11
    assert "replay.jsonl" in RecoveryReplayCheck.reads and "failing_samples.jsonl" in RecoveryReplayCheck.reads


def test_sends_held_back_by_the_concurrency_cap_are_noted(tmp_path: Path) -> None:
    run = ReplayRun(tmp_path)
    run.replay_all()
    lines = run.kit.extra_lines["replay.jsonl"]
    late = []
    for line in lines:
        data = json.loads(line)
        data["planned_ts"] = data["sent_ts"] - 3.0
        late.append(json.dumps(data) + "\n")
    run.kit.extra_lines["replay.jsonl"] = late
    verdict = run.judge()
    assert verdict.status is Status.PASS and any("concurrency cap" in n for n in verdict.notes)


def _replay_started_after(run: ReplayRun, *, observed: bool) -> None:
    """The replay phase as the runner journals it now: its summary says how the wait for recovery ended."""
    reason = "queue depth 0 <= 1 (baseline max 0)" if observed else "queue depth 1500 > 1 (baseline max 0)"
    recovery = {"observed": observed, "waited_s": 3.0 if observed else 120.0, "max_wait_s": 120.0, "reason": reason}
    run.kit.event("phase_started", 180, phase="replay", planned_s=None)
    run.kit.event("phase_ended", 200, phase="replay", elapsed_s=20, summary={"recovery": recovery})


def test_the_verdict_says_when_the_replay_started_and_why(tmp_path: Path) -> None:
    run = ReplayRun(tmp_path, replay_ran=False)
    _replay_started_after(run, observed=True)
    run.replay_all()
    verdict = run.judge()
    assert verdict.status is Status.PASS, verdict.message
    assert any("started 3.0s after the load stopped, once recovery was observed" in n for n in verdict.notes)


def test_originals_failing_on_a_stack_never_seen_to_recover_are_inconclusive_not_fail(tmp_path: Path) -> None:
    run = ReplayRun(tmp_path, replay_ran=False)
    _replay_started_after(run, observed=False)
    run.replay_all()
    run.replay(run.failed[1], status=504, error="timeout", e2e_ms=30_000.0)
    verdict = run.judge(min_success=1.0)
    assert verdict.status is Status.INCONCLUSIVE and "still fail" in verdict.message
    assert "before recovery was observed" in verdict.message
    assert any("without observed recovery (gave up waiting after 120.0s)" in n for n in verdict.notes)


def test_originals_that_pass_even_so_pass(tmp_path: Path) -> None:
    run = ReplayRun(tmp_path, replay_ran=False)
    _replay_started_after(run, observed=False)
    run.replay_all()
    assert run.judge().status is Status.PASS
