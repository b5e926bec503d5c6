"""Fixtures of the topology tests: the real Toxiproxy server, and asyncio for ``@pytest.mark.anyio``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from drill.backends.toxiproxy import ToxiproxyClient, ToxiproxyServer


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def toxiproxy_server() -> Iterator[ToxiproxyServer]:
    """The real toxiproxy-server on a free port, stopped after the module even on failure."""
    server = ToxiproxyServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture()
def toxiproxy(toxiproxy_server: ToxiproxyServer) -> Iterator[ToxiproxyClient]:
    """A client whose server is emptied of proxies after each test."""
    client = toxiproxy_server.client()
    try:
        yield client
    finally:
        for name in client.proxies():
            client.delete_proxy(name)
        client.close()
