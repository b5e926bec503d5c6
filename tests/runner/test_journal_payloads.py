"""The journal's typed payloads: a misspelt field fails at the call; what is on disk reads back as before."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest

from drill.rundir.journal import PAYLOADS, Event, FaultInjected, Journal, RunStatus, check_payload, read_journal
from drill.runner.fault_schedule import FaultState
from drill.runner.reverts import pending_reverts, pending_teardowns
from drill.runner.run import RunResult

RECORDED = sorted((Path(__file__).parents[1] / "fixtures" / "recorded-runs").glob("*/journal.jsonl"))


def test_every_event_has_a_frozen_payload_record() -> None:
    assert set(PAYLOADS) == set(Event)
    for record in PAYLOADS.values():
        assert record.__dataclass_params__.frozen, record


def test_a_misspelt_field_is_an_error_and_nothing_is_written(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    with pytest.raises(TypeError, match="fault_injected.*faultid.*its fields are fault_id, kind"):
        journal.write(Event.FAULT_INJECTED, faultid="f1", kind="partition")
    with pytest.raises(TypeError, match="run_finished"):
        journal.write(Event.RUN_FINISHED, status="completed")  # exit_code missing
    with pytest.raises(TypeError, match="not an Event"):
        journal.write("note", message="a string is not an event")  # type: ignore[arg-type]
    journal.close()
    assert path.read_text() == ""


def test_the_line_on_disk_is_the_envelope_and_exactly_the_given_fields(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path, by="runner")
    journal.write(Event.RUN_FINISHED, status="completed", exit_code=0)
    journal.close()
    line = json.loads(path.read_text())
    assert set(line) == {"seq", "event", "ts", "mono", "by", "status", "exit_code"}  # no null optional fields
    assert (line["event"], line["status"], line["exit_code"], line["seq"]) == ("run_finished", "completed", 0, 1)


def test_reading_a_misspelt_key_is_an_error_and_payload_is_typed(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.write(Event.FAULT_INJECTED, fault_id="f1", kind="partition")
    journal.close()
    entry = next(read_journal(path))
    assert entry.get("fault_id") == "f1" and entry.get("phase") is None  # a field of another event: absent here
    with pytest.raises(KeyError, match="faultid"):
        entry.get("faultid")
    assert entry.payload == FaultInjected(fault_id="f1", kind="partition")


@pytest.mark.parametrize("path", RECORDED, ids=[p.parent.name for p in RECORDED])
def test_recorded_journals_match_the_records_and_still_rebuild_reverts(path: Path) -> None:
    entries = list(read_journal(path))
    assert entries
    for entry in entries:
        check_payload(Event(entry.event), entry.data)
        assert isinstance(entry.payload, PAYLOADS[Event(entry.event)])
    assert pending_reverts(entries) == [] and pending_teardowns(entries) == []  # every recorded fault reverted


def test_an_old_journal_with_a_pending_revert_still_rebuilds_it(tmp_path: Path) -> None:
    """Lines as earlier versions wrote them (no payload records then): the revert is found and rebuilt."""
    path = tmp_path / "journal.jsonl"
    target = {"kind": "openai", "base_url": "http://127.0.0.1:1"}
    lines = [
        {
            "seq": 1,
            "event": "run_started",
            "ts": 1.0,
            "mono": 1.0,
            "by": "runner",
            "run_id": "r",
            "pid": 1,
            "pid_start": None,
        },
        {
            "seq": 2,
            "event": "revert_registered",
            "ts": 2.0,
            "mono": 2.0,
            "by": "runner",
            "fault_id": "f1",
            "kind": "partition",
            "params": {},
            "target": target,
            "targets": {},
            "saved": {},
            "planned_end_ts": None,
            "timeout_s": 10.0,
        },
        {
            "seq": 3,
            "event": "fault_injected",
            "ts": 2.1,
            "mono": 2.1,
            "by": "runner",
            "fault_id": "f1",
            "kind": "partition",
        },
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    entries = list(read_journal(path))
    [record] = pending_reverts(entries)
    assert (record.fault_id, record.kind, record.target.base_url) == ("f1", "partition", "http://127.0.0.1:1")
    assert {f.name for f in fields(PAYLOADS[Event.REVERT_REGISTERED])} >= set(lines[1]) - {
        "seq",
        "event",
        "ts",
        "mono",
        "by",
    }


def test_a_run_status_that_is_none_is_an_error_at_write(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    with pytest.raises(ValueError, match="run_finished.*'complted' is not a valid RunStatus"):
        journal.write(Event.RUN_FINISHED, status="complted", exit_code=0)
    journal.write(Event.RUN_FINISHED, status=RunStatus.INTERRUPTED, exit_code=130)
    journal.close()
    [line] = path.read_text().splitlines()
    assert json.loads(line)["status"] == "interrupted"


def test_states_are_str_enums_whose_json_and_text_are_the_old_strings() -> None:
    assert json.dumps({"status": RunStatus.COMPLETED}) == '{"status": "completed"}'
    assert f"{RunStatus.ERROR} {FaultState.ACTIVE}" == "error active"
    assert {s.value for s in RunStatus} == {"completed", "interrupted", "error", "unfinished"}
    assert [s.value for s in FaultState] == ["pending", "active", "done"]
    assert RunResult(run_dir=None).status is RunStatus.ERROR
    with pytest.raises(AttributeError):
        RunStatus.COMPLETD  # type: ignore[attr-defined]  # noqa: B018
