"""The Prometheus metrics source at its HTTP seam (httpx.MockTransport): the queries it sends, the replicas it
names, the ``metrics.jsonl`` it writes (read back by the report's quantities unchanged), and what it says when
a replica or Prometheus itself has nothing."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from drill.report.quantities import phase_quantities
from drill.rundir.evidence import RunEvidence
from drill.runner.prometheus import PrometheusMetrics, PrometheusQueryError, promql
from drill.serving_metrics import live_value, resolve
from drill.spec.models import MetricsSpec, PrometheusSourceSpec

REPO = Path(__file__).resolve().parents[2]
T0 = 1_764_000_000.0


def _spec(**extra) -> PrometheusSourceSpec:
    return PrometheusSourceSpec.model_validate({"url": "http://prom:9090", "selector": '{job="vllm"}', **extra})


def _series(name: str, instance: str, values: list[tuple[float, float]]) -> dict:
    return {
        "metric": {"__name__": name, "instance": instance, "job": "vllm"},
        "values": [[ts, str(v)] for ts, v in values],
    }


class FakePrometheus:
    """Answers query_range from a fixed list of series (cut to the asked window) and instant queries from
    ``vector``; records every request."""

    def __init__(self, series: list[dict], vector: list[dict] | None = None) -> None:
        self.series = series
        self.vector = vector or []
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        params = request.url.params
        if request.url.path == "/api/v1/query_range":
            lo, hi = float(params["start"]), float(params["end"])
            cut = [{**s, "values": [p for p in s["values"] if lo - 1e-6 <= p[0] <= hi + 1e-6]} for s in self.series]
            result = [s for s in cut if s["values"]]
            return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": result}})
        data = {"resultType": "vector", "result": self.vector}
        return httpx.Response(200, json={"status": "success", "data": data})


def _source(tmp_path: Path, fake, spec=None, **kwargs) -> PrometheusMetrics:
    return PrometheusMetrics(
        spec or _spec(),
        tmp_path / "metrics.jsonl",
        1.0,
        names=["vllm:num_requests_waiting", "vllm:generation_tokens_total"],
        transport=httpx.MockTransport(fake),
        **kwargs,
    )


def test_promql_asks_only_for_the_names_within_the_selector() -> None:
    assert promql(["b", "a", "b"], '{job="vllm", ns="prod"}') == '{__name__=~"a|b",job="vllm", ns="prod"}'
    assert promql(["up"], "") == '{__name__=~"up"}'


def test_the_window_becomes_the_scrapers_lines_per_replica_per_step(tmp_path: Path) -> None:
    steps = [T0 + k for k in range(5)]
    fake = FakePrometheus(
        [
            _series("vllm:num_requests_waiting", "10.0.0.1:8000", [(t, 3.0) for t in steps]),
            _series("vllm:num_requests_waiting", "10.0.0.2:8000", [(t, 5.0) for t in steps[:3]]),  # gone at 3, 4
            _series("up", "10.0.0.1:8000", [(t, 1.0) for t in steps]),
            _series("up", "10.0.0.2:8000", [(t, 1.0) for t in steps[:3]] + [(steps[3], 0.0)]),
        ]
    )
    source = _source(
        tmp_path, fake, metrics_urls={"replica-0": "http://10.0.0.1:8000/metrics"}, spec=_spec(replicas={})
    )
    assert source.write_window(T0, T0 + 4) == 10
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(x["ts"], x["source"]) for x in lines[:2]] == [(T0, "10.0.0.2:8000"), (T0, "replica-0")]
    assert all(x["collector"] == "prometheus" for x in lines)
    good = lines[1]
    assert good["ok"] and good["samples"] == {'vllm:num_requests_waiting{instance="10.0.0.1:8000",job="vllm"}': 3.0}
    by = {(x["ts"], x["source"]): x for x in lines}
    assert not by[(T0 + 3, "10.0.0.2:8000")]["ok"] and "up == 0" in by[(T0 + 3, "10.0.0.2:8000")]["error"]
    assert not by[(T0 + 4, "10.0.0.2:8000")]["ok"] and "no sample" in by[(T0 + 4, "10.0.0.2:8000")]["error"]
    query = fake.requests[0].url.params
    assert query["step"] == "1" and query["start"] == f"{T0:.3f}" and 'job="vllm"' in query["query"]
    assert "up" in query["query"].split('"')[1].split("|")


def test_the_reports_quantities_read_the_prometheus_lines(tmp_path: Path) -> None:
    steps = [T0 + k for k in range(11)]
    fake = FakePrometheus(
        [
            _series("vllm:num_requests_waiting", "a:1", [(t, float(k)) for k, t in enumerate(steps)]),
            _series("vllm:generation_tokens_total", "a:1", [(t, 100.0 * k) for k, t in enumerate(steps)]),
        ]
    )
    _source(tmp_path, fake, spec=_spec(replicas={"a:1": "replica-0"})).write_window(T0, T0 + 10)
    journal = [
        {"seq": 1, "event": "phase_started", "ts": T0, "phase": "baseline", "planned_s": 10.0},
        {"seq": 2, "event": "phase_ended", "ts": T0 + 10, "phase": "baseline"},
    ]
    (tmp_path / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in journal))
    evidence = RunEvidence(tmp_path)
    figures = phase_quantities(evidence)["baseline"]
    assert figures["queue_depth"] == 9.0  # the largest in [start, end)
    assert figures["generation_tokens_per_s"] == pytest.approx(100.0)
    assert figures["preemptions"] is None  # not exported: not available, never 0


def test_a_long_window_is_asked_in_parts_prometheus_accepts(tmp_path: Path) -> None:
    fake = FakePrometheus([_series("vllm:num_requests_waiting", "a:1", [(T0 + k, 1.0) for k in range(25_001)])])
    lines = _source(tmp_path, fake).write_window(T0, T0 + 25_000)
    ranges = [r for r in fake.requests if r.url.path == "/api/v1/query_range"]
    assert len(ranges) == 3 and lines == 25_001
    spans = [(float(r.url.params["end"]) - float(r.url.params["start"])) for r in ranges]
    assert max(spans) < 11_000


def test_live_readings_change_only_when_prometheus_scraped_again(tmp_path: Path) -> None:
    def vector(tokens: float, up: float = 1.0) -> list[dict]:
        return [
            {"metric": {"__name__": "vllm:generation_tokens_total", "instance": "a:1"}, "value": [T0, str(tokens)]},
            {"metric": {"__name__": "up", "instance": "a:1"}, "value": [T0, str(up)]},
        ]

    fake = FakePrometheus([], vector(100.0))
    source = _source(tmp_path, fake)
    source.poll()
    first = source.readings()["a:1"]
    source.poll()
    assert source.readings()["a:1"] is first  # the same sample: not a new reading (no rate of 0)
    fake.vector = vector(150.0)
    source.poll()
    reading = source.readings()["a:1"]
    assert reading.previous is not None and reading.previous.totals == first.totals
    resolved = resolve(reading.totals, "generation_tokens_per_s")
    assert resolved is not None and live_value({"a:1": reading}, resolved) > 0
    fake.vector = vector(150.0, up=0.0)
    source.poll()
    assert source.readings() == {}  # Prometheus could not scrape it: no reading, not a stale one


def test_prometheus_errors_are_said(tmp_path: Path) -> None:
    def failing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"status": "error", "errorType": "bad_data", "error": "parse error at 3"})

    with pytest.raises(PrometheusQueryError, match="parse error at 3"):
        _source(tmp_path, failing).write_window(T0, T0 + 2)

    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    with pytest.raises(PrometheusQueryError, match="Prometheus at http://prom:9090: ConnectError"):
        _source(tmp_path, unreachable).poll()


def test_the_metrics_block_is_validated() -> None:
    assert MetricsSpec.model_validate({"source": "prometheus", "prometheus": {"url": "http://p:9090"}}).prometheus
    with pytest.raises(ValueError, match="needs a 'prometheus' block"):
        MetricsSpec.model_validate({"source": "prometheus"})
    with pytest.raises(ValueError, match="only with source: prometheus"):
        MetricsSpec.model_validate({"prometheus": {"url": "http://p:9090"}})
    with pytest.raises(ValueError, match="selector"):
        _spec(selector='job="vllm"')  # matchers go in braces


def test_setup_stops_saying_what_to_do_when_it_cannot_install_prometheus(tmp_path: Path) -> None:
    """``./dev setup``/``./dev test`` run setup_prometheus under ``set -e``: no server and no way to install one
    (offline) is exit 1 with the remedy, not a test failing later far from the cause."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in ("bash", "id", "tail", "dirname"):
        found = shutil.which(tool)
        assert found is not None
        (folder / tool).symlink_to(found)
    (tmp_path / "venv").mkdir()
    env = {"PATH": str(folder), "HOME": str(tmp_path), "VENV": str(tmp_path / "venv"), "DRILL_SETUP_OFFLINE": "1"}
    done = subprocess.run(
        ["bash", "-c", "set -euo pipefail; source scripts/setup.sh; setup_prometheus; echo carried-on"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1 and "carried-on" not in done.stdout
    assert "apt-get install prometheus" in done.stderr and "PROMETHEUS_BIN" in done.stderr
