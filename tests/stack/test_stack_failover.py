"""Acceptance: GPU memory filled on one replica (admin API) — its in-flight requests fail fast with
500, the router routes around it, the supervisor (or Docker) restarts it, and it serves again.
The same test runs with local processes and with ``runtime: docker``."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.stack.stack_probes import admin_get, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STACK = {"replicas": 2, "engine": {"weight_load_time": "1s"}, "router": {"health_check_interval": "100ms"}}
LONG = {"model": "llama-3-8b", "prompt": "tell me a long story", "max_tokens": 400, "ignore_eos": True}
SHORT = {"model": "llama-3-8b", "prompt": "hi", "max_tokens": 2}


def _attempts(router: str) -> dict[str, float]:
    text = httpx.get(f"{router}/metrics", timeout=10, trust_env=False).text
    return {m[0]: float(m[1]) for m in re.findall(r'drill_router_attempts_total\{replica="([^"]+)"\} (\S+)', text)}


def _restarts(state, replica) -> int:
    if replica.container:
        from drill.backends.docker import DockerBackend

        with DockerBackend() as docker:
            return docker.info(replica.container).restart_count
    return 0 if int(Path(replica.pid_file).read_text()) == replica.pid else 1


def _replica_health(state, name: str) -> bool:
    replicas = admin_get(f"{state.router_admin_url}/state", state.admin_token)["replicas"]
    return next(r["healthy"] for r in replicas if r["name"] == name)


@pytest.mark.parametrize("runtime", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_memory_hog_fails_fast_routes_around_and_restarts(stack_factory, runtime: str) -> None:
    state = stack_factory(STACK, runtime=runtime)
    victim, other = state.replicas
    results: list[tuple[int, float]] = []

    def long_request() -> None:
        response = httpx.post(f"{victim.url}/v1/completions", json=LONG, timeout=60, trust_env=False)
        results.append((response.status_code, time.monotonic()))

    threads = [threading.Thread(target=long_request) for _ in range(2)]
    for thread in threads:
        thread.start()
    wait_until(
        lambda: admin_get(f"{victim.admin_url}/admin/state", state.admin_token)["engine"]["running"] == 2,
        10,
        "both long requests running on the victim",
    )

    hogged_at = time.monotonic()
    httpx.put(
        f"{victim.admin_url}/admin/gpu/memory-hog",
        json={"gib": 80},
        headers={"Authorization": f"Bearer {state.admin_token}"},
        timeout=10,
        trust_env=False,
    )
    for thread in threads:
        thread.join(timeout=30)
    assert [status for status, _ in results] == [500, 500]
    assert max(at for _, at in results) - hogged_at < 1.5  # fail fast, not after 400 tokens (~3 s)

    wait_until(lambda: not _replica_health(state, victim.name), 5, "the router to take the victim out")
    before = _attempts(state.router)
    with httpx.Client(base_url=state.router, timeout=30, trust_env=False) as client:
        statuses = [client.post("/v1/completions", json=SHORT).status_code for _ in range(6)]
    after = _attempts(state.router)
    assert statuses == [200] * 6
    assert after.get(other.name, 0) - before.get(other.name, 0) == 6
    assert after.get(victim.name, 0) == before.get(victim.name, 0)

    wait_until(lambda: _replica_health(state, victim.name), 30, "the victim to be restarted and healthy again")
    assert _restarts(state, victim) >= 1
    state_after = admin_get(f"{victim.admin_url}/admin/state", state.admin_token)
    assert state_after["engine_alive"] and state_after["gpu"]["memory_hog_gib"] == 0

    before = _attempts(state.router)
    with httpx.Client(base_url=state.router, timeout=30, trust_env=False) as client:
        statuses = [client.post("/v1/completions", json=SHORT).status_code for _ in range(6)]
    assert statuses == [200] * 6
    assert _attempts(state.router).get(victim.name, 0) - before.get(victim.name, 0) >= 1  # it serves again
