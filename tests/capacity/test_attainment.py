"""The SLO-attainment rule over one point's records (pure: synthetic records)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from drill.capacity.attainment import AttainmentRule, judge_pool, request_value
from drill.capacity.point import PointRequest, PointTiming, judge_point
from drill.errors import InputError
from drill.rundir.records import ErrorClass, RequestRecord

SLO = {"ttft_p95": 2.0, "tpot_p95": 0.1}


def _ok(i: int, ttft: float, tpot: float = 20.0, tokens: int = 11, lag: float = 1.0) -> RequestRecord:
    chunks = [ttft + k * tpot for k in range(tokens)]
    return RequestRecord(
        request_id=f"r{i}",
        logical_id=f"chat-{i}",
        pool="chat",
        attempt=1,
        intended_ts=100.0 + i * 0.1,
        sent_ts=100.0 + i * 0.1,
        schedule_lag_ms=lag,
        status=200,
        ttft_ms=ttft,
        e2e_ms=chunks[-1] + 1,
        chunk_offsets_ms=chunks,
        completion_tokens=tokens,
    )


def _failed(i: int, error: ErrorClass, chunks: list[float] | None = None) -> RequestRecord:
    return RequestRecord(
        request_id=f"r{i}",
        logical_id=f"chat-{i}",
        pool="chat",
        attempt=1,
        intended_ts=100.0 + i * 0.1,
        sent_ts=100.0 + i * 0.1,
        schedule_lag_ms=1.0,
        error=error,
        ttft_ms=chunks[0] if chunks else None,
        chunk_offsets_ms=chunks or [],
    )


def test_all_on_time_holds_and_every_attempt_is_good():
    records = [_ok(i, 100.0 + i) for i in range(40)]
    out = judge_pool("chat", SLO, records, 10.0, AttainmentRule())
    assert out.holds and out.good == 40 and out.goodput_per_s == pytest.approx(4.0)
    assert out.ratio == pytest.approx(max(s.ratio for s in out.slos))
    assert {s.key for s in out.slos} == {"ttft_p95", "tpot_p95"}


def test_failures_count_over_every_bound_so_an_overloaded_point_cannot_look_healthy():
    records = [_ok(i, 100.0) for i in range(90)] + [_failed(90 + i, ErrorClass.TIMEOUT) for i in range(10)]
    out = judge_pool("chat", SLO, records, 10.0, AttainmentRule())
    assert not out.holds
    assert math.isinf(out.binding.observed_ms)
    assert out.failed == 10 and out.good == 90


def test_the_percentile_decides_not_the_mean():
    records = [_ok(i, 100.0) for i in range(94)] + [_ok(94 + i, 5000.0) for i in range(6)]
    out = judge_pool("chat", SLO, records, 10.0, AttainmentRule())
    ttft = next(s for s in out.slos if s.key == "ttft_p95")
    assert not ttft.holds and ttft.observed_ms > 2000


def test_a_cut_off_attempt_is_censored_not_failed():
    on_time = _failed(1, ErrorClass.CANCELLED, chunks=[300.0, 320.0, 340.0, 360.0])
    assert request_value(on_time, "ttft", 95) == 300.0
    assert request_value(on_time, "tpot", 95) == pytest.approx(20.0)
    assert math.isinf(request_value(on_time, "e2e", 95))
    never_started = _failed(2, ErrorClass.CANCELLED)
    assert math.isinf(request_value(never_started, "ttft", 95))
    out = judge_pool("chat", SLO, [_ok(0, 100.0), on_time], 1.0, AttainmentRule())
    assert out.holds and out.good == 2 and out.cancelled == 1


def test_goodput_rule_needs_the_share():
    records = [_ok(i, 100.0) for i in range(85)] + [_ok(85 + i, 3000.0) for i in range(15)]
    assert not judge_pool("chat", SLO, records, 10.0, AttainmentRule("goodput", 0.9)).holds
    assert judge_pool("chat", SLO, records, 10.0, AttainmentRule("goodput", 0.8)).holds


@pytest.mark.parametrize("text", ["median", "goodput:2", "goodput:x", "percentile:3", "goodput:0"])
def test_bad_rules_are_refused(text: str):
    with pytest.raises(InputError, match="--attainment"):
        AttainmentRule.parse(text)


def test_rule_parsing():
    assert AttainmentRule.parse("goodput:90%") == AttainmentRule("goodput", 0.9)
    assert AttainmentRule.parse("percentile") == AttainmentRule()


def test_a_point_flags_a_late_load_generator():
    request = PointRequest("full", 0, 5.0, 0, 7)
    records = [_ok(i, 100.0, lag=80.0) for i in range(30)]
    point = judge_point(request, Path("p"), records, {"chat": SLO}, PointTiming(measure_s=3.0), AttainmentRule())
    assert point.holds and point.harness_limited
    assert any("schedule lag" in note for note in point.notes)
    assert point.arrivals_per_s == pytest.approx(10.0)
