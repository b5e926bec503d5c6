"""``bounded_completion`` on hand-built run directories: hangs, late answers, and the span each waited in."""

from __future__ import annotations

from pathlib import Path

from drill.api import EvidenceKind, Status
from drill.checks.completion import BoundedCompletionCheck, BoundedCompletionParams, where_it_waited
from drill.testing import CheckCase, run_check_contract
from tests.checks.rundir_kit import RunKit


def _check(**params) -> BoundedCompletionCheck:
    return BoundedCompletionCheck(BoundedCompletionParams(**params))


def _kv_trace(kit: RunKit, trace: str, at: float, waited_s: float, *, state: str = "in_flight") -> None:
    """The router's request span, its decode attempt, the prefill leg and the decode worker's kv_transfer."""
    kit.span(
        trace_id=trace,
        span_id=f"{trace[:8]}root",
        name="POST /v1/chat/completions",
        service="drill-router",
        kind="SERVER",
        start=at,
        end=at + waited_s,
    )
    kit.span(
        trace_id=trace,
        span_id=f"{trace[:8]}pref",
        parent_id=f"{trace[:8]}root",
        name="POST prefill",
        service="drill-router",
        start=at,
        end=at + 0.05,
    )
    kit.span(
        trace_id=trace,
        span_id=f"{trace[:8]}deco",
        parent_id=f"{trace[:8]}root",
        name="POST decode",
        service="drill-router",
        start=at + 0.05,
        end=at + waited_s,
    )
    kit.span(
        trace_id=trace,
        span_id=f"{trace[:8]}kvtr",
        parent_id=f"{trace[:8]}deco",
        name="kv_transfer",
        service="drill-replica-1",
        start=at + 0.06,
        end=at + waited_s - 0.01,
        status="ERROR",
        attributes={"drill.kv.state": state},
    )


def _run(tmp_path: Path, *, hung: int = 0, failed_fast: int = 0, name: str = "run") -> RunKit:
    kit = RunKit(tmp_path / name)
    kit.phases(baseline=(0, 30), fault=(30, 60), recovery=(60, 90))
    for i in range(4):
        kit.request(1 + i)
    for i in range(hung):
        trace = f"{i + 1:032x}"
        kit.request(31 + i, status=None, error="timeout", e2e_ms=20_000.0, trace_id=trace, request_id=f"hung-{i}")
        _kv_trace(kit, trace, 31 + i, 20.0)
    for i in range(failed_fast):
        kit.request(40 + i, status=500, error="server_error", e2e_ms=2_100.0, request_id=f"fast-{i}")
    kit.request(61)
    return kit


def test_errors_within_the_lease_are_terminal_statuses(tmp_path: Path) -> None:
    verdict = _check(bound="5s").evaluate(_run(tmp_path, failed_fast=3).evidence())
    assert verdict.status is Status.PASS, verdict.message
    assert verdict.observed["requests"] == 8 and verdict.observed["terminal_in_time"] == 8


def test_a_request_left_to_the_clients_timeout_fails_naming_the_kv_transfer_span(tmp_path: Path) -> None:
    verdict = _check().evaluate(_run(tmp_path, hung=2).evidence())
    assert verdict.status is Status.FAIL
    assert verdict.observed["hangs"] == 2 and verdict.observed["waited_in"] == {"kv_transfer": 2}
    assert "waited until the client's timeout; waited in kv_transfer (drill-replica-1" in verdict.message
    spans = [e.value for e in verdict.evidence if e.kind is EvidenceKind.SPAN]
    assert spans == [f"{1:032x}"[:8] + "kvtr", f"{2:032x}"[:8] + "kvtr"]


def test_an_answer_later_than_the_bound_is_late(tmp_path: Path) -> None:
    kit = _run(tmp_path)
    kit.request(32, e2e_ms=9_000.0, schedule_lag_ms=1_000.0, request_id="slow")
    assert _check(bound="10s").evaluate(kit.evidence()).status is Status.PASS  # 8 s from its send
    verdict = _check(bound="5s").evaluate(kit.evidence())
    assert verdict.status is Status.FAIL and verdict.observed["late"] == 1
    assert "slow ended 8.0s after it was sent (bound 5s); no span of its trace" in verdict.message


def test_cancelled_at_stop_is_a_hang_and_max_hangs_tolerates_some(tmp_path: Path) -> None:
    kit = _run(tmp_path)
    kit.request(62, status=None, error="cancelled")
    evidence = kit.evidence()
    assert _check().evaluate(evidence).status is Status.FAIL
    assert _check(max_hangs=1).evaluate(evidence).status is Status.PASS


def test_never_sent_requests_are_not_judged(tmp_path: Path) -> None:
    kit = RunKit(tmp_path / "run")
    kit.phases(baseline=(0, 30), fault=(30, 60), recovery=(60, 90))
    kit.request(31, status=None, error="client_drop", sent_ts=None)
    assert _check().evaluate(kit.evidence()).status is Status.INCONCLUSIVE


def test_where_it_waited_descends_while_a_child_covers_half_its_parent(tmp_path: Path) -> None:
    kit = RunKit(tmp_path / "run")
    _kv_trace(kit, "a" * 32, 0, 10.0)
    spans = [_as_span(s) for s in kit.spans]
    assert where_it_waited(spans).name == "kv_transfer"
    assert where_it_waited([s for s in spans if s.name != "kv_transfer"]).name == "POST decode"
    assert where_it_waited([]) is None


def _as_span(raw: dict):  # a Span from the kit's raw span, as the table gives it
    from drill.traces.table import Span

    return Span(
        raw["trace_id"],
        raw["span_id"],
        raw["parent_span_id"] or "",
        raw["service"],
        raw["name"],
        raw["kind"],
        raw["start_ns"],
        raw["end_ns"],
        raw["status"]["code"],
        None,
        raw["attributes"],
    )


def test_bounded_completion_keeps_the_contract(tmp_path: Path) -> None:
    runs = [(_run(tmp_path, failed_fast=2, name="ok").write(), Status.PASS)]
    runs.append((_run(tmp_path, hung=1, name="hung").write(), Status.FAIL))
    case = CheckCase("bounded_completion", {"bound": "5s"}, runs=runs, incidental_reads=("spans.jsonl",))
    print(run_check_contract(case, tmp_path / "contract").lines())
