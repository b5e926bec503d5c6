"""``metric`` stop conditions by quantity name: mapped from any server's names, "not available" (never 0) when
the target does not export it, and a located error with a did-you-mean for a name that is neither."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from drill.cli.main import cli
from drill.runner.stopconditions import StopMonitor
from drill.serving_metrics import Reading
from drill.spec.models import StopCondition

DRILL = """name: typo
target: {kind: openai, config: {url: "http://127.0.0.1:8000"}}
scenario:
  arrival: {process: poisson, rate: 5}
  pools:
    - {name: chat, input_tokens: {dist: fixed, value: 100}, output_tokens: {dist: fixed, value: 50}}
stop_conditions:
  - kind: metric
    metric: %s
    above: 10
"""


def _cond(metric: str, above: float = 10, for_: str = "1s") -> StopCondition:
    return StopCondition.model_validate({"kind": "metric", "metric": metric, "above": above, "for": for_})


def _monitor(tmp_path: Path, cond: StopCondition, readings: dict, notes: list[str]) -> StopMonitor:
    return StopMonitor([cond], tmp_path / "none.jsonl", lambda: readings, time.monotonic(), notes.append)


def _fires(monitor: StopMonitor) -> str | None:
    t0 = time.monotonic()
    monitor.poll(fault_phase=True, now_mono=t0)
    trigger = monitor.poll(fault_phase=True, now_mono=t0 + 1.5)
    return None if trigger is None else trigger.observed


@pytest.mark.parametrize(
    ("server_metric", "value"),
    [
        ("vllm:num_requests_waiting", 6.0),
        ("sglang:num_queue_reqs", 6.0),
        ("tgi_queue_size", 6.0),
        ("llamacpp:requests_deferred", 6.0),
    ],
)
def test_queue_depth_reads_each_servers_name_summed_over_replicas(tmp_path: Path, server_metric, value) -> None:
    readings = {f"r{i}": Reading(100.0, {server_metric: value}) for i in range(2)}  # 12 queued in all
    notes: list[str] = []
    observed = _fires(_monitor(tmp_path, _cond("queue_depth", above=10), readings, notes))
    assert observed is not None and observed.startswith(f"queue_depth ({server_metric}) = 12")
    assert notes == []
    below = {"r0": Reading(100.0, {server_metric: value})}  # 6: under the bound
    assert _fires(_monitor(tmp_path, _cond("queue_depth", above=10), below, notes)) is None


def test_a_quantity_the_server_does_not_export_is_noted_once_and_never_triggers(tmp_path: Path) -> None:
    """llama.cpp exports no preemption counter: "not available", not a 0 that passes for a calm server."""
    readings = {"llama": Reading(100.0, {"llamacpp:requests_deferred": 50.0})}
    notes: list[str] = []
    monitor = _monitor(tmp_path, _cond("preemptions", above=-1), readings, notes)  # any value, even 0, would fire
    assert _fires(monitor) is None and _fires(monitor) is None
    assert len(notes) == 1
    assert "preemptions: not available" in notes[0] and "vllm:num_preemptions_total" in notes[0]


def test_no_reading_yet_says_nothing(tmp_path: Path) -> None:
    notes: list[str] = []
    assert _fires(_monitor(tmp_path, _cond("preemptions", above=-1), {}, notes)) is None
    assert notes == []


def test_a_raw_name_still_works_and_a_missing_one_is_noted(tmp_path: Path) -> None:
    readings = {"r0": Reading(1.0, {"vllm:num_requests_waiting": 3.0}), "r1": Reading(1.0, {"vllm:x": 1.0})}
    notes: list[str] = []
    assert _fires(_monitor(tmp_path, _cond("vllm:num_requests_waiting", above=2), readings, notes)) is not None
    assert _fires(_monitor(tmp_path, _cond("vllm:not_there", above=-1), readings, notes)) is None
    assert len(notes) == 1 and "vllm:not_there: not available" in notes[0]


def test_a_counter_quantity_is_its_rate_per_second(tmp_path: Path) -> None:
    """preemptions from vLLM's counter: 30 more in 2 s on one replica, 10 on the other = 20/s; a reset counts."""
    r0 = Reading(102.0, {"vllm:num_preemptions_total": 130.0}, Reading(100.0, {"vllm:num_preemptions_total": 100.0}))
    r1 = Reading(102.0, {"vllm:num_preemptions_total": 10.0}, Reading(100.0, {"vllm:num_preemptions_total": 900.0}))
    notes: list[str] = []
    observed = _fires(_monitor(tmp_path, _cond("preemptions", above=19.5), {"r0": r0, "r1": r1}, notes))
    assert observed is not None and "= 20 " in observed
    assert _fires(_monitor(tmp_path, _cond("preemptions", above=20.5), {"r0": r0, "r1": r1}, notes)) is None
    one_scrape = {"r0": Reading(100.0, {"vllm:num_preemptions_total": 100.0})}  # no interval: nothing measured
    assert _fires(_monitor(tmp_path, _cond("preemptions", above=-1), one_scrape, notes)) is None
    assert notes == []


def test_ttft_seconds_is_the_histogram_mean_over_the_last_interval(tmp_path: Path) -> None:
    before = {"vllm:time_to_first_token_seconds_sum": 10.0, "vllm:time_to_first_token_seconds_count": 10.0}
    after = {"vllm:time_to_first_token_seconds_sum": 40.0, "vllm:time_to_first_token_seconds_count": 20.0}
    readings = {"r0": Reading(2.0, after, Reading(1.0, before))}  # 30 s over 10 requests: 3 s mean
    assert "= 3 " in (_fires(_monitor(tmp_path, _cond("ttft_seconds", above=2.9), readings, [])) or "")
    assert _fires(_monitor(tmp_path, _cond("ttft_seconds", above=3.1), readings, [])) is None


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [("queue_dpeth", "queue_depth"), ("kv_cache", "kv_cache_usage"), ("queue depth", "queue_depth")],
)
def test_an_unknown_quantity_is_a_located_error_with_a_did_you_mean(tmp_path: Path, name: str, suggestion) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text(DRILL % f'"{name}"')
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert f"{path}:9:" in result.output and ": error: " in result.output
    assert f"did you mean {suggestion!r}" in result.output


@pytest.mark.parametrize("name", ["my_queue_length", "vllm:num_gpu_blocks", "tgi_queue_size", "running"])
def test_quantities_and_plausible_raw_names_validate(name: str) -> None:
    assert _cond(name).metric == name
