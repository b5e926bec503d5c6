"""The request set decided in advance: determinism, arrival processes, pool shares, length quantiles.

Acceptance (issue 4): the same seed gives an identical request set (digests compared), and pool
shares and length distributions match the scenario within statistical tolerance (quantiles checked).
"""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path

import pytest

from drill.errors import InputError
from drill.load.lengths import empirical_quantile, sample_length
from drill.load.payload import PromptText, build_body, payload_digest
from drill.load.schedule import build_schedule, nominal_rate, with_total_rate
from drill.spec.azure_trace import per_bucket_counts, read_trace
from drill.spec.loader import load_scenario
from drill.spec.scenario import LengthDistribution, Scenario
from drill.stats import percentile

REPO = Path(__file__).resolve().parents[2]
CONV_CONTEXT = [
    2,
    181,
    207,
    372,
    387,
    396,
    403,
    414,
    703,
    984,
    1020,
    1045,
    1071,
    1097,
    1130,
    1189,
    1315,
    1876,
    2734,
    4083,
    14050,
]


def _scenario(**overrides) -> Scenario:
    data = {
        "seed": 5,
        "arrival": {"process": "poisson", "rate": 50},
        "pools": [
            {
                "name": "a",
                "share": 0.7,
                "input_tokens": {"dist": "fixed", "value": 10},
                "output_tokens": {"dist": "fixed", "value": 5},
            },
            {
                "name": "b",
                "share": 0.3,
                "input_tokens": {"dist": "empirical", "quantiles": CONV_CONTEXT},
                "output_tokens": {"dist": "lognormal", "mu": 4.0, "sigma": 0.5},
            },
        ],
    }
    data.update(overrides)
    return Scenario.model_validate(data)


def _digests(scenario: Scenario, duration_s: float, seed: int) -> list[str]:
    text = PromptText(seed)
    pools = {p.name: p for p in scenario.pools}
    return [
        payload_digest(build_body(pools[r.pool], "m", r.logical_id, r.input_tokens, r.output_tokens, text))
        for r in build_schedule(scenario, duration_s, seed).requests
    ]


def test_same_seed_gives_byte_identical_request_set() -> None:
    scenario = _scenario()
    first, second = _digests(scenario, 20, 5), _digests(scenario, 20, 5)
    assert len(first) > 500
    assert first == second
    other = _digests(scenario, 20, 6)
    assert other != first and len(set(other) & set(first)) < len(first) // 10


def test_pool_shares_and_poisson_rate_within_tolerance() -> None:
    requests = build_schedule(_scenario(), 200, 1).requests
    n = len(requests)
    assert abs(n - 50 * 200) < 4 * math.sqrt(50 * 200)  # Poisson count: within 4 sigma
    share_a = sum(r.pool == "a" for r in requests) / n
    assert abs(share_a - 0.7) < 4 * math.sqrt(0.7 * 0.3 / n)
    gaps = [b.offset_s - a.offset_s for a, b in zip(requests, requests[1:])]
    cv = statistics.pstdev(gaps) / statistics.fmean(gaps)
    assert 0.95 < cv < 1.05  # exponential gaps: CV 1


def test_empirical_lengths_reproduce_the_quantile_table() -> None:
    scenario = _scenario(
        pools=[
            {
                "name": "b",
                "input_tokens": {"dist": "empirical", "quantiles": CONV_CONTEXT},
                "output_tokens": {"dist": "fixed", "value": 1},
            }
        ]
    )
    lengths = [r.input_tokens for r in build_schedule(scenario, 400, 2).requests]
    assert len(lengths) > 15000
    for i in range(1, 20):  # q5..q95: sampled quantile within 2.5 percentile points of the table's
        sampled_low, sampled_high = percentile(lengths, 5 * i - 2.5), percentile(lengths, 5 * i + 2.5)
        assert sampled_low <= CONV_CONTEXT[i] + 1 and CONV_CONTEXT[i] - 1 <= sampled_high, i


def test_empirical_inverse_cdf_interpolates_in_log_space() -> None:
    assert empirical_quantile([10, 1000], 0.5) == pytest.approx(100)
    assert empirical_quantile(CONV_CONTEXT, 0.5) == pytest.approx(1020)
    assert empirical_quantile(CONV_CONTEXT, 0.0) == pytest.approx(2)


def test_lengths_are_clipped_and_trace_needs_a_row() -> None:
    rng = random.Random(0)
    dist = LengthDistribution(dist="lognormal", mu=10, sigma=0.1, max=500)
    assert sample_length(dist, rng) == 500
    assert sample_length(LengthDistribution(dist="trace", max=100), rng, trace_value=250) == 100
    with pytest.raises(ValueError, match="trace"):
        sample_length(LengthDistribution(dist="trace"), rng)


def test_gamma_burstiness_sets_the_gap_cv() -> None:
    scenario = _scenario(arrival={"process": "gamma", "rate": 20, "burstiness": 0.25})
    requests = build_schedule(scenario, 300, 3).requests
    gaps = [b.offset_s - a.offset_s for a, b in zip(requests, requests[1:])]
    cv = statistics.pstdev(gaps) / statistics.fmean(gaps)
    assert abs(len(requests) / 300 - 20) < 2.5
    assert 1.8 < cv < 2.2  # gamma shape k: CV = 1/sqrt(k) = 2


def test_constant_and_stages() -> None:
    constant = build_schedule(_scenario(arrival={"process": "constant", "rate": 4}), 2.0, 0).requests
    assert [r.offset_s for r in constant] == pytest.approx([0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75])
    stages = _scenario(
        arrival={
            "process": "stages",
            "stages": [
                {"kind": "ramp", "duration": "20s", "from": 0, "to": 100},
                {"kind": "step", "duration": "10s", "rate": 10},
            ],
        }
    )
    schedule = build_schedule(stages, 40, 4)
    first_half = sum(r.offset_s < 10 for r in schedule.requests)
    second_half = sum(10 <= r.offset_s < 20 for r in schedule.requests)
    assert abs(first_half - 250) < 4 * math.sqrt(250) and abs(second_half - 750) < 4 * math.sqrt(750)
    assert sum(r.offset_s >= 30 for r in schedule.requests) == pytest.approx(100, abs=4 * 10)  # last rate holds
    assert schedule.rate_at("a", 10.0) == pytest.approx(0.7 * 50)


def test_trace_replay_keeps_rows_and_per_minute_counts() -> None:
    path = REPO / "scenarios" / "data" / "azure2023_code_first12min.csv"
    rows = read_trace(path)
    scenario = Scenario.model_validate(
        {
            "arrival": {"process": "trace", "trace": {"file": str(path), "speedup": 60, "use_lengths": True}},
            "pools": [{"name": "code", "input_tokens": {"dist": "trace"}, "output_tokens": {"dist": "trace"}}],
        }
    )
    schedule = build_schedule(scenario, 12, 0)
    assert len(schedule.requests) == len(rows) == 1966
    minute_counts = per_bucket_counts([r.offset_s for r in rows], 60, 720)
    assert minute_counts == [63, 0, 0, 531, 187, 130, 15, 42, 38, 476, 421, 63]
    assert per_bucket_counts([r.offset_s for r in schedule.requests], 1, 12) == minute_counts
    assert [(r.input_tokens, r.output_tokens) for r in schedule.requests[:2]] == [(4808, 10), (3180, 8)]
    assert schedule.rate_at("code", 3.5) == pytest.approx(531, rel=0.01)  # a one-trace-minute window


def test_rate_override_rescales_all_pools() -> None:
    scenario = _scenario()
    assert nominal_rate(scenario, 10) == pytest.approx(50)
    faster = with_total_rate(scenario, 80, 10)
    assert faster.arrival.rate == pytest.approx(80)
    stages = _scenario(
        arrival={"process": "stages", "stages": [{"kind": "ramp", "duration": "10s", "from": 0, "to": 20}]}
    )
    assert nominal_rate(with_total_rate(stages, 5, 10), 10) == pytest.approx(5, rel=0.01)
    replay = load_scenario(REPO / "scenarios" / "azure-conv-replay.yaml")[0]
    with pytest.raises(InputError, match="speedup"):
        with_total_rate(replay, 5, 10)


def test_partitions_cover_the_schedule_exactly_once() -> None:
    schedule = build_schedule(_scenario(), 10, 9)
    parts = [schedule.partition(i, 3) for i in range(3)]
    assert sorted(r.index for part in parts for r in part) == list(range(len(schedule.requests)))


@pytest.mark.parametrize("name", ["chat-azure-conv", "code-azure-code", "mixed-interactive-batch", "azure-conv-replay"])
def test_shipped_scenarios_validate_and_schedule(name: str) -> None:
    scenario, diagnostics = load_scenario(REPO / "scenarios" / f"{name}.yaml")
    assert scenario is not None, [d.render() for d in diagnostics]
    requests = build_schedule(scenario, 60, scenario.seed).requests
    assert len(requests) > 100
    for pool in scenario.pools:
        mine = [r for r in requests if r.pool == pool.name]
        assert mine and all(pool.input_tokens.min <= r.input_tokens <= pool.input_tokens.max for r in mine)


def test_chat_scenario_lengths_follow_the_azure_conv_table() -> None:
    scenario = load_scenario(REPO / "scenarios" / "chat-azure-conv.yaml")[0]
    requests = build_schedule(scenario, 3600, 1).requests  # ~20k requests
    inputs = [r.input_tokens for r in requests]
    outputs = [r.output_tokens for r in requests]
    assert abs(len(requests) / 3600 - 5.53) < 0.2
    assert percentile(inputs, 50) == pytest.approx(1020, rel=0.03)
    assert percentile(outputs, 50) == pytest.approx(129, rel=0.05)
    assert percentile(outputs, 90) == pytest.approx(424, rel=0.05)
