"""Acceptance, over the whole stack as processes (router → Toxiproxy → replica): requests the router gives up
on (its upstream timeout, 504) are aborted by the replica at once, freeing its queue and KV blocks, and counted
as ``vllm:request_success_total{finished_reason="abort"}``; with ``abort_abandoned: false`` the replica goes on
computing them (what the unbounded-queue drill showed before: a backlog that outlived the flood)."""

from __future__ import annotations

import re
import threading
import time

import httpx
import pytest

from tests.stack.stack_probes import admin_get, wait_until

pytestmark = [pytest.mark.integration]

ABANDONED = 6
BODY = {"model": "llama-3-8b", "prompt": "a long answer nobody will wait for", "max_tokens": 3000, "ignore_eos": True}


def _stack(abort_abandoned: bool) -> dict:
    return {
        "replicas": 1,
        "abort_abandoned": abort_abandoned,
        "engine": {"weight_load_time": "0s", "max_num_seqs": 1},
        "router": {"health_check_interval": "200ms", "retries": {"timeout": "1s"}},
    }


def _send_abandoned(router: str) -> tuple[list[int], float]:
    statuses: list[int] = []

    def send() -> None:
        statuses.append(httpx.post(f"{router}/v1/completions", json=BODY, timeout=30, trust_env=False).status_code)

    threads = [threading.Thread(target=send) for _ in range(ABANDONED)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return statuses, time.monotonic()


def _engine(state) -> dict:
    return admin_get(f"{state.replicas[0].admin_url}/admin/state", state.admin_token)["engine"]


def _aborted(state) -> float:
    text = httpx.get(f"{state.replicas[0].url}/metrics", timeout=10, trust_env=False).text
    match = re.search(r'vllm:request_success_total\{[^}]*finished_reason="abort"[^}]*\} (\S+)', text)
    return float(match.group(1)) if match else 0.0


def test_requests_the_router_gave_up_on_are_aborted_by_the_replica(stack_factory) -> None:
    state = stack_factory(_stack(abort_abandoned=True))
    statuses, answered = _send_abandoned(state.router)
    assert statuses == [504] * ABANDONED
    wait_until(lambda: _engine(state)["running"] + _engine(state)["waiting"] == 0, 2, "the replica to abort them")
    print(f"replica empty {time.monotonic() - answered:.3f} s after the last 504")
    assert _aborted(state) == ABANDONED


def test_with_abort_abandoned_off_the_replica_keeps_computing_them(stack_factory) -> None:
    state = stack_factory(_stack(abort_abandoned=False))
    statuses, _ = _send_abandoned(state.router)
    assert statuses == [504] * ABANDONED
    time.sleep(0.5)
    engine = _engine(state)
    assert (engine["running"], engine["waiting"]) == (1, ABANDONED - 1) and _aborted(state) == 0
