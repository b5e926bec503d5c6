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
        effect=errors_above(0.3),
        clean=_serving,
        fault_id=kind.replace("_", "-"),
        max_partial_steps=1,
        sample_s=0.8,
        traffic={"rate_per_s": 15},
    )
    report = run_fault_contract(case, tmp_path)
    print("\n".join(report.lines()))
    assert len(report.clauses) == 5 and "killed (SIGKILL); back as pid" in report.evidence


def test_sigkill_of_the_runner_during_the_kv_faults_reverts_them(pd_stack, tmp_path: Path) -> None:
    """The crash matrix: a toxic on the KV link, a KV fault on the prefill worker and a killed decode worker, all
    journaled by a runner that is then SIGKILLed; the watchdog reverts all three from the journal."""
    state, info = pd_stack
    faults = [
        ["delay", "kv_transfer_delay", {"latency_ms": 100}],
        ["corrupt", "kv_block_corrupt", {"share": 0.5}],
        ["crash", "decode_crash", {"transfer_wait": "0s"}],
    ]
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
    try:
        assert runner.stdout.readline().strip() == "READY"
        assert httpx.get(f"{prefill.admin_url}/admin/kv", headers=token).json()["fault"]["name"] == "drill-corrupt"
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait(5)
        _wait(lambda: httpx.get(f"{prefill.admin_url}/admin/kv", headers=token).json()["fault"] is None, 10)
        proxy = httpx.get(f"{state.toxiproxy_url}/proxies/{state.name}-kv-p0-d1").json()
        _wait(lambda: not httpx.get(f"{state.toxiproxy_url}/proxies/{proxy['name']}/toxics").json(), 10)
    finally:
        runner.kill()
    _wait(lambda: (run_dir / "journal.jsonl").read_text().count('"event":"fault_reverted"') == 3, 30)
    assert '"by":"watchdog"' in (run_dir / "journal.jsonl").read_text()
    _serving(FaultContext("check", info, FaultTargets()))


def _wait(predicate, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout_s:g}s"
        time.sleep(0.05)
