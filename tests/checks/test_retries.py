"""duplicate_side_effects and retry_budget on hand-built run directories (ledger, spans, client records)."""

from __future__ import annotations

import json
from pathlib import Path

from drill.api import EvidenceKind, Status
from drill.checks.retries import (
    DuplicateSideEffectsCheck,
    DuplicateSideEffectsParams,
    RetryBudgetCheck,
    RetryBudgetParams,
)
from drill.runner.verdicts import judge_one
from tests.checks.rundir_kit import RunKit


def _kit(tmp_path: Path, replicas: int = 2) -> RunKit:
    kit = RunKit(tmp_path / "run")
    kit.phases(baseline=(0, 60), fault=(60, 120), recovery=(120, 180))
    kit.fault("storm", injected=60, reverted=120, kind="router_retry_storm")
    kit.pool("interactive", timeout="10s", slo={"ttft_p95": 1.0}, attempts=2)
    kit.embedded_target(replicas)
    for replica in range(replicas):
        kit.empty_ledger(replica)
    return kit


def _dupes(kit: RunKit, **params):
    return DuplicateSideEffectsCheck(DuplicateSideEffectsParams(**params)).evaluate(kit.evidence())


def _served(kit: RunKit, n: int, at: float = 70) -> None:
    """``n`` requests answered ok, each executed once on replica n % 2."""
    for i in range(n):
        record = kit.request(at + i, logical_id=f"ok-{i}")
        kit.ledger(i % 2, key=record.idempotency_key, request_id=record.request_id, at=at + i)


# --- duplicate side effects ------------------------------------------------------------------------------


def test_each_key_executed_once_passes(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    _served(kit, 10)
    kit.ledger(0, key=None, request_id="probe")  # a health probe without a key is not judged
    verdict = _dupes(kit)
    assert verdict.status is Status.PASS, verdict.message
    assert verdict.observed["keys_requested"] == 10 and verdict.observed["executions"] == 10
    assert verdict.observed["duplicated"] == 0 and verdict.units["executions"] == "executions"


def test_a_key_executed_on_two_replicas_is_duplicated(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    _served(kit, 5)
    first = kit.request(80, status=None, error="timeout", e2e_ms=10_000, logical_id="dup", attempt=1)
    kit.request(91, logical_id="dup", attempt=2)
    kit.ledger(0, key=first.idempotency_key, request_id="dup-1", at=80)  # abandoned, still billed
    kit.ledger(1, key=first.idempotency_key, request_id="dup-2", at=91, status="ok")
    verdict = _dupes(kit)
    assert verdict.status is Status.FAIL and "1 duplicated" in verdict.message
    assert verdict.observed["duplicated"] == 1 and verdict.observed["extra_executions"] == 1
    assert verdict.observed["concurrent"] == 0
    keys = [e.value for e in verdict.evidence if e.kind is EvidenceKind.IDEMPOTENCY_KEY]
    assert keys == [first.idempotency_key]
    requests = {e.value for e in verdict.evidence if e.kind is EvidenceKind.REQUEST}
    assert {"dup-1", "dup-2"} <= requests


def test_an_unbilled_aborted_record_is_not_a_side_effect(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    _served(kit, 5)
    first = kit.request(80, status=None, error="timeout", e2e_ms=10_000, logical_id="dup", attempt=1)
    kit.request(91, logical_id="dup", attempt=2)
    kit.ledger(0, key=first.idempotency_key, at=80, status="aborted", billed_tokens=0)
    kit.ledger(1, key=first.idempotency_key, at=91)
    verdict = _dupes(kit)
    assert verdict.status is Status.PASS, verdict.message


def test_overlapping_executions_are_also_concurrent(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    record = kit.request(80, logical_id="twice")
    kit.ledger(0, key=record.idempotency_key, at=80)
    kit.ledger(1, key=record.idempotency_key, at=80.2)  # each record lasts 0.5 s
    verdict = _dupes(kit)
    assert verdict.status is Status.FAIL and verdict.observed["concurrent"] == 1


def test_acknowledged_but_never_executed_is_lost(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    _served(kit, 5)
    kit.request(90, logical_id="ghost")  # ok to the client, no ledger record
    verdict = _dupes(kit)
    assert verdict.status is Status.FAIL and "1 lost" in verdict.message
    assert verdict.observed["lost"] == 1


def test_lost_with_a_replica_ledger_missing_is_inconclusive(tmp_path: Path) -> None:
    kit = _kit(tmp_path, replicas=3)
    del kit.ledgers[2]  # replica-2 left no ledger
    _served(kit, 5)
    kit.request(90, logical_id="ghost")
    verdict = _dupes(kit)
    assert verdict.status is Status.INCONCLUSIVE
    assert "replica-2" in verdict.message


def test_executed_but_never_requested_is_unexpected(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    _served(kit, 5)
    kit.ledger(1, key="nobody-sent-this", request_id="phantom", at=95)
    verdict = _dupes(kit)
    assert verdict.status is Status.FAIL and verdict.observed["unexpected"] == 1
    assert [e.value for e in verdict.evidence if e.kind is EvidenceKind.IDEMPOTENCY_KEY] == ["nobody-sent-this"]


def test_replay_keys_are_requested_too(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    _served(kit, 5)
    kit.ledger(1, key="key-ok-0-replay", request_id="ok-0-1-replay", at=200)
    kit.raw_line(
        "replay.jsonl", json.dumps({"request_id": "ok-0-1-replay", "idempotency_key": "key-ok-0-replay"}) + "\n"
    )
    assert _dupes(kit).status is Status.PASS


def test_one_key_with_two_payloads_fails(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    first = kit.request(80, status=None, error="timeout", e2e_ms=10_000, logical_id="p", payload_digest="aaa")
    kit.request(91, logical_id="p", attempt=2, payload_digest="bbb")
    kit.ledger(1, key=first.idempotency_key, at=91)
    verdict = _dupes(kit)
    assert verdict.status is Status.FAIL and verdict.observed["different_payload"] == 1


def test_failed_to_the_client_but_executed_once_is_recovered(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    record = kit.request(80, status=None, error="timeout", e2e_ms=10_000, logical_id="r")
    kit.ledger(0, key=record.idempotency_key, at=80)
    verdict = _dupes(kit)
    assert verdict.status is Status.PASS and verdict.observed["recovered"] == 1


def test_unreadable_ledger_line_makes_it_inconclusive(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    _served(kit, 5)
    kit.raw_line("ledger/replica-1.jsonl", "garbage\n")
    params = DuplicateSideEffectsParams()
    verdict = judge_one("duplicate_side_effects", "dupes", params, kit.evidence())
    assert verdict.status is Status.INCONCLUSIVE and "replica-1.jsonl" in verdict.message


def _span_run(kit: RunKit, key: str, copies: int, *, status: str = "UNSET") -> None:
    for c in range(copies):
        kit.span(
            trace_id=f"{c + 1:032x}",
            span_id=f"{c + 1:016x}",
            name="llm_request",
            service=f"drill-replica-{c}",
            kind="INTERNAL",
            start=80 + c,
            end=80.5 + c,
            status=status,
            attributes={"drill.idempotency_key": key, "drill.replica": f"replica-{c}"},
        )


def test_without_a_ledger_the_server_spans_count(tmp_path: Path) -> None:
    kit = RunKit(tmp_path / "run")
    kit.phases(fault=(60, 120))
    record = kit.request(80, logical_id="s")
    _span_run(kit, record.idempotency_key, copies=2)
    verdict = _dupes(kit)
    assert verdict.status is Status.FAIL and verdict.observed["duplicated"] == 1
    assert any("spans" in n for n in verdict.notes)


def test_error_spans_are_not_executions(tmp_path: Path) -> None:
    kit = RunKit(tmp_path / "run")
    kit.phases(fault=(60, 120))
    record = kit.request(80, logical_id="s")
    _span_run(kit, record.idempotency_key, copies=1)
    kit.span(
        trace_id="f" * 32,
        span_id="f" * 16,
        name="llm_request",
        service="drill-replica-1",
        start=81,
        end=81.2,
        status="ERROR",
        attributes={"drill.idempotency_key": record.idempotency_key},
    )
    assert _dupes(kit).status is Status.PASS


def test_no_ledger_and_no_spans_is_inconclusive(tmp_path: Path) -> None:
    kit = RunKit(tmp_path / "run")
    kit.phases(fault=(60, 120))
    kit.request(80)
    verdict = _dupes(kit)
    assert verdict.status is Status.INCONCLUSIVE
    assert "the target exported no spans" in verdict.message


def test_no_idempotency_keys_is_inconclusive(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    kit.request(80, idempotency_key="")
    assert _dupes(kit).status is Status.INCONCLUSIVE


# --- retry budget ----------------------------------------------------------------------------------------


def _budget(kit: RunKit, **params):
    return RetryBudgetCheck(RetryBudgetParams(**params)).evaluate(kit.evidence())


def _logical(kit: RunKit, n: int, attempts: int = 1, at: float = 70, prefix: str = "l") -> None:
    for i in range(n):
        for a in range(1, attempts + 1):
            ok = a == attempts
            kit.request(
                at + i * 0.5 + a * 0.1,
                logical_id=f"{prefix}-{i}",
                attempt=a,
                status=200 if ok else 503,
                error=None if ok else "refused",
                headers_ms=None if ok else 10,
                e2e_ms=None if ok else 10,
            )


def test_few_retries_pass(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    _logical(kit, 95)
    _logical(kit, 5, attempts=2, prefix="r")
    verdict = _budget(kit, use_spans=False)
    assert verdict.status is Status.PASS, verdict.message
    assert verdict.observed["client_retries"] == 5 and verdict.observed["client_retry_share"] == round(5 / 105, 4)
    assert verdict.observed["max_attempts_seen"] == 2


def test_retry_share_over_budget_fails(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    _logical(kit, 70)
    _logical(kit, 30, attempts=2, prefix="r")  # 30 / 130 = 23 % retries
    verdict = _budget(kit, use_spans=False)
    assert verdict.status is Status.FAIL and "pool interactive's client retries" in verdict.message
    assert _budget(kit, use_spans=False, max_retry_share=0.25).status is Status.PASS


def test_more_than_three_attempts_fails_with_the_logical_ids(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    _logical(kit, 100)
    _logical(kit, 1, attempts=4, prefix="stubborn")
    verdict = _budget(kit, use_spans=False)
    assert verdict.status is Status.FAIL and verdict.observed["max_attempts_seen"] == 4
    assert [e.value for e in verdict.evidence if e.kind is EvidenceKind.LOGICAL] == ["stubborn-0"]


def test_requests_first_sent_outside_the_window_are_left_out(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    _logical(kit, 100)
    _logical(kit, 30, attempts=2, at=10, prefix="baseline")
    assert _budget(kit, use_spans=False).status is Status.PASS
    assert _budget(kit, use_spans=False, phase=None).status is Status.FAIL


def test_router_retries_seen_only_in_spans_count(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    for i in range(30):
        record = kit.request(70 + i, logical_id=f"l-{i}")
        trace = record.trace_id
        kit.span(
            trace_id=trace,
            span_id=f"{i:08x}00000000",
            name="POST /v1/chat/completions",
            service="drill-router",
            kind="SERVER",
            start=70 + i,
            end=71 + i,
        )
        upstream = 4 if i == 0 else 1  # the router tried l-0 four times
        for a in range(upstream):
            kit.span(
                trace_id=trace,
                span_id=f"{i:08x}{a + 1:08x}",
                parent_id=f"{i:08x}00000000",
                name="POST upstream",
                service="drill-router",
                kind="CLIENT",
                start=70 + i + a * 0.1,
                end=70.1 + i + a * 0.1,
                attributes={"drill.attempt": a + 1},
            )
    verdict = _budget(kit)
    assert verdict.status is Status.FAIL, verdict.message
    assert verdict.observed["client_retries"] == 0 and verdict.observed["server_retries"] == 3
    assert verdict.observed["server_retry_share"] == round(3 / 33, 4)
    assert verdict.observed["max_attempts_seen"] == 4
    assert [e.value for e in verdict.evidence if e.kind is EvidenceKind.LOGICAL] == ["l-0"]
    # without the spans the client sees nothing wrong
    assert _budget(kit, use_spans=False).status is Status.PASS


def test_without_spans_the_client_view_is_judged_and_noted(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    _logical(kit, 30)
    verdict = _budget(kit)
    assert verdict.status is Status.PASS
    assert any("the target exported no spans" in n for n in verdict.notes)


def test_too_few_logical_requests_is_inconclusive(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    _logical(kit, 3, attempts=4)
    assert _budget(kit).status is Status.INCONCLUSIVE


def test_a_key_without_its_span_is_not_proven_lost(tmp_path: Path) -> None:
    kit = RunKit(tmp_path / "run")
    kit.phases(fault=(60, 120))
    record = kit.request(80, logical_id="s")
    _span_run(kit, record.idempotency_key, copies=1)
    kit.request(81, logical_id="no-span")  # ok to the client; its span may have been dropped
    verdict = _dupes(kit)
    assert verdict.status is Status.INCONCLUSIVE and verdict.observed["lost"] == 1


def test_the_client_share_is_reported_per_pool(tmp_path: Path) -> None:
    kit = _kit(tmp_path)
    _logical(kit, 40)
    for i in range(10):
        for a in (1, 2):
            kit.request(70 + i + a * 0.1, pool="batch", logical_id=f"b-{i}", attempt=a)
    verdict = _budget(kit, use_spans=False)
    assert verdict.observed["interactive.client_retry_share"] == 0.0
    assert verdict.observed["batch.client_retry_share"] == 0.5
    assert verdict.units["batch.client_retry_share"] == "ratio"
    assert verdict.status is Status.FAIL and "pool batch's client retries were 50.0%" in verdict.message
