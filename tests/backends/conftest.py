"""Fixtures for backend tests: the real Toxiproxy server and a TCP echo upstream, on ephemeral ports."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


class _EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture(scope="module")
def echo_addr() -> Iterator[str]:
    """``127.0.0.1:<port>`` of a TCP echo server, stopped after the module."""
    server = _EchoServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _roundtrip(addr: str, payload: bytes = b"ping", timeout_s: float = 5.0) -> bytes:
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(payload)
        received = b""
        while len(received) < len(payload):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
        return received


@pytest.fixture()
def roundtrip():
    """``roundtrip(addr, payload=b"ping")``: send to ``host:port``, read as many bytes back."""
    return _roundtrip
