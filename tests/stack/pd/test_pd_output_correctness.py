"""``output_correctness`` catches the 200-with-wrong-tokens failure of a 1P:1D stack (real processes, real load).

Block versions unchecked, ``kv_block_corrupt`` (foreign blocks, half the transfers) makes the decode worker answer
HTTP 200 with other tokens. The same seeded load runs twice through the router, clean (the baseline) and under the
fault: same bodies, new request ids. The check must fail and name exactly the requests whose transfers the fault
hit, which ``sha256(seed:transfer id)`` against ``share`` says (the transfer id is the request's ``X-Request-Id``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from drill.api import Status
from drill.checks.answers import OutputCorrectnessCheck, OutputCorrectnessParams
from drill.stack.kv.kv_faults import hits_share
from tests.checks.rundir_kit import RunKit
from tests.load.loadkit import run_load, scenario

pytestmark = pytest.mark.integration

CONFIG = {
    "engine": {"weight_load_time": "200ms"},
    "router": {"health_check_interval": "250ms"},
    "topology": {"prefill": 1, "decode": 1, "kv_transfer": {"lease": "2s", "check_block_versions": False}},
}
SEED, SHARE = 7, 0.5


@pytest.fixture
def unchecked_stack(tmp_path: Path) -> Iterator[object]:
    from drill.stack.config import parse_stack_config
    from drill.stack.supervision.launcher import start_stack, stop_stack

    name = f"pdoc{uuid.uuid4().hex[:6]}"
    state = start_stack(parse_stack_config(CONFIG), name=name, state_dir=tmp_path / "state", timeout_s=120)
    try:
        yield state
    finally:
        stop_stack(name, state_dir=tmp_path / "state")


def test_unchecked_corrupt_blocks_fail_output_correctness_naming_exactly_the_hit_requests(
    unchecked_stack, tmp_path: Path
) -> None:
    state = unchecked_stack
    prefill = state.replicas[0]
    admin = {"Authorization": f"Bearer {state.admin_token}"}
    model = httpx.get(f"{prefill.direct_url}/v1/models").json()["data"][0]["id"]
    sc = scenario(8, inp=24, out=8, seed=3).model_copy(update={"model": model})
    clean = run_load(state.router, sc, 2.0, tmp_path / "clean", capture_outputs=True)
    fault = {"name": "t", "mode": "corrupt", "corruption": "foreign", "share": SHARE, "seed": SEED}
    assert httpx.put(f"{prefill.admin_url}/admin/kv/fault", json=fault, headers=admin).status_code == 200
    try:
        corrupt = run_load(state.router, sc, 2.0, tmp_path / "corrupt", capture_outputs=True)
    finally:
        httpx.delete(f"{prefill.admin_url}/admin/kv/fault?name=t", headers=admin)

    assert clean.records and all(r.ok and r.output_digest for r in clean.records)
    assert corrupt.records and all(r.status == 200 and r.ok for r in corrupt.records)  # nothing errors
    kit = RunKit(tmp_path / "run", t0=clean.t0)
    kit.phases(baseline=(0, corrupt.t0 - clean.t0 - 0.1), fault=(corrupt.t0 - clean.t0, corrupt.t0 - clean.t0 + 60))
    kit.records.extend(clean.records + corrupt.records)
    verdict = OutputCorrectnessCheck(OutputCorrectnessParams(judged_phases=("fault",))).evaluate(kit.evidence())

    hit = sorted(r.request_id for r in corrupt.records if hits_share(SEED, r.request_id, SHARE))
    assert 0 < len(hit) < len(corrupt.records), hit
    assert verdict.status is Status.FAIL, verdict.message
    assert verdict.observed["compared"] == len(corrupt.records)
    assert verdict.observed["mismatched_request_ids"] == hit
    assert verdict.observed["mismatched_http_200"] == len(hit)
    assert "first differing token #" in verdict.message
