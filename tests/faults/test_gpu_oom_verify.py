"""gpu_oom (stack_admin) verify ties its evidence to the hog: a death or restart counts only when the replica
reports it died of CUDA OOM with the hog's memory in use. The admin API is answered at its HTTP transport seam."""

from __future__ import annotations

import httpx
import pytest

from drill import registry
from drill.api import FaultContext, FaultNotLanded, FaultTargets, ReplicaRef, TargetInfo
from drill.backends.stack_admin import StackAdminClient

REPLICA = ReplicaRef(
    name="replica-0", index=0, url="http://127.0.0.1:9", admin_url="http://127.0.0.1:9", admin_token="token-123"
)
TARGET = TargetInfo(kind="embedded", base_url="http://127.0.0.1:9", replicas=[REPLICA])
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.20 GiB. GPU 0 has a total capacity of "
    "79.65 GiB of which 0.00 GiB is free. Another process has 78.00 GiB memory in use. (simulated by drill)"
)
XID = "NVIDIA XID 79: GPU has fallen off the bus; CUDA error: unspecified launch failure"


def _state(
    pid: int, *, alive: bool = True, hog: float = 0.0, dead_reason: str | None = None, last_death: dict | None = None
) -> dict:
    return {
        "name": "replica-0",
        "index": 0,
        "pid": pid,
        "started_at": 1.0,
        "engine_alive": alive,
        "gpu": {
            "memory_hog_gib": hog,
            "clock_fraction": 1.0,
            "kv_blocks_total": 100,
            "kv_blocks_free": 100,
            "kv_blocks_usable": 100,
        },
        "stall_until": None,
        "last_death": last_death,
        "engine": {"dead_reason": dead_reason},
    }


def _verify(before_pid: int, answer: dict):
    fault_cls = registry.faults.get("gpu_oom")
    fault = fault_cls(fault_cls.Params.model_validate({"gib": 78}))
    ctx = FaultContext("oom", TARGET, FaultTargets(replicas=[REPLICA]), timeout_s=1)
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=answer))
    ctx._cache[f"stack_admin:{REPLICA.name}"] = StackAdminClient(
        REPLICA.admin_url, REPLICA.admin_token, transport=transport
    )
    ctx.saved = fault_cls.Saved(hog_gib={"replica-0": 0.0}, pid={"replica-0": before_pid}, kv_usable={"replica-0": 100})
    return fault.verify(ctx)


def test_an_unrelated_restart_is_not_the_hog_landing() -> None:
    with pytest.raises(FaultNotLanded, match="restarted as pid 200, but not of this memory hog"):
        _verify(100, _state(200))  # a new pid, no death recorded (e.g. killed by something else)


def test_a_restart_after_another_death_is_not_the_hog_landing() -> None:
    with pytest.raises(FaultNotLanded, match="it died of: NVIDIA XID 79"):
        _verify(100, _state(200, last_death={"pid": 100, "reason": XID, "at": 5.0}))


def test_a_dead_engine_of_another_cause_is_not_the_hog_landing() -> None:
    with pytest.raises(FaultNotLanded, match="its engine is dead, but not of this memory hog"):
        _verify(100, _state(100, alive=False, dead_reason=XID))


def test_a_stale_death_of_an_older_process_does_not_count() -> None:
    with pytest.raises(FaultNotLanded, match="not of this memory hog"):
        _verify(100, _state(200, last_death={"pid": 42, "reason": OOM, "at": 5.0}))


def test_death_of_cuda_oom_under_the_hog_is_evidence() -> None:
    lingering = _verify(100, _state(100, alive=False, dead_reason=OOM))
    assert "died of CUDA OOM under the 78 GiB hog" in lingering.summary
    restarted = _verify(100, _state(200, last_death={"pid": 100, "reason": OOM, "at": 5.0}))
    assert "restarted as pid 200" in restarted.summary and restarted.observations["replica-0.dead_reason"] == OOM


def test_the_hog_in_the_admin_state_is_evidence() -> None:
    assert "78 GiB taken (simulated)" in _verify(100, _state(100, hog=78.0)).summary


@pytest.mark.integration
def test_a_replica_killed_by_the_hog_reports_it_after_the_restart(local_stack) -> None:
    """The real stack: the hog kills the engine under load, the supervisor restarts it, and the new process's
    admin state carries the old one's death reason, so verify proves the hog landed (and only the hog)."""
    import time

    from tests.faults.conftest import wait_healthy

    fault_cls = registry.faults.get("gpu_oom")
    fault = fault_cls(fault_cls.Params.model_validate({"gib": 78}))
    replica = local_stack.info.replicas[0]
    ctx = FaultContext("oom-live", local_stack.info, FaultTargets(replicas=[replica]), timeout_s=20)
    ctx.saved = fault.prepare(ctx)
    before = ctx.saved.pid[replica.name]
    try:
        fault.inject(ctx)
        body = {"model": local_stack.info.model or "default", "prompt": "hello " * 200, "max_tokens": 8}
        deadline = time.monotonic() + 30
        admin = ctx.stack_admin(replica)
        while time.monotonic() < deadline:
            try:
                httpx.post(f"{replica.direct_url}/v1/completions", json=body, timeout=5, trust_env=False)
                if admin.state().pid != before:
                    break
            except Exception:  # noqa: BLE001 - the replica is dying or restarting
                pass
            time.sleep(0.2)
        wait_healthy(replica.direct_url)
        state = admin.state()
        assert state.pid != before, "the hog should have killed the engine under load"
        assert state.last_death is not None and state.last_death.pid == before
        assert "CUDA out of memory" in state.last_death.reason
        evidence = fault.verify(ctx)
        assert f"restarted as pid {state.pid}" in evidence.summary
    finally:
        fault.revert(ctx)
        ctx.close()
