"""TP/PP links: real rank processes over real TCP through the real Toxiproxy, vs the link model."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from drill.api import LinkKind
from drill.backends.toxiproxy import Stream, ToxiproxyClient
from drill.errors import StackError
from drill.stack.interconnect.link_model import LinkToxic, predict_step_increase
from drill.stack.interconnect.step_exchange import ExchangePlan, NoopInterconnect
from drill.stack.interconnect.tcp import InterconnectLaunch, TcpInterconnect, connect, micro_batches, scaled_bytes
from drill.stack.launch import PeerLaunch
from drill.stack.supervision.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


def _links(toxiproxy: ToxiproxyClient, kind: str, count: int) -> tuple[PeerLaunch, ...]:
    """``count`` links of one kind, each behind its own Toxiproxy proxy."""
    links = []
    for rank in range(1, count + 1):
        listen = f"127.0.0.1:{free_port()}"
        proxy = toxiproxy.create_proxy(f"{kind}{rank}", listen)
        links.append(PeerLaunch(kind=kind, rank=rank, listen=listen, connect=proxy.listen, proxy=proxy.name))
    return tuple(links)


async def _median_excess(interconnect: TcpInterconnect, plan: ExchangePlan, samples: int = 5) -> float:
    return statistics.median([await interconnect.exchange(plan) for _ in range(samples)])


def _pids_alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        state = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}/stat").exists() else "X"
        if state not in ("Z", "X"):
            alive.append(pid)
    return alive


def test_scaling_and_micro_batches() -> None:
    assert scaled_bytes(0, 1 / 1024) == 0
    assert scaled_bytes(1, 1 / 1024) == 1  # never rounds a real message away
    assert scaled_bytes(8 * 1024 * 1024, 1 / 1024) == 8192
    assert scaled_bytes(10**12, 1.0) == 1 << 20  # capped per message
    assert micro_batches(1, 1) == 1 and micro_batches(4, 2) == 2 and micro_batches(0, 3) == 0


def test_prediction_arithmetic() -> None:
    plan = ExchangePlan(tp_rounds=64, tp_bytes_per_round=8 * 1024 * 1024, pp_transfers=1, pp_bytes_per_transfer=0)
    latency = LinkToxic(LinkKind.TP, latency_ms=5)
    assert predict_step_increase(plan, latency) == pytest.approx(64 * 0.005)
    both_ways = LinkToxic(LinkKind.TP, latency_ms=5, streams=frozenset(Stream))
    assert predict_step_increase(plan, both_ways) == pytest.approx(2 * 64 * 0.005)
    capped = LinkToxic(LinkKind.TP, bandwidth_kbps=100, streams=frozenset({Stream.UPSTREAM}))
    assert predict_step_increase(plan, capped) == pytest.approx(64 * (8 + 8192) / 100_000)
    pp_plan = ExchangePlan(tp_rounds=0, tp_bytes_per_round=0, pp_transfers=2, pp_bytes_per_transfer=4096 * 1024)
    assert predict_step_increase(pp_plan, latency) == 0.0
    assert predict_step_increase(pp_plan, LinkToxic(LinkKind.PP, latency_ms=20), pp=3) == pytest.approx(0.020)


async def test_no_peers_gives_the_noop_interconnect() -> None:
    interconnect = await connect(InterconnectLaunch())
    assert isinstance(interconnect, NoopInterconnect)


async def test_tp_latency_adds_what_the_model_predicts(toxiproxy: ToxiproxyClient) -> None:
    links = _links(toxiproxy, "tp", 1)
    interconnect = await connect(InterconnectLaunch(links=links))
    plan = ExchangePlan(tp_rounds=16, tp_bytes_per_round=1024 * 1024, pp_transfers=0, pp_bytes_per_transfer=0)
    predicted = predict_step_increase(plan, LinkToxic(LinkKind.TP, latency_ms=5))
    try:
        clean = await _median_excess(interconnect, plan)
        toxiproxy.add_toxic(links[0].proxy, "latency", {"latency": 5})
        faulted = await _median_excess(interconnect, plan)
        toxiproxy.delete_toxic(links[0].proxy, "latency_downstream")
        recovered = await _median_excess(interconnect, plan)
    finally:
        await interconnect.close()
    assert clean < 0.25 * predicted
    assert faulted == pytest.approx(predicted, rel=0.3)
    assert recovered < 0.25 * predicted


async def test_tp_bandwidth_cap_adds_what_the_model_predicts(toxiproxy: ToxiproxyClient) -> None:
    links = _links(toxiproxy, "tp", 2)  # tp = 3: the capped link is the slow one in every round
    interconnect = await connect(InterconnectLaunch(links=links))
    plan = ExchangePlan(tp_rounds=4, tp_bytes_per_round=8 * 1024 * 1024, pp_transfers=0, pp_bytes_per_transfer=0)
    toxic = LinkToxic(LinkKind.TP, bandwidth_kbps=200, streams=frozenset({Stream.UPSTREAM}))
    try:
        toxiproxy.add_toxic(links[1].proxy, "bandwidth", {"rate": 200}, stream="upstream")
        faulted = await _median_excess(interconnect, plan, samples=3)
    finally:
        await interconnect.close()
    assert faulted == pytest.approx(predict_step_increase(plan, toxic), rel=0.3)


async def test_pp_stage_link_latency_and_cap(toxiproxy: ToxiproxyClient) -> None:
    links = _links(toxiproxy, "pp", 2)  # pp = 3: stage 0 (here) -> stage 1 -> stage 2
    interconnect = await connect(InterconnectLaunch(links=links))
    one_batch = ExchangePlan(tp_rounds=0, tp_bytes_per_round=0, pp_transfers=2, pp_bytes_per_transfer=4 << 20)
    four_batches = ExchangePlan(tp_rounds=0, tp_bytes_per_round=0, pp_transfers=8, pp_bytes_per_transfer=4 << 20)
    latency = LinkToxic(LinkKind.PP, latency_ms=40, streams=frozenset({Stream.UPSTREAM}))
    cap = LinkToxic(LinkKind.PP, bandwidth_kbps=100, streams=frozenset({Stream.UPSTREAM}))
    try:
        clean = await _median_excess(interconnect, four_batches)
        toxiproxy.add_toxic(links[1].proxy, "latency", {"latency": 40}, stream="upstream")
        with_latency = await _median_excess(interconnect, one_batch)
        toxiproxy.reset()
        toxiproxy.add_toxic(links[0].proxy, "bandwidth", {"rate": 100}, stream="upstream")
        with_cap = await _median_excess(interconnect, four_batches, samples=3)
    finally:
        await interconnect.close()
    assert clean < 0.01
    assert with_latency == pytest.approx(predict_step_increase(one_batch, latency, pp=3), rel=0.3)
    assert with_cap == pytest.approx(predict_step_increase(four_batches, cap, pp=3), rel=0.3)


async def test_a_dead_rank_breaks_the_step(toxiproxy: ToxiproxyClient) -> None:
    links = _links(toxiproxy, "tp", 1)
    interconnect = await connect(InterconnectLaunch(links=links))
    plan = ExchangePlan(tp_rounds=2, tp_bytes_per_round=1024, pp_transfers=0, pp_bytes_per_transfer=0)
    try:
        interconnect._processes[0].kill()
        interconnect._processes[0].wait(timeout=5)
        with pytest.raises(StackError) as info:
            await interconnect.exchange(plan)
        assert isinstance(info.value, ConnectionError)
    finally:
        await interconnect.close()


async def test_close_ends_the_rank_processes(toxiproxy: ToxiproxyClient) -> None:
    interconnect = await connect(InterconnectLaunch(links=_links(toxiproxy, "pp", 1)))
    pids = [p.pid for p in interconnect._processes]
    await interconnect.close()
    assert _pids_alive(pids) == []


_PARENT = """
import asyncio, sys
from drill.stack.interconnect.tcp import InterconnectLaunch, connect
from drill.stack.launch import PeerLaunch
async def main():
    links = tuple(PeerLaunch.model_validate_json(a) for a in sys.argv[1:])
    ic = await connect(InterconnectLaunch(links=links))
    print(" ".join(str(p.pid) for p in ic._processes), flush=True)
    await asyncio.sleep(60)
asyncio.run(main())
"""


def test_ranks_die_when_their_replica_is_killed() -> None:
    links = [PeerLaunch(kind="tp", rank=1, listen=f"127.0.0.1:{free_port()}", connect="")]
    links = [p.model_copy(update={"connect": p.listen}) for p in links]
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, *(p.model_dump_json() for p in links)], stdout=subprocess.PIPE, text=True
    )
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert pids and _pids_alive(pids) == pids
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=5)
    deadline = time.monotonic() + 5
    while _pids_alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _pids_alive(pids) == []
