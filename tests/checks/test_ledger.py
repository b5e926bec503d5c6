"""The run's side-effect ledgers: reading ledger/*.jsonl, what counts as a side effect, and the copy
the embedded target makes into the run directory before it stops."""

from __future__ import annotations

import json
import time
from pathlib import Path

from drill.api import TargetContext
from drill.rundir.ledger import LedgerStatus, is_side_effect, load_run_ledger, parse_ledger_record
from drill.stack.config import Runtime, StackConfig
from drill.stack.replica.ledger import Ledger
from drill.stack.supervision.state import ReplicaEntry, StackState, remove_state, write_state
from drill.targets.embedded import EmbeddedStack, copy_complete_lines, stack_name
from tests.checks.rundir_kit import RunKit


def test_records_of_every_replica_are_read_with_their_status(tmp_path: Path) -> None:
    kit = RunKit(tmp_path / "run")
    kit.embedded_target(2)
    kit.ledger(0, key="a", status="ok")
    kit.ledger(1, key="a", status="aborted", billed_tokens=120)
    kit.ledger(1, key="b", status="timeout", billed_tokens=0)
    kit.ledger(1, key=None)
    ledger = kit.evidence().ledger
    assert ledger.files == ("ledger/replica-0.jsonl", "ledger/replica-1.jsonl")
    assert ledger.replicas == ("replica-0", "replica-1") and ledger.missing_replicas == ()
    assert [r.status for r in ledger.records] == [
        LedgerStatus.OK,
        LedgerStatus.ABORTED,
        LedgerStatus.TIMEOUT,
        LedgerStatus.OK,
    ]
    assert {k: len(v) for k, v in ledger.by_key().items()} == {"a": 2}  # b was not billed
    assert ledger.unkeyed() == 1


def test_billed_or_ok_is_a_side_effect() -> None:
    base = {"seq": 1, "ts": 1.0, "replica": "replica-0", "request_id": "r", "billed_tokens": 0}
    assert is_side_effect(parse_ledger_record({**base, "status": "ok"}))
    assert not is_side_effect(parse_ledger_record({**base, "status": "error"}))
    assert is_side_effect(parse_ledger_record({**base, "status": "error", "billed_tokens": 5}))


def test_unreadable_lines_are_counted_per_file_and_in_the_union(tmp_path: Path) -> None:
    kit = RunKit(tmp_path / "run")
    kit.ledger(0, key="a")
    kit.ledger(1, key="b")
    kit.raw_line("ledger/replica-1.jsonl", '{"seq": 9}\n')  # no status: unreadable
    kit.raw_line("ledger/replica-1.jsonl", '{"seq": 10, "ts"')  # torn last line
    evidence = kit.evidence()
    ledger = evidence.ledger
    assert len(ledger.records) == 2
    union = evidence.reports["ledger"]
    assert union.bad_count == 1 and union.lines_read == 2
    assert "replica-1.jsonl" in union.bad_lines[0].reason and union.torn_last_line is not None
    assert evidence.reports["ledger/replica-1.jsonl"].bad_count == 1


def test_a_run_without_ledgers_has_an_empty_one(tmp_path: Path) -> None:
    kit = RunKit(tmp_path / "run")
    kit.embedded_target(2)
    ledger = kit.evidence().ledger
    assert not ledger.present and ledger.missing_replicas == ("replica-0", "replica-1")


def test_the_copy_stops_at_the_last_complete_line(tmp_path: Path) -> None:
    source = tmp_path / "src.jsonl"
    source.write_bytes(b'{"a":1}\n{"b":2}\n{"c":')
    assert copy_complete_lines(source, tmp_path / "out" / "copy.jsonl")
    assert (tmp_path / "out" / "copy.jsonl").read_bytes() == b'{"a":1}\n{"b":2}\n'
    assert not copy_complete_lines(tmp_path / "missing.jsonl", tmp_path / "out" / "x.jsonl")


def test_the_embedded_target_copies_each_replica_ledger_into_the_run_dir(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    target = EmbeddedStack(StackConfig(), TargetContext("RUN-LEDGER-COPY", str(run_dir)))
    stack_dir = tmp_path / "stack"
    entries = []
    for i in range(2):
        path = stack_dir / f"replica-{i}.ledger.jsonl"
        ledger = Ledger(path, f"replica-{i}")  # the stack's own writer
        ledger.append(
            request_id=f"r{i}",
            idempotency_key=f"k{i}",
            trace_id=None,
            prompt_tokens=3,
            completion_tokens=2,
            billed_tokens=5,
            finish_reason="length",
            status=LedgerStatus.OK,
            arrival_ts=time.time(),
            first_token_ts=None,
            finish_ts=time.time(),
        )
        ledger.close()
        entries.append(
            ReplicaEntry(
                name=f"replica-{i}",
                index=i,
                url="http://x",
                direct_url="http://x",
                admin_url="http://x",
                pid_file=stack_dir / f"r{i}.pid",
                ledger_path=path,
                log_path=stack_dir / f"r{i}.log",
            )
        )
    name = stack_name("RUN-LEDGER-COPY")
    write_state(
        StackState(
            name=name,
            runtime=Runtime.LOCAL,
            model="m",
            router="http://r",
            router_admin_url="http://r",
            admin_token="t",
            toxiproxy_url="http://t",
            toxiproxy_owned=False,
            replicas=tuple(entries),
            run_dir=stack_dir,
            created_at=time.time(),
        )
    )
    try:
        assert target.collect_evidence(str(run_dir)) == ["ledger/replica-0.jsonl", "ledger/replica-1.jsonl"]
    finally:
        remove_state(name)
    copied = [json.loads(line) for line in (run_dir / "ledger" / "replica-1.jsonl").read_text().splitlines()]
    assert [(r["request_id"], r["idempotency_key"], r["status"]) for r in copied] == [("r1", "k1", "ok")]
    # and the checks read it back
    kit = RunKit(run_dir)
    assert [r.request_id for r in load_run_ledger(kit.evidence()).records] == ["r0", "r1"]


def test_a_target_that_keeps_no_records_copies_nothing(tmp_path: Path) -> None:
    target = EmbeddedStack(StackConfig(), TargetContext("RUN-NO-STATE", str(tmp_path)))
    assert target.collect_evidence(str(tmp_path)) == []
