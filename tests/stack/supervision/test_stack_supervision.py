"""The supervisor: restarts what dies, never leaves orphans, shares an external Toxiproxy politely."""

from __future__ import annotations

import os
import signal
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
