"""Measurement truth per phase: client minus server TTFT and E2E over each phase's requests alone, the hops the
difference spans (client → router → replica, read from the traces), in ``verdicts.json``; a verdict carries the
figures of its own window."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drill.checks.builtin import SloCheck, SloParams
from drill.rundir.evidence import RunEvidence
from drill.runner.verdicts import verdicts_document
from tests.checks.rundir_kit import RunKit

ROUTER, REPLICA = "drill-router", "drill-replica-1"


def _traced(kit: RunKit, at: float, *, client_ttft_ms: float, server_ttft_ms: float) -> None:
    """A request through the router to a replica: client TTFT ``client_ttft_ms``, the replica's span TTFT
    ``server_ttft_ms``; E2E 600 ms at the client, 500 ms at the replica."""
    record = kit.request(at, ttft_ms=client_ttft_ms, e2e_ms=600.0)
    trace, sid = record.trace_id, record.trace_id[-12:]
    kit.span(
        trace_id=trace,
        span_id=sid + "0001",
        name="POST /v1/chat/completions",
        service=ROUTER,
        kind="SERVER",
        start=at,
        end=at + 0.59,
    )
    kit.span(
        trace_id=trace,
        span_id=sid + "0002",
        parent_id=sid + "0001",
        name="upstream",
        service=ROUTER,
        kind="CLIENT",
        start=at + 0.01,
        end=at + 0.58,
    )
    kit.span(
        trace_id=trace,
        span_id=sid + "0003",
        parent_id=sid + "0002",
        name="POST /v1/chat/completions",
        service=REPLICA,
        kind="SERVER",
        start=at + 0.02,
        end=at + 0.52,
    )
    kit.span(
        trace_id=trace,
        span_id=sid + "0004",
        parent_id=sid + "0003",
        name="llm_request",
        service=REPLICA,
        start=at + 0.02,
        end=at + 0.51,
        attributes={"gen_ai.latency.time_to_first_token": server_ttft_ms / 1e3},
    )


def truth_run(kit: RunKit) -> RunKit:
    """30 ms client - server TTFT in the baseline, 400 ms in the fault phase (the router queues the flood)."""
    kit.phases(baseline=(0, 10), fault=(10, 20))
    kit.pool("interactive", slo={"ttft_p95": 1.0})
    for i in range(20):
        _traced(kit, 0.5 + i * 0.4, client_ttft_ms=150.0, server_ttft_ms=120.0)
        _traced(kit, 10.5 + i * 0.4, client_ttft_ms=600.0, server_ttft_ms=200.0)
    return kit


def test_verdicts_json_has_measurement_truth_per_phase_with_the_hops_it_spans(tmp_path: Path) -> None:
    evidence = RunEvidence(truth_run(RunKit(tmp_path / "run")).write())
    doc = verdicts_document("run", "kit", "completed", None, [], evidence)
    truth = doc["measurement_truth"]
    assert truth["source"] == "spans" and truth["note"] == ""
    by_phase = {p["phase"]: p for p in truth["phases"]}
    assert list(by_phase) == ["baseline", "fault"]
    assert by_phase["baseline"]["ttft_diff_ms"]["p50"] == pytest.approx(30.0, abs=0.01)
    assert by_phase["fault"]["ttft_diff_ms"]["p50"] == pytest.approx(400.0, abs=0.01)
    assert by_phase["baseline"]["e2e_diff_ms"]["p50"] == pytest.approx(100.0, abs=0.01)
    for phase in by_phase.values():
        assert phase["joined"] == phase["requests"] == 20
        assert phase["hops"] == ["load client", "drill-router", "drill-replica"]
        assert phase["spans"] == "load client → drill-router → drill-replica"
    json.dumps(doc)  # the document is JSON as it stands


def test_a_verdict_carries_the_measurement_truth_of_its_own_window(tmp_path: Path) -> None:
    """The baseline SLO's figures are the baseline's (30 ms), not the whole run's mix of 30 and 400 ms."""
    evidence = RunEvidence(truth_run(RunKit(tmp_path / "run")).write())
    verdict = SloCheck(SloParams(phase="baseline", min_requests=5), "baseline-slo").evaluate(evidence)
    assert verdict.observed["measurement_truth.joined"] == 20
    assert verdict.observed["measurement_truth.ttft_diff_ms.p95"] == pytest.approx(30.0, abs=0.01)
    assert any("in this verdict's window" in n for n in verdict.notes)


def test_refusals_without_a_replica_span_do_not_hide_the_chain_the_figures_span(tmp_path: Path) -> None:
    """Admission control under a flood: most of the fault phase's requests are refused (503) before a replica takes
    them, so their traces have no ``llm_request``; the phase's hops are still the chain its figures were measured
    over, and the refusals are not another chain."""
    kit = truth_run(RunKit(tmp_path / "run"))
    for i in range(40):
        record = kit.request(10.6 + i * 0.2, status=503, error="refused", ttft_ms=None, e2e_ms=15.0)
        kit.span(trace_id=record.trace_id, span_id=record.trace_id[-12:] + "0001", name="POST /v1/chat/completions",
                 service=ROUTER, kind="SERVER", start=10.6 + i * 0.2, end=10.61 + i * 0.2)  # fmt: skip
    doc = verdicts_document("run", "kit", "completed", None, [], RunEvidence(kit.write()))
    fault = next(p for p in doc["measurement_truth"]["phases"] if p["phase"] == "fault")
    assert fault["requests"] == 60
    assert fault["spans"] == "load client → drill-router → drill-replica"
    assert fault["other_chains"] == 0
