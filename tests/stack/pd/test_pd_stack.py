"""A 1P:1D stack as ``drill stack up`` starts it (real processes, the real Toxiproxy server): requests through the
router, and every KV fault through the fault contract (drill.testing) under live traffic."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from drill.api import FaultContext, FaultTargets, TargetInfo
from drill.testing import FaultCase, errors_above, latency_above, run_fault_contract
from tests.faults.conftest import wait_healthy

pytestmark = pytest.mark.integration

CONFIG = {
    "engine": {"weight_load_time": "200ms"},
    "router": {"health_check_interval": "250ms"},
    "topology": {"prefill": 1, "decode": 1, "kv_transfer": {"lease": "1s", "check_block_versions": True}},
}


@pytest.fixture(scope="module")
def pd_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[object, TargetInfo]]:
    from drill.stack.config import parse_stack_config
    from drill.stack.supervision.launcher import start_stack, stop_stack
    from drill.targets.embedded import EmbeddedStack, info_from_state

    state_dir, name, config = (
        tmp_path_factory.mktemp("pd-stack"),
        f"pd{uuid.uuid4().hex[:6]}",
        parse_stack_config(CONFIG),
    )
    state = start_stack(config, name=name, state_dir=state_dir, timeout_s=120)
    try:
        yield state, info_from_state(state, EmbeddedStack.static_capabilities(config))
    finally:
        stop_stack(name, state_dir=state_dir)


def test_requests_through_the_router_are_prefilled_then_decoded_over_the_proxied_kv_link(pd_stack) -> None:
    state, info = pd_stack
    prefill, decode = state.replicas
    assert (prefill.role, decode.role) == ("prefill", "decode")
    link = f"{state.name}-kv-p0-d1"
    assert [ln.proxy for ln in decode.links] == [link] and [ln.proxy for ln in prefill.links] == [link]
    body = {"model": info.model, "prompt": "a disaggregated hello", "max_tokens": 8, "temperature": 0}
    aggregated = httpx.post(f"{prefill.direct_url}/v1/completions", json=body, timeout=10).json()["choices"][0]["text"]
    with httpx.Client(timeout=10, trust_env=False) as http:
        answers = [http.post(f"{state.router}/v1/completions", json=body) for _ in range(3)]
        streamed = http.post(f"{state.router}/v1/completions", json={**body, "stream": True})
        loads = http.get(f"{decode.admin_url}/admin/kv", headers={"Authorization": f"Bearer {state.admin_token}"})
        held = http.get(f"{prefill.admin_url}/admin/kv", headers={"Authorization": f"Bearer {state.admin_token}"})
        proxies = http.get(f"{state.toxiproxy_url}/proxies").json()
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert {a.json()["choices"][0]["text"] for a in answers} == {aggregated}
    assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")
    assert loads.json()["counts"]["loaded"] == 4 and loads.json()["counts"]["failed"] == 0
    assert held.json()["counts"]["consumed"] == 4 and held.json()["pending"] == 0
    assert proxies[link]["upstream"] == prefill.links[0].upstream


def test_the_live_workers_export_the_kv_connector_metrics_the_runner_scrapes(pd_stack) -> None:
    from drill.runner.scraper import parse_samples  # lazy: the runner's parser, as metrics.jsonl records them

    state, info = pd_stack
    prefill, decode = state.replicas
    body = {"model": info.model, "prompt": "metrics over the kv link", "max_tokens": 4, "temperature": 0}

    def totals(url: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for key, value in parse_samples(httpx.get(f"{url}/metrics", timeout=10).text).items():
            out[key.split("{", 1)[0]] = out.get(key.split("{", 1)[0], 0.0) + value
        return out

    before = totals(decode.direct_url)
    with httpx.Client(timeout=10, trust_env=False) as http:
        assert [http.post(f"{state.router}/v1/completions", json=body).status_code for _ in range(2)] == [200, 200]
    after, held = totals(decode.direct_url), totals(prefill.direct_url)
    assert after["vllm:nixl_xfer_time_seconds_count"] - before["vllm:nixl_xfer_time_seconds_count"] == 2
    assert after["vllm:nixl_bytes_transferred_sum"] > before["vllm:nixl_bytes_transferred_sum"]
    assert after["vllm:nixl_num_failed_transfers_total"] == before["vllm:nixl_num_failed_transfers_total"]
    assert after["drill:kv_transfers_in_flight"] == 0 and held["drill:kv_transfers_held"] == 0
    assert "vllm:nixl_xfer_time_seconds_count" not in held  # the prefill side records no transfer time


def test_the_plain_endpoints_answer_through_the_pd_router_as_through_the_aggregated_one(pd_stack) -> None:
    """``GET /v1/models`` and ``/version`` go to a decode worker (no prefill leg: they have no body), as the
    aggregated router sends them to a replica; ``/health`` and ``/metrics`` are the router's own."""
    state, info = pd_stack
    decode = state.replicas[1]
    with httpx.Client(timeout=10, trust_env=False) as http:
        models, version = http.get(f"{state.router}/v1/models"), http.get(f"{state.router}/version")
        served = http.get(f"{decode.direct_url}/v1/models").json()
        health, metrics = http.get(f"{state.router}/health"), http.get(f"{state.router}/metrics")
    assert models.status_code == 200, models.text
    assert models.json() == served and [m["id"] for m in served["data"]] == [info.model]
    assert version.status_code == 200 and "version" in version.json()
    assert health.status_code == 200
    assert metrics.status_code == 200 and "drill_router_replica_healthy" in metrics.text


CASES = {
    "kv_transfer_delay": ({"latency_ms": 300}, latency_above(0.2)),
    "kv_transfer_stall": ({}, errors_above(0.5)),  # the lease (1 s) ends each stalled transfer: 500
    "kv_transfer_stall-toxiproxy": ({"method": "toxiproxy"}, errors_above(0.5)),
    "kv_transfer_fail": ({"point": "after_data"}, errors_above(0.5)),
    "kv_block_corrupt": ({"corruption": "foreign"}, errors_above(0.5)),  # block versions are checked
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(CASES))
def test_kv_fault_contract_on_a_pd_stack(kind: str, pd_stack, tmp_path: Path) -> None:
    _, info = pd_stack
    params, effect = CASES[kind]
    case = FaultCase(
        kind.split("-")[0],
        params,
        info,
        effect=effect,
        fault_id=kind.replace("_", "-"),
        max_partial_steps=2,
        sample_s=0.8,
        traffic={"rate_per_s": 15},
    )
    report = run_fault_contract(case, tmp_path)
    print("\n".join(report.lines()))
    assert len(report.clauses) == 5 and report.faulted is not None and report.recovered is not None


def _serving(ctx) -> None:
    """A crash cannot be undone, only recovered from: clean = every worker serves again."""
    for replica in ctx.target.replicas:
        wait_healthy(replica.direct_url)


#: The crash faults of one role each, through the same kit (a crash is recovered from, not undone).
CRASH_KINDS = ("prefill_crash", "decode_crash")


@pytest.mark.slow
@pytest.mark.parametrize("kind", CRASH_KINDS)
def test_role_crash_contract_on_a_pd_stack(kind: str, pd_stack, tmp_path: Path) -> None:
    _, info = pd_stack
    case = FaultCase(
        kind,
        {"transfer_wait": "1s"},
        info,
        # the requests sent to the killed worker before its restart fail: 25-50% of a 0.8 s sample measured
        effect=errors_above(0.15),
        clean=_serving,
        fault_id=kind.replace("_", "-"),
        max_partial_steps=1,
        sample_s=0.8,
        traffic={"rate_per_s": 15},
    )
    report = run_fault_contract(case, tmp_path)
    print("\n".join(report.lines()))
    assert len(report.clauses) == 5 and "killed (SIGKILL); back as pid" in report.evidence


#: The crash matrix's sets of faults, each journaled by one runner that is then SIGKILLed: a prefill worker holds
#: one KV fault at a time, so the faults set through ``/admin/kv`` are spread over the sets; the toxics on the KV
#: link and the crashes go beside them. Together: every P/D fault.
CRASH_MATRIX = {
    "delay-corrupt-decode": [
        ["delay", "kv_transfer_delay", {"latency_ms": 100}],
        ["corrupt", "kv_block_corrupt", {"share": 0.5}],
        ["crash", "decode_crash", {"transfer_wait": "0s"}],
    ],
    # the crash first: the toxic does not need the new process's admin API, which starts after its weights load
    "prefill-crash-toxic-stall": [
        ["crash", "prefill_crash", {"transfer_wait": "0s"}],
        ["stall", "kv_transfer_stall", {"method": "toxiproxy"}],
    ],
    "stall": [["stall", "kv_transfer_stall", {}]],
    "fail": [["fail", "kv_transfer_fail", {"point": "in_flight"}]],
}


@pytest.mark.parametrize("case", list(CRASH_MATRIX))
def test_sigkill_of_the_runner_during_the_kv_faults_reverts_them(case: str, pd_stack, tmp_path: Path) -> None:
    """The crash matrix: KV faults (a toxic on the KV link, a fault set on the prefill worker, a killed worker)
    journaled by a runner that is then SIGKILLed; the watchdog reverts every one from the journal."""
    state, info = pd_stack
    faults = CRASH_MATRIX[case]
    (tmp_path / "target.json").write_text(info.model_dump_json())
    (tmp_path / "faults.json").write_text(json.dumps(faults))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    runner = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("pd_fake_runner.py")),
            str(run_dir),
            *(str(tmp_path / f) for f in ("target.json", "faults.json")),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
    )
    prefill = state.replicas[0]
    token = {"Authorization": f"Bearer {state.admin_token}"}
    admin = [f"drill-{fault_id}" for fault_id, kind, params in faults if _sets_kv_fault(kind, params)]
    toxics = [kind for _, kind, params in faults if not _sets_kv_fault(kind, params) and "crash" not in kind]
    proxy = f"{state.toxiproxy_url}/proxies/{state.name}-kv-p0-d1/toxics"
    try:
        assert runner.stdout.readline().strip() == "READY"
        wait_healthy(prefill.direct_url)  # a crashed prefill worker is back (its admin API too)
        assert _kv_fault(prefill.admin_url, token) == (admin[0] if admin else None)
        assert bool(httpx.get(proxy).json()) == bool(toxics)
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait(5)
        _wait(lambda: _kv_fault(prefill.admin_url, token) is None, 10)
        _wait(lambda: not httpx.get(proxy).json(), 10)
    finally:
        runner.kill()
    _wait(lambda: (run_dir / "journal.jsonl").read_text().count('"event":"fault_reverted"') == len(faults), 30)
    assert '"by":"watchdog"' in (run_dir / "journal.jsonl").read_text()
    _serving(FaultContext("check", info, FaultTargets()))


def _sets_kv_fault(kind: str, params: dict) -> bool:
    """Whether the fault is set on the prefill worker through ``PUT /admin/kv/fault``."""
    return kind in ("kv_block_corrupt", "kv_transfer_fail") or (
        kind == "kv_transfer_stall" and params.get("method") != "toxiproxy"
    )


def _kv_fault(admin_url: str, token: dict[str, str]) -> str | None:
    fault = httpx.get(f"{admin_url}/admin/kv", headers=token).json()["fault"]
    return None if fault is None else fault["name"]


def _wait(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout_s:g}s"
        time.sleep(0.05)
