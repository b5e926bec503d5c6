"""The KV connector's metrics on a P/D worker's ``/metrics``: vLLM's NIXL names, moved by the actual transfers."""

from __future__ import annotations

import asyncio
import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from drill.report.quantities import metric_used, phase_quantities
from drill.report.serving import serving_side
from drill.rundir.evidence import RunEvidence
from drill.runner.scraper import parse_samples

pytestmark = pytest.mark.anyio

BYTES = 4 * 131_072  # 4 prompt tokens of llama-3-8b's KV cache (the default model preset)


async def _samples(pair, side: str) -> dict[str, float]:
    """``name{labels}`` -> value of one worker's ``/metrics`` (label values only, in order)."""
    worker = pair.decode if side == "decode" else pair.prefill
    text = (await pair.http.get(f"{worker.server.url}/metrics")).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            extra = sample.labels.get("point") or sample.labels.get("le")
            out[f"{sample.name}{'{' + extra + '}' if extra else ''}"] = sample.value
    return out


async def test_a_transfer_that_succeeds_is_observed_on_the_decode_side(pd_pair) -> None:
    async with pd_pair() as pair:
        before = await _samples(pair, "decode")
        assert (await pair.prefill_then_decode("req-ok")).status_code == 200
        after = await _samples(pair, "decode")
        prefill = await _samples(pair, "prefill")
        text = (await pair.http.get(f"{pair.decode.server.url}/metrics")).text
    labels = {
        s.name: set(s.labels) - {"le"} for f in text_string_to_metric_families(text) for s in f.samples
    }  # vLLM's per-engine labels on each connector metric
    assert labels["vllm:nixl_xfer_time_seconds_sum"] == {"model_name", "engine"}
    assert labels["vllm:nixl_num_failed_transfers_total"] == {"model_name", "engine"}
    assert labels["drill:kv_transfer_failures_total"] == {"model_name", "engine", "point"}
    assert before["vllm:nixl_xfer_time_seconds_count"] == 0 and after["vllm:nixl_xfer_time_seconds_count"] == 1
    assert 0 < after["vllm:nixl_xfer_time_seconds_sum"] < 5
    assert after["vllm:nixl_bytes_transferred_count"] == 1 and after["vllm:nixl_bytes_transferred_sum"] == BYTES
    assert after["vllm:nixl_bytes_transferred_bucket{524288.0}"] == 1  # 2**19: the bucket the 512 KiB fall in
    assert after["vllm:nixl_bytes_transferred_bucket{131072.0}"] == 0
    assert after["vllm:nixl_num_failed_transfers_total"] == 0 and after["drill:kv_transfers_in_flight"] == 0
    assert "vllm:nixl_xfer_time_seconds_count" not in prefill  # the consumer records the transfer, as in vLLM
    assert prefill["vllm:nixl_num_kv_expired_reqs_total"] == 0 and prefill["drill:kv_transfers_held"] == 0


@pytest.mark.parametrize(
    ("fault", "point"),
    [
        ({"mode": "fail", "point": "before_start"}, "before_start"),
        ({"mode": "fail", "point": "in_flight"}, "in_flight"),
        ({"mode": "fail", "point": "after_data"}, "after_data"),
        ({"mode": "stall"}, "lease_expired"),
        ({"mode": "corrupt", "corruption": "stale"}, "block_check"),
    ],
)
async def test_a_failed_transfer_is_counted_once_at_the_point_it_broke(pd_pair, fault: dict, point: str) -> None:
    async with pd_pair(lease="300ms", check_block_versions=True) as pair:
        await pair.set_fault(**fault)
        assert (await pair.prefill_then_decode(f"req-{point}")).status_code == 500
        after = await _samples(pair, "decode")
    assert after["vllm:nixl_num_failed_transfers_total"] == 1
    assert after[f"drill:kv_transfer_failures_total{{{point}}}"] == 1
    assert sum(v for k, v in after.items() if k.startswith("drill:kv_transfer_failures_total")) == 1
    assert after["vllm:nixl_xfer_time_seconds_count"] == 0  # vLLM observes successful transfers only
    assert after["drill:kv_transfers_in_flight"] == 0


async def test_a_stalled_transfer_without_a_lease_stays_in_flight_and_held(pd_pair) -> None:
    async with pd_pair(lease=None) as pair:
        await pair.set_fault(mode="stall")
        stuck = asyncio.create_task(pair.prefill_then_decode("req-stuck"))
        for _ in range(100):
            decode = await _samples(pair, "decode")
            if decode["drill:kv_transfers_in_flight"] == 1:
                break
            await asyncio.sleep(0.02)
        prefill = await _samples(pair, "prefill")
        stuck.cancel()
    assert decode["drill:kv_transfers_in_flight"] == 1 and decode["vllm:nixl_num_failed_transfers_total"] == 0
    assert prefill["drill:kv_transfers_held"] == 1


async def test_a_transfer_never_read_counts_as_expired_on_the_prefill_side(pd_pair) -> None:
    async with pd_pair(free_after="100ms") as pair:
        body = {"prompt": "never read", "max_tokens": 1, "kv_transfer_params": {"do_remote_decode": True}}
        assert (await pair.http.post(f"{pair.prefill.server.url}/v1/completions", json=body)).status_code == 200
        held = await _samples(pair, "prefill")
        await asyncio.sleep(0.2)
        expired = await _samples(pair, "prefill")
    assert held["drill:kv_transfers_held"] == 1 and held["vllm:nixl_num_kv_expired_reqs_total"] == 0
    assert expired["drill:kv_transfers_held"] == 0 and expired["vllm:nixl_num_kv_expired_reqs_total"] == 1


async def test_the_metric_map_reads_the_kv_quantities_from_the_workers_scrapes(pd_pair, tmp_path) -> None:
    lines: list[dict] = []

    async def scrape(t: float) -> None:
        for side, worker in (("prefill", pair.prefill), ("decode", pair.decode)):
            text = (await pair.http.get(f"{worker.server.url}/metrics")).text
            lines.append({"ts": 1000.0 + t, "source": side, "url": "", "ok": True, "samples": parse_samples(text)})

    async with pd_pair() as pair:
        await scrape(0)
        assert (await pair.prefill_then_decode("req-1")).status_code == 200
        await pair.set_fault(mode="fail", point="after_data")
        assert (await pair.prefill_then_decode("req-2")).status_code == 500
        await scrape(2)
    journal = [
        {"seq": 1, "event": "phase_started", "ts": 1000.0, "phase": "fault", "planned_s": 3},
        {"seq": 2, "event": "phase_ended", "ts": 1003.0, "phase": "fault", "elapsed_s": 3},
    ]
    (tmp_path / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in journal))
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    evidence = RunEvidence(tmp_path)
    q = phase_quantities(evidence)["fault"]
    assert q["kv_transfer_bytes"] == BYTES  # one transfer's bytes: the failed one moved none that count
    assert q["kv_transfer_failures"] == 1
    assert q["kv_transfers_pending"] == 0
    assert q["kv_transfer_seconds"] is not None and 0 < q["kv_transfer_seconds"] < 5
    assert metric_used(evidence, "kv_transfer_seconds") == "vllm:nixl_xfer_time_seconds"
    assert metric_used(evidence, "kv_transfers_pending") == "drill:kv_transfers_in_flight"
    (row,) = serving_side(evidence, ("fault",)).kv_transfers  # the report's KV-transfer line
    assert (row.phase, row.bytes, row.failures, row.pending_max) == ("fault", BYTES, 1, 0)
    assert row.mean_ms == round(q["kv_transfer_seconds"] * 1000, 3)
