"""The Prometheus metrics source against a real Prometheus server (Debian's ``prometheus``; ``./dev setup``
installs it) scraping the embedded stack's replicas every second.

One short drill runs with ``metrics: {source: prometheus}``: a ``metric`` stop condition on a quantity is fed by
Prometheus's instant queries and ends the fault phase; ``metrics.jsonl`` comes from its range queries. The test
scrapes the same replicas directly meanwhile (the scraper the drill would otherwise use) and compares the two.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from drill.report.quantities import phase_quantities
from drill.rundir.evidence import RunEvidence
from drill.rundir.journal import read_journal
from drill.runner.scraper import MetricsScraper

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration
COUNTER = "vllm:generation_tokens_total"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    from drill.stack.config import parse_stack_config
    from drill.stack.supervision.launcher import start_stack, stop_stack

    state_dir = tmp_path_factory.mktemp("stack")
    config = parse_stack_config({"replicas": 2, "engine": {"weight_load_time": "200ms"}})
    state = start_stack(config, name="prometheus-source", state_dir=state_dir, timeout_s=90)
    yield state
    stop_stack("prometheus-source", state_dir=state_dir)


@pytest.fixture(scope="module")
def prometheus(stack, tmp_path_factory) -> Iterator[str]:
    """A real Prometheus on loopback scraping each replica's /metrics every second; its URL."""
    binary = os.environ.get("PROMETHEUS_BIN") or shutil.which("prometheus")
    if binary is None:
        pytest.fail("no Prometheus server: run ./dev setup (it installs Debian's prometheus) or set PROMETHEUS_BIN")
    work = tmp_path_factory.mktemp("prometheus")
    targets = [r.direct_url.split("://", 1)[1] for r in stack.replicas]
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
        "scrape_configs": [{"job_name": "stack", "static_configs": [{"targets": targets}]}],
    }
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    log = (work / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_scraped(url, len(targets), process, work / "prometheus.log")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)
        log.close()


def _wait_scraped(url: str, targets: int, process: subprocess.Popen, log: Path) -> None:
    """Until Prometheus answers and has scraped every replica once (up == 1)."""
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"prometheus exited {process.returncode}: {log.read_text()[-2000:]}")
        try:
            body = httpx.get(f"{url}/api/v1/query", params={"query": "up == 1"}, timeout=2, trust_env=False).json()
            if len(body["data"]["result"]) == targets:
                return
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.3)
    pytest.fail(f"Prometheus did not scrape the {targets} replicas within 45 s: {log.read_text()[-2000:]}")


def _drill(path: Path, stack, prometheus: str) -> Path:
    replicas = [{"name": r.name, "url": r.url, "metrics_url": f"{r.direct_url}/metrics"} for r in stack.replicas]
    drill = {
        "name": "prometheus-source",
        "target": {"kind": "openai", "config": {"url": stack.router, "replicas": replicas}},
        "scenario": {
            "seed": 5,
            "arrival": {"process": "poisson", "rate": 8},
            "pools": [
                {
                    "name": "chat",
                    "input_tokens": {"dist": "uniform", "min": 20, "max": 120},
                    "output_tokens": {"dist": "fixed", "value": 24},
                }
            ],
        },
        "otlp": {"enabled": False},
        "phases": {"warmup": "1s", "baseline": "3s", "fault": "6s", "recovery": "2s", "replay": False},
        "metrics": {
            "source": "prometheus",
            "prometheus": {"url": prometheus, "selector": '{job="stack"}', "replica_label": "instance"},
        },
        "stop_conditions": [{"kind": "metric", "metric": "generation_tokens_per_s", "above": 1, "for": "1s"}],
    }
    path.write_text(yaml.safe_dump(drill, sort_keys=False))
    return path


def _counter(lines: list[dict], source: str) -> list[tuple[float, float]]:
    out = []
    for line in lines:
        if line["source"] == source and line["ok"]:
            values = [v for k, v in line["samples"].items() if k.split("{", 1)[0] == COUNTER]
            if values:
                out.append((line["ts"], sum(values)))
    return out


def _at(series: list[tuple[float, float]], ts: float) -> float | None:
    """The counter's value as last scraped at or before ``ts``."""
    before = [v for t, v in series if t <= ts]
    return before[-1] if before else None


def test_a_drill_reads_its_metrics_from_prometheus_like_the_scraper(stack, prometheus, tmp_path: Path) -> None:
    direct = MetricsScraper(
        {r.name: f"{r.direct_url}/metrics" for r in stack.replicas}, tmp_path / "direct.jsonl", 1.0
    ).start()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "drill", "run", str(_drill(tmp_path / "d.yaml", stack, prometheus))]
            + ["--out", str(tmp_path / "runs"), "--no-progress"],
            cwd=tmp_path,
            env={**os.environ, "DRILL_STATE_DIR": str(tmp_path / "state")},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        time.sleep(1.2)  # one more direct scrape after the run's window closed
        direct.stop()
    assert done.returncode in (0, 1), done.stdout + done.stderr
    (run_dir,) = list((tmp_path / "runs").glob("prometheus-source/*"))
    journal = list(read_journal(run_dir / "journal.jsonl"))

    # live: the stop condition read the quantity from Prometheus's instant queries and ended the fault phase
    stops = [e for e in journal if e.event == "stop_condition"]
    assert stops, [e.get("message") for e in journal if e.event == "note"]
    assert stops[0].get("observed").startswith(f"generation_tokens_per_s ({COUNTER}) = ")

    # at the end: metrics.jsonl from the range queries, one line per replica per step, named like the scraper's
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert lines and all(x["collector"] == "prometheus" for x in lines)
    names = {r.name for r in stack.replicas}
    assert {x["source"] for x in lines} == names  # instance host:port -> the target's replica names
    assert sum(x["ok"] for x in lines) >= 0.9 * len(lines)
    figures = phase_quantities(RunEvidence(run_dir))["baseline"]  # the report reads them as it reads a scrape
    assert (figures["generation_tokens_per_s"] or 0) > 1 and figures["running"] is not None

    # agreement with the direct scrape. Prometheus's value at step t is its last scrape by t (up to a second
    # before); a counter only grows, so it lies between the direct scrape's value 2.5 s before t and 1.5 s after
    # (a second of scrape interval each side, and slack for a loaded machine); the window's total within the same.
    direct_lines = [json.loads(x) for x in (tmp_path / "direct.jsonl").read_text().splitlines()]
    for name in sorted(names):
        via_prometheus, scraped = _counter(lines, name), _counter(direct_lines, name)
        assert len(via_prometheus) >= 8 and len(scraped) >= 8
        outside = [
            (t, v, lo, hi)
            for t, v in via_prometheus
            if not ((lo := _at(scraped, t - 2.5) or 0.0) <= v <= (hi := _at(scraped, t + 1.5) or 0.0))
        ]
        assert not outside, (name, outside[:5])
        # over the window: the same bracket at both ends (each end's Prometheus value may be up to a scrape
        # interval old, so a fixed share of the total is no tolerance: 1 s at ~50 tokens/s is 10% of 500)
        (t0, v0), (t1, v1) = via_prometheus[0], via_prometheus[-1]
        total_prometheus = v1 - v0
        total_direct = (_at(scraped, t1) or 0.0) - (_at(scraped, t0) or 0.0)
        low = (_at(scraped, t1 - 2.5) or 0.0) - (_at(scraped, t0 + 1.5) or 0.0)
        high = (_at(scraped, t1 + 1.5) or 0.0) - (_at(scraped, t0 - 2.5) or 0.0)
        assert low > 100
        assert low <= total_prometheus <= high, (total_prometheus, low, high)
        print(
            f"{name}: {len(via_prometheus)} steps, all within the direct scrape's bracket; "
            f"total tokens {total_prometheus:g} via Prometheus vs {total_direct:g} scraped"
        )
