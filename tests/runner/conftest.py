"""Real mechanisms for engine tests: the Toxiproxy server with one proxy, and a Docker container."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import pytest

from drill.backends.toxiproxy import ToxiproxyClient, ToxiproxyServer


@pytest.fixture()
def proxy(toxiproxy_server: ToxiproxyServer) -> Iterator[tuple[ToxiproxyClient, str]]:
    """A proxy named uniquely for the test, deleted afterwards."""
    client = toxiproxy_server.client()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        upstream = f"127.0.0.1:{sock.getsockname()[1]}"
    name = f"test-{uuid.uuid4().hex[:8]}"
    client.create_proxy(name, upstream)
    try:
        yield client, name
    finally:
        client.delete_proxy(name, missing_ok=True)
        client.close()


@pytest.fixture()
def container() -> Iterator[str]:
    """A running container (host binaries bind-mounted read-only), removed afterwards."""
    from drill.backends.docker import DockerBackend, ensure_empty_image

    backend = DockerBackend(timeout_s=30)
    image = ensure_empty_image(backend)
    name = f"llm-drill-test-{uuid.uuid4().hex[:8]}"
    binds = {p: {"bind": p, "mode": "ro"} for p in ("/usr", "/lib", "/lib64", "/bin")}
    backend.run(image, ["/bin/sleep", "600"], name=name, init=True, network_mode="host", volumes=binds)
    try:
        yield name
    finally:
        backend.remove(name, missing_ok=True)
        backend.close()
