"""recovery_time on hand-built run directories: back in band within max, after max, never."""

from __future__ import annotations

from pathlib import Path

import pytest

from drill.api import EvidenceKind, Status
from drill.checks.recovery import RecoveryTimeCheck, RecoveryTimeParams
from tests.checks.rundir_kit import RunKit

REVERT = 120.0


def _kit(tmp_path: Path, recovery_end: float = 240.0) -> RunKit:
    kit = RunKit(tmp_path / "run")
    kit.phases(baseline=(0, 60), fault=(60, REVERT), recovery=(REVERT, recovery_end))
    kit.fault("slow", injected=65, reverted=REVERT, kind="slow_replica")
    kit.pool("interactive", slo={"ttft_p95": 1.0})
    for i in range(120):  # baseline: 2 req/s at TTFT 100..139 ms
        kit.request(i * 0.5, ttft_ms=100 + i % 40)
    return kit


def _load(kit: RunKit, start: float, end: float, ttft_ms: float, *, error_every: int = 0) -> None:
    """2 req/s from ``start`` to ``end`` with the given TTFT (every ``error_every``-th one a 500)."""
    t, n = start, 0
    while t < end:
        n += 1
        if error_every and n % error_every == 0:
            kit.request(t, status=500, error="server_error", headers_ms=5, e2e_ms=5)
        else:
            kit.request(t, ttft_ms=ttft_ms)
        t += 0.5


def _judge(kit: RunKit, **params):
    return RecoveryTimeCheck(RecoveryTimeParams(**params)).evaluate(kit.evidence())


def test_back_in_band_within_max_passes(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    _load(kit, REVERT, REVERT + 20, ttft_ms=3_000)  # the backlog drains for 20 s
    _load(kit, REVERT + 20, 240, ttft_ms=110)
    verdict = _judge(kit)
    assert verdict.status is Status.PASS, verdict.message
    # windows start every second and are 10 s long: the first all-good window starts at +20 s
    assert verdict.observed["recovery_s"] == pytest.approx(20.0)
    assert verdict.observed["interactive.baseline_ttft_p95_ms"] == pytest.approx(137.05, abs=0.01)
    assert verdict.observed["interactive.band_ttft_ms"] == pytest.approx(137.05 * 1.5, abs=0.01)
    assert verdict.units["recovery_s"] == "s"
    assert any(e.kind is EvidenceKind.JOURNAL for e in verdict.evidence)


def test_back_in_band_after_max_fails(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    _load(kit, REVERT, REVERT + 70, ttft_ms=3_000)
    _load(kit, REVERT + 70, 240, ttft_ms=110)
    verdict = _judge(kit, max="60s")
    assert verdict.status is Status.FAIL and "70.0s after the revert" in verdict.message
    assert verdict.observed["recovery_s"] == pytest.approx(70.0)
    assert _judge(kit, max="80s").status is Status.PASS


def test_errors_keep_it_out_of_band(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    _load(kit, REVERT, REVERT + 30, ttft_ms=110, error_every=4)  # latency fine, 25% errors
    _load(kit, REVERT + 30, 240, ttft_ms=110)
    verdict = _judge(kit)
    assert verdict.status is Status.PASS
    assert verdict.observed["recovery_s"] == pytest.approx(30.0)


def test_never_back_for_longer_than_max_fails(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    _load(kit, REVERT, 240, ttft_ms=3_000)
    verdict = _judge(kit, max="60s")
    assert verdict.status is Status.FAIL and "not back in band" in verdict.message
    assert verdict.observed["recovery_s"] is None


def test_recovery_phase_ending_before_max_is_inconclusive(tmp_path: Path) -> None:
    kit = _kit(tmp_path, recovery_end=REVERT + 40)
    _load(kit, REVERT, REVERT + 40, ttft_ms=3_000)
    verdict = _judge(kit, max="60s")
    assert verdict.status is Status.INCONCLUSIVE
    assert "the recovery phase ended before 60s" in verdict.message


def test_a_single_good_window_is_not_recovery_when_hold_asks_for_more(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    _load(kit, REVERT, REVERT + 10, ttft_ms=3_000)
    _load(kit, REVERT + 10, REVERT + 20, ttft_ms=110)  # one good stretch...
    _load(kit, REVERT + 20, REVERT + 40, ttft_ms=3_000)  # ...then bad again
    _load(kit, REVERT + 40, 240, ttft_ms=110)
    assert _judge(kit, hold="0s").observed["recovery_s"] == pytest.approx(10.0)
    assert _judge(kit, hold="10s").observed["recovery_s"] == pytest.approx(40.0)


def test_without_a_recovery_phase_or_baseline_samples_it_is_inconclusive(tmp_path: Path) -> None:
    kit = RunKit(tmp_path / "a")
    kit.phases(baseline=(0, 60), fault=(60, 120))
    assert _judge(kit).status is Status.INCONCLUSIVE
    kit = RunKit(tmp_path / "b")
    kit.phases(baseline=(0, 60), fault=(60, 120), recovery=(120, 240))
    kit.request(10)
    verdict = _judge(kit)
    assert verdict.status is Status.INCONCLUSIVE and "baseline samples" in verdict.message


def test_the_fault_phase_end_is_the_revert_when_the_journal_has_none(tmp_path: Path) -> None:
    kit = RunKit(tmp_path / "run")
    kit.phases(baseline=(0, 60), fault=(60, 100), recovery=(100, 220))
    for i in range(120):
        kit.request(i * 0.5, ttft_ms=100)
    _load(kit, 100, 115, ttft_ms=3_000)
    _load(kit, 115, 220, ttft_ms=100)
    verdict = _judge(kit)
    assert verdict.status is Status.PASS and verdict.observed["recovery_s"] == pytest.approx(15.0)
