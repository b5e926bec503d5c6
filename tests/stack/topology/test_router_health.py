"""The router's health checks under a flood: a check that times out is weak evidence (the router itself may be
the late one), so a replica leaves rotation after three in a row, and a burst of upstream timeouts asks one check
at a time. Real HTTP on ephemeral ports against scriptable upstreams."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from topology_fakes import FakeReplica

from drill.stack.config import RetryConfig, RouterConfig
from drill.stack.router.gateway import HEALTH_TIMEOUTS_TO_FAIL, Gateway
from drill.stack.specs import RouterSpec, UpstreamSpec

pytestmark = pytest.mark.anyio


async def _gateway(replica: FakeReplica, **config: object) -> Gateway:
    spec = RouterSpec(
        replicas=(UpstreamSpec(name=replica.name, index=0, url=replica.url),),
        router=RouterConfig(**{"health_check_interval": "30s", **config}),  # checks only when the test asks
        admin_token="admin-token-for-tests",
    )
    gateway = Gateway(spec)
    await gateway.start()
    return gateway


async def test_a_replica_leaves_rotation_only_after_three_health_timeouts_in_a_row() -> None:
    replica = await FakeReplica("r0").start()
    gateway = Gateway(
        RouterSpec(
            replicas=(UpstreamSpec(name="r0", index=0, url=replica.url),),
            router=RouterConfig(health_check_interval="500ms"),  # a check times out after 0.5 s
            admin_token="admin-token-for-tests",
        )
    )  # not started: no periodic checks, only the test's
    try:
        await gateway.check(gateway.pool.replicas[0])
        assert gateway.pool.replicas[0].healthy
        replica.health_delay_s = 0.8
        for _ in range(HEALTH_TIMEOUTS_TO_FAIL - 1):
            await gateway.check(gateway.pool.replicas[0])
        assert gateway.pool.replicas[0].healthy, "one late check took a replica out of rotation"
        replica.health_delay_s = 0.0
        await gateway.check(gateway.pool.replicas[0])  # an answer resets the count
        replica.health_delay_s = 0.8
        for _ in range(HEALTH_TIMEOUTS_TO_FAIL):
            await gateway.check(gateway.pool.replicas[0])
        state = gateway.pool.replicas[0]
        assert not state.healthy and state.last_error == f"ReadTimeout ({HEALTH_TIMEOUTS_TO_FAIL} in a row)"
        replica.health, replica.health_delay_s = 503, 0.0
        await gateway.check(state)
        assert state.last_error == "HTTP 503"  # an answer that is not 200 is evidence at once
    finally:
        await gateway.close()
        await replica.close()


async def test_a_burst_of_upstream_timeouts_asks_one_health_check_at_a_time() -> None:
    replica = await FakeReplica("r0", mode="slow", delay_s=2.0).start()
    gateway = await _gateway(replica, retries=RetryConfig(timeout="200ms"))
    try:
        replica.health_delay_s = 0.3
        before = replica.health_checks
        async with httpx.AsyncClient(base_url=gateway.server.url, timeout=10) as client:
            answers = await asyncio.gather(
                *(client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 4}) for _ in range(30))
            )
        await asyncio.sleep(0.5)
        assert [a.status_code for a in answers] == [504] * 30
        assert replica.health_checks - before <= 3, replica.health_checks - before
        assert gateway.pool.replicas[0].healthy
    finally:
        await gateway.close()
        await replica.close()
