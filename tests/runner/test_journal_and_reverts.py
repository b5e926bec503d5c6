"""Journal durability and the revert stack's guarantees."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from drill.api import FaultTargets, TargetInfo
from drill.rundir.journal import Event, Journal, read_journal
from drill.runner.cleanup import clean_run
from drill.runner.reverts import RevertRecord, RevertStack, pending_reverts

TARGET = TargetInfo(kind="openai", base_url="http://127.0.0.1:1")


def _record(fid: str, kind: str = "test_raising_revert", timeout_s: float = 1.0) -> RevertRecord:
    return RevertRecord(fault_id=fid, kind=kind, params={}, target=TARGET, targets=FaultTargets(), timeout_s=timeout_s)


def test_journal_survives_a_torn_last_line_and_continues_numbering(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.write(Event.NOTE, message="one")
    journal.write(Event.NOTE, message="two")
    journal.close()
    with path.open("a") as fh:
        fh.write('{"seq": 3, "event": "no')  # a crash mid-write
    entries = list(read_journal(path))
    assert [e.get("message") for e in entries] == ["one", "two"]
    again = Journal(path)
    entry = again.write(Event.NOTE, message="three")
    again.close()
    assert entry.seq == 3


def test_revert_is_journaled_before_the_fault_and_runs_lifo(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    stack = RevertStack(journal)
    order: list[str] = []
    for fid in ("a", "b", "c"):
        stack.push(_record(fid), lambda fid=fid: order.append(fid))
        assert fid in [r.fault_id for r in pending_reverts(list(read_journal(tmp_path / "journal.jsonl")))]
    outcomes = stack.revert_all("test")
    assert order == ["c", "b", "a"]
    assert all(o.ok for o in outcomes)
    assert pending_reverts(list(read_journal(tmp_path / "journal.jsonl"))) == []
    assert stack.revert_all("again") == []  # each revert runs at most once


def test_a_failing_revert_is_recorded_and_the_others_still_run(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    stack = RevertStack(journal)
    ran: list[str] = []
    stack.push(_record("first"), lambda: ran.append("first"))
    stack.push(_record("broken"), lambda: (_ for _ in ()).throw(RuntimeError("backend down")))
    stack.push(_record("last"), lambda: ran.append("last"))
    outcomes = {o.fault_id: o for o in stack.revert_all("test")}
    assert ran == ["last", "first"]
    assert not outcomes["broken"].ok and "backend down" in outcomes["broken"].error
    events = [e.event for e in read_journal(tmp_path / "journal.jsonl")]
    assert events.count("revert_failed") == 1 and events.count("fault_reverted") == 2
    assert [r.fault_id for r in pending_reverts(list(read_journal(tmp_path / "journal.jsonl")))] == ["broken"]


def test_a_hanging_revert_is_bounded_and_does_not_block_the_rest(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    stack = RevertStack(journal)
    release = threading.Event()
    ran: list[str] = []
    stack.push(_record("ok"), lambda: ran.append("ok"))
    stack.push(_record("hangs", timeout_s=0.1), lambda: release.wait(30))
    start = time.monotonic()
    outcomes = {o.fault_id: o for o in stack.revert_all("test")}
    release.set()
    assert time.monotonic() - start < 15  # a blocked revert would hold it for the hook's 30 s
    assert not outcomes["hangs"].ok and "did not finish" in outcomes["hangs"].error
    assert ran == ["ok"]


def test_cleanup_rebuilds_a_fault_from_the_journal_and_reports_failures(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl")
    RevertStack(journal).push(_record("x"), lambda: None)
    journal.close()
    report = clean_run(tmp_path, by="cleanup")
    assert report.reverted == [] and report.failed and "revert failed on purpose" in report.failed[0][1]
