"""The supervisor: restarts what dies, never leaves orphans, shares an external Toxiproxy politely."""

from __future__ import annotations

import os
import signal
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import pytest

from drill.backends.toxiproxy import ToxiproxyServer
from drill.errors import StackError
from drill.stack.config import parse_stack_config
from drill.stack.supervision.launcher import start_stack, stop_stack, supervisor_alive
from tests.stack.stack_probes import group_members, wait_until

pytestmark = [pytest.mark.integration]

SMALL = {"replicas": 1, "engine": {"weight_load_time": "200ms"}, "router": {"health_check_interval": "100ms"}}
WITH_TP = {**SMALL, "engine": {"tensor_parallel_size": 2, "weight_load_time": "200ms"}}


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_killed_replica_is_restarted(stack_factory) -> None:
    state = stack_factory(WITH_TP)
    (replica,) = state.replicas
    os.kill(replica.pid, signal.SIGKILL)
    wait_until(lambda: int(Path(replica.pid_file).read_text()) != replica.pid, 10, "a new replica pid")
    wait_until(lambda: _healthy(replica.direct_url), 30, "the restarted replica to answer")
    wait_until(lambda: _healthy(state.router), 10, "the router to put it back in rotation")
    response = httpx.post(
        f"{state.router}/v1/completions",
        timeout=30,
        trust_env=False,
        json={"model": "llama-3-8b", "prompt": "hi", "max_tokens": 3},
    )
    assert response.status_code == 200  # its TP rank came back with it: the step exchange works


def test_killing_the_supervisor_leaves_no_orphans(stack_factory, tmp_path: Path) -> None:
    state = stack_factory(WITH_TP)
    members = group_members(state.supervisor_pid)
    assert len(members) >= 5  # supervisor, toxiproxy-server, router, replica, TP rank
    os.kill(state.supervisor_pid, signal.SIGKILL)
    wait_until(lambda: not group_members(state.supervisor_pid), 10, "every child to die with the supervisor")
    assert not supervisor_alive(state)
    assert stop_stack(state.name, state_dir=tmp_path) is True  # the state file was still there
    assert stop_stack(state.name, state_dir=tmp_path) is False


def test_a_second_stack_of_the_same_name_is_refused(stack_factory, tmp_path: Path) -> None:
    state = stack_factory(SMALL)
    with pytest.raises(StackError) as info:
        start_stack(parse_stack_config(SMALL), name=state.name, state_dir=tmp_path)
    assert "already running" in str(info.value) and "drill stack down" in str(info.value)


def test_an_external_toxiproxy_keeps_its_other_proxies(stack_factory, monkeypatch, tmp_path: Path) -> None:
    with ToxiproxyServer() as server, server.client() as client:
        client.create_proxy("someone-else", "127.0.0.1:9")
        monkeypatch.setenv("TOXIPROXY_URL", server.url)
        state = stack_factory(WITH_TP)
        assert state.toxiproxy_url == server.url and not state.toxiproxy_owned
        assert {"someone-else", f"{state.name}-replica-0", f"{state.name}-replica-0-tp1"} == set(client.proxies())
        assert stop_stack(state.name, state_dir=tmp_path)
        assert set(client.proxies()) == {"someone-else"}


@pytest.mark.docker
def test_containers_stop_when_the_supervisor_is_killed(stack_factory, tmp_path: Path) -> None:
    from drill.backends.docker import ContainerState, DockerBackend

    state = stack_factory(SMALL, runtime="docker")
    (replica,) = state.replicas
    with DockerBackend() as docker:
        assert docker.info(replica.container).state is ContainerState.RUNNING
        os.kill(state.supervisor_pid, signal.SIGKILL)
        info = docker.wait_for_state(replica.container, ContainerState.EXITED, timeout_s=15)
        assert info.exit_code == 0  # the lifeline broke: a clean exit, so Docker does not restart it
        assert stop_stack(state.name, state_dir=tmp_path) is True
        assert docker.find(labels={"llm-drill.stack": state.name}) == []


class _OtherStacksReplica(BaseHTTPRequestHandler):
    """A server of another stack: healthy, but its admin API refuses any token but its own."""

    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append(self.path)
        code = 200 if self.path == "/health" else 401
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def port_taken(monkeypatch):
    """``take(plans)``: another stack's replica (:class:`_OtherStacksReplica`) listens on a port, and the first
    ``plans`` stack plans (None: every one) give replica-0 that port (the 4th popped, after router, Toxiproxy,
    lifeline). Returns the port and the ports each plan got."""
    import threading
    from http.server import ThreadingHTTPServer

    from drill.stack.supervision import stack_plan

    other = ThreadingHTTPServer(("127.0.0.1", 0), _OtherStacksReplica)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    taken, picks, real = other.server_address[1], [], stack_plan.free_ports

    def take(plans: int | None) -> tuple[int, list[list[int]]]:
        def racing(count: int, host: str = "127.0.0.1") -> list[int]:
            ports = real(count, host)
            if plans is None or len(picks) < plans:
                ports[-4] = taken
            picks.append(list(ports))
            return ports

        monkeypatch.setattr(stack_plan, "free_ports", racing)
        return taken, picks

    yield take
    other.shutdown()


def test_a_port_another_server_holds_is_found_and_the_stack_starts_on_others(stack_factory, port_taken) -> None:
    """Ports are picked free and released before the replicas bind them: a stack started at the same moment can
    take one. Its server answers health checks but refuses this stack's admin token; the stack starts again on
    other ports and serves from its own replica (before, it came up 'healthy' and sent requests to the other)."""
    taken, picks = port_taken(1)
    state = stack_factory(SMALL)
    assert len(picks) == 2, picks  # a second set of ports, after the first was found taken
    assert f":{taken}" not in state.replicas[0].direct_url and "/admin/state" in _OtherStacksReplica.seen
    headers = {"Authorization": f"Bearer {state.admin_token}"}
    own = httpx.get(f"{state.replicas[0].admin_url}/admin/state", headers=headers, timeout=5, trust_env=False)
    assert own.status_code == 200 and own.json()["name"] == "replica-0"
    answer = httpx.post(
        f"{state.router}/v1/completions",
        json={"model": state.model, "prompt": "hello", "max_tokens": 2},
        timeout=30,
        trust_env=False,
    )
    assert answer.status_code == 200, answer.text


def test_a_port_taken_on_every_start_stops_after_three_saying_so(stack_factory, port_taken, tmp_path: Path) -> None:
    _, picks = port_taken(None)
    with pytest.raises(StackError, match="keeps taking the ports") as raised:
        stack_factory(SMALL)
    assert len(picks) == 3 and "refuses this stack's admin token" in str(raised.value)
    assert not list((tmp_path / "stack").glob("*.json")), "a stack that did not start leaves no state"
