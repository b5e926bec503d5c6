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
