"""A prefill worker and a decode worker in one loop: the handshake, the transfer, and what each KV fault does to it."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pd_harness import ADMIN

from drill.stack.kv.kv_faults import hits_share

pytestmark = pytest.mark.anyio

TRACE_ID, PARENT_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", 0x00F067AA0BA902B7
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_SPAN:016x}-01"  # the P/D router's attempt span, as both workers see it


async def _aggregated_text(pair, prompt: str = "the quick brown fox") -> str:
    """The same request on the prefill worker alone (it answers like an aggregated replica)."""
    response = await pair.http.post(
        f"{pair.prefill.server.url}/v1/completions", json={"prompt": prompt, "max_tokens": 12, "temperature": 0}
    )
    return response.json()["choices"][0]["text"]


async def test_the_decode_worker_answers_what_an_aggregated_replica_answers(pd_pair) -> None:
    exporter = InMemorySpanExporter()
    async with pd_pair(span_processor=SimpleSpanProcessor(exporter)) as pair:
        response = await pair.prefill_then_decode("req-a", headers={"traceparent": TRACEPARENT})
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["text"] == await _aggregated_text(pair)
        assert response.headers["x-drill-kv-transfer"].startswith("state=consumed")
        state = (await pair.http.get(f"{pair.prefill.server.url}/admin/kv", headers=ADMIN)).json()
    assert state["counts"]["consumed"] == 1 and state["counts"]["freed"] == 1 and state["pending"] == 0
    sides = _kv_spans(exporter)
    assert set(sides) == {"prefill", "decode"}  # one span a side, both in the request's trace (issue 19)
    for side in sides.values():
        assert format(side.context.trace_id, "032x") == TRACE_ID and side.parent.span_id == PARENT_SPAN
        assert side.status.is_ok
    prefill, decode = sides["prefill"].attributes, sides["decode"].attributes
    assert decode["drill.kv.transfer_id"] == prefill["drill.kv.transfer_id"] == "req-a"
    assert decode["drill.kv.state"] == "consumed" and prefill["drill.kv.state"] == "freed"
    assert decode["drill.kv.bytes"] == prefill["drill.kv.bytes"] == 4 * 131_072  # 4 tokens of llama-3-8b's KV
    assert decode["drill.kv.blocks"] == prefill["drill.kv.blocks"] == 1
    assert decode["drill.kv.wire_bytes"] == prefill["drill.kv.wire_bytes"] > 0
    assert prefill["drill.kv.consumer"] == "replica-1" and prefill["drill.kv.free_after_s"] == 480


@pytest.mark.parametrize(
    ("fault", "reached", "failure", "point"),
    [
        ({"mode": "fail", "point": "before_start"}, "requested", "error", "before_start"),
        ({"mode": "fail", "point": "in_flight"}, "in_flight", "error", "in_flight"),
        ({"mode": "fail", "point": "after_data"}, "in_flight", "error", "after_data"),
        ({"mode": "corrupt"}, "done", "link_closed", "after_data"),  # the reader's check refused the blocks
    ],
)
async def test_the_prefill_side_span_of_a_failed_transfer_names_where_it_failed(
    pd_pair, fault: dict, reached: str, failure: str, point: str
) -> None:
    exporter = InMemorySpanExporter()
    kv = {"lease": "300ms", "check_block_versions": True}
    async with pd_pair(span_processor=SimpleSpanProcessor(exporter), **kv) as pair:
        await pair.set_fault(**fault)
        response = await pair.prefill_then_decode("req-f", headers={"traceparent": TRACEPARENT})
        assert response.status_code == 500, response.text
        for _ in range(100):  # the holder ends its span when it sees the reader go
            if len(_kv_spans(exporter)) == 2:
                break
            await asyncio.sleep(0.02)
    sides = _kv_spans(exporter)
    prefill = sides["prefill"]
    assert format(prefill.context.trace_id, "032x") == TRACE_ID and prefill.parent.span_id == PARENT_SPAN
    assert not prefill.status.is_ok and prefill.status.description
    assert prefill.attributes["drill.kv.state"] == reached
    assert (prefill.attributes["drill.kv.failure"], prefill.attributes["drill.kv.failure_point"]) == (failure, point)
    assert not sides["decode"].status.is_ok and sides["decode"].attributes["drill.kv.transfer_id"] == "req-f"


async def test_a_stalled_transfer_s_prefill_side_span_ends_normally_when_its_blocks_are_sent(pd_pair) -> None:
    """The holder's part is done once the blocks are sent; the wait for the withheld completion is the reader's, so
    only the decode side's span is abnormal (the one the trace reader must name, tests/e2e/test_pd_drills.py)."""
    exporter = InMemorySpanExporter()
    async with pd_pair(span_processor=SimpleSpanProcessor(exporter), lease="300ms") as pair:
        await pair.set_fault(mode="stall")
        response = await pair.prefill_then_decode("req-s", headers={"traceparent": TRACEPARENT})
    assert response.status_code == 500, response.text
    sides = _kv_spans(exporter)
    prefill, decode = sides["prefill"], sides["decode"]
    assert prefill.status.is_ok and "drill.kv.failure" not in prefill.attributes
    assert prefill.attributes["drill.kv.stalled"] is True and prefill.attributes["drill.kv.state"] == "in_flight"
    assert prefill.attributes["drill.kv.wire_bytes"] > 0  # every block sent
    assert prefill.end_time < decode.end_time - 0.2e9  # it ended at the blocks, not with the 300 ms lease
    assert not decode.status.is_ok and decode.attributes["drill.kv.failure_point"] == "lease_expired"


def _kv_spans(exporter: InMemorySpanExporter) -> dict:
    """The finished ``kv_transfer`` spans by side (``drill.kv.role``); one a side."""
    spans = [s for s in exporter.get_finished_spans() if s.name == "kv_transfer"]
    sides = {s.attributes["drill.kv.role"]: s for s in spans}
    assert len(sides) == len(spans), spans
    return sides


async def test_corrupt_blocks_unchecked_are_http_200_with_other_tokens(pd_pair) -> None:
    async with pd_pair(check_block_versions=False) as pair:
        golden = await _aggregated_text(pair)
        await pair.set_fault(mode="corrupt", corruption="stale")
        response = await pair.prefill_then_decode("req-b")
    assert response.status_code == 200
    assert response.json()["choices"][0]["text"] != golden


async def test_corrupt_blocks_checked_fail_the_request_or_are_recomputed(pd_pair) -> None:
    async with pd_pair(check_block_versions=True) as pair:
        await pair.set_fault(mode="corrupt", corruption="foreign")
        failed = await pair.prefill_then_decode("req-c")
    assert failed.status_code == 500 and "block check failed" in failed.json()["error"]["message"]
    async with pd_pair(check_block_versions=True, failure_policy="recompute") as pair:
        golden = await _aggregated_text(pair)
        await pair.set_fault(mode="corrupt")
        recomputed = await pair.prefill_then_decode("req-d")
        counts = (await pair.http.get(f"{pair.decode.server.url}/admin/kv", headers=ADMIN)).json()["counts"]
    assert recomputed.status_code == 200 and recomputed.json()["choices"][0]["text"] == golden
    assert counts["recomputed"] == 1 and counts["block_check"] == 1


@pytest.mark.parametrize("point", ["before_start", "in_flight", "after_data"])
async def test_a_failed_transfer_fails_the_request_at_each_point(pd_pair, point: str) -> None:
    async with pd_pair() as pair:
        await pair.set_fault(mode="fail", point=point)
        response = await pair.prefill_then_decode(f"req-{point}")
    assert response.status_code == 500, response.text
    state = response.headers["x-drill-kv-transfer"]
    assert state.startswith("state=failed")


async def test_a_stalled_transfer_ends_at_the_lease(pd_pair) -> None:
    async with pd_pair(lease="300ms") as pair:
        await pair.set_fault(mode="stall")
        started = asyncio.get_running_loop().time()
        response = await pair.prefill_then_decode("req-stall")
        waited = asyncio.get_running_loop().time() - started
    assert response.status_code == 500 and "lease of 0.3s expired" in response.json()["error"]["message"]
    assert 0.3 <= waited < 3.0


async def test_without_a_lease_a_stalled_transfer_waits_until_the_client_goes(pd_pair) -> None:
    async with pd_pair(lease=None) as pair:
        await pair.set_fault(mode="stall")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(pair.prefill_then_decode("req-forever"), 1.5)
        for _ in range(100):  # the client's close aborts the load (vLLM's abort of an abandoned request)
            held = (await pair.http.get(f"{pair.prefill.server.url}/admin/kv", headers=ADMIN)).json()
            if held["counts"]["failed"]:
                break
            await asyncio.sleep(0.02)
        loads = (await pair.http.get(f"{pair.decode.server.url}/admin/kv", headers=ADMIN)).json()
    assert held["counts"]["failed"] == 1 and held["in_flight"] == 0
    assert loads["counts"]["aborted"] == 1 and loads["in_flight"] == 0


async def test_a_share_of_transfers_is_hit_as_the_seed_decides(pd_pair) -> None:
    ids = [f"req-{i}" for i in range(12)]
    expected = [i for i in ids if hits_share(7, i, 0.5)]
    assert 0 < len(expected) < len(ids)
    async with pd_pair(check_block_versions=True) as pair:
        await pair.set_fault(mode="corrupt", share=0.5, seed=7)
        statuses = {i: (await pair.prefill_then_decode(i)).status_code for i in ids}
    assert [i for i, status in statuses.items() if status == 500] == expected


async def test_the_prefill_worker_says_how_much_modelled_link_time_its_transfer_in_flight_has_left(pd_pair) -> None:
    """``GET /admin/kv``'s ``longest_left_s``: what ``prefill_crash`` waits on to land its kill mid-transfer."""
    modelled_s = 4 * 131_072 * 8 / (0.004 * 1e9)  # 4 tokens of llama-3-8b's KV over a 4 Mb/s link: 1.05 s
    async with pd_pair(link_gbps=0.004) as pair:
        url = f"{pair.prefill.server.url}/admin/kv"
        idle = (await pair.http.get(url, headers=ADMIN)).json()
        load = asyncio.create_task(pair.prefill_then_decode("req-slow-link"))
        seen = []
        while not load.done():
            state = (await pair.http.get(url, headers=ADMIN)).json()
            if state["in_flight"]:
                seen.append(state["longest_left_s"])
            await asyncio.sleep(0.05)
        response = await load
        after = (await pair.http.get(url, headers=ADMIN)).json()
    assert response.status_code == 200 and response.headers["x-drill-kv-transfer"].startswith("state=consumed")
    assert idle["longest_left_s"] == after["longest_left_s"] == 0 and after["in_flight"] == 0
    assert len(seen) >= 5 and 0.5 * modelled_s < max(seen) <= modelled_s, seen
    assert seen == sorted(seen, reverse=True) and min(seen) < 0.5 * modelled_s, seen  # it counts down
