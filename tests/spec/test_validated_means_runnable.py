"""What passes ``drill validate`` runs: values that would fail only once a run plans its arrivals, samples
lengths or creates its files are refused at validation, located at the key that holds them."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drill.errors import SpecError
from drill.load.lengths import sample_length
from drill.load.schedule import build_schedule
from drill.spec.diagnostics import format_path
from drill.spec.loader import load_drill
from drill.spec.scenario import LengthDistribution, Scenario
from tests.minimal_drill import minimal_drill

DRILL = minimal_drill("ok")


@pytest.mark.parametrize(
    "override, path, words",
    [
        # planning the arrivals: a rate that validates but asks for billions of requests, built in memory
        ("scenario.arrival.rate=1000000000", ("scenario", "arrival", "rate"), "largest a scenario may ask for"),
        ("scenario.arrival.rate=90000", ("scenario",), "a run plans at most"),
        ("phases.fault=9000h", ("phases", "fault"), "longer than 366 days"),
        (
            "scenario.arrival={process: stages, stages: [{kind: ramp, duration: 1h, from: 1, to: 99999}]}",
            ("scenario",),
            "a run plans at most",
        ),
        # sampling: parameters whose draws overflow (exp of a huge mean, gamma shapes below the sampler's range)
        (
            "scenario.pools[0].input_tokens={dist: lognormal, mu: 1000000, sigma: 1}",
            ("scenario", "pools", 0, "input_tokens", "mu"),
            "less than or equal to 50",
        ),
        (
            "scenario.pools[0].output_tokens={dist: gamma, shape: 0.0000001, scale: 1}",
            ("scenario", "pools", 0, "output_tokens", "shape"),
            "greater than or equal to 0.01",
        ),
        (
            "scenario.pools[0].output_tokens={dist: gamma, shape: 1000000, scale: 1e300}",
            ("scenario", "pools", 0, "output_tokens", "scale"),
            "less than or equal to 10000000",
        ),
        (
            "scenario.arrival={process: gamma, rate: 5, burstiness: 0.000000001}",
            ("scenario", "arrival", "burstiness"),
            "greater than or equal to 0.01",
        ),
        # timers and files: durations that overflow a timer, names too long for a folder
        ("scenario.pools[0].timeout=99999999999h", ("scenario", "pools", 0, "timeout"), "longer than 366 days"),
        ("scenario.pools[0].timeout=1e400s", ("scenario", "pools", 0, "timeout"), "longer than 366 days"),
        ("name=" + "x" * 300, ("name",), "at most 100 characters"),
        # negative waits: a gevent.Timeout of -5 s fails every request at once; time.sleep(-1) raises
        ("scenario.pools[0].timeout=-5s", ("scenario", "pools", 0, "timeout"), "greater than 0"),
        (
            "scenario.pools[0].retry={attempts: 2, backoff: -1s}",
            ("scenario", "pools", 0, "retry", "backoff"),
            "greater than or equal to 0",
        ),
        ("phases.cold_start={timeout: -1s}", ("phases", "cold_start", "timeout"), "greater than 0"),
        # listening: a bind address that is not one fails only when the receiver binds
        ("otlp={host: not a host}", ("otlp", "host"), "expected an IP address to listen on"),
        (
            "scenario.arrival={process: trace, trace: {file: t.csv, speedup: 0.0000001}}",
            ("scenario", "arrival", "trace", "speedup"),
            "greater than or equal to 0.001",
        ),
    ],
)
def test_values_that_would_fail_at_run_time_are_refused_at_validation(
    override: str, path: tuple, words: str, tmp_path: Path
) -> None:
    file = tmp_path / "d.yaml"
    file.write_text(DRILL)
    load_drill(file)  # the drill itself is fine
    with pytest.raises(SpecError) as info:
        load_drill(file, overrides=[override])
    rendered = info.value.render()
    assert any(d.path == path and words in d.message for d in info.value.diagnostics), rendered
    assert all(d.position.line >= 1 and d.position.col >= 1 for d in info.value.diagnostics), rendered


def test_a_malformed_trace_row_is_a_validation_error_at_the_trace_key(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6,10,5\nnot a row\n")
    file = tmp_path / "d.yaml"
    file.write_text(
        DRILL.replace("arrival: {process: poisson, rate: 5}", "arrival: {process: trace, trace: {file: t.csv}}")
    )
    with pytest.raises(SpecError) as info:
        load_drill(file)
    (d,) = info.value.diagnostics
    assert format_path(d.path) == "scenario.arrival.trace.file" and (d.position.line, d.position.col) == (4, 43)
    assert "t.csv:3: cannot read trace row" in d.message


finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
distributions = st.one_of(
    st.fixed_dictionaries({"dist": st.just("lognormal"), "mu": finite, "sigma": finite}),
    st.fixed_dictionaries({"dist": st.just("gamma"), "shape": finite, "scale": finite}),
    st.fixed_dictionaries(
        {"dist": st.just("empirical"), "quantiles": st.lists(finite, min_size=2, max_size=5).map(sorted)}
    ),
    st.fixed_dictionaries({"dist": st.just("fixed"), "value": st.integers(-5, 2**62)}),
)
arrivals = st.one_of(
    st.fixed_dictionaries({"process": st.sampled_from(["poisson", "constant"]), "rate": finite}),
    st.fixed_dictionaries({"process": st.just("gamma"), "rate": finite, "burstiness": finite}),
)


@settings(max_examples=300, deadline=None)
@given(distributions, st.integers(0, 2**32))
def test_every_length_distribution_that_validates_samples_finite_lengths(dist: dict, seed: int) -> None:
    try:
        model = LengthDistribution.model_validate(dist)
    except ValueError:
        return
    rng = random.Random(seed)
    for _ in range(50):
        assert model.min <= sample_length(model, rng) <= model.max


@settings(max_examples=200, deadline=None)
@given(arrivals)
def test_every_arrival_process_that_validates_can_be_planned(arrival: dict) -> None:
    data = {
        "arrival": arrival,
        "pools": [
            {"name": "p", "input_tokens": {"dist": "fixed", "value": 1}, "output_tokens": {"dist": "fixed", "value": 1}}
        ],
    }
    try:
        scenario = Scenario.model_validate(data)
    except ValueError:
        return
    schedule = build_schedule(scenario, 1.0, seed=1)
    assert len(schedule.requests) <= 2 * max(1.0, scenario.arrival.rate) + 10


@pytest.mark.parametrize(
    "factor, words",
    [
        (float("nan"), "positive finite number"),
        (0.0, "positive finite number"),
        (-1.0, "positive finite number"),
        (float("inf"), "positive finite number"),
        (100_000.0, "a run plans at most"),
    ],
)
def test_a_time_scale_that_cannot_run_is_refused_located_at_the_option(
    factor: float, words: str, tmp_path: Path
) -> None:
    file = tmp_path / "d.yaml"
    file.write_text(DRILL)
    with pytest.raises(SpecError) as info:
        load_drill(file, time_scale=factor)
    (d,) = info.value.diagnostics
    assert str(d.position) == "<--time-scale>:1:1" and words in d.message, info.value.render()
