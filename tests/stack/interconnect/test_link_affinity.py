"""The TP/PP link chain runs on one CPU (drill.stack.interconnect.affinity): rank 0's exchange thread,
the rank processes and the calibration that sets their baseline.

Spread over CPUs, 64 clean TP rounds through Toxiproxy flipped between ~3 ms and ~7.5 ms on their own
for seconds at a time, and a clean stack's latency with them (+65 %, the fault contract's recovery clause
failed on it); see the affinity module's docstring.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from drill.stack.interconnect.affinity import link_cpu, pinned_preexec
from drill.stack.interconnect.tcp import InterconnectLaunch, connect
from drill.stack.launch import PeerLaunch
from drill.stack.supervision.ports import free_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.anyio,
    pytest.mark.skipif(link_cpu() is None, reason="one CPU (or no affinity API): nothing to pin"),
]


async def test_exchange_thread_calibration_and_ranks_share_the_link_cpu() -> None:
    listen = f"127.0.0.1:{free_port()}"
    interconnect = await connect(
        InterconnectLaunch(links=(PeerLaunch(kind="tp", rank=1, listen=listen, connect=listen),))
    )
    try:
        cpu = link_cpu()
        assert interconnect._executor.submit(os.sched_getaffinity, 0).result() == {cpu}
        assert [os.sched_getaffinity(p.pid) for p in interconnect._processes] == [{cpu}]
        assert interconnect.baseline.tp_round_s > 0  # calibrated (in the pinned thread: calibrate submits to it)
        assert os.sched_getaffinity(0) != {cpu}  # the caller's own thread is left alone
    finally:
        await interconnect.close()


def test_pinned_preexec_pins_the_child_then_runs_the_next_preexec(tmp_path) -> None:
    marker = tmp_path / "ran"
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
        preexec_fn=pinned_preexec(lambda: marker.write_text("yes")),
        capture_output=True,
        text=True,
        check=True,
    )
    assert child.stdout.strip() == str([link_cpu()])
    assert marker.read_text() == "yes"
