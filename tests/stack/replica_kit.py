"""Helpers of the replica tests: replica launches and replica processes (imported by conftest and tests)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from drill.stack.config import parse_stack_config
from drill.stack.http.server import HttpRequest, HttpResponse, HttpServer, ResponseStream, Router
from drill.stack.launch import ReplicaLaunch

ADMIN_TOKEN = "test-admin-token"
REPO = Path(__file__).resolve().parents[2]


def make_launch(tmp_path: Path, engine: dict | None = None, **config: object) -> ReplicaLaunch:
    """A launch for a replica on a free port that loads its weights at once."""
    stack = parse_stack_config({"engine": {"weight_load_time": "0s", **(engine or {})}, **config})
    return ReplicaLaunch(
        name="replica-0",
        index=0,
        port=0,
        config=stack,
        admin_token=ADMIN_TOKEN,
        ledger_path=tmp_path / f"ledger-{secrets.token_hex(4)}.jsonl",
    )


@dataclass
class ReplicaProcess:
    """A replica started as ``python -m drill.stack.replica.api_server`` by :class:`ReplicaLauncher`."""

    proc: subprocess.Popen
    launch: ReplicaLaunch
    url: str
    log_path: Path

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@dataclass
class ReplicaLauncher:
    """Starts replica processes in ``tmp_path``; :meth:`kill_all` ends every one still running."""

    tmp_path: Path
    started: list[subprocess.Popen] = field(default_factory=list)

    def __call__(
        self,
        engine: dict | None = None,
        *,
        otlp_endpoint: str | None = None,
        ready_timeout: float = 20.0,
        **config: object,
    ) -> ReplicaProcess:
        number = len(self.started)
        ready = self.tmp_path / f"ready-{number}.json"
        log_path = self.tmp_path / f"replica-{number}.log"
        launch = make_launch(self.tmp_path, engine, **config).model_copy(
            update={"ready_file": ready, "log_path": log_path, "otlp_endpoint": otlp_endpoint}
        )
        launch_path = self.tmp_path / f"launch-{number}.json"
        launch_path.write_text(launch.model_dump_json())
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "drill.stack.replica.api_server", "--launch", str(launch_path)], env=env
        )
        self.started.append(proc)
        deadline = time.monotonic() + ready_timeout
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"replica did not start (exit {proc.poll()}): {log_path.read_text()}")
            time.sleep(0.02)
        return ReplicaProcess(proc, launch, json.loads(ready.read_text())["url"], log_path)

    def kill_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=10)


class OtlpSink:
    """A tiny OTLP/HTTP receiver: decodes protobuf ExportTraceServiceRequest bodies into span dicts."""

    def __init__(self) -> None:
        self.spans: list[dict] = []
        self.posts = 0
        router = Router()
        router.add("POST", "/v1/traces", self.receive)
        self.server = HttpServer(router)

    async def receive(self, request: HttpRequest, stream: ResponseStream) -> HttpResponse:
        self.posts += 1
        export = ExportTraceServiceRequest()
        export.ParseFromString(request.body)
        for resource in export.resource_spans:
            service = {kv.key: kv.value.string_value for kv in resource.resource.attributes}["service.name"]
            for scope in resource.scope_spans:
                for span in scope.spans:
                    attributes = {kv.key: kv.value for kv in span.attributes}
                    self.spans.append(
                        {
                            "service": service,
                            "name": span.name,
                            "trace_id": span.trace_id.hex(),
                            "status": span.status.code,
                            "attributes": attributes,
                        }
                    )
        return HttpResponse(200, b"", "application/x-protobuf")
