"""Fixtures of the engine-half tests: asyncio through anyio's pytest plugin, in-process replicas, and
replica processes that are killed when the test ends (helpers: ``replica_harness.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from replica_harness import ReplicaLauncher, make_spec

from drill.stack.replica.api_server import Replica


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
        replica = Replica(make_spec(tmp_path, engine, **config), span_processor=span_processor)
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
