"""The load driver never drops a message from its generator silently: a line it cannot read is counted and
described in the summary and in any error; a channel that breaks is the error. Tested at the socket seam."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path

import pytest

from drill.errors import LoadError
from drill.load.control import Channel
from drill.load.driver import LoadDriver, LoadPlan, LoadSummary
from drill.spec.scenario import Scenario

SCENARIO = Scenario.model_validate(
    {
        "arrival": {"process": "constant", "rate": 1},
        "pools": [
            {"name": "p", "input_tokens": {"dist": "fixed", "value": 1}, "output_tokens": {"dist": "fixed", "value": 1}}
        ],
    }
)


def _driver(tmp_path: Path, lines: list[bytes]) -> LoadDriver:
    driver = LoadDriver(
        LoadPlan(
            scenario=SCENARIO, target_url="http://127.0.0.1:9", model="m", duration_s=1.0, run_dir=tmp_path, seed=0
        )
    )
    ours, theirs = socket.socketpair()
    driver._channel = Channel(ours)
    reader = threading.Thread(target=driver._read_loop)
    reader.start()
    theirs.sendall(b"".join(line + b"\n" for line in lines))
    theirs.close()
    reader.join(5)
    return driver


def _msg(kind: str, **data) -> bytes:
    return json.dumps({"type": kind, **data}).encode()


def test_unreadable_messages_are_counted_in_the_summary_and_reading_goes_on(tmp_path: Path) -> None:
    driver = _driver(
        tmp_path,
        [
            _msg("ready", t0=1.0),
            b"{torn json",
            b"[1, 2]",
            _msg("summary", counters={"sent": 3, "due": 3, "ok": 3}, elapsed_s=1.0),
        ],
    )
    summary = driver.stop()
    assert summary.sent == 3, "messages after the unreadable ones are still read"
    assert len(summary.unreadable_messages) == 2
    assert summary.unreadable_messages[0].startswith("not JSON") and "list" in summary.unreadable_messages[1]
    assert tuple(summary.to_dict()["unreadable_messages"]) == summary.unreadable_messages


def test_a_summary_lost_to_an_unreadable_line_says_so(tmp_path: Path) -> None:
    driver = _driver(tmp_path, [_msg("ready", t0=1.0), b'{"type": "summary", "counters": {"sent": 3'])
    with pytest.raises(LoadError) as info:
        driver.stop()
    assert "stopped without a summary" in info.value.message
    assert "1 message(s) from the generator could not be read (first: not JSON" in info.value.message


def test_a_load_stopped_early_says_how_many_planned_arrivals_never_came_due() -> None:
    data = {"counters": {"sent": 2, "due": 2, "ok": 2}, "elapsed_s": 0.4}
    summary = LoadSummary.from_child(data, duration_s=1.0, scheduled=5)
    assert summary.shortfall() == (
        "sent fewer requests than planned: 2 of 5 planned arrivals; 3 never came due "
        "(the load stopped 0.4 s into its 1.0 s window)"
    )
    whole = LoadSummary.from_child({"counters": {"sent": 5, "due": 5}, "elapsed_s": 1.0}, duration_s=1.0, scheduled=5)
    assert whole.shortfall() is None
