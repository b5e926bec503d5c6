"""The metrics scraper and the stop conditions, on real HTTP and real record files."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from drill.rundir.jsonl import read_jsonl
from drill.rundir.records import ErrorClass, RequestRecord
from drill.runner.scraper import MetricsScraper, parse_samples
from drill.runner.stopconditions import StopMonitor
from drill.serving_metrics import Reading
from drill.spec.models import StopCondition

EXPOSITION = """# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} %d
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="m"} 3
"""


def _server(waiting: list[int]):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = (EXPOSITION % waiting[0]).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_parse_samples_keeps_labels() -> None:
    samples = parse_samples(EXPOSITION % 7)
    assert samples['vllm:num_requests_waiting{engine="0",model_name="m"}'] == 7.0
    assert samples['vllm:num_preemptions_total{engine="0",model_name="m"}'] == 3.0


def test_scraper_writes_one_line_per_endpoint_per_tick_and_survives_a_dead_one(tmp_path: Path) -> None:
    server = _server([12])
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    scraper = MetricsScraper(
        {"replica-0": url, "dead": "http://127.0.0.1:1/metrics"}, tmp_path / "m.jsonl", 0.2
    ).start()
    deadline = time.monotonic() + 60  # a hang guard: ticks every 0.2 s, waited for by what they wrote, not by the clock
    while _scraped(tmp_path / "m.jsonl") < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    scraper.stop()
    server.shutdown()
    lines = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    good = [x for x in lines if x["source"] == "replica-0"]
    dead = [x for x in lines if x["source"] == "dead"]
    assert len(good) >= 3 and all(x["ok"] for x in good)
    assert dead and not any(x["ok"] for x in dead) and "error" in dead[0]
    reading = scraper.readings()["replica-0"]
    assert reading.totals["vllm:num_requests_waiting"] == 12.0 and reading.previous is not None
    assert "dead" not in scraper.readings()


def _scraped(path: Path) -> int:
    """The successful scrapes of replica-0 written so far (a line still being written is not read)."""
    return sum(x["source"] == "replica-0" and x["ok"] for x in read_jsonl(path))


def _record(t: float, ok: bool, ttft: float = 100.0) -> RequestRecord:
    return RequestRecord(
        request_id=str(t),
        logical_id=str(t),
        pool="p",
        attempt=1,
        intended_ts=t,
        sent_ts=t,
        schedule_lag_ms=0.0,
        status=200 if ok else 503,
        error=None if ok else ErrorClass.REFUSED,
        ttft_ms=ttft,
        e2e_ms=ttft + 10,
        completion_tokens=5,
    )


def test_error_rate_stop_fires_only_above_the_bound_with_enough_requests(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    cond = StopCondition.model_validate({"kind": "error_rate", "above": 0.5, "for": "10s", "min_requests": 10})
    monitor = StopMonitor([cond], path, dict, time.monotonic())
    now = time.time()
    with path.open("w") as fh:
        for i in range(10):
            fh.write(_record(now - 5 + i * 0.1, ok=i < 6).to_json() + "\n")
    assert monitor.poll(fault_phase=True, now_wall=now + 1) is None  # 40% errors
    with path.open("a") as fh:
        for i in range(10):
            fh.write(_record(now - 4 + i * 0.1, ok=False).to_json() + "\n")
        fh.write('{"torn": ')  # a line still being written
    trigger = monitor.poll(fault_phase=True, now_wall=now + 1)
    assert trigger is not None and "70.0%" in trigger.observed
    assert monitor.poll(fault_phase=False, now_wall=now + 1) is None  # only in the fault phase


def test_latency_metric_and_max_duration_stops(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    now = time.time()
    path.write_text("".join(_record(now - 1, True, ttft=3000 + i).to_json() + "\n" for i in range(30)))
    latency = StopCondition.model_validate(
        {"kind": "latency", "metric": "ttft", "percentile": 99, "above": "2s", "for": "5s"}
    )
    metric = StopCondition.model_validate(
        {"kind": "metric", "metric": "vllm:num_requests_waiting", "above": 100, "for": "1s"}
    )
    assert (
        StopMonitor([latency], path, dict, time.monotonic())
        .poll(fault_phase=True, now_wall=now)
        .observed.startswith("ttft p99")
    )
    values = {"r0": Reading(now, {"vllm:num_requests_waiting": 500.0})}
    monitor = StopMonitor([metric], tmp_path / "none.jsonl", lambda: values, time.monotonic())
    t0 = time.monotonic()
    assert monitor.poll(fault_phase=True, now_mono=t0) is None
    assert monitor.poll(fault_phase=True, now_mono=t0 + 1.5) is not None
    limit = StopCondition.model_validate({"kind": "max_duration", "value": "1s"})
    started = time.monotonic() - 2
    assert StopMonitor([limit], path, dict, started).poll(fault_phase=False) is not None


def test_error_rate_stop_can_ignore_refusals(tmp_path: Path) -> None:
    """Refusing overload fast is what a healthy stack should do; a stop condition can count only real failures."""
    path = tmp_path / "requests.jsonl"
    now = time.time()
    path.write_text("".join(_record(now - 1 + i * 0.01, ok=False).to_json() + "\n" for i in range(30)))  # all 503
    only_failures = StopCondition.model_validate(
        {"kind": "error_rate", "above": 0.5, "for": "10s", "classes": ["server_error", "timeout"]}
    )
    everything = StopCondition.model_validate({"kind": "error_rate", "above": 0.5, "for": "10s"})
    assert StopMonitor([only_failures], path, dict, time.monotonic()).poll(fault_phase=True, now_wall=now) is None
    assert StopMonitor([everything], path, dict, time.monotonic()).poll(fault_phase=True, now_wall=now) is not None
    assert only_failures.label() == "error rate (server_error, timeout) above 0.5 for 10s"
