"""Exact figures from raw records: percentiles, vLLM's TPOT/ITL, throughput, errors, goodput, phases."""

from __future__ import annotations

import pytest

from drill.load.live_status import WindowStats, format_status, window_stats
from drill.load.summary import ALL_POOLS, render_text, summarize
from drill.rundir.records import ErrorClass, RequestRecord


def _rec(
    i: int,
    *,
    pool: str = "chat",
    start: float = 100.0,
    chunks: list[float] | None = None,
    tokens: int = 4,
    error: ErrorClass | None = None,
    status: int = 200,
    lag: float = 1.0,
) -> RequestRecord:
    chunks = [10.0 * i + 5, 10.0 * i + 15, 10.0 * i + 25, 10.0 * i + 35] if chunks is None else chunks
    ok = error is None
    return RequestRecord(
        request_id=f"r{i}",
        logical_id=f"{pool}-{i}",
        pool=pool,
        attempt=1,
        intended_ts=start + i,
        sent_ts=start + i + lag / 1000,
        schedule_lag_ms=lag,
        status=status if ok else 503,
        error=error,
        ttft_ms=chunks[0] if ok and chunks else None,
        e2e_ms=(chunks[-1] + 1) if ok and chunks else 2.0,
        chunk_offsets_ms=chunks if ok else [],
        completion_tokens=tokens if ok else None,
    )


def test_percentiles_tpot_itl_and_throughput_are_exact() -> None:
    records = [_rec(i) for i in range(10)]
    report = summarize(records, duration_s=10.0, start_ts=100.0)
    g = report.group()
    assert g.ttft.percentiles["p50"] == pytest.approx(50.0)  # TTFTs 5, 15, ..., 95
    assert g.ttft.percentiles["p90"] == pytest.approx(86.0)  # numpy linear interpolation
    assert g.tpot.count == 10 and g.tpot.percentiles["p99"] == pytest.approx(10.0)  # (35 - 5) / (4 - 1)
    assert g.itl.count == 30 and g.itl.max == pytest.approx(10.0)
    assert g.e2e.min == pytest.approx(36.0)
    assert g.requests_per_s == pytest.approx(1.0) and g.output_tokens_per_s == pytest.approx(4.0)
    assert g.schedule_lag.percentiles["p50"] == pytest.approx(1.0)
    assert g.error_rate == 0 and g.goodput_per_s == pytest.approx(1.0)


def test_errors_drops_and_goodput_against_pool_slos() -> None:
    records = [_rec(i) for i in range(8)]
    records.append(_rec(8, error=ErrorClass.REFUSED))
    records.append(_rec(9, error=ErrorClass.CLIENT_DROP))
    report = summarize(records, slos={"chat": {"ttft_p50": 0.040, "itl_p99": 0.020}}, duration_s=10, start_ts=100)
    g = report.group(pool="chat")
    assert g.attempts == 10 and g.ok == 8 and g.client_drops == 1
    assert g.errors == {"refused": 1, "client_drop": 1} and g.error_rate == pytest.approx(0.2)
    assert g.goodput_per_s == pytest.approx(0.4)  # TTFT 5, 15, 25, 35 ms meet 40 ms; 45..75 do not
    assert g.goodput_share == pytest.approx(0.5)
    by_key = {s.key: s for s in g.slo}
    assert by_key["ttft_p50"].observed_ms == pytest.approx(40.0) and by_key["ttft_p50"].met
    assert by_key["itl_p99"].met
    assert report.group(pool=ALL_POOLS).slo == ()


def test_requests_cancelled_at_stop_are_not_counted_as_failures() -> None:
    records = [_rec(i) for i in range(6)] + [_rec(6, error=ErrorClass.TIMEOUT), _rec(7, error=ErrorClass.CANCELLED)]
    g = summarize(records).group()
    assert g.errors == {"timeout": 1, "cancelled": 1} and g.error_rate == pytest.approx(1 / 7)


def test_single_token_and_failed_requests_have_no_tpot() -> None:
    records = [_rec(0, chunks=[5.0], tokens=1), _rec(1, error=ErrorClass.TIMEOUT)]
    g = summarize(records).group()
    assert g.tpot.count == 0 and g.ttft.count == 1 and g.itl.count == 0


def test_records_fall_into_the_phase_of_their_intended_start() -> None:
    records = [_rec(i, start=0.0) for i in range(10)] + [_rec(i, pool="batch", start=0.0) for i in range(3)]
    report = summarize(records, phases={"baseline": (0.0, 5.0), "fault": (5.0, 10.0)})
    assert report.group("baseline").attempts == 5 + 3 and report.group("fault").attempts == 5
    assert report.group("baseline", "batch").attempts == 3
    assert report.group("fault").requests_per_s == pytest.approx(1.0)
    with pytest.raises(KeyError, match="fault"):
        report.group("fault", "batch")
    text = render_text(report)
    assert "phase baseline" in text and "phase fault" in text and "batch" in text


def test_status_line_shows_rates_latencies_and_errors() -> None:
    records = [_rec(i) for i in range(5)] + [_rec(5, error=ErrorClass.REFUSED)]
    stats = window_stats(records, {"in_flight": 7, "dropped": 2}, (20.0, 19.5), 12.0)
    line = format_status(stats)
    assert "20.0/s → 19.5/s" in line and "in flight 7" in line and "drops 2" in line
    assert "TTFT p50 25ms" in line and "refused 1" in line
    assert format_status(WindowStats(0, 0, 0, 0, 0, None, None, None, None, {})).count("-") >= 4
