"""Start the real Jaeger all-in-one (v2 binary, built and cached by scripts/jaeger_build.py) with in-memory storage
on free loopback ports: OTLP/HTTP in, the query HTTP API out."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import httpx

from drill.errors import NotAvailableError
from tests.supervised_server import ServerError, load_script, tool

CONFIG = """\
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: []
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp_port}
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    storage:
      traces: memstore
    grpc:
      endpoint: 127.0.0.1:{grpc_port}
    http:
      endpoint: 127.0.0.1:{query_port}
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


#: A cold build at nice 19 beside the rest of the suite (``./dev test`` starts it; about 3 minutes of CPU alone).
BUILD_WAIT_S = 1800.0


def find_jaeger_binary(wait_s: float = BUILD_WAIT_S) -> Path:
    """``$JAEGER_BIN``, else scripts/jaeger_build.py's cached build: waited for while ``./dev test``'s background
    build runs, built now when none does; a recorded failure raises NotAvailableError with the log's tail."""
    try:
        return tool("JAEGER_BIN", load_script("jaeger_build"), "build", wait_s)
    except ServerError as exc:
        raise NotAvailableError(str(exc), hint="run ./dev setup (needs Go), or set JAEGER_BIN") from exc


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class JaegerServer:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.otlp_port, self.query_port, grpc_port = _free_port(), _free_port(), _free_port()
        self.config = workdir / "jaeger.yaml"
        self.config.write_text(CONFIG.format(otlp_port=self.otlp_port, query_port=self.query_port, grpc_port=grpc_port))
        self.log = workdir / "jaeger.log"
        self.process: subprocess.Popen | None = None

    @property
    def otlp_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.otlp_port}/v1/traces"

    @property
    def query_url(self) -> str:
        return f"http://127.0.0.1:{self.query_port}"

    def start(self, timeout_s: float = 60.0) -> JaegerServer:
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [str(find_jaeger_binary()), "--config", str(self.config)], stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jaeger exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.query_url}/api/services", timeout=1).status_code == 200 and self._otlp_up():
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"jaeger did not answer within {timeout_s:g}s:\n{self.log.read_text()[-3000:]}")

    def _otlp_up(self) -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", self.otlp_port)) == 0

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:  # Jaeger's graceful shutdown took the whole 10 s this waited before (nothing of it is kept)
            self.process.wait(2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
