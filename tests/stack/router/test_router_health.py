"""The router's health checks under a flood: a check that times out is weak evidence (the router itself may be
the late one), so a replica leaves rotation after three in a row, and a burst of upstream timeouts asks one check
at a time. Real HTTP on ephemeral ports against scriptable upstreams."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from drill.stack.config import RetryConfig, RouterConfig
from drill.stack.launch import RouterLaunch, UpstreamLaunch
from drill.stack.router.gateway import HEALTH_TIMEOUTS_TO_FAIL, Gateway
from tests.stack.router.fake_upstreams import FakeReplica

pytestmark = [pytest.mark.anyio, pytest.mark.realtime]  # served in real time: see tests/conftest.py


async def _gateway(replica: FakeReplica, **config: object) -> Gateway:
    launch = RouterLaunch(
        replicas=(UpstreamLaunch(name=replica.name, index=0, url=replica.url),),
        router=RouterConfig(**{"health_check_interval": "30s", **config}),  # checks only when the test asks
        admin_token="admin-token-for-tests",
    )
    gateway = Gateway(launch)
    await gateway.start()
    return gateway


async def test_a_replica_leaves_rotation_only_after_three_health_timeouts_in_a_row() -> None:
    replica = await FakeReplica("r0").start()
    gateway = Gateway(
        RouterLaunch(
            replicas=(UpstreamLaunch(name="r0", index=0, url=replica.url),),
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
        assert gateway.pool.pick() is state  # out for late checks only, and no other replica: still used
        replica.health, replica.health_delay_s = 503, 0.0
        await gateway.check(state)
        assert state.last_error == "HTTP 503"  # an answer that is not 200 is evidence at once
        assert gateway.pool.pick() is None  # ... and never used
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


async def test_with_every_check_late_the_router_still_routes_instead_of_refusing_everything() -> None:
    """Envoy's panic routing: both replicas out for late checks alone (the router's own loop lagging under a flood)
    still get requests, spread as usual; a healthy replica is preferred whenever there is one."""
    replicas = [await FakeReplica(f"r{i}").start() for i in range(2)]
    gateway = Gateway(
        RouterLaunch(
            replicas=tuple(UpstreamLaunch(name=r.name, index=i, url=r.url) for i, r in enumerate(replicas)),
            router=RouterConfig(health_check_interval="500ms"),
            admin_token="admin-token-for-tests",
        )
    )
    await gateway.start()
    gateway._health_task.cancel()  # the test's checks only
    try:
        for replica in replicas:
            replica.health_delay_s = 0.8
        for _ in range(HEALTH_TIMEOUTS_TO_FAIL):
            await gateway.check_all()
        assert gateway.pool.healthy() == []
        async with httpx.AsyncClient(base_url=gateway.server.url, timeout=10) as client:
            answers = [await client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 4}) for _ in range(4)]
            health = await client.get("/health")
        assert [a.status_code for a in answers] == [200] * 4
        assert sorted(a.json()["replica"] for a in answers) == ["r0", "r0", "r1", "r1"]
        assert health.status_code == 503  # the router's own health still says none passes its checks
        replicas[1].health_delay_s = 0.0
        await gateway.check(gateway.pool.replicas[1])
        assert gateway.pool.pick() is gateway.pool.replicas[1]
    finally:
        await gateway.close()
        for replica in replicas:
            await replica.close()
