"""Fixtures of the P/D tests: asyncio through anyio's pytest plugin, and a prefill + a decode worker in this loop."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest
from pd_harness import PdPair, worker_spec

from drill.stack.replica.api_server import Replica


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def pd_pair(tmp_path: Path) -> Callable:
    """``async with pd_pair(kv_transfer={...}, span_processor=..., engines=...) as pair:`` (1 prefill + 1 decode
    worker; ``engines``: the topology's ``prefill_engine`` / ``decode_engine``)."""

    @contextlib.asynccontextmanager
    async def start(span_processor: object = None, engines: dict | None = None, **kv: object) -> AsyncIterator[PdPair]:
        topology = {"prefill": 1, "decode": 1, "kv_transfer": kv, **(engines or {})}
        config = {"engine": {"weight_load_time": "0s"}, "topology": topology}
        prefill = Replica(worker_spec(tmp_path, config, 0, "prefill"), span_processor=span_processor)
        decode = Replica(worker_spec(tmp_path, config, 1, "decode"), span_processor=span_processor)
        await prefill.start()
        await decode.start()
        try:
            async with httpx.AsyncClient(timeout=20, trust_env=False) as http:
                yield PdPair(prefill, decode, http)
        finally:
            await decode.close()
            await prefill.close()

    return start
