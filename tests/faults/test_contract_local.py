"""The contract (drill.testing) for every built-in fault on a local reference stack, under live traffic.

One stack for the module (1 replica, TP=2 behind a Toxiproxy link proxy, local processes with a
supervisor), the real Toxiproxy server. Each case: inject, verify, the effect is visible to clients,
revert, the effect is gone, a second revert is a no-op, revert with nothing injected, revert after
an inject that failed at each backend call (before and after it ran), and revert from the journal
record alone as the watchdog does it.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from drill.api import FaultContext
from drill.testing import FaultCase, errors_above, latency_above, run_fault_contract
from tests.faults.conftest import RunningStack, wait_healthy

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _no_hog(ctx: FaultContext) -> None:
    """gpu_oom may kill the engine (the replica then restarts without the hog): clean = no hog on it."""
    wait_healthy(ctx.targets.replicas[0].direct_url)
    hog = ctx.stack_admin(ctx.targets.replicas[0]).state().gpu.memory_hog_gib
    assert hog == 0.0, f"{hog} GiB still taken"


def _serving(ctx: FaultContext) -> None:
    """replica_crash cannot be undone, only recovered from: clean = the replica serves again."""
    wait_healthy(ctx.targets.replicas[0].direct_url)


CASES = {
    "slow_replica-toxiproxy": ("slow_replica", {"latency_ms": 600}, latency_above(0.25), {}, None),
    "slow_replica-clock_cap": (
        "slow_replica",
        {"method": "clock_cap", "clock_fraction": 0.15},
        latency_above(0.15),
        {"prompt_tokens": 1500, "rate_per_s": 4},
        None,
    ),
    "gpu_clock_cap": (
        "gpu_clock_cap",
        {"fraction": 0.15},
        latency_above(0.15),
        {"prompt_tokens": 1500, "rate_per_s": 4},
        None,
    ),
    "nccl_degradation": (
        "nccl_degradation",
        {"latency_ms": 1, "direction": "downstream"},
        latency_above(0.2),
        {},
        None,
    ),
    "gpu_oom": ("gpu_oom", {"gib": 78}, errors_above(0.2), {}, _no_hog),
    "link_reset": ("link_reset", {}, errors_above(0.5), {}, None),
    "partition-blackhole": ("partition", {"mode": "blackhole"}, errors_above(0.5), {}, None),
    "partition-refuse": ("partition", {"mode": "refuse"}, errors_above(0.5), {}, None),
    "router_retry_storm": (
        "router_retry_storm",
        {"attempts": 2, "attempt_timeout": "40ms"},
        errors_above(0.5),
        {"max_tokens": 16},
        None,
    ),
    "replica_pause-process": ("replica_pause", {"method": "process"}, errors_above(0.5), {}, None),
    "replica_crash-process": ("replica_crash", {"method": "process"}, errors_above(0.3), {}, _serving),
}


@pytest.mark.parametrize("name", list(CASES))
def test_fault_contract_on_the_local_stack(name: str, local_stack: RunningStack, tmp_path: Path) -> None:
    kind, params, effect, traffic, clean = CASES[name]
    wait_healthy(local_stack.state.router)
    case = FaultCase(
        kind,
        params,
        local_stack.info,
        effect=effect,
        traffic=traffic,
        clean=clean,
        fault_id=name.replace("_", "-"),
        max_partial_steps=2,
    )
    report = run_fault_contract(case, tmp_path)
    print("\n".join(report.lines()))
    assert len(report.clauses) == 5
    assert report.faulted is not None and report.recovered is not None


def test_the_replica_serves_after_every_contract(local_stack: RunningStack) -> None:
    """Nothing is left behind: no toxic on any proxy, the router config as configured, all healthy."""
    from drill.backends.stack_admin import RouterAdminClient
    from drill.backends.toxiproxy import ToxiproxyClient

    with ToxiproxyClient(local_stack.info.toxiproxy_url) as toxiproxy:
        proxies = toxiproxy.proxies()
    assert proxies and all(p.enabled and not p.toxics for p in proxies.values() if p.name.startswith(local_stack.name))
    with RouterAdminClient(local_stack.info.router_admin_url, local_stack.info.admin_token) as router:
        assert router.config().retries.attempts == 0
    wait_healthy(local_stack.state.router)
    response = httpx.post(
        f"{local_stack.state.router}/v1/completions",
        json={"model": local_stack.info.model, "prompt": "hi", "max_tokens": 2},
        timeout=10,
    )
    assert response.status_code == 200
