"""Fixtures of the reference stack's tests: asyncio through anyio's pytest plugin, in-process replicas, replica
processes that are killed when the test ends (helpers: ``replica_kit.py``), and whole stacks that are stopped
when the test ends (client-side measurements: ``stack_probes.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from drill.stack.replica.api_server import Replica
from tests.stack.replica_kit import ReplicaLauncher, make_launch


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def start_replica(tmp_path: Path) -> Callable:
    """``async with start_replica(engine={...}, span_processor=...) as replica:`` runs one in this loop."""

    @contextlib.asynccontextmanager
    async def start(
        engine: dict | None = None, span_processor: object = None, **config: object
    ) -> AsyncIterator[Replica]:
        replica = Replica(make_launch(tmp_path, engine, **config), span_processor=span_processor)
        await replica.start()
        try:
            yield replica
        finally:
            await replica.close()

    return start


@pytest.fixture
def spawn_replica(tmp_path: Path) -> Iterator[ReplicaLauncher]:
    """``spawn_replica(engine={...}, otlp_endpoint=...)`` starts a replica process; all are killed at the end."""
    launcher = ReplicaLauncher(tmp_path)
    try:
        yield launcher
    finally:
        launcher.kill_all()


@pytest.fixture()
def stack_factory(tmp_path):
    """``start(config_dict, runtime="local", name=...)`` starts a stack under ``tmp_path``;
    every stack started is stopped after the test, even on failure."""
    from drill.stack.config import parse_stack_config
    from drill.stack.supervision.launcher import start_stack, stop_stack

    started: list[str] = []

    def start(config: dict, *, runtime: str = "local", name: str | None = None, timeout_s: float = 90):
        name = name or f"t{len(started)}-{tmp_path.name[-12:].lower().replace('_', '-')}"
        started.append(name)
        return start_stack(
            parse_stack_config(config), name=name, runtime=runtime, state_dir=tmp_path, timeout_s=timeout_s
        )

    yield start
    for name in started:
        stop_stack(name, state_dir=tmp_path)
