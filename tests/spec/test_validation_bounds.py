"""Validated means runnable, for bounds too (issue 21): no negative duration or bound, no check step that would
judge millions of windows, no ``${NAME}`` that is unset — each a located error (file:line:col, a hint), exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from drill.cli.main import cli

DRILL = """\
name: bounds
target:
  kind: openai
  config: {url: "http://127.0.0.1:8000"}
scenario:
  arrival: {process: poisson, rate: 5}
  pools:
    - name: chat
      input_tokens: {dist: fixed, value: 10}
      output_tokens: {dist: fixed, value: 5}
phases: {baseline: 10s, fault: 20s, recovery: 30s, replay: false}
checks:
  - {kind: recovery_time, name: back}
"""

PROMETHEUS = "metrics={{source: prometheus, prometheus: {{url: 'http://127.0.0.1:9090', {}}}}}"


def _validate(tmp_path: Path, *overrides: str):
    path = tmp_path / "d.yaml"
    path.write_text(DRILL)
    args = ["validate", str(path)]
    for override in overrides:
        args += ["--set", override]
    return CliRunner().invoke(cli, args)


def test_the_drill_itself_is_valid(tmp_path: Path) -> None:
    result = _validate(tmp_path)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("override", "where", "says"),
    [
        ("checks[0].params={step: 1us}", "checks[0]", "50,000,000 windows"),
        ("checks[0].params={step: 1ms}", "checks[0]", "at most 10,000"),
        ("checks[0].params={step: 0s}", "checks[0].params.step", "greater than 0"),
        ("checks[0].params={window: -1s}", "checks[0].params.window", "greater than 0"),
        ("checks[0].params={window: 0s}", "checks[0].params.window", "greater than 0"),
        ("checks[0].params={max: -1s}", "checks[0].params.max", "negative"),
        ("scenario.pools[0].slo={ttft_p95: -5s}", "scenario.pools[0].slo.ttft_p95", "negative"),
        ("scenario.pools[0].slo={ttft_p95: 0s}", "scenario.pools[0].slo", "more than 0"),
        ("slo={e2e_p99: -1s}", "slo.e2e_p99", "negative"),
        ("phases.warmup=-1s", "phases.warmup", "negative"),
        ("stop_conditions=[{kind: latency, metric: ttft, above: -1s}]", "stop_conditions[0].above", "more than 0"),
        ("stop_conditions=[{kind: latency, metric: ttft, above: 1s, for: -5s}]", "stop_conditions[0].for", "than 0"),
    ],
)
def test_negative_and_unrunnable_bounds_are_located_errors(tmp_path: Path, override: str, where: str, says: str):
    result = _validate(tmp_path, override)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    lines = [line for line in result.output.splitlines() if where in line]
    assert lines and any(says in line for line in lines), result.output


def test_a_step_too_fine_is_located_at_the_step_and_says_which_step_would_do(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text(DRILL.replace("name: back}", "name: back, params: {step: 1us}}"))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2
    assert f"{path}:13:54: error: checks[0].params.step: step " in result.output, result.output
    assert "hint: use a step of at least 5ms" in result.output


@pytest.mark.parametrize(
    ("override", "where"),
    [
        ("target.config.headers={X-Api-Key: '${DRILL_E21_UNSET_A}'}", "target.config.headers.X-Api-Key"),
        ("target.config.api_key=Bearer-${DRILL_E21_UNSET_A}", "target.config.api_key"),
        (
            PROMETHEUS.format("bearer_token: '${DRILL_E21_UNSET_A}'"),
            "metrics.prometheus.bearer_token",
        ),
        (
            PROMETHEUS.format("headers: {X-Org: '${DRILL_E21_UNSET_A}'}"),
            "metrics.prometheus.headers.X-Org",
        ),
    ],
)
def test_an_unset_variable_is_a_located_error_at_validate_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, override: str, where: str
) -> None:
    monkeypatch.delenv("DRILL_E21_UNSET_A", raising=False)
    result = _validate(tmp_path, override)
    assert result.exit_code == 2, result.output
    assert f"{where}: the environment variable DRILL_E21_UNSET_A is not set" in result.output
    assert "hint: export DRILL_E21_UNSET_A=" in result.output
    monkeypatch.setenv("DRILL_E21_UNSET_A", "set-now")
    assert _validate(tmp_path, override).exit_code == 0
