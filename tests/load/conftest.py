"""Fixtures of the load-driver tests: real servers in their own processes, on ephemeral ports.

- ``sse_server``: ``bench/sse_server.py`` (fast asyncio SSE server with per-chunk send times and
  test controls: refusals, mid-stream errors, cut connections, stalls);
- ``spawn_replica``: one replica of the reference stack (``python -m drill.stack.replica.api_server``), with
  its admin API (engine stall) and its ledger (the server's own request log).

Every process started here is killed when the test ends, even on failure.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "load-test-admin-token"


@dataclass
class SseServer:
    proc: subprocess.Popen
    url: str

    def configure(self, **settings: object) -> None:
        httpx.put(self.url + "/_bench/config", json=settings, timeout=5).raise_for_status()

    def stall(self, seconds: float) -> None:
        httpx.put(self.url + "/_bench/stall", json={"seconds": seconds}, timeout=5).raise_for_status()

    def log(self) -> list[dict]:
        return httpx.get(self.url + "/_bench/log", timeout=30).json()["requests"]


def _wait_ready(proc: subprocess.Popen, ready: Path, log: Path | None, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            text = log.read_text() if log and log.exists() else ""
            raise AssertionError(f"server did not start (exit {proc.poll()}): {text[-2000:]}")
        time.sleep(0.02)
    return json.loads(ready.read_text())


def _kill(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture
def start_sse_server(tmp_path: Path) -> Iterator[Callable[..., SseServer]]:
    """``start_sse_server(gap_ms=10, ttft_ms=0)``: a fresh bench SSE server per call."""
    started: list[subprocess.Popen] = []

    def start(gap_ms: float = 10.0, ttft_ms: float = 0.0) -> SseServer:
        ready = tmp_path / f"sse-ready-{len(started)}.json"
        proc = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "bench" / "sse_server.py"),
                "--port",
                "0",
                "--ready-file",
                str(ready),
                "--gap-ms",
                str(gap_ms),
                "--ttft-ms",
                str(ttft_ms),
            ]
        )
        started.append(proc)
        info = _wait_ready(proc, ready, None, 20.0)
        return SseServer(proc, f"http://127.0.0.1:{info['port']}")

    try:
        yield start
    finally:
        _kill(started)


@pytest.fixture
def sse_server(start_sse_server) -> SseServer:
    return start_sse_server()


@dataclass
class ReplicaProcess:
    proc: subprocess.Popen
    url: str
    ledger_path: Path
    log_path: Path

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ADMIN_TOKEN}"}

    def stall(self, seconds: float) -> None:
        httpx.put(
            self.url + "/admin/engine/stall", json={"seconds": seconds}, headers=self.admin_headers, timeout=5
        ).raise_for_status()

    def ledger(self) -> list[dict]:
        return [json.loads(line) for line in self.ledger_path.read_text().splitlines() if line.strip()]


@pytest.fixture
def spawn_replica(tmp_path: Path) -> Iterator[Callable[..., ReplicaProcess]]:
    """``spawn_replica(engine={...}, gpu="h100", model="llama-3-8b")``: one replica process of the stack."""
    from drill.stack.config import parse_stack_config
    from drill.stack.launch import ReplicaLaunch

    started: list[subprocess.Popen] = []

    def spawn(engine: dict | None = None, **config: object) -> ReplicaProcess:
        n = len(started)
        stack = parse_stack_config({"engine": {"weight_load_time": "0s", **(engine or {})}, **config})
        spec = ReplicaLaunch(
            name=f"replica-{n}",
            index=0,
            port=0,
            config=stack,
            admin_token=ADMIN_TOKEN,
            ledger_path=tmp_path / f"ledger-{n}-{secrets.token_hex(3)}.jsonl",
            ready_file=tmp_path / f"replica-ready-{n}.json",
            log_path=tmp_path / f"replica-{n}.log",
        )
        spec_path = tmp_path / f"replica-spec-{n}.json"
        spec_path.write_text(spec.model_dump_json())
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "drill.stack.replica.api_server", "--launch", str(spec_path)], env=env
        )
        started.append(proc)
        info = _wait_ready(proc, spec.ready_file, spec.log_path, 30.0)
        return ReplicaProcess(proc, info["url"], spec.ledger_path, spec.log_path)

    try:
        yield spawn
    finally:
        _kill(started)
