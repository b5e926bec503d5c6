"""prefill_crash lands its kill in a transfer with modelled link time left: a transfer about to complete could
finish between the poll and the signal, and the kill would land between transfers (the flake of
tests/e2e/test_pd_drills.py that CI met). The worker's ``GET /admin/kv`` is answered at its HTTP transport seam."""

from __future__ import annotations

import time

import httpx
import pytest

from drill import registry
from drill.api import FaultContext, FaultTargets, ReplicaRef, TargetInfo
from drill.backends.stack_admin import StackAdminClient

WORKER = ReplicaRef(
    name="replica-0",
    index=0,
    url="http://127.0.0.1:9",
    admin_url="http://127.0.0.1:9",
    admin_token="token-123",
    role="prefill",
)
TARGET = TargetInfo(kind="embedded", base_url="http://127.0.0.1:9", replicas=[WORKER])


def _wait(answers: list[tuple[int, float | None]], wait_s: float = 2.0) -> tuple[str | None, int]:
    """What ``prefill_crash``'s wait says it lands in, and how many polls it took, for a worker answering
    ``(in_flight, longest_left_s)`` in turn (the last one for ever)."""
    polls = []

    def answer(request: httpx.Request) -> httpx.Response:
        in_flight, left = answers[min(len(polls), len(answers) - 1)]
        polls.append(request.url.path)
        body = {"role": "prefill", "counts": {}, "in_flight": in_flight}
        return httpx.Response(200, json=body if left is None else {**body, "longest_left_s": left})

    fault_cls = registry.faults.get("prefill_crash")
    fault = fault_cls(fault_cls.Params.model_validate({"transfer_wait": f"{wait_s}s", "transfer_left": "50ms"}))
    ctx = FaultContext("crash", TARGET, FaultTargets(replicas=[WORKER]), timeout_s=1)
    client = StackAdminClient(WORKER.admin_url, WORKER.admin_token, transport=httpx.MockTransport(answer))
    ctx._cache[f"stack_admin:{WORKER.name}"] = client
    said = fault._wait_for_transfer(ctx, WORKER, time.monotonic() + wait_s)
    assert set(polls) == {"/admin/kv"}
    return said, len(polls)


def test_a_transfer_about_to_complete_is_passed_over_for_one_with_time_left() -> None:
    said, polls = _wait([(1, 0.004), (0, 0.0), (2, 0.020), (1, 0.120)])
    assert polls == 4
    assert (
        said
        == "killed with 1 KV transfer(s) in flight on replica-0, the longest with 120 ms of its modelled link time left"
    )


@pytest.mark.realtime  # a 0.3 s wait must end within 2 s of wall time
def test_with_no_transfer_with_time_left_in_time_the_kill_lands_in_what_is_in_flight_and_says_so() -> None:
    started = time.monotonic()
    said, polls = _wait([(0, 0.0), (1, 0.010)], wait_s=0.3)
    assert 0.3 <= time.monotonic() - started < 2.0 and polls > 2
    assert said == (
        "killed with 1 KV transfer(s) in flight on replica-0, the longest with 10 ms of its modelled link time left "
        "(none had 50 ms left in time)"
    )


def test_nothing_in_flight_says_nothing_and_a_worker_that_does_not_report_time_left_is_taken_at_its_word() -> None:
    assert _wait([(0, 0.0)], wait_s=0.2)[0] is None
    said, polls = _wait([(0, None), (3, None)])
    assert (said, polls) == ("killed with 3 KV transfer(s) in flight on replica-0", 2)
