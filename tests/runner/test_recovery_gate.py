"""The wait before the replay (drill.runner.recovery_gate): the band from the baseline, the live queue, the
bounded wait, and what it says — driven with a fake clock and hand-built run directories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drill.runner.recovery_gate import (
    RecoveryBand,
    live_queue_depth,
    recent_error_rate,
    recovery_band,
    wait_for_recovery,
)
from drill.serving_metrics import Reading
from tests.checks.rundir_kit import RunKit


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _queue(depths: list[float | None], time: FakeTime, poll_s: float = 0.5):
    """A live queue depth that reads ``depths[i]`` in the i-th poll interval (the last value afterwards)."""
    return lambda: depths[min(int(time.now / poll_s + 1e-9), len(depths) - 1)]


BAND = RecoveryBand(queue_depth=1.0, baseline_queue_depth=0.0, error_rate=0.01, baseline_error_rate=0.0)


def test_the_replay_waits_for_the_backlog_to_drain_and_then_holds_it() -> None:
    time = FakeTime()
    depths = [900, 600, 300, 40, 0, 3, 0, 0, 0, 0, 0]  # a blip at 2.5 s restarts the hold
    wait = wait_for_recovery(
        BAND, 0.0, _queue(depths, time), max_wait_s=60, hold_s=2.0, clock=time.clock, sleep=time.sleep
    )
    assert wait.observed and wait.waited_s == pytest.approx(5.0)  # in band from 3.0 s, held 2 s
    assert wait.queue_depth == 0 and "queue depth 0 <= 1" in wait.reason and "error rate 0.0% <= 1.0%" in wait.reason


def test_a_queue_that_never_drains_gives_up_at_the_bound() -> None:
    time = FakeTime()
    wait = wait_for_recovery(BAND, 0.0, lambda: 1500.0, max_wait_s=30, hold_s=2.0, clock=time.clock, sleep=time.sleep)
    assert not wait.observed and not wait.queue_held and wait.waited_s == pytest.approx(30.0)
    assert "queue depth 1500 > 1" in wait.reason
    assert wait.summary()["band"]["queue_depth"] == 1.0 and wait.summary()["observed"] is False


def test_errors_out_of_band_at_the_recovery_phases_end_are_not_recovery() -> None:
    """The queue drained, but the last window of the recovery phase failed 20%: no waiting changes that."""
    time = FakeTime()
    wait = wait_for_recovery(BAND, 0.2, lambda: 0.0, max_wait_s=60, hold_s=1.0, clock=time.clock, sleep=time.sleep)
    assert not wait.observed and wait.queue_held and wait.waited_s == pytest.approx(1.0)
    assert "error rate 20.0% > 1.0%" in wait.reason


def test_no_wait_at_all_starts_at_once_and_a_target_without_queue_depth_is_judged_on_errors() -> None:
    time = FakeTime()
    zero = wait_for_recovery(BAND, 0.0, lambda: 50.0, max_wait_s=0, hold_s=2.0, clock=time.clock, sleep=time.sleep)
    assert not zero.observed and zero.waited_s == 0.0
    blind = RecoveryBand(None, None, 0.01, 0.0)
    wait = wait_for_recovery(blind, 0.0, lambda: None, max_wait_s=60, hold_s=0.0, clock=time.clock, sleep=time.sleep)
    assert wait.observed and "exports no queue depth" in wait.reason


def _scrape(kit: RunKit, at: float, source: str, waiting: float) -> None:
    line = {"ts": kit.ts(at), "source": source, "url": "http://x/metrics", "ok": True, "scrape_ms": 1.0}
    line["samples"] = {'vllm:num_requests_waiting{engine="0",model_name="m"}': waiting}
    kit.raw_line("metrics.jsonl", json.dumps(line) + "\n")


def test_the_band_comes_from_the_baseline_phase(tmp_path: Path) -> None:
    kit = RunKit(tmp_path)
    kit.phases(baseline=(0, 60), fault=(60, 120), recovery=(120, 180))
    for second in range(0, 180, 5):
        depth = 4.0 if second == 30 else (800.0 if 60 <= second < 150 else 0.0)
        _scrape(kit, second, "replica-0", depth)
        _scrape(kit, second + 0.01, "replica-1", 2.0 if second == 30 else 0.0)
    for i in range(50):
        kit.request(at=1 + i, status=200 if i else 500, error=None if i else "server_error", ttft_ms=100)
    for i in range(10):  # the recovery phase's last 10 s: 2 of 10 fail
        kit.request(at=170.5 + i, status=504 if i < 2 else 200, error="timeout" if i < 2 else None, ttft_ms=100)
    evidence = kit.evidence()
    band = recovery_band(evidence)
    assert band.baseline_queue_depth == 6.0 and band.queue_depth == 9.0  # 6 x 1.5
    assert band.baseline_error_rate == pytest.approx(0.02) and band.error_rate == pytest.approx(0.03)
    assert recent_error_rate(evidence, 10.0) == pytest.approx(0.2)


def test_the_live_queue_depth_sums_the_replicas_and_is_none_when_not_exported() -> None:
    def reading(**totals: float) -> Reading:
        return Reading(0.0, totals)

    readings = {
        "replica-0": reading(**{"vllm:num_requests_waiting": 3.0}),
        "replica-1": reading(**{"vllm:num_requests_waiting": 4.0}),
    }
    assert live_queue_depth(readings) == 7.0
    assert live_queue_depth({"replica-0": reading(something_else=1.0)}) is None
