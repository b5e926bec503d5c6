"""The fault contract's "recovered" means back within the baseline's band, not just under the inject threshold."""

from __future__ import annotations

import pytest

from drill.testing import (
    ContractViolation,
    FaultCase,
    TrafficSample,
    errors_above,
    latency_above,
    within_baseline,
)
from drill.testing.fault_contract import _sample_until

BASE = TrafficSample(count=100, errors=0, p50_s=0.050, p90_s=0.080)


class ScriptedTraffic:
    """Stands in for live traffic at the seam the contract samples through: one sample per call, in order."""

    def __init__(self, samples: list[TrafficSample]) -> None:
        self.samples = list(samples)
        self.taken = 0

    def sample(self, seconds: float) -> TrafficSample:
        self.taken += 1
        return self.samples.pop(0)


def _case(effect, timeout_s: float = 30.0) -> FaultCase:
    return FaultCase(kind="scripted", params={}, target=None, effect=effect, sample_s=0.0, recovery_timeout_s=timeout_s)


def test_half_the_requests_failing_is_not_recovered_under_errors_above_half() -> None:
    traffic = ScriptedTraffic(
        [TrafficSample(100, 49, 0.05, 0.08), TrafficSample(100, 20, 0.05, 0.08), TrafficSample(100, 1, 0.05, 0.08)]
    )
    recovered, _ = _sample_until(traffic, _case(errors_above(0.5)), BASE)
    assert recovered.errors == 1 and traffic.taken == 3


def test_latency_just_under_the_inject_threshold_is_not_recovered() -> None:
    traffic = ScriptedTraffic([TrafficSample(100, 0, 0.340, 0.400), TrafficSample(100, 0, 0.060, 0.090)])
    recovered, _ = _sample_until(traffic, _case(latency_above(0.3)), BASE)  # 290 ms slower: under 300, still faulted
    assert recovered.p50_s == 0.060 and traffic.taken == 2


def test_never_back_in_the_band_is_a_contract_violation_that_says_why() -> None:
    traffic = ScriptedTraffic([TrafficSample(100, 30, 0.05, 0.08)] * 50)
    with pytest.raises(ContractViolation, match="30% errors; the baseline's band ends at"):
        _sample_until(traffic, _case(errors_above(0.5), timeout_s=0.0), BASE)


@pytest.mark.parametrize(
    "now, recovered",
    [
        (TrafficSample(100, 0, 0.050, 0.080), True),
        (TrafficSample(100, 2, 0.070, 0.100), True),  # within noise: 2% errors of 100, median under the baseline's p90
        (TrafficSample(100, 15, 0.050, 0.080), False),
        (TrafficSample(100, 0, 0.200, 0.250), False),
        (TrafficSample(0, 0, 0.0, 0.0), False),
    ],
)
def test_the_band_is_measured_like_the_effects(now: TrafficSample, recovered: bool) -> None:
    assert (within_baseline(BASE, now) is None) is recovered
