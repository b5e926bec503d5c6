"""The contract for the Docker methods on a ``runtime: docker`` reference stack, with the real Docker engine.

One stack for the module: one replica in a container (``init``, host networking, ``restart_policy:
on-failure``) behind a Toxiproxy proxy. Cases: a CPU quota (``slow_replica`` docker_cpu),
``docker pause`` (``replica_pause``), the container's main process killed from the host so the
restart policy brings it back (``replica_crash``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from drill.api import FaultContext
from drill.backends.docker import DockerBackend
from drill.testing import FaultCase, errors_above, latency_or_errors, run_fault_contract
from tests.faults.conftest import RunningStack, start_embedded, stop_embedded, wait_healthy

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def docker_stack(stack_dir: Path) -> Iterator[RunningStack]:
    stack = start_embedded(
        {"replicas": 1, "engine": {"weight_load_time": "300ms"}, "router": {"health_check_interval": "250ms"}},
        stack_dir,
        runtime="docker",
    )
    try:
        yield stack
    finally:
        stop_embedded(stack)


def _serving(ctx: FaultContext) -> None:
    replica = ctx.targets.replicas[0]
    wait_healthy(replica.direct_url)
    with DockerBackend() as docker:
        assert str(docker.info(replica.container).state) == "running"


CASES = {
    "slow_replica-docker_cpu": (
        "slow_replica",
        {"method": "docker_cpu", "cpus": 0.01},
        latency_or_errors(0.15, 0.5),
        None,
    ),
    "replica_pause-docker": ("replica_pause", {"method": "docker"}, errors_above(0.5), None),
    "replica_crash-docker": ("replica_crash", {"method": "docker"}, errors_above(0.3), _serving),
}


@pytest.mark.parametrize("name", list(CASES))
def test_docker_fault_contract(name: str, docker_stack: RunningStack, tmp_path: Path) -> None:
    kind, params, effect, clean = CASES[name]
    wait_healthy(docker_stack.state.router)
    case = FaultCase(
        kind,
        params,
        docker_stack.info,
        effect=effect,
        clean=clean,
        fault_id=name.replace("_", "-"),
        max_partial_steps=2,
    )
    report = run_fault_contract(case, tmp_path)
    print("\n".join(report.lines()))
    assert len(report.clauses) == 5


def test_the_docker_crash_is_restarted_by_docker_not_by_hand(docker_stack: RunningStack) -> None:
    """The crash's evidence is Docker's own restart count, one higher and running, with a new main process."""
    from drill import registry
    from drill.api import Selector
    from drill.runner.fault_schedule import resolve_targets

    fault_cls = registry.faults.get("replica_crash")
    fault = fault_cls(fault_cls.Params(method="docker"))
    ctx = FaultContext("crash-evidence", docker_stack.info, resolve_targets(fault, Selector(), docker_stack.info, 0))
    container = docker_stack.info.replicas[0].container
    with DockerBackend() as docker:
        before = docker.info(container)
        ctx.saved = fault.prepare(ctx)
        fault.inject(ctx)
        evidence = fault.verify(ctx)
        after = docker.info(container)
    fault.revert(ctx)
    ctx.close()
    assert after.restart_count == before.restart_count + 1 and after.pid != before.pid
    assert f"restart count {after.restart_count}" in evidence.summary
