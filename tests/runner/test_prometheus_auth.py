"""The Prometheus metrics source behind auth, at its HTTP seam (httpx.MockTransport): ``headers`` and
``bearer_token`` (``${NAME}`` read from the environment, as the openai target's ``headers`` / ``api_key``) go with
every query, and the run's redactor keeps them out of ``resolved.json``, the logs and the reports."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import yaml

from drill.api import TargetInfo
from drill.errors import InputError
from drill.rundir.directory import create_run_dir
from drill.rundir.redact import REDACTED
from drill.runner.prometheus import PrometheusMetrics
from drill.runner.run import Runner, resolved_inputs
from drill.spec.loader import load_drill
from drill.spec.models import PrometheusSourceSpec

TOKEN = "planted-promtoken-5d1c7a"  # bearer_token: ${PROM_AUTH_TEST_PASS}
LITERAL = "planted-promkey-2e8f40"  # headers: {X-Api-Key: ...} in the drill file
AUTH = {"bearer_token": "${PROM_AUTH_TEST_PASS}", "headers": {"X-Api-Key": LITERAL, "X-Scope-OrgID": "tenant-7"}}


def _spec(**extra) -> PrometheusSourceSpec:
    return PrometheusSourceSpec.model_validate({"url": "http://prom:9090", **AUTH, **extra})


def _answer(request: httpx.Request) -> httpx.Response:
    kind = "matrix" if request.url.path.endswith("query_range") else "vector"
    return httpx.Response(200, json={"status": "success", "data": {"resultType": kind, "result": []}})


def test_every_query_carries_the_headers_with_the_environment_read(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PROM_AUTH_TEST_PASS", TOKEN)
    seen: list[httpx.Request] = []
    transport = httpx.MockTransport(lambda request: (seen.append(request), _answer(request))[1])
    source = PrometheusMetrics(_spec(), tmp_path / "metrics.jsonl", 1.0, names=["up"], transport=transport)
    source.poll()
    source.write_window(1_764_000_000.0, 1_764_000_002.0)
    assert {r.url.path for r in seen} == {"/api/v1/query", "/api/v1/query_range"}
    for request in seen:
        assert request.headers["authorization"] == f"Bearer {TOKEN}"
        assert request.headers["x-api-key"] == LITERAL and request.headers["x-scope-orgid"] == "tenant-7"


def test_an_unset_variable_is_an_input_error_naming_the_key(monkeypatch) -> None:
    monkeypatch.delenv("PROM_AUTH_TEST_PASS", raising=False)
    with pytest.raises(InputError, match=r"metrics\.prometheus\.bearer_token: the environment variable "):
        _spec().request_headers()


def test_bearer_token_and_an_authorization_header_are_not_both_given() -> None:
    with pytest.raises(ValueError, match="not both"):
        _spec(headers={"authorization": "Bearer x"})


def test_credentials_in_the_prometheus_url_are_refused_at_the_url() -> None:
    # they would be copied into metrics.jsonl and the journal with every query's URL
    with pytest.raises(ValueError, match="credentials in the URL"):
        PrometheusSourceSpec(url="http://alice:s3cret@127.0.0.1:9090")
    assert PrometheusSourceSpec(url="http://127.0.0.1:9090/prom@v1").url  # an @ in the path is not userinfo


def _drill(tmp_path: Path) -> Path:
    drill = {
        "name": "prom-auth",
        "target": {"kind": "openai", "config": {"url": "http://127.0.0.1:9"}},
        "scenario": {
            "arrival": {"process": "poisson", "rate": 1},
            "pools": [
                {
                    "name": "chat",
                    "input_tokens": {"dist": "fixed", "value": 20},
                    "output_tokens": {"dist": "fixed", "value": 8},
                }
            ],
        },
        "metrics": {"source": "prometheus", "prometheus": {"url": "http://127.0.0.1:9", **AUTH}},
        "phases": {"warmup": "0s", "baseline": "1s", "fault": "1s", "recovery": "1s"},
    }
    path = tmp_path / "prom-auth.yaml"
    path.write_text(yaml.safe_dump(drill, sort_keys=False))
    return path


def test_the_runs_redactor_keeps_the_credentials_out_of_its_files(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PROM_AUTH_TEST_PASS", TOKEN)
    loaded = load_drill(_drill(tmp_path))
    runner = Runner(loaded)
    runner.redactor = runner._initial_redactor()
    resolved = json.dumps(runner.redactor.data(resolved_inputs(loaded)))  # what resolved.json gets
    assert LITERAL not in resolved and "tenant-7" in resolved
    assert f'"bearer_token": "{REDACTED}"' in resolved
    assert runner.redactor.value(f"401 for key {LITERAL}") == f"401 for key {REDACTED}"  # a log line, a report
    # $PROM_AUTH_TEST_PASS does not look secret by its name: the redactor learns its value when the source is
    # made, before any query is sent
    runner.rundir = create_run_dir(tmp_path / "reports", "prom-auth")
    runner.target_info = TargetInfo(kind="openai", base_url="http://127.0.0.1:9", metrics_urls={})
    assert TOKEN in runner.redactor.value(f"a log line echoing {TOKEN}")
    source = runner._prometheus_source(loaded.drill.metrics.prometheus)
    source._client.close()
    assert runner.redactor.value(f"a log line echoing {TOKEN}") == f"a log line echoing {REDACTED}"
    assert runner.redactor.data({"note": f"Prometheus said: token {TOKEN} is expired"}) == {
        "note": f"Prometheus said: token {REDACTED} is expired"
    }
