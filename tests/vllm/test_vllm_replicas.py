"""``slow-replica`` and ``replica-crash`` on two real vLLM replicas behind the harness's router, as a user's deployment
would be.

The router (``drill.stack.router.gateway``) is started pointing at two addresses where the drill's harness-made
Toxiproxy proxies will listen (``upstream`` + ``listen`` in the target). slow-replica slows the first replica's link:
the traces must point at the router's call to that replica, never the other one. replica-crash SIGKILLs the first
replica's API server (the process ``drill supervise`` started, by its PID file): its in-flight requests fail fast,
the router routes to the other, its ``/health`` answers nothing until ``drill supervise`` has started it anew.
"""

from __future__ import annotations

import json

import pytest

from tests.vllm import catalogue
from tests.vllm.conftest import ServerPool
from tests.vllm.drills import DrillRun, run_drill
from tests.vllm.servers import DEFAULT, PRIORITY, PRIORITY_FLAGS, START_TIMEOUT_S, VllmServer, free_port, start_router

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

#: the second replica: the priority-policy server of test_vllm_priority.py, already running (tests/vllm/servers.py says
#: why it serves these all-priority-0 drills as FCFS does)
SECOND, SECOND_FLAGS = PRIORITY, PRIORITY_FLAGS


def _behind_the_router(servers: dict[str, VllmServer], otlp_port: int, folder, make) -> DrillRun:
    """``make(router_url, replicas)``'s drill, run with the router over harness-made proxies to ``servers``."""
    listens = {name: f"127.0.0.1:{free_port()}" for name in servers}
    router = start_router(folder / "router", {n: f"http://{a}" for n, a in listens.items()}, otlp_port)
    replicas = [
        {"name": name, "upstream": server.upstream, "listen": listens[name], "pid_file": str(server.pid_file)}
        for name, server in servers.items()
    ]
    try:
        return run_drill(make(router.url, replicas), folder / "run", timeout_s=300 + START_TIMEOUT_S)
    finally:
        router.stop()


def test_a_slow_link_to_one_vllm_replica_is_named_in_the_traces_and_recovers(
    vllm_servers: ServerPool, vllm_otlp_port: int, tmp_path
) -> None:
    servers = vllm_servers.get_many({DEFAULT: (), SECOND: SECOND_FLAGS})
    run = _behind_the_router(
        servers, vllm_otlp_port, tmp_path, lambda url, replicas: catalogue.slow_replica(url, replicas, vllm_otlp_port)
    )
    print(f"\nslow-replica on two vLLM replicas: {run.statuses()} ({run.wall_s:.0f} s)")
    for name in ("fault_landed", "baseline-slo", "no-errors-while-slow", "recovered"):
        assert run.status(name) == "PASS", run.verdicts[name]
    verdict = run.verdicts["first_abnormal_span"]
    assert verdict["status"] == "PASS", verdict
    observed = verdict["observed"]
    if "service" in observed:  # a first abnormal span: the router's call to vllm-0, or vllm-0's own
        assert observed["service"] in (catalogue.ROUTER_SERVICE, DEFAULT), verdict
    else:  # none flagged by the onset rule: the slowed replica is the top suspect, the healthy one is not
        assert observed["suspects"][0]["service"] == DEFAULT, verdict


# last in this folder (conftest.py's FILE_ORDER): it SIGKILLs vllm-0, which drill supervise then restarts
def test_a_sigkilled_vllm_replica_fails_only_its_requests_fast_and_health_says_so_until_it_is_back(
    vllm_servers: ServerPool, vllm_otlp_port: int, tmp_path
) -> None:
    servers = vllm_servers.get_many({DEFAULT: (), SECOND: SECOND_FLAGS})
    run = _behind_the_router(
        servers,
        vllm_otlp_port,
        tmp_path,
        lambda url, replicas: catalogue.replica_crash(url, replicas, vllm_otlp_port, START_TIMEOUT_S),
    )
    print(f"\nreplica-crash on two vLLM replicas: {run.statuses()} ({run.wall_s:.0f} s)")
    for name in ("fault_landed", "baseline-slo", "contained", "fast-failure", "recovered"):
        assert run.status(name) == "PASS", run.verdicts[name]
    assert run.status("recovery_time") in ("PASS", "INCONCLUSIVE"), run.verdicts["recovery_time"]
    health = [json.loads(line) for line in (run.run_dir / "health.jsonl").read_text().splitlines() if line]
    killed = [probe for probe in health if probe["source"] == DEFAULT]
    assert killed[0]["healthy"], killed[0]  # before the kill
    assert any(p["status"] is None for p in killed), "the killed server's /health always answered"
    other = [probe["healthy"] for probe in health if probe["source"] == SECOND]
    assert sum(other) >= 0.9 * len(other) > 0  # the other server stayed in rotation (a probe may time out here)
    servers[DEFAULT].wait_healthy()  # back under drill supervise (20-100 s after the kill here)
