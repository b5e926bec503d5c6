"""``priority-isolation`` on real vLLM: a batch flood beside interactive chat, FCFS (vLLM's default) against
``--scheduling-policy priority`` with the batch pool at priority 10 (the catalogue drill's candidate)."""

from __future__ import annotations

import pytest

from tests.vllm import catalogue
from tests.vllm.conftest import ServerPool
from tests.vllm.drills import DrillRun, run_drill
from tests.vllm.servers import DEFAULT, PRIORITY, PRIORITY_FLAGS

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

SLO_MS = 1000  # the fitted interactive TTFT p95 SLO (tests/vllm/catalogue.py, priority_isolation)


@pytest.fixture(scope="module")
def priority_runs(vllm_servers: ServerPool, vllm_otlp_port: int, tmp_path_factory) -> tuple[DrillRun, DrillRun]:
    servers = vllm_servers.get_many({DEFAULT: (), PRIORITY: PRIORITY_FLAGS}, isolated=True)
    folder = tmp_path_factory.mktemp("priority-isolation")
    fcfs = run_drill(catalogue.priority_isolation(servers[DEFAULT].url, vllm_otlp_port, priority=False), folder / "a")
    prio = run_drill(catalogue.priority_isolation(servers[PRIORITY].url, vllm_otlp_port, priority=True), folder / "b")
    print(f"\npriority-isolation on vLLM: FCFS {fcfs.statuses()} ({fcfs.wall_s:.0f} s)")
    print(f"priority: {prio.statuses()} ({prio.wall_s:.0f} s)")
    return fcfs, prio


def _ttft_p95(run: DrillRun, check: str) -> float:
    return run.verdicts[check]["observed"]["interactive.ttft_p95"]


def test_under_fcfs_the_batch_flood_breaks_the_interactive_slo_and_nothing_fails(priority_runs) -> None:
    fcfs, _ = priority_runs
    assert fcfs.status("baseline-slo") == "PASS", fcfs.verdicts["baseline-slo"]
    assert fcfs.status("batch-not-broken") == "PASS", fcfs.verdicts["batch-not-broken"]
    assert fcfs.status("interactive-isolated") == "FAIL", fcfs.verdicts["interactive-isolated"]
    assert _ttft_p95(fcfs, "interactive-isolated") > SLO_MS


def test_priority_scheduling_keeps_the_interactive_slo_while_the_batch_waits(priority_runs) -> None:
    fcfs, prio = priority_runs
    print(f"interactive TTFT p95 in the flood: FCFS {_ttft_p95(fcfs, 'interactive-isolated'):.0f} ms, "
          f"priority {_ttft_p95(prio, 'interactive-isolated'):.0f} ms")  # fmt: skip
    assert prio.status("batch-not-broken") == "PASS", prio.verdicts["batch-not-broken"]
    assert prio.status("interactive-isolated") == "PASS", prio.verdicts["interactive-isolated"]
    assert _ttft_p95(prio, "interactive-isolated") < _ttft_p95(fcfs, "interactive-isolated") / 2
