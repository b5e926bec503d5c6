"""The recovery replay against real servers: originals and controls, byte-identical, paced, judged.

The load generator (the real Locust child) digests the output of the control candidates; the replay
sends the failed originals and the controls (twice) to the same server, at the baseline's rate, and
``replay.jsonl`` is judged by the ``recovery_replay`` check. The bench SSE server logs every request's
body sha256 and arrival time (the server-side truth for bytes and pacing); the stack's replica checks
that rebuilt control bodies give the same greedy text as the baseline did.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
from loadkit import run_load, scenario

from drill.api import Status
from drill.checks.replay import RecoveryReplayCheck
from drill.load.driver import resolve_model
from drill.load.replay import ReplayPlan, baseline_rate, choose_control_ids, replay_after_recovery
from drill.rundir.evidence import RunEvidence
from drill.rundir.journal import Event, Journal
from drill.rundir.replay_results import read_replay

pytestmark = pytest.mark.integration

DURATION_S = 2.5
BASELINE_S = 1.2  # the first 1.2 s succeed (controls come from here), then the server refuses everything


def _replay(
    run, sc, url: str, *, controls: int, max_samples: int = 6, rate: float | None = None, baseline_s: float = DURATION_S
):
    baseline = (run.t0, run.t0 + baseline_s)
    rate = rate or baseline_rate(run.records, baseline)
    plan = ReplayPlan(url, timeout_s=10, concurrency=4, max_samples=max_samples, controls=controls, seed=7, rate=rate)
    out = run.run_dir / "replay.jsonl"
    summary = replay_after_recovery(
        run.run_dir / "failing_samples.jsonl",
        run.records,
        out,
        plan,
        scenario=sc,
        model=resolve_model(url, {}),
        load_seed=sc.seed,
        baseline_ts=baseline,
    )
    return summary, list(read_replay(out)), rate


@pytest.mark.parametrize("workers", [0, 2], ids=["local", "two-workers"])
def test_originals_and_controls_replay_byte_identical_at_the_baseline_rate(
    sse_server, tmp_path: Path, workers: int
) -> None:
    sc = scenario(20, out=3, seed=3)
    ids = choose_control_ids(sc, DURATION_S, sc.seed, (0.0, BASELINE_S - 0.3), 4, sample_seed=7)

    def fault(driver) -> None:
        time.sleep(max(0.0, driver.t0 + BASELINE_S - time.time()))
        sse_server.configure(fail_status=503, fail_every=1)

    run = run_load(sse_server.url, sc, DURATION_S, tmp_path / "run", control_ids=ids, workers=workers, during=fault)
    sse_server.configure(fail_status=0)
    watched = [r for r in run.records if r.output_digest]
    assert watched and {r.logical_id for r in watched} <= set(ids)
    assert all(r.output_digest == "sha256:" + hashlib.sha256(b" tok" * 3).hexdigest() for r in watched)
    assert len(watched) >= 6, (len(watched), ids)
    assert not any(r.output_digest for r in run.records if r.logical_id not in ids)
    failed = {s.logical_id for s in run.samples}
    assert len(failed) >= 6, (len(run.records), run.summary)

    before = len(sse_server.log())
    summary, lines, rate = _replay(run, sc, sse_server.url, controls=4, baseline_s=BASELINE_S)
    assert 8 <= rate <= 40
    originals = [line for line in lines if line.set == "original"]
    controls = [line for line in lines if line.set == "control"]
    assert len(originals) == summary.originals == 6 and len({o.logical_id for o in originals}) == 6
    assert {o.logical_id for o in originals} <= failed
    assert summary.controls == 4 and len(controls) == 8
    assert sorted(c.repetition for c in controls) == [1] * 4 + [2] * 4
    assert all(line.ok for line in lines) and summary.skipped_digest_mismatch == 0

    served = {e["request_id"]: e for e in sse_server.log()[before:]}
    assert set(served) == {line.request_id for line in lines}
    records = {r.request_id: r for r in run.records}
    samples = {s.request_id: s for s in run.samples}
    for line in lines:
        original = samples[line.original_request_id] if line.set == "original" else records[line.original_request_id]
        assert "sha256:" + served[line.request_id]["body_sha256"] == original.payload_digest == line.payload_digest
        assert served[line.request_id]["traceparent"].split("-")[1] == line.trace_id != line.original_trace_id
    for control in controls:
        assert control.output_digest == records[control.original_request_id].output_digest

    arrivals = sorted(served[line.request_id]["arrival_ts"] for line in lines)
    gap = 1.0 / rate
    for k, ts in enumerate(arrivals):  # paced: the k-th send never comes before its slot
        assert ts - arrivals[0] >= k * gap - 0.03, (k, ts - arrivals[0], k * gap)
    assert arrivals[-1] - arrivals[0] <= (len(arrivals) - 1) * gap + 3.0

    verdict = _judge(run, lines, slo={"chat": {"ttft_p95": 5.0}})
    assert verdict.status is Status.PASS, verdict.message
    assert verdict.observed["originals_passed"] == 6 and verdict.observed["controls_passed"] == 4


def test_replayed_controls_give_the_replica_s_greedy_text_again(spawn_replica, tmp_path: Path) -> None:
    replica = spawn_replica()
    sc = scenario(10, inp=40, out=8, seed=5)
    ids = choose_control_ids(sc, DURATION_S, sc.seed, (0.0, DURATION_S), 5)
    run = run_load(replica.url, sc, DURATION_S, tmp_path / "run", control_ids=ids)
    baseline = {r.request_id: r for r in run.records if r.output_digest}
    assert len(baseline) >= 5 and not run.samples
    summary, lines, _ = _replay(run, sc, replica.url, controls=5, rate=20.0)
    assert summary.controls == 5 and summary.controls_skipped_digest_mismatch == 0 and len(lines) == 10
    for line in lines:
        assert line.set == "control" and line.ok and line.deterministic
        assert line.payload_digest == baseline[line.original_request_id].payload_digest
        assert line.output_digest == baseline[line.original_request_id].output_digest
    texts = {line.output_digest for line in lines}
    assert len(texts) > 1  # different prompts, different greedy answers
    ledger = {e["request_id"]: e for e in replica.ledger()}
    for line in lines:
        assert ledger[line.request_id]["prompt_tokens"] == ledger[line.original_request_id]["prompt_tokens"]
    verdict = _judge(run, lines, slo={"chat": {"ttft_p95": 5.0}})
    assert verdict.status is Status.INCONCLUSIVE and "no failing samples" in verdict.message


def _judge(run, lines, slo: dict):
    """Judge the run directory: a journal with the baseline and replay phases around the real files."""
    journal = Journal(run.run_dir / "journal.jsonl")
    journal.write(Event.PHASE_STARTED, phase="baseline", planned_s=DURATION_S)
    journal.write(Event.PHASE_ENDED, phase="baseline", elapsed_s=DURATION_S)
    journal.write(Event.PHASE_STARTED, phase="replay", planned_s=None)
    journal.write(Event.PHASE_ENDED, phase="replay", elapsed_s=1.0)
    journal.close()
    _rewrite_ts(
        run.run_dir / "journal.jsonl",
        [run.t0, run.t0 + DURATION_S + 5, min(r.sent_ts for r in lines), max(r.sent_ts for r in lines) + 1],
    )
    return RecoveryReplayCheck(RecoveryReplayCheck.Params()).evaluate(RunEvidence(run.run_dir, slo))


def _rewrite_ts(path: Path, stamps: list[float]) -> None:
    """Put the phase events at the run's own times (the journal stamps them when written)."""
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    for entry, ts in zip(entries, stamps):
        entry["ts"] = ts
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
