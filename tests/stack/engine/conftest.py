"""Fixtures of the engine-half tests: async tests run on asyncio through anyio's pytest plugin."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


import contextlib
import secrets
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from drill.stack.config import parse_stack_config
from drill.stack.replica import Replica
from drill.stack.replica_spec import ReplicaSpec

ADMIN_TOKEN = "test-admin-token"


def make_spec(tmp_path: Path, engine: dict | None = None, **config: object) -> ReplicaSpec:
    """A spec for an in-process replica on a free port that loads its weights at once."""
    stack = parse_stack_config({"engine": {"weight_load_time": "0s", **(engine or {})}, **config})
    return ReplicaSpec(name="replica-0", index=0, port=0, config=stack, admin_token=ADMIN_TOKEN,
                       ledger_path=tmp_path / f"ledger-{secrets.token_hex(4)}.jsonl")


@pytest.fixture
def start_replica(tmp_path: Path) -> Callable:
    """``async with start_replica(engine={...}, span_processor=...) as replica:`` runs one in this loop."""

    @contextlib.asynccontextmanager
    async def start(engine: dict | None = None, span_processor: object = None, **config: object
                    ) -> AsyncIterator[Replica]:
        replica = Replica(make_spec(tmp_path, engine, **config), span_processor=span_processor)
        await replica.start()
        try:
            yield replica
        finally:
            await replica.close()

    return start


import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

REPO = Path(__file__).resolve().parents[3]


@dataclass
class ReplicaProcess:
    """A replica started as ``python -m drill.stack.replica`` by :func:`spawn_replica`."""

    proc: subprocess.Popen
    spec: ReplicaSpec
    url: str
    log_path: Path

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ADMIN_TOKEN}"}

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)


@pytest.fixture
def spawn_replica(tmp_path: Path) -> Callable:
    """Start replica processes; every one still running is killed when the test ends."""
    started: list[subprocess.Popen] = []

    def spawn(engine: dict | None = None, *, otlp_endpoint: str | None = None, ready_timeout: float = 20.0,
              **config: object) -> ReplicaProcess:
        spec = make_spec(tmp_path, engine, **config)
        ready = tmp_path / f"ready-{len(started)}.json"
        log_path = tmp_path / f"replica-{len(started)}.log"
        spec = spec.model_copy(update={"ready_file": ready, "log_path": log_path, "otlp_endpoint": otlp_endpoint})
        spec_path = tmp_path / f"spec-{len(started)}.json"
        spec_path.write_text(spec.model_dump_json())
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
        proc = subprocess.Popen([sys.executable, "-m", "drill.stack.replica", "--spec", str(spec_path)], env=env)
        started.append(proc)
        deadline = time.monotonic() + ready_timeout
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"replica did not start (exit {proc.poll()}): {log_path.read_text()}")
            time.sleep(0.02)
        url = json.loads(ready.read_text())["url"]
        return ReplicaProcess(proc, spec, url, log_path)

    yield spawn
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
