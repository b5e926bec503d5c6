"""first_abnormal_span: verdicts from hand-built run directories (journal + spans.jsonl)."""

from __future__ import annotations

import gzip
import random
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from drill.api import EvidenceKind, Status
from drill.checks.spans import FirstAbnormalSpanCheck, FirstAbnormalSpanParams
from drill.registry import checks
from drill.rundir.evidence import RunEvidence
from drill.runner.verdicts import judge_one
from tests.checks.rundir_kit import RunKit
from tests.traces.spankit import drill_request, vllm_request

SPACING_MS = 50.0
N_BASE, N_FAULT = 120, 60


def run(
    tmp_path, *, slow_queue: bool = True, baseline: bool = True, n_base: int = N_BASE, edit=None, make=drill_request
) -> RunKit:
    """A 6 s baseline and a 3 s fault phase (fault injected at its start) of requests every 50 ms."""
    kit = RunKit(tmp_path)
    base_s, fault_s = n_base * SPACING_MS / 1e3, N_FAULT * SPACING_MS / 1e3
    if baseline:
        kit.phases(baseline=(0, base_s), fault=(base_s, base_s + fault_s))
    else:
        kit.phases(fault=(base_s, base_s + fault_s))
    kit.fault("flood-0", injected=base_s, reverted=base_s + fault_s)
    rng = random.Random(0)
    for i in range(n_base + N_FAULT):
        in_fault = i >= n_base
        queue = 400.0 if in_fault and slow_queue and i % 2 == 0 else 1 + rng.random() * 0.5
        spans = make(
            i + 1,
            replica=i % 2,
            start_ms=i * SPACING_MS,
            queue_ms=queue,
            prefill_ms=5 + rng.random(),
            decode_ms=20 + rng.random() * 2,
        )
        if edit is not None and in_fault:
            spans = edit(spans)
        kit.spans.extend(spans)
    return kit


def judge(kit: RunKit, **params):
    return FirstAbnormalSpanCheck(FirstAbnormalSpanParams(**params)).evaluate(kit.evidence())


def test_registered_under_its_kind():
    assert checks.get("first_abnormal_span") is FirstAbnormalSpanCheck
    assert FirstAbnormalSpanCheck.reads == ("journal.jsonl", "spans.jsonl")


def test_pass_names_the_span_its_chain_and_evidence(tmp_path):
    verdict = judge(run(tmp_path))
    assert verdict.status is Status.PASS, verdict.message
    o = verdict.observed
    assert (o["service"], o["name"]) == ("drill-replica-0", "queue")
    assert "x baseline p99" in o["deviation"] and 0 <= o["onset_s"] < 0.05
    assert o["chain"][-1] == "drill-router/POST /v1/chat/completions" and len(o["chain"]) == 5
    assert o["pairs"][0]["name"] == "queue" and o["pairs"][0]["root_causes"] == N_FAULT // 2
    assert o["attributes"]["drill.replica"] == 0
    assert verdict.units["onset_s"] == "s"
    kinds = [e.kind for e in verdict.evidence]
    assert kinds[0] is EvidenceKind.TRACE and verdict.evidence[0].value == o["trace_id"]
    assert kinds.count(EvidenceKind.SPAN) == 5 and verdict.evidence[1].value == o["span_id"]
    assert verdict.window == "fault" and "drill-replica-0/queue" in verdict.message


def test_a_queue_flood_on_real_vllm_spans_is_named_as_the_queue(tmp_path):
    """vLLM exports only ``llm_request``, its phases as attributes: the reader makes them phases to judge."""
    verdict = judge(run(tmp_path, make=vllm_request), expect={"name": "queue"})
    assert verdict.status is Status.PASS, verdict.message
    o = verdict.observed
    assert (o["service"], o["name"]) == ("vllm-0", "queue")
    assert o["chain"] == [
        "vllm-0/queue",
        "vllm-0/llm_request",
        "drill-router/POST",
        "drill-router/POST /v1/chat/completions",
    ]
    assert o["pairs"][0]["name"] == "queue" and o["pairs"][0]["root_causes"] == N_FAULT // 2


def test_expectations_match_or_fail(tmp_path):
    kit = run(tmp_path)
    assert judge(kit, expect={"service": "drill-replica-.*", "name": "queue"}).status is Status.PASS
    assert judge(kit, expect={"service": "drill-replica-0", "attributes": {"drill.replica": "0"}}).status is Status.PASS
    wrong = judge(kit, expect={"service": "drill-replica-1"})
    assert wrong.status is Status.FAIL and "expected service ~ drill-replica-1" in wrong.message
    either = judge(kit, expect=[{"service": "drill-router", "name": "POST"}, {"name": "queue"}])
    assert either.status is Status.PASS


def test_suspects_top_five_in_observed_and_expect_within_k(tmp_path):
    kit = run(tmp_path)
    verdict = judge(kit)
    suspects = verdict.observed["suspects"]
    assert suspects[0]["service"] == "drill-replica-0" and suspects[0]["rank"] == 1 and len(suspects) <= 5
    assert "own work" in suspects[0]["why"] and suspects[0]["evidence"]
    assert "suspects: drill-replica-0" in verdict.message
    assert judge(kit, expect={"service": "drill-replica-0", "within": 1}).status is Status.PASS
    missed = judge(kit, expect={"service": "drill-replica-1", "within": 3})
    assert missed.status is Status.FAIL and "within the first 3" in missed.message


def test_an_immaterial_first_span_is_no_pass_when_a_span_is_expected(tmp_path):
    kit = run(tmp_path)
    weak = judge(kit, min_impact=1000.0, expect={"service": "drill-replica-0"})  # nothing adds 1000x
    assert weak.status is Status.FAIL and weak.message.startswith("nothing material deviated; weakest signals:")
    assert judge(kit, min_impact=1000.0, expect={"service": "drill-replica-0"}, material=False).status is Status.PASS
    assert judge(kit, min_impact=1000.0).status is Status.PASS  # nothing expected: reported, with a note


def test_nothing_abnormal_passes_unless_required(tmp_path):
    kit = run(tmp_path, slow_queue=False)
    calm = judge(kit)
    assert calm.status is Status.PASS and "no span of the fault window deviates" in calm.message
    assert judge(kit, require=True).status is Status.FAIL
    assert judge(kit, expect={"name": "queue"}).status is Status.FAIL


def test_no_spans_is_inconclusive_with_the_reason(tmp_path):
    kit = RunKit(tmp_path)
    kit.phases(baseline=(0, 60), fault=(60, 120))
    kit.fault("flood-0", injected=60, reverted=120)
    kit.request(at=70)
    verdict = judge(kit)
    assert verdict.status is Status.INCONCLUSIVE and verdict.message == "the target exported no spans"


def test_too_many_orphans_is_inconclusive(tmp_path):
    def lose_parents(spans):  # replica spans lose their llm_request/SERVER parents
        return [
            s
            for s in spans
            if s["name"] not in ("llm_request",)
            and not (s["service"].startswith("drill-replica") and s["kind"] == "SERVER")
        ]

    kit = run(tmp_path, edit=lose_parents)
    verdict = judge(kit, max_orphan_share=0.05)
    assert verdict.status is Status.INCONCLUSIVE and "never exported" in verdict.message


def test_thin_baseline_is_judged_by_rank_test_and_too_thin_is_inconclusive(tmp_path):
    kit = run(tmp_path, n_base=8)  # 8 router spans of each pair, 4 per replica
    thin = judge(kit)  # under min_baseline_spans (10): the rank test still judges the replica's queue
    assert thin.status is Status.PASS and thin.observed["suspects"][0]["service"] == "drill-replica-0", thin.observed
    assert any("thin baseline: rank test on 4 spans" in e for e in thin.observed["suspects"][0]["evidence"])
    verdict = judge(kit, min_judged_spans=9)  # no pair has 9 baseline spans: nothing can be judged
    assert verdict.status is Status.INCONCLUSIVE
    assert "could be judged" in verdict.message and "fewer than 9 baseline spans" in verdict.message
    assert verdict.observed["baseline_spans"] == 56
    assert judge(kit, min_baseline_spans=8).status is Status.PASS


def test_no_baseline_phase_is_inconclusive(tmp_path):
    verdict = judge(run(tmp_path, baseline=False))
    assert verdict.status is Status.INCONCLUSIVE and "no baseline phase" in verdict.message


def test_unreadable_span_lines_make_it_inconclusive_through_the_engine(tmp_path):
    kit = run(tmp_path)
    kit.raw_line("spans.jsonl", "{not json\n")
    verdict = judge_one("first_abnormal_span", "where", FirstAbnormalSpanParams(), kit.evidence())
    assert verdict.status is Status.INCONCLUSIVE


def test_params_are_validated():
    with pytest.raises(ValidationError):
        FirstAbnormalSpanParams(expect={"service": "("})
    with pytest.raises(ValidationError):
        FirstAbnormalSpanParams(unknown=1)
    assert FirstAbnormalSpanParams(onset_tolerance="5ms").options().onset_tolerance_ms == pytest.approx(5.0)


def test_spans_without_the_clients_trace_ids_are_still_judged(tmp_path):
    kit = run(tmp_path)
    for at in (1.0, 2.0):
        kit.request(at=at, trace_id="f" * 32)  # the client's traceparent never reached the stack
    verdict = judge(kit)
    assert verdict.status is Status.PASS and verdict.observed["name"] == "queue"


def test_too_few_spans_is_inconclusive(tmp_path):
    verdict = judge(run(tmp_path), min_spans=5000)
    assert verdict.status is Status.INCONCLUSIVE and "fewer than the 5000 needed" in verdict.message


# --- recorded runs of the embedded stack ---------------------------------------------------------------
# tests/fixtures/recorded-runs/<drill>/: the baseline and fault phases of real `drill run` runs of the
# embedded stack at a CI time scale (journal phase/fault events; spans.jsonl gzipped, without the resource,
# scope and events fields), so the rules are checked on the stack's real span shapes and timing noise.

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "recorded-runs"


def recorded(tmp_path: Path, drill: str) -> RunEvidence:
    src = RECORDED / drill
    shutil.copy(src / "journal.jsonl", tmp_path / "journal.jsonl")
    (tmp_path / "spans.jsonl").write_bytes(gzip.decompress((src / "spans.jsonl.gz").read_bytes()))
    return RunEvidence(tmp_path)


@pytest.mark.parametrize(
    "drill, expect",
    [
        ("unbounded-queue", {"service": "drill-replica-.*", "name": "queue"}),  # the flood waits in the queue
        ("slow-replica", {"service": "drill-router", "attributes": {"drill.upstream": "replica-0"}}),  # 400 ms toxic
        ("nccl-degradation", {"service": "drill-replica-0", "name": "decode"}),  # replica 0's TP link
        ("gpu-oom", {"service": "drill-replica-0"}),  # replica 0's engine died
    ],
)
def test_recorded_runs_name_where_the_fault_is(tmp_path, drill, expect):
    verdict = FirstAbnormalSpanCheck(FirstAbnormalSpanParams(expect=expect, require=True)).evaluate(
        recorded(tmp_path, drill)
    )
    assert verdict.status is Status.PASS, verdict.message


def test_recorded_slow_replica_names_the_link(tmp_path):
    verdict = judge_one("first_abnormal_span", "where", FirstAbnormalSpanParams(), recorded(tmp_path, "slow-replica"))
    assert verdict.observed["kind"] == "CLIENT" and verdict.observed["link"].startswith(
        "slow link drill-router → drill-replica-0"
    )
    assert "drill.upstream=replica-0" in " ".join(verdict.observed["pairs"][0]["attributes"])


def test_recorded_tp_degradation_side_effects_are_listed_not_first(tmp_path):
    verdict = FirstAbnormalSpanCheck(FirstAbnormalSpanParams()).evaluate(recorded(tmp_path, "nccl-degradation"))
    pairs = {(x["service"], x["name"]): x for x in verdict.observed["pairs"]}
    assert pairs[("drill-replica-0", "decode")]["material"] > 0
    assert pairs[("drill-replica-1", "queue")]["material"] == 0  # the healthy replica took more load
    assert verdict.observed["pairs"][0]["name"] == "decode"


def test_recorded_gpu_oom_names_the_engine_error(tmp_path):
    verdict = FirstAbnormalSpanCheck(FirstAbnormalSpanParams()).evaluate(recorded(tmp_path, "gpu-oom"))
    assert "EngineCore encountered an issue" in verdict.observed["deviation"]
    assert "baseline error rate 0%" in verdict.observed["deviation"]
