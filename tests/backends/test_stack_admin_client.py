"""The typed admin-API clients against a real replica process and a real router, on ephemeral ports.

Error paths that a live server cannot be made to produce on demand (a server that answers with the
wrong schema) use httpx's MockTransport, the transport seam.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from drill.backends.stack_admin import RouterAdminClient, StackAdminClient
from drill.errors import AdminApiError

REPO = Path(__file__).resolve().parents[2]
TOKEN = "stack-admin-test-token"


@dataclass
class Servers:
    replica_url: str
    router_admin_url: str
    replica: subprocess.Popen


def _start(argv: list[str], ready: Path, log: Path) -> tuple[subprocess.Popen, dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", *argv], env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{argv[0]} did not start: {log.read_text()[-2000:]}")
        time.sleep(0.02)
    return proc, json.loads(ready.read_text())


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """One replica and a router in front of it; both killed after the module, even on failure."""
    from drill.stack.config import parse_stack_config
    from drill.stack.launch import ReplicaLaunch, RouterLaunch, UpstreamLaunch

    tmp = tmp_path_factory.mktemp("admin")
    spec = ReplicaLaunch(
        name="replica-0",
        index=0,
        port=0,
        admin_token=TOKEN,
        ready_file=tmp / "replica.ready",
        config=parse_stack_config({"engine": {"weight_load_time": "0s"}}),
        ledger_path=tmp / "ledger.jsonl",
        log_path=tmp / "replica.log",
    )
    (tmp / "replica.json").write_text(spec.model_dump_json())
    procs = []
    try:
        replica, info = _start(
            ["drill.stack.replica.api_server", "--launch", str(tmp / "replica.json")],
            spec.ready_file,
            tmp / "replica.out",
        )
        procs.append(replica)
        router_launch = RouterLaunch(
            replicas=(UpstreamLaunch(name="replica-0", index=0, url=info["url"]),),
            admin_token=TOKEN,
            ready_file=tmp / "router.ready",
        )
        (tmp / "router.json").write_text(router_launch.model_dump_json())
        router, rinfo = _start(
            ["drill.stack.router.gateway", "--launch", str(tmp / "router.json")],
            router_launch.ready_file,
            tmp / "router.out",
        )
        procs.append(router)
        yield Servers(info["url"], rinfo["url"] + "/admin", replica)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


def test_replica_state_and_gpu_conditions_are_typed_and_return_the_previous_value(servers: Servers) -> None:
    with StackAdminClient(servers.replica_url, TOKEN, timeout_s=5) as admin:
        state = admin.state()
        assert state.engine_alive and state.pid == servers.replica.pid and state.gpu.memory_hog_gib == 0.0
        assert admin.set_memory_hog(10) == 0.0
        shrunk = admin.state().gpu
        assert shrunk.memory_hog_gib == 10.0 and shrunk.kv_blocks_usable < state.gpu.kv_blocks_usable
        assert admin.clear_memory_hog() == 10.0 and admin.clear_memory_hog() == 0.0
        assert admin.set_clock_cap(0.25) == 1.0 and admin.state().gpu.clock_fraction == 0.25
        assert admin.clear_clock_cap() == 0.25
        admin.stall(5)
        assert admin.state().stall_until is not None
        admin.clear_stall()
        assert admin.state().stall_until is None


def test_bad_values_and_wrong_tokens_are_admin_api_errors_with_status_and_hint(servers: Servers) -> None:
    with StackAdminClient(servers.replica_url, TOKEN) as admin:
        with pytest.raises(AdminApiError, match="clock cap 5: .* HTTP 400: fraction must be between") as bad:
            admin.set_clock_cap(5)
        assert bad.value.status == 400 and bad.value.operation == "set clock cap 5"
    with StackAdminClient(servers.replica_url, "wrong-token") as admin, pytest.raises(AdminApiError) as denied:
        admin.state()
    assert denied.value.status == 401 and "state file" in denied.value.hint


@pytest.mark.realtime  # a 0.5 s timeout must fire within 3 s of wall time
def test_an_unreachable_or_stopped_replica_fails_within_the_timeout(servers: Servers) -> None:
    with StackAdminClient("http://127.0.0.1:9", TOKEN, timeout_s=1) as admin:
        with pytest.raises(AdminApiError, match="cannot reach") as gone:
            admin.state()
    assert gone.value.status is None
    os.kill(servers.replica.pid, signal.SIGSTOP)
    try:
        with StackAdminClient(servers.replica_url, TOKEN, timeout_s=0.5) as admin:
            start = time.monotonic()
            with pytest.raises(AdminApiError, match="did not answer within 0.5s"):
                admin.state()
            assert time.monotonic() - start < 3.0
    finally:
        os.kill(servers.replica.pid, signal.SIGCONT)


def test_router_config_patch_answers_previous_and_new(servers: Servers) -> None:
    with RouterAdminClient(servers.router_admin_url, TOKEN) as router:
        before = router.config()
        change = router.patch_config({"retries": {"attempts": 3, "timeout": "250ms"}, "idempotency": True})
        assert change.previous == before
        assert change.config.retries.attempts == 3 and change.config.retries.timeout == 0.25
        assert change.config.retries.on == before.retries.on and change.config.idempotency
        state = router.state()
        assert state.config == change.config and [r.name for r in state.replicas] == ["replica-0"]
        with pytest.raises(AdminApiError) as bad:
            router.patch_config({"retries": {"attempts": 99}})
        assert bad.value.status == 400
        restored = router.patch_config(
            {"retries": before.retries.model_dump(mode="json"), "idempotency": before.idempotency}
        )
        assert restored.config == before


def test_an_answer_of_the_wrong_shape_is_an_admin_api_error_naming_the_field() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json={"name": "r", "index": 0}))
    with StackAdminClient("http://replica.test", TOKEN, transport=transport) as admin:
        with pytest.raises(AdminApiError, match="unexpected answer .* at pid"):
            admin.state()
    text = httpx.MockTransport(lambda request: httpx.Response(200, text="not json"))
    with RouterAdminClient("http://router.test/admin", TOKEN, transport=text) as router:
        with pytest.raises(AdminApiError, match="non-JSON"):
            router.config()
