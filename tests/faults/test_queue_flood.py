"""``queue_flood`` through the real load driver (Locust in a child process) against a local stack.

The stack is small on purpose (an L4, 16 sequences at most, vLLM's unbounded waiting queue), so a
burst of 15x the scenario's rate saturates it and the contract's probe requests queue behind it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from drill.api import FaultContext, Selector
from drill.load.driver import LoadDriver, LoadPlan
from drill.spec.scenario import Scenario
from drill.testing import FaultCase, latency_above, run_fault_contract
from tests.faults.conftest import RunningStack, start_embedded, stop_embedded, wait_healthy

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SCENARIO = {
    "seed": 3,
    "arrival": {"process": "poisson", "rate": 1},
    "pools": [
        {
            "name": "chat",
            "input_tokens": {"dist": "fixed", "value": 100},
            "output_tokens": {"dist": "fixed", "value": 32},
        },
        {
            "name": "batch",
            "share": 0.0,
            "input_tokens": {"dist": "fixed", "value": 10},
            "output_tokens": {"dist": "fixed", "value": 4},
        },
    ],
}


@pytest.fixture(scope="module")
def small_stack(stack_dir: Path) -> Iterator[RunningStack]:
    stack = start_embedded(
        {
            "replicas": 1,
            "gpu": "l4",
            "engine": {"max_num_seqs": 16, "weight_load_time": "300ms"},
            "links": {"replica_proxies": False, "tp_proxies": False, "pp_proxies": False},
        },
        stack_dir,
    )
    try:
        yield stack
    finally:
        stop_embedded(stack)


@pytest.fixture()
def load(small_stack: RunningStack, tmp_path: Path) -> Iterator[LoadDriver]:
    scenario = Scenario.model_validate({**SCENARIO, "pools": SCENARIO["pools"][:1]})
    driver = LoadDriver(
        LoadPlan(
            scenario=scenario,
            target_url=small_stack.state.router,
            model=small_stack.info.model,
            duration_s=300,
            run_dir=tmp_path / "load",
            seed=3,
        )
    )
    driver.start()
    try:
        yield driver
    finally:
        driver.stop(drain_s=0)


def _burst_ended(driver: LoadDriver):
    def clean(ctx: FaultContext) -> None:
        if not driver.alive():
            return  # the generator died (with the runner): nothing sends any more
        status = ctx.load.burst_status(f"drill-{ctx.fault_id}")
        assert status["active"] == 0, f"burst still active: {status}"

    return clean


def test_queue_flood_contract_under_the_real_load_driver(
    small_stack: RunningStack, load: LoadDriver, tmp_path: Path
) -> None:
    wait_healthy(small_stack.state.router)
    case = FaultCase(
        "queue_flood",
        {"rate_multiplier": 15, "prompt_multiplier": 2},
        small_stack.info,
        effect=latency_above(0.4),
        load=load.control,
        clean=_burst_ended(load),
        runner_death=lambda: load.stop(drain_s=0),
        selector=Selector(pools=["chat"]),
        traffic={"rate_per_s": 4},
        recovery_timeout_s=40,
        settle_s=1.5,
        fault_id="flood",
    )
    report = run_fault_contract(case, tmp_path)
    print("\n".join(report.lines()))
    assert "extra requests sent" in report.evidence
    summary = load.stop()
    assert summary.bursts and all(not b.get("active") for b in summary.bursts.values()), summary.bursts


def test_queue_flood_refuses_to_run_without_a_load_driver(small_stack: RunningStack) -> None:
    from drill import registry
    from drill.api import InjectError
    from drill.runner.fault_schedule import resolve_targets

    fault_cls = registry.faults.get("queue_flood")
    fault = fault_cls(fault_cls.Params())
    ctx = FaultContext("no-load", small_stack.info, resolve_targets(fault, Selector(), small_stack.info, 0))
    with pytest.raises(InjectError, match="load driver"):
        fault.inject(ctx)
    fault.revert(ctx)  # nothing to end: a no-op, as after a runner crash
