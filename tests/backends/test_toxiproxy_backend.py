"""The Toxiproxy client against the real toxiproxy-server (``integration``), and unit tests of its error
translation at the transport seam (``httpx.MockTransport``) and against sockets that never answer."""

from __future__ import annotations

import os
import socket
import time

import httpx
import pytest

from drill.backends.toxiproxy import (
    NewProxy,
    Stream,
    ToxicType,
    ToxiproxyClient,
    ToxiproxyServer,
    find_toxiproxy_binary,
)
from drill.errors import NotAvailableError, ToxiproxyError

real_server = pytest.mark.integration  # starts the real toxiproxy-server


@real_server
def test_version_answers(toxiproxy: ToxiproxyClient) -> None:
    assert toxiproxy.version()  # "2.12.0", or "git" for an untagged go install


@real_server
def test_proxy_lifecycle_passes_traffic(toxiproxy: ToxiproxyClient, echo_addr: str, roundtrip) -> None:
    proxy = toxiproxy.create_proxy("echo", echo_addr)
    assert proxy.listen_port > 0 and proxy.upstream == echo_addr and proxy.enabled
    assert roundtrip(proxy.listen, b"hello") == b"hello"
    assert set(toxiproxy.proxies()) == {"echo"}
    assert toxiproxy.proxy("echo").listen == proxy.listen

    disabled = toxiproxy.disable("echo")
    assert not disabled.enabled
    with pytest.raises(OSError):
        roundtrip(proxy.listen)
    assert toxiproxy.enable("echo").enabled
    assert toxiproxy.delete_proxy("echo") is True
    assert toxiproxy.proxies() == {}


@real_server
def test_deletes_are_idempotent(toxiproxy: ToxiproxyClient, echo_addr: str) -> None:
    assert toxiproxy.delete_proxy("never-there") is False
    toxiproxy.create_proxy("p", echo_addr)
    assert toxiproxy.delete_toxic("p", "never-there") is False
    with pytest.raises(ToxiproxyError) as info:
        toxiproxy.delete_proxy("never-there", missing_ok=False)
    assert info.value.status == 404 and info.value.hint and "list proxies" in info.value.hint


@real_server
def test_duplicate_proxy_is_409_with_hint(toxiproxy: ToxiproxyClient, echo_addr: str) -> None:
    toxiproxy.create_proxy("dup", echo_addr)
    with pytest.raises(ToxiproxyError) as info:
        toxiproxy.create_proxy("dup", echo_addr)
    assert info.value.status == 409
    assert "already exists" in str(info.value) and "populate" in str(info.value)


@real_server
def test_latency_toxic_add_update_delete(toxiproxy: ToxiproxyClient, echo_addr: str, roundtrip) -> None:
    proxy = toxiproxy.create_proxy("lat", echo_addr)
    toxic = toxiproxy.add_toxic("lat", ToxicType.LATENCY, {"latency": 150}, stream=Stream.DOWNSTREAM)
    assert toxic.name == "latency_downstream" and toxic.attributes["latency"] == 150
    assert _timed(roundtrip, proxy.listen) >= 0.14

    updated = toxiproxy.update_toxic("lat", toxic.name, attributes={"jitter": 0}, toxicity=1.0)
    assert updated.attributes == {"latency": 150, "jitter": 0}  # PATCH merges attributes
    toxiproxy.update_toxic("lat", toxic.name, attributes={"latency": 0})
    assert _timed(roundtrip, proxy.listen) < 0.1

    assert toxiproxy.delete_toxic("lat", toxic.name) is True
    assert toxiproxy.toxics("lat") == []


@real_server
def test_bad_toxic_attributes_are_400_with_hint(toxiproxy: ToxiproxyClient, echo_addr: str) -> None:
    toxiproxy.create_proxy("bad", echo_addr)
    with pytest.raises(ToxiproxyError) as info:
        toxiproxy.add_toxic("bad", "latency", {"latency": "slow"})  # type: ignore[dict-item]
    assert info.value.status == 400 and "integers" in (info.value.hint or "")
    with pytest.raises(ValueError):
        toxiproxy.add_toxic("bad", "no-such-toxic")


@real_server
def test_reset_removes_toxics_and_reenables(toxiproxy: ToxiproxyClient, echo_addr: str, roundtrip) -> None:
    proxy = toxiproxy.create_proxy("r", echo_addr)
    toxiproxy.add_toxic("r", "bandwidth", {"rate": 1}, stream="upstream")
    toxiproxy.disable("r")
    toxiproxy.reset()
    after = toxiproxy.proxy("r")
    assert after.enabled and after.toxics == ()
    assert roundtrip(proxy.listen) == b"ping"


@real_server
def test_populate_keeps_unchanged_proxies(toxiproxy: ToxiproxyClient, echo_addr: str) -> None:
    first = toxiproxy.create_proxy("keep", echo_addr)
    wanted = [NewProxy(name="keep", upstream=echo_addr, listen=first.listen), NewProxy(name="new", upstream=echo_addr)]
    result = {p.name: p for p in toxiproxy.populate(wanted)}
    assert result["keep"].listen == first.listen
    assert result["new"].listen_port > 0
    assert set(toxiproxy.proxies()) == {"keep", "new"}


def test_unreachable_server_has_hint() -> None:
    port = _closed_port()
    with ToxiproxyClient(f"http://127.0.0.1:{port}", timeout_s=1.0) as client, pytest.raises(ToxiproxyError) as info:
        client.proxies()
    assert info.value.status is None and "TOXIPROXY_URL" in (info.value.hint or "")


@pytest.mark.realtime  # a 0.3 s timeout must fire within 2 s of wall time
def test_hung_server_times_out() -> None:
    with socket.socket() as listener:  # accepts into the backlog, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()
        with ToxiproxyClient(url, timeout_s=0.3) as client, pytest.raises(ToxiproxyError) as info:
            client.version()
    assert time.monotonic() - started < 2.0
    assert "did not answer within 0.3s" in str(info.value)


def test_403_is_translated_at_the_transport_seam() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(403, json={"error": "User agent not allowed", "status": 403})

    with (
        ToxiproxyClient("http://toxiproxy.invalid", transport=httpx.MockTransport(handler)) as client,
        pytest.raises(ToxiproxyError) as info,
    ):
        client.reset()
    assert info.value.status == 403 and "Mozilla" in (info.value.hint or "")


def test_client_sends_a_non_browser_user_agent() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["user-agent"])
        return httpx.Response(200, json={"version": "2.12.0"})

    with ToxiproxyClient("http://t.invalid", transport=httpx.MockTransport(handler)) as client:
        assert client.version() == "2.12.0"
    assert seen and not seen[0].startswith("Mozilla/")


def test_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOXIPROXY_URL", "http://127.0.0.1:1/")
    assert ToxiproxyClient.from_env().base_url == "http://127.0.0.1:1"
    monkeypatch.delenv("TOXIPROXY_URL")
    with pytest.raises(NotAvailableError):
        ToxiproxyClient.from_env()


def test_missing_binary_is_not_available(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("TOXIPROXY_BIN", str(tmp_path / "nope"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("sys.executable", str(tmp_path / "python"))
    with pytest.raises(NotAvailableError) as info:
        find_toxiproxy_binary()
    assert "TOXIPROXY_BIN" in (info.value.hint or "")


@real_server
def test_server_manager_stop_is_idempotent() -> None:
    server = ToxiproxyServer().start()
    pid = server.pid
    try:
        with server.client() as client:
            assert pid is not None and client.version()
    finally:
        server.stop()
    server.stop()
    with pytest.raises(ProcessLookupError):  # stopped and reaped
        os.kill(pid, 0)


def _timed(fn, *args) -> float:
    started = time.monotonic()
    fn(*args)
    return time.monotonic() - started


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
