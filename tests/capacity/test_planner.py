"""The knee planner, driven step by step with synthetic points (no process, no clock)."""

from __future__ import annotations

import math

import pytest

from drill.capacity.planner import Done, Next, Observation, SearchConfig, decide, knee_of, t_interval


def _drive(config: SearchConfig, capacity_by_rep: dict[int, float], limit: int = 40) -> list[Observation]:
    """Run the planner against a synthetic target whose repetition k holds below ``capacity_by_rep[k]``."""
    points: list[Observation] = []
    for _ in range(limit):
        step = decide(config, points)
        if isinstance(step, Done):
            return points
        assert isinstance(step, Next)
        knee = capacity_by_rep[step.repetition]
        ratio = (step.rate / knee) ** 2  # a smooth SLO curve: observed/bound crosses 1 at the capacity
        points.append(Observation(step.rate, step.repetition, ratio <= 1.0, ratio))
    raise AssertionError("the planner did not finish")


def test_first_step_is_the_start_rate():
    step = decide(SearchConfig(start=5.0), [])
    assert isinstance(step, Next) and step.rate == 5.0 and step.repetition == 0


def test_coarse_sweep_doubles_while_rates_hold():
    config = SearchConfig(start=5.0, repetitions=1)
    step = decide(config, [Observation(5.0, 0, True, 0.2)])
    assert isinstance(step, Next) and step.rate == 10.0


def test_coarse_sweep_halves_while_rates_fail():
    config = SearchConfig(start=8.0, repetitions=1)
    step = decide(config, [Observation(8.0, 0, False, 3.0)])
    assert isinstance(step, Next) and step.rate == 4.0


def test_a_holding_rate_is_confirmed_with_every_repetition_before_bisection():
    config = SearchConfig(start=5.0, repetitions=2)
    points = [Observation(5.0, 0, True, 0.3), Observation(10.0, 0, False, 2.0)]
    step = decide(config, points)
    assert isinstance(step, Next) and (step.rate, step.repetition) == (5.0, 1)


def test_bisection_takes_the_geometric_midpoint():
    config = SearchConfig(start=5.0, repetitions=1)
    points = [Observation(5.0, 0, True, 0.3), Observation(10.0, 0, False, 2.0)]
    step = decide(config, points)
    assert isinstance(step, Next) and step.rate == pytest.approx(math.sqrt(50.0))


def test_one_failing_repetition_fails_the_rate():
    config = SearchConfig(start=5.0, repetitions=2)
    points = [
        Observation(5.0, 0, True, 0.3),
        Observation(5.0, 1, True, 0.4),
        Observation(10.0, 0, False, 2.0),
        Observation(7.0, 0, True, 0.9),
        Observation(7.0, 1, False, 1.1),
    ]
    step = decide(config, points)
    assert isinstance(step, Next) and step.rate == pytest.approx(math.sqrt(35.0)) and step.repetition == 0


def test_search_converges_to_the_capacity_within_the_tolerance():
    config = SearchConfig(start=3.0, repetitions=1, tolerance=0.05)
    points = _drive(config, {0: 11.3})
    result = knee_of(points, bracketed=True)
    assert result.knee is not None and result.upper is not None
    assert result.knee <= 11.3 < result.upper
    assert result.upper / result.knee <= 1.05 + 1e-9
    assert result.mean == pytest.approx(11.3, rel=0.02)


def test_the_knee_is_the_lowest_capacity_over_repetitions_and_the_interval_covers_them():
    config = SearchConfig(start=4.0, repetitions=3, tolerance=0.05, max_points=40)
    points = _drive(config, {0: 10.0, 1: 9.0, 2: 9.5})
    result = knee_of(points, bracketed=True, repetitions=3)
    assert result.knee is not None and result.knee <= 9.0
    assert len(result.estimates) == 3
    assert result.ci_low is not None and result.ci_high is not None
    assert result.ci_low < 9.5 < result.ci_high


def test_done_when_bracketed():
    config = SearchConfig(start=5.0, repetitions=1, tolerance=0.1)
    done = decide(config, [Observation(5.0, 0, True, 0.9), Observation(5.4, 0, False, 1.1)])
    assert isinstance(done, Done) and done.bracketed


def test_unbracketed_when_every_rate_holds_up_to_the_maximum():
    config = SearchConfig(start=5.0, repetitions=1, max_rate=12.0)
    points = _drive(config, {0: 1000.0})
    done = decide(config, points)
    assert isinstance(done, Done) and not done.bracketed and "held" in done.reason
    assert knee_of(points, bracketed=False).knee is None


def test_unbracketed_when_every_rate_fails_down_to_the_minimum():
    config = SearchConfig(start=5.0, repetitions=1, min_rate=1.0)
    points = _drive(config, {0: 0.01})
    done = decide(config, points)
    assert isinstance(done, Done) and not done.bracketed and "failed" in done.reason
    assert knee_of(points, bracketed=False).knee is None


def test_the_point_budget_ends_the_search_unbracketed():
    config = SearchConfig(start=5.0, repetitions=1, tolerance=0.001, max_points=4)
    points = _drive(config, {0: 7.0})
    assert len(points) == 4
    done = decide(config, points)
    assert isinstance(done, Done) and not done.bracketed and "max-points" in done.reason


def test_listed_rates_are_measured_in_order_at_every_repetition():
    config = SearchConfig(start=1.0, rates=(2.0, 8.0), repetitions=2)
    points = _drive(config, {0: 5.0, 1: 5.0})
    assert [(p.rate, p.repetition) for p in points] == [(2.0, 0), (2.0, 1), (8.0, 0), (8.0, 1)]
    done = decide(config, points)
    assert isinstance(done, Done) and done.bracketed
    assert knee_of(points, bracketed=True, repetitions=2).knee == 2.0


def test_a_holding_rate_not_measured_at_every_repetition_is_not_the_knee():
    points = [Observation(4.0, 0, True, 0.5), Observation(4.0, 1, True, 0.6), Observation(5.0, 0, True, 0.8)]
    points.append(Observation(6.0, 0, False, 1.3))
    assert knee_of(points, bracketed=False, repetitions=2).knee == 4.0


def test_a_rate_that_holds_above_a_failing_one_is_flagged_and_ignored():
    points = [Observation(4.0, 0, True, 0.5), Observation(6.0, 0, False, 1.2), Observation(8.0, 0, True, 0.9)]
    result = knee_of(points, bracketed=True)
    assert result.knee == 4.0 and result.upper == 6.0 and result.non_monotone


def test_t_interval():
    assert t_interval([5.0]) == (None, None)
    low, high = t_interval([9.0, 10.0, 11.0])
    assert low == pytest.approx(10.0 - 4.303 / math.sqrt(3)) and high == pytest.approx(10.0 + 4.303 / math.sqrt(3))


def test_the_failing_end_of_the_final_bracket_is_measured_at_every_repetition():
    config = SearchConfig(start=5.0, repetitions=2, tolerance=0.1)
    points = [Observation(5.0, 0, True, 0.9), Observation(5.0, 1, True, 0.8), Observation(5.4, 0, False, 1.1)]
    step = decide(config, points)
    assert isinstance(step, Next) and (step.rate, step.repetition) == (5.4, 1)
    done = decide(config, [*points, Observation(5.4, 1, True, 0.95)])
    assert isinstance(done, Done) and done.bracketed


def test_the_knee_estimate_stays_inside_the_measured_bracket():
    points = [
        Observation(8.0, 0, True, 0.5),
        Observation(8.0, 1, True, 0.6),
        Observation(10.0, 0, False, 2.0),
        Observation(10.0, 1, False, 1.5),
    ]
    result = knee_of(points, bracketed=True, repetitions=2)
    assert result.knee == 8.0 and result.upper == 10.0
    # the worst repetition: 0.6 at 8/s, 2.0 at 10/s -> log-linear crossing
    share = -math.log(0.6) / (math.log(2.0) - math.log(0.6))
    assert result.estimate == pytest.approx(8.0 + 2.0 * share)
    assert 8.0 <= result.estimate <= 10.0


def test_without_a_finite_slope_the_estimate_is_the_measured_knee():
    points = [Observation(3.0, 0, True, 0.2), Observation(30.0, 0, False, math.inf)]
    result = knee_of(points, bracketed=True, repetitions=1)
    assert result.knee == 3.0 and result.estimate == 3.0
