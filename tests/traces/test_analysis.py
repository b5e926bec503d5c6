"""First abnormal span: one hand-built trace set per rule of drill.traces.analysis."""

from __future__ import annotations

import json
import random
import time

import numpy as np
import pytest

from drill.traces.analysis import AnalysisOptions, find_abnormal
from drill.traces.request_phases import with_phase_spans
from drill.traces.table import SpanTable
from tests.traces.spankit import T0, drill_request, span, vllm_request

SPACING_MS = 50.0
N_BASE = 120
N_FAULT = 60
FAULT_START = T0 + int(N_BASE * SPACING_MS * 1e6)
CHAIN = ["queue", "llm_request", "POST /v1/chat/completions", "POST", "POST /v1/chat/completions"]


def drill_spans(fault=None, *, n_base: int = N_BASE, n_fault: int = N_FAULT, seed: int = 0, edit=None) -> list[dict]:
    """Requests every 50 ms with jittered phases; ``fault(i)`` gives drill_request overrides for fault request i,
    ``edit(i, spans)`` may change a fault request's spans (drop, retime)."""
    rng = random.Random(seed)
    spans: list[dict] = []
    for i in range(n_base + n_fault):
        kw = dict(
            replica=i % 2, queue_ms=1 + rng.random() * 0.5, prefill_ms=5 + rng.random(), decode_ms=20 + rng.random() * 2
        )
        if i >= n_base and fault is not None:
            kw.update(fault(i - n_base))
        request = drill_request(i + 1, start_ms=i * SPACING_MS, **kw)
        if i >= n_base and edit is not None:
            request = edit(i - n_base, request)
        spans += request
    return spans


def analyse(spans: list[dict], **kw):
    kw.setdefault("baseline_until_ns", FAULT_START)
    kw.setdefault("fault_start_ns", FAULT_START)
    return find_abnormal(SpanTable.from_spans(spans), **kw)


def by_name(spans: list[dict], name: str, service: str | None = None) -> dict:
    return next(s for s in spans if s["name"] == name and (service is None or s["service"] == service))


def retime(s: dict, *, extra_ms: float = 0.0, shift_ms: float = 0.0) -> None:
    s["start_ns"] += int(shift_ms * 1e6)
    s["end_ns"] += int((shift_ms + extra_ms) * 1e6)


def pair(report, service: str, name: str):
    return next(p for p in report.pairs if (p.service, p.name) == (service, name))


def test_slow_leaf_under_slow_parents_is_the_first_abnormal_span():
    report = analyse(drill_spans(lambda i: {"queue_ms": 400.0} if i % 2 == 0 else {}))
    first = report.first
    assert (first.service, first.name) == ("drill-replica-0", "queue")
    assert [c.name for c in first.chain] == CHAIN
    assert first.chain[-1].service == "drill-router" and not first.root_missing
    (deviation,) = first.deviations
    assert deviation.kind == "latency" and deviation.ratio > 100
    assert "x baseline p99" in first.deviation
    assert 0 <= first.onset_s < 0.05  # the first fault request starts at the injection
    assert first.context_attributes["drill.replica"] == 0
    assert all(c.deviation for c in first.chain)  # every ancestor is slow too ...
    top = report.pairs[0]
    assert (top.service, top.name) == ("drill-replica-0", "queue")
    assert top.root_causes == top.flagged == N_FAULT // 2 and top.share == 1.0
    for service, name in [("drill-replica-0", "llm_request"), ("drill-router", "POST")]:
        assert pair(report, service, name).root_causes == 0  # ... and explained by the slow leaf
    assert not any(p.service == "drill-replica-1" for p in report.pairs)


def test_unchanged_traces_have_no_abnormal_span():
    report = analyse(drill_spans(n_fault=120))
    assert report.first is None and report.pairs == () and report.candidates == 0
    assert report.fault_spans == 120 * 7 and report.judged_pairs == 12  # 2 router pairs, 5 per replica


def test_p99_exceedances_at_the_baseline_rate_are_noise():
    rng = np.random.default_rng(7)
    spans = []
    for i in range(600):
        gw = span(
            i + 1,
            "GET /cart",
            service="gateway",
            kind="SERVER",
            start_ms=i * 10.0,
            end_ms=i * 10.0 + float(rng.lognormal(3, 0.6)),
        )
        spans.append(gw)
    report = find_abnormal(
        SpanTable.from_spans(spans), baseline_until_ns=T0 + int(300 * 10e6), fault_start_ns=T0 + int(300 * 10e6)
    )
    assert report.first is None


def test_microsecond_jitter_is_not_a_deviation():
    def edit(i, request):
        retime(by_name(request, "queue"), extra_ms=0.4)  # +400 µs on a 1 ms span, under the 1 ms margin
        return request

    spans = drill_spans(edit=edit)
    for s in spans:  # baseline queue spans without jitter at all
        if s["name"] == "queue" and s["start_ns"] < FAULT_START:
            s["end_ns"] = s["start_ns"] + 1_000_000
    assert analyse(spans).first is None
    assert analyse(spans, options=AnalysisOptions(min_excess_ms=0.1)).first.name == "queue"


def test_slow_parent_with_a_barely_slow_child_is_its_own_cause():
    def edit(i, request):
        if i % 2:
            return request
        llm = by_name(request, "llm_request")
        retime(llm, extra_ms=300)  # 300 ms of the replica's own time ...
        retime(by_name(request, "decode"), extra_ms=10)  # ... a 10 ms slower decode does not explain it
        for name, service in [
            ("POST /v1/chat/completions", "drill-replica-0"),
            ("POST", None),
            ("POST /v1/chat/completions", "drill-router"),
        ]:
            retime(by_name(request, name, service), extra_ms=310)
        return request

    report = analyse(drill_spans(edit=edit))
    assert pair(report, request_service(0), "llm_request").root_causes == N_FAULT // 2
    assert pair(report, request_service(0), "decode").root_causes == N_FAULT // 2
    assert pair(report, "drill-router", "POST").root_causes == 0


def request_service(replica: int) -> str:
    return f"drill-replica-{replica}"


def test_tie_same_onset_same_depth_is_broken_by_ids_whatever_the_row_order():
    def fault(i):
        return {"queue_ms": 400.0}  # requests 0 and 1 start 50 ms apart on two replicas

    def edit(i, request):
        if i == 1:  # make request 1 start with request 0
            for s in request:
                retime(s, shift_ms=-SPACING_MS)
        return request

    spans = drill_spans(fault, edit=edit, n_base=120)
    for s in spans:  # identical baselines on both replicas so that both thresholds are equal
        if s["name"] == "queue" and s["start_ns"] < FAULT_START:
            s["end_ns"] = s["start_ns"] + 1_000_000
    firsts = set()
    for seed in range(4):
        random.Random(seed).shuffle(spans)
        first = analyse(spans).first
        firsts.add((first.trace_id, first.span_id))
    assert len(firsts) == 1
    trace = firsts.pop()[0]
    assert trace == f"{N_BASE + 1:032x}"  # the smaller trace id of the two


def microservice(
    trace: int,
    start_ms: float,
    *,
    auth_ms: float = 2.0,
    db_ms: float = 3.0,
    api_ms: float = 1.0,
    db_error: bool = False,
    error_message: str | None = None,
    skew_ms: float = 0.0,
) -> list[dict]:
    """gateway SERVER -> auth CLIENT/SERVER, gateway -> api SERVER -> db CLIENT (no LLM attribute anywhere)."""
    t = start_ms
    total = auth_ms + api_ms + db_ms + 2
    gw = span(
        trace,
        "GET /checkout",
        service="gateway",
        kind="SERVER",
        start_ms=t,
        end_ms=t + total,
        status="ERROR" if db_error else "UNSET",
        attributes={"http.route": "/checkout"},
    )
    auth = span(
        trace,
        "POST /verify",
        service="auth",
        kind="SERVER",
        parent=gw,
        start_ms=t + 0.5 + skew_ms,
        end_ms=t + 0.5 + auth_ms + skew_ms,
    )
    api = span(
        trace,
        "GET /orders",
        service="orders",
        kind="SERVER",
        parent=gw,
        start_ms=t + auth_ms + 1,
        end_ms=t + auth_ms + 1 + api_ms + db_ms,
        status="ERROR" if db_error else "UNSET",
    )
    db = span(
        trace,
        "SELECT orders",
        service="orders",
        kind="CLIENT",
        parent=api,
        start_ms=t + auth_ms + 1 + api_ms,
        end_ms=t + auth_ms + 1 + api_ms + db_ms,
        status="ERROR" if db_error else "UNSET",
        message=error_message,
        attributes={"db.system": "postgresql", "server.address": "db-0"},
    )
    return [gw, auth, api, db]


def microservice_spans(fault=None, *, n_base: int = 150, n_fault: int = 60, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    spans = []
    for i in range(n_base + n_fault):
        kw = dict(auth_ms=2 + rng.random() * 0.2, db_ms=3 + rng.random() * 0.3, api_ms=1 + rng.random() * 0.1)
        if i >= n_base and fault is not None:
            kw.update(fault(i - n_base))
        spans += microservice(i + 1, i * SPACING_MS, **kw)
    return spans


def micro_fault_start(n_base: int = 150) -> int:
    return T0 + int(n_base * SPACING_MS * 1e6)


def test_generic_microservice_without_llm_attributes():
    spans = microservice_spans(lambda i: {"db_ms": 250.0})
    report = find_abnormal(
        SpanTable.from_spans(spans), baseline_until_ns=micro_fault_start(), fault_start_ns=micro_fault_start()
    )
    first = report.first
    assert (first.service, first.name, first.kind) == ("orders", "SELECT orders", "CLIENT")
    assert [c.name for c in first.chain] == ["SELECT orders", "GET /orders", "GET /checkout"]
    assert first.attributes == {"db.system": "postgresql", "server.address": "db-0"}
    assert first.link is not None and first.link.server_service is None and first.link.peer == "db-0"
    assert not any(p.service == "auth" for p in report.pairs)


def test_equal_onsets_the_deeper_span_wins_and_a_clearly_earlier_one_wins_over_depth():
    # auth (depth 1) and the db call (depth 2) are each slow in their own trace
    def fault_same(i):
        return {"auth_ms": 300.0} if i % 2 == 0 else {"db_ms": 300.0}

    def shift(spans, trace, by_ms):
        for s in spans:
            if s["trace_id"] == f"{trace:032x}":
                retime(s, shift_ms=by_ms)

    base = 150
    spans = microservice_spans(fault_same)
    # both onsets within a few ms of each other: trace 151's auth call moves to 3 ms before trace 152's db call
    auth = by_name([s for s in spans if s["trace_id"] == f"{base + 1:032x}"], "POST /verify")
    db = by_name([s for s in spans if s["trace_id"] == f"{base + 2:032x}"], "SELECT orders")
    shift(spans, base + 1, (db["start_ns"] - auth["start_ns"]) / 1e6 - 3)
    report = find_abnormal(
        SpanTable.from_spans(spans), baseline_until_ns=micro_fault_start(), fault_start_ns=micro_fault_start()
    )
    assert report.first.name == "SELECT orders" and report.first.depth == 2
    # now the auth call's trace starts 30 ms earlier: the earlier, shallower auth span is first
    shift(spans, base + 1, -30)
    report = find_abnormal(
        SpanTable.from_spans(spans), baseline_until_ns=micro_fault_start(), fault_start_ns=micro_fault_start()
    )
    assert report.first.name == "POST /verify" and report.first.depth == 1


def test_clock_skew_between_processes_keeps_the_leaf_and_its_chain():
    spans = drill_spans(lambda i: {"queue_ms": 400.0} if i % 2 == 1 else {})
    for s in spans:  # replica-0's clock runs 4 ms ahead, replica-1's 6 ms behind the router's
        if s["service"] == "drill-replica-0":
            retime(s, shift_ms=4)
        elif s["service"] == "drill-replica-1":
            retime(s, shift_ms=-6)
    report = analyse(spans)
    first = report.first
    assert (first.service, first.name) == ("drill-replica-1", "queue")
    assert [c.name for c in first.chain] == CHAIN
    assert pair(report, "drill-router", "POST").root_causes == 0
    assert pair(report, "drill-router", "POST /v1/chat/completions").root_causes == 0


def test_missing_parents_orphans_are_still_analysed():
    def edit(i, request):
        return [s for s in request if not (s["service"] == "drill-router" and s["kind"] == "SERVER")]

    report = analyse(drill_spans(lambda i: {"queue_ms": 400.0}, edit=edit))
    first = report.first
    assert first.name == "queue"
    assert [c.name for c in first.chain] == CHAIN[:-1] and first.chain[-1].kind == "CLIENT"
    assert first.root_missing
    assert report.orphans == N_FAULT


def test_a_lost_inner_span_shows_as_a_missing_child_and_its_orphans_still_count():
    def edit(i, request):
        return [s for s in request if s["name"] != "llm_request"]

    report = analyse(drill_spans(lambda i: {"queue_ms": 400.0}, edit=edit))
    assert report.first.name == "queue" and report.first.root_missing
    server = pair(report, "drill-replica-0", "POST /v1/chat/completions")
    assert server.missing_child == N_FAULT // 2 and "llm_request" in server.deviation


def test_error_with_normal_latency_is_abnormal_and_the_deepest_error_wins():
    spans = microservice_spans(lambda i: {"db_error": i % 3 == 0, "error_message": "connection refused"})
    report = find_abnormal(
        SpanTable.from_spans(spans), baseline_until_ns=micro_fault_start(), fault_start_ns=micro_fault_start()
    )
    first = report.first
    assert (first.service, first.name) == ("orders", "SELECT orders")
    (deviation,) = first.deviations
    assert deviation.kind == "error" and deviation.baseline == 0.0
    assert first.deviation == "error (connection refused), baseline error rate 0%"
    assert [c.status for c in first.chain] == ["ERROR", "ERROR", "ERROR"]
    assert pair(report, "gateway", "GET /checkout").root_causes == 0
    assert pair(report, "orders", "SELECT orders").errors == 20


def test_errors_at_the_baseline_error_rate_are_not_abnormal():
    rng = random.Random(3)
    spans = []
    for i in range(400):
        spans += microservice(i + 1, i * SPACING_MS, db_error=rng.random() < 0.3)
    fault_start = T0 + int(200 * SPACING_MS * 1e6)
    report = find_abnormal(SpanTable.from_spans(spans), baseline_until_ns=fault_start, fault_start_ns=fault_start)
    assert report.first is None


def test_missing_expected_child():
    def edit(i, request):  # from the fifth fault request on, replica 0's requests end before decoding
        return [s for s in request if s["name"] != "decode"] if i >= 4 and i % 2 == 0 else request

    report = analyse(drill_spans(edit=edit))
    first = report.first
    assert (first.service, first.name) == ("drill-replica-0", "llm_request")
    (deviation,) = first.deviations
    assert deviation.kind == "missing_child" and deviation.baseline == 1.0
    assert first.deviation == "missing child drill-replica-0/decode (under 100% of baseline parents)"


def test_slow_client_over_a_normal_server_names_the_link():
    def edit(i, request):
        if i % 2 == 0:  # 300 ms between the router and replica 0 (e.g. a toxic)
            retime(by_name(request, "POST"), extra_ms=300)
            retime(by_name(request, "POST /v1/chat/completions", "drill-router"), extra_ms=300)
        return request

    report = analyse(drill_spans(edit=edit))
    first = report.first
    assert (first.service, first.name, first.kind) == ("drill-router", "POST", "CLIENT")
    assert first.attributes["drill.upstream"] == "replica-0"
    assert first.link.client_service == "drill-router" and first.link.server_service == "drill-replica-0"
    assert "slow link drill-router → drill-replica-0" in first.deviation
    assert [c.name for c in first.chain] == ["POST", "POST /v1/chat/completions"]
    assert pair(report, "drill-router", "POST").root_causes == N_FAULT // 2
    assert not any(p.service.startswith("drill-replica") for p in report.pairs)


def test_default_baseline_is_the_first_third():
    spans = drill_spans(lambda i: {"queue_ms": 400.0}, n_base=120, n_fault=60)
    table = SpanTable.from_spans(spans)
    report = find_abnormal(table)
    assert "first third" in report.baseline_rule and report.reference == "baseline end"
    third = T0 + (int(table.end_ns.max()) - T0) // 3
    routers = (table.kind == 2) & (table.service == table.service_code("drill-router"))
    assert report.baseline_spans == 7 * int((table.start_ns[routers] < third).sum())
    assert report.first.name == "queue" and report.first.onset_s > 0


def test_baseline_mask_and_json():
    spans = drill_spans(lambda i: {"queue_ms": 400.0})
    table = SpanTable.from_spans(spans)
    report = find_abnormal(table, baseline=table.start_ns < FAULT_START, top=2)
    assert report.baseline_rule == "the given baseline spans" and len(report.pairs) == 2
    data = json.loads(json.dumps(report.to_json()))
    assert data["first"]["name"] == "queue" and data["first"]["deviation"].endswith(")")
    assert data["pairs"][0]["name"] == "queue"
    with pytest.raises(ValueError, match="shape"):
        find_abnormal(table, baseline=np.ones(3, dtype=bool))


def test_empty_table():
    report = find_abnormal(SpanTable.empty())
    assert report.first is None and report.spans == 0


def test_parent_cycle_does_not_hang():
    a = span(1, "a", span_id="00000000000000aa", parent="00000000000000bb", start_ms=0, end_ms=1)
    b = span(1, "b", span_id="00000000000000bb", parent="00000000000000aa", start_ms=0, end_ms=1)
    report = find_abnormal(SpanTable.from_spans([a, b]))
    assert report.spans == 2 and report.first is None


def test_analysis_of_many_spans_is_fast():
    spans = drill_spans(lambda i: {"queue_ms": 400.0} if i % 2 == 0 else {}, n_base=6000, n_fault=3000)
    table = SpanTable.from_spans(spans)
    began = time.process_time()  # CPU time: the bound is on the analysis, not on how busy the machine is
    fault_start = T0 + int(6000 * SPACING_MS * 1e6)
    report = find_abnormal(table, baseline_until_ns=fault_start, fault_start_ns=fault_start)
    elapsed = max(time.process_time() - began, 1e-6)
    assert report.first.name == "queue" and report.first.service == "drill-replica-0"
    assert len(table) / elapsed > 20_000, f"{len(table)} spans in {elapsed:.2f}s"  # ~2M/s on an idle core


def test_a_small_earlier_sibling_is_not_the_cause_the_material_one_is():
    # TP-link-like: replica 0's decode takes 3.5 s more; its queue grows by 12 ms as a side effect, and the
    # healthy replica 1 queues 8 ms more. Both are real deviations, neither is where the fault is.
    def fault(i):
        if i % 2 == 0:
            return {"queue_ms": 13.0 + i * 0.01, "decode_ms": 3500.0}
        return {"queue_ms": 9.0 + i * 0.01}

    report = analyse(drill_spans(fault))
    first = report.first
    assert (first.service, first.name) == ("drill-replica-0", "decode") and first.material
    assert first.impact > 50
    assert pair(report, "drill-replica-0", "queue").root_causes == N_FAULT // 2
    assert pair(report, "drill-replica-0", "queue").material == 0
    assert pair(report, "drill-replica-1", "queue").root_causes == N_FAULT // 2
    assert (report.pairs[0].service, report.pairs[0].name) == ("drill-replica-0", "decode")


def test_a_material_earlier_sibling_is_first():
    # unbounded-queue-like: the queue adds 2 s, then decode (bigger batches) adds 10 s: the queue showed first
    report = analyse(drill_spans(lambda i: {"queue_ms": 2000.0, "decode_ms": 10_000.0}))
    assert report.first.name == "queue" and report.first.material
    assert pair(report, "drill-replica-0", "decode").material == N_FAULT // 2


def test_when_no_cause_is_material_the_earliest_cause_is_still_reported():
    report = analyse(drill_spans(lambda i: {"queue_ms": 8.0} if i % 2 == 0 else {}))  # +7 ms of ~30 ms
    first = report.first
    assert (first.service, first.name) == ("drill-replica-0", "queue")
    assert not first.material and 0 < first.impact < 0.5


def test_no_link_claim_when_the_server_span_cannot_be_judged():
    def edit(i, request):
        if i % 2 == 0:
            retime(by_name(request, "POST"), extra_ms=300)
            retime(by_name(request, "POST /v1/chat/completions", "drill-router"), extra_ms=300)
        return request

    spans = drill_spans(edit=edit)
    for s in spans:  # replica 0's SERVER spans appear only in the fault window: their latency is unknown
        if s["service"] == "drill-replica-0" and s["kind"] == "SERVER" and s["start_ns"] < FAULT_START:
            s["name"] = "warming up"
    first = analyse(spans).first
    assert (first.service, first.name) == ("drill-router", "POST") and first.link is None


def test_what_the_flagged_spans_share_is_named():
    def edit(i, request):
        if i % 2 == 0:
            retime(by_name(request, "POST"), extra_ms=300)
            retime(by_name(request, "POST /v1/chat/completions", "drill-router"), extra_ms=300)
        return request

    report = analyse(drill_spans(edit=edit))
    client = pair(report, "drill-router", "POST")
    (skew,) = client.attributes  # drill.attempt is 1 everywhere, ids are not dimensions
    assert (skew.key, skew.value, skew.flagged_share) == ("drill.upstream", "replica-0", 1.0)
    assert skew.others_share == 0.4  # others: 120 baseline (60 to replica 0) and 30 fault (to replica 1)
    assert skew.text == "drill.upstream=replica-0 on 100% of flagged vs 40% of others"


def test_an_unjudged_span_in_between_does_not_cut_the_chain():
    # the router's attempt times out (ERROR); the replica's SERVER span has no baseline (a new route), its
    # llm_request and queue do: the deepest deviation, the queue, is first, and the timeout is explained by it
    def edit(i, request):
        for s in request:
            if s["service"] == "drill-router":
                s["status"] = {"code": "ERROR", "message": "timeout"}
        return request

    spans = drill_spans(lambda i: {"queue_ms": 400.0}, edit=edit)
    for s in spans:
        if (
            s["kind"] == "SERVER"
            and s["name"] == "POST /v1/chat/completions"
            and s["service"] != "drill-router"
            and s["start_ns"] >= FAULT_START
        ):
            s["name"] = "POST /v2/chat"
    report = analyse(spans)
    assert report.first.name == "queue"
    assert [c.name for c in report.first.chain][:4] == ["queue", "llm_request", "POST /v2/chat", "POST"]
    client = pair(report, "drill-router", "POST")
    assert client.errors == N_FAULT and client.root_causes == 0
    assert "drill-replica-0/POST /v2/chat" in report.new_pairs


@pytest.mark.parametrize("seed", range(6))
def test_random_forests_keep_the_invariants(seed):
    """Random trees (orphans, errors, slow spans, shared names) never crash and keep what the report promises."""
    rng = np.random.default_rng(seed)
    spans, n_traces = [], 300
    for t in range(n_traces):
        start = t * 20.0
        fault = t >= n_traces // 2
        rows: list[dict] = []
        for _ in range(int(rng.integers(1, 9))):
            parent = rows[int(rng.integers(0, len(rows)))] if rows and rng.random() < 0.9 else None
            lost = parent is None and rows and rng.random() < 0.5
            begin = (parent["start_ns"] - T0) / 1e6 if parent else start
            dur = float(rng.lognormal(1, 0.5)) * (30 if fault and rng.random() < 0.2 else 1)
            rows.append(
                span(
                    t + 1,
                    f"op{int(rng.integers(0, 4))}",
                    service=f"svc{int(rng.integers(0, 3))}",
                    parent=parent or ("deadbeefdeadbeef" if lost else None),
                    start_ms=begin,
                    end_ms=begin + dur,
                    kind=["SERVER", "CLIENT", "INTERNAL"][int(rng.integers(0, 3))],
                    status="ERROR" if fault and rng.random() < 0.1 else "UNSET",
                )
            )
        spans += rows
    fault_start = T0 + int(n_traces // 2 * 20.0 * 1e6)
    table = SpanTable.from_spans(spans)
    report = find_abnormal(table, baseline_until_ns=fault_start, fault_start_ns=fault_start, top=50)
    again = find_abnormal(
        SpanTable.from_spans(list(reversed(spans))), baseline_until_ns=fault_start, fault_start_ns=fault_start, top=50
    )
    assert report.spans == len(spans) and report.baseline_spans + report.fault_spans == len(spans)
    assert (report.first is None) == (again.first is None) == (report.candidates == 0)
    if report.first is not None:
        first = report.first
        assert (first.trace_id, first.span_id) == (again.first.trace_id, again.first.span_id)
        assert first.deviations and first.chain[0].span_id == first.span_id and len(first.chain) == first.depth + 1
        assert first.onset_s is not None and first.onset_s >= 0
    assert sum(p.root_causes for p in report.pairs) == report.candidates
    assert all(p.material <= p.root_causes <= p.flagged <= p.spans for p in report.pairs)
    assert [(p.service, p.name) for p in report.pairs] == [(p.service, p.name) for p in again.pairs]


def test_a_slow_span_off_the_critical_path_is_not_the_cause():
    # checkout waits for a 50 ms pricing call; a parallel 2 ms cache call gets 40 ms slower from the start,
    # which checkout never waits for; 20 ms later the pricing call gets 400 ms slower: that one the user feels
    rng = random.Random(5)
    spans = []
    for i in range(300):
        t, fault = i * SPACING_MS, i >= 150
        cache_ms = 2 + rng.random() * 0.2 + (40 if fault else 0)
        pricing_ms = 50 + rng.random() * 2 + (400 if fault and i >= 152 else 0)
        root = span(i + 1, "GET /checkout", service="shop", kind="SERVER", start_ms=t, end_ms=t + pricing_ms + 1)
        spans += [
            root,
            span(
                i + 1,
                "GET cache",
                service="shop",
                kind="CLIENT",
                parent=root,
                start_ms=t + 0.5,
                end_ms=t + 0.5 + cache_ms,
            ),
            span(
                i + 1,
                "POST /price",
                service="pricing",
                kind="SERVER",
                parent=root,
                start_ms=t + 0.5,
                end_ms=t + 0.5 + pricing_ms,
            ),
        ]
    fault_start = T0 + int(150 * SPACING_MS * 1e6)
    report = find_abnormal(SpanTable.from_spans(spans), baseline_until_ns=fault_start, fault_start_ns=fault_start)
    cache = pair(report, "shop", "GET cache")
    assert cache.root_causes == 150 and cache.material == 0  # slow, but it reached nobody
    assert (report.first.service, report.first.name) == ("pricing", "POST /price") and report.first.material


def test_one_error_in_a_pair_that_never_erred_counts():
    # one crashed request among 60: too few to be significant, but the baseline's 60 llm_request spans never erred
    def edit(i, request):
        if i == 10:
            for s in request:
                if s["name"] in ("llm_request", "POST /v1/chat/completions"):
                    s["status"] = {"code": "ERROR", "message": "EngineCore died"}
            return [s for s in request if s["name"] != "decode"]
        return request

    report = analyse(drill_spans(edit=edit))
    first = report.first
    assert (first.service, first.name) == ("drill-replica-0", "llm_request")
    assert [d.kind for d in first.deviations] == ["error", "missing_child"]
    assert first.deviation.startswith("error (EngineCore died), baseline error rate 0%")
    # a pair that errs now and then in the baseline (2 of replica 0's 60) needs more than one error: the
    # missing decode (under every baseline llm_request) is what is left
    spans = drill_spans(edit=edit)
    for s in spans:
        if s["name"] == "llm_request" and s["start_ns"] < FAULT_START and int(s["trace_id"], 16) % 40 == 1:
            s["status"] = {"code": "ERROR", "message": "rare"}
    first = analyse(spans).first
    assert (first.service, first.name) == ("drill-replica-0", "llm_request")
    assert [d.kind for d in first.deviations] == ["missing_child"]


def test_a_flood_s_growing_queue_is_first_over_a_slight_decode_slowdown_that_began_earlier():
    """vLLM under a flood (issue #17): the batch fills first, so decode slows a little 0.5 s before the queue
    grows by orders of magnitude. The onset rule and the suspects' ranking must agree: the queue is first."""
    rng = random.Random(3)
    spans: list[dict] = []
    for i in range(N_BASE + N_FAULT):
        late = i - N_BASE  # fault request index; 10 requests = 0.5 s
        queue_ms = 1 + rng.random() * 0.5 if late < 10 else 40.0 * (late - 9)
        decode_ms = (20 + rng.random() * 2) * (1.8 if late >= 0 else 1.0)
        spans += vllm_request(i + 1, replica=0, start_ms=i * SPACING_MS, queue_ms=queue_ms, decode_ms=decode_ms)
    table, derived = with_phase_spans(SpanTable.from_spans(spans))
    assert derived == 3 * (N_BASE + N_FAULT)
    report = find_abnormal(table, baseline_until_ns=FAULT_START, fault_start_ns=FAULT_START)
    assert pair(report, "vllm-0", "decode").material > 0
    onset_only = find_abnormal(table, baseline_until_ns=FAULT_START, fault_start_ns=FAULT_START, rank=False)
    assert onset_only.first.name == "decode" and onset_only.first.onset_s < report.first.onset_s  # it began first
    assert report.suspects[0].service == "vllm-0" and report.suspects[0].evidence[0].name == "queue"
    assert (report.first.service, report.first.name) == ("vllm-0", "queue"), report.first.text


def slow_link_to_one_vllm_replica(seed: int = 5) -> list[dict]:
    """The slow-replica drill on real vLLM (issue #17): two replicas behind the router, whose calls to both carry
    one span name (``POST upstream``). In the fault window replica 0's link adds ~400 ms outside its
    ``llm_request`` span, and the router (least outstanding) sends two requests of three to replica 1, whose
    prefill and queue slow down under the extra load — from the first fault request on, before any slow link
    call has passed its threshold."""
    rng = random.Random(seed)
    spans: list[dict] = []
    for i in range(N_BASE + N_FAULT):
        late = i - N_BASE
        replica = i % 2 if late < 0 else (0 if late % 3 == 2 else 1)
        queue_ms, prefill_ms = 1 + rng.random() * 0.5, 5 + rng.random()
        if late >= 0 and replica == 1:
            queue_ms, prefill_ms = queue_ms * 3, prefill_ms * 5
        router, client, llm = vllm_request(
            i + 1,
            replica=replica,
            start_ms=i * SPACING_MS,
            queue_ms=queue_ms,
            prefill_ms=prefill_ms,
            decode_ms=20 + rng.random() * 2,
        )
        spans += through_a_slowed_link(router, client, llm, replica=replica, slowed=late >= 0, rng=rng)
    return spans


def through_a_slowed_link(
    router: dict, client: dict, llm: dict, *, replica: int, slowed: bool, rng: random.Random
) -> list[dict]:
    """One request's spans as the router calls ``vllm-<replica>``; with ``slowed``, the link to replica 0 adds
    Toxiproxy's ~400 ms latency to the bytes it sends back (the router's call and the router's span grow)."""
    client["name"], client["attributes"]["drill.upstream"] = "POST upstream", f"vllm-{replica}"
    if slowed and replica == 0:
        delay = 400 + rng.uniform(-50, 50)
        retime(client, extra_ms=delay)
        retime(router, extra_ms=delay)
    return [router, client, llm]


def test_a_slow_link_to_one_vllm_replica_is_first_and_top_suspect_over_the_busier_healthy_replica():
    table, _ = with_phase_spans(SpanTable.from_spans(slow_link_to_one_vllm_replica()))
    report = find_abnormal(table, baseline_until_ns=FAULT_START, fault_start_ns=FAULT_START)
    # the healthy replica's prefill is a material deviation too, and it began first
    assert pair(report, "vllm-1", "prefill").material > 0
    onset_only = find_abnormal(table, baseline_until_ns=FAULT_START, fault_start_ns=FAULT_START, rank=False)
    assert (onset_only.first.service, onset_only.first.name) == ("vllm-1", "prefill")
    # the router's calls are judged per replica: the link to vllm-0 is the top suspect ...
    top = report.suspects[0]
    assert top.service == "vllm-0", [(s.service, s.score) for s in report.suspects]
    assert top.evidence[0].name == "POST upstream → vllm-0" and top.evidence[0].role == "callee of a slow link"
    # ... and the first abnormal span is that link, the router's call to vllm-0, as the ranking says
    first = report.first
    assert (first.service, first.name, first.attributes.get("drill.upstream")) == (
        "drill-router",
        "POST upstream",
        "vllm-0",
    )
    assert first.link is not None and first.link.server_service == "vllm-0", first.deviation


def load_moved_off_a_slowed_replica(seed: int = 1) -> tuple[list[dict], int]:
    """real vLLM's slow-replica drill in numbers: 5 requests/s, a 12 s baseline, about 0.7 s per request; in the
    fault window replica 0's link adds ~400 ms, so the least-outstanding router sends five requests of six to
    replica 1, whose batch fills: its decode is 10% slower, and a third of its requests queue 10-40x longer and
    prefill 2-4x (a heavier tail, not a shifted median). Returns the spans and the fault's start (ns)."""
    rng, spacing_ms, n_base, n_fault = random.Random(seed), 200.0, 60, 60
    spans: list[dict] = []
    for i in range(n_base + n_fault):
        late = i - n_base
        replica = i % 2 if late < 0 else (0 if late % 6 == 5 else 1)
        queue_ms, prefill_ms, decode_ms = 5 + rng.random() * 5, 50 + rng.random() * 10, 600 * (1 + 0.1 * rng.random())
        if late >= 0 and replica == 1:
            decode_ms *= 1.1
            if rng.random() < 0.35:
                queue_ms, prefill_ms = queue_ms * rng.uniform(10, 40), prefill_ms * rng.uniform(2, 4)
        router, client, llm = vllm_request(
            i + 1, replica=replica, start_ms=i * spacing_ms, queue_ms=queue_ms, prefill_ms=prefill_ms,
            decode_ms=decode_ms,
        )  # fmt: skip
        spans += through_a_slowed_link(router, client, llm, replica=replica, slowed=late >= 0, rng=rng)
    return spans, T0 + int(n_base * spacing_ms * 1e6)


def test_load_moved_onto_the_healthy_replica_does_not_outrank_the_slowed_one():
    """The shape that made a test of upper-tail exceedances name the healthy replica on real vLLM: the replica
    that took the moved load has a heavier tail for real, in several phases, on five times the spans. The
    slowed replica's link is where the fault is: it must rank first, out of the near-tie band where the onset
    rule would decide (the healthy replica's tail starts first), and the first abnormal span must be that link."""
    spans, fault_start = load_moved_off_a_slowed_replica()
    table, _ = with_phase_spans(SpanTable.from_spans(spans))
    report = find_abnormal(table, baseline_until_ns=fault_start, fault_start_ns=fault_start)
    ranked = dict((s.service, s.score) for s in report.suspects)
    assert next(iter(ranked)) == "vllm-0", ranked
    assert report.suspects[0].evidence[0].role == "callee of a slow link"
    assert ranked.get("vllm-1", 0.0) < 0.75 * ranked["vllm-0"], ranked  # analysis._TIED
    first = report.first
    assert first.material, first.deviation
    assert (first.service, first.attributes.get("drill.upstream")) == ("drill-router", "vllm-0"), first.text


def test_a_child_absent_where_spans_get_lost_is_judged_against_the_baseline_s_loss():
    """Sampling or a full export queue loses spans: a usual child can be absent for that reason alone."""

    def spans_with(baseline_loss: bool) -> list[dict]:
        spans: list[dict] = []
        for i in range(N_BASE + N_FAULT):
            request = drill_request(i + 1, replica=i % 2, start_ms=i * SPACING_MS)
            lost = (baseline_loss and i < N_BASE and i % 2 == 1 and i % 30 == 1) or i == N_BASE + 10
            spans += [s for s in request if not (lost and s["name"] == "llm_request")]
        return spans

    # the baseline lost 4 of replica 1's llm_request spans (their phases arrived without a parent): one of
    # replica 0's missing in the fault window is within that loss, not a finding
    report = analyse(spans_with(baseline_loss=True))
    assert report.orphans == 3 * 5 and report.first is None, report.first and report.first.deviation
    # with nothing lost in the baseline, a child that was under every baseline parent counts when absent once
    first = analyse(spans_with(baseline_loss=False)).first
    assert first is not None and [d.kind for d in first.deviations] == ["missing_child"]


@pytest.mark.parametrize("segment_sorts", [4096, 0])  # one sort per group, or two whole-array passes
def test_group_quantiles_sort_each_group_as_lexsort_would(monkeypatch, segment_sorts: int) -> None:
    from drill.traces import analysis

    monkeypatch.setattr(analysis, "_SEGMENT_SORTS", segment_sorts)
    rng = np.random.default_rng(5)
    groups, values = 40, rng.integers(-5, 10_000, 3000)
    group = np.minimum(rng.geometric(0.1, 3000) - 1, groups - 2)  # uneven sizes; the last group empty
    counts, (median, p99) = analysis._group_quantiles(values, group, groups, (0.5, 0.99))
    assert counts.tolist() == np.bincount(group, minlength=groups).tolist()
    for g in range(groups):
        mine = values[group == g]
        expected = np.quantile(mine, [0.5, 0.99]) if len(mine) else [np.nan, np.nan]
        assert np.allclose([median[g], p99[g]], expected, equal_nan=True), g


def checkout(
    trace: int, start_ms: float, *, stock_ms: float, stock_fails: bool, pay: bool = True, cart_ms: float = 0.0
) -> list[dict]:
    """gateway SERVER -> stock SERVER (a leaf), then -> payment SERVER; with ``cart_ms``, the stock call is made
    by a cart service after that much work of its own. No span carries a status code (traces as many
    benchmarks export them). A failing stock service returns at once and the gateway skips the payment."""
    t = start_ms
    stock_start = t + 0.5 + cart_ms
    stock_end = stock_start + (0.1 if stock_fails else stock_ms)
    paid = pay and not stock_fails
    end = stock_end + (4.5 if paid else 0.5)
    gateway = span(trace, "POST /checkout", service="gateway", kind="SERVER", start_ms=t, end_ms=end)
    caller = gateway
    spans = [gateway]
    if cart_ms:
        caller = span(trace, "GET /cart", service="cart", kind="SERVER", parent=gateway, start_ms=t + 0.5,
                      end_ms=stock_end + 0.1)  # fmt: skip
        spans.append(caller)
    spans.append(span(trace, "GET /stock", service="stock", kind="SERVER", parent=caller, start_ms=stock_start,
                      end_ms=stock_end))  # fmt: skip
    if paid:
        spans.append(span(trace, "POST /pay", service="payment", kind="SERVER", parent=gateway,
                          start_ms=stock_end + 0.5, end_ms=stock_end + 4.0))  # fmt: skip
    return spans


def checkout_spans(
    n_base: int, n_fault: int, *, fails: float, skips: float = 0.0, cart_ms: float = 0.0, seed: int = 2
) -> list[dict]:
    """``fails``: the share of fault-window requests whose stock call fails fast (the gateway then skips the
    payment); ``skips``: the share where the gateway skips the payment itself, after a normal stock call."""
    rng = random.Random(seed)
    spans: list[dict] = []
    for i in range(n_base + n_fault):
        fault = i >= n_base
        stock_fails = fault and rng.random() < fails
        pay = not (fault and rng.random() < skips)
        stock_ms = 3 + rng.random()
        spans += checkout(i + 1, i * SPACING_MS, stock_ms=stock_ms, stock_fails=stock_fails, pay=pay, cart_ms=cart_ms)
    return spans


def test_a_leaf_that_fails_fast_without_a_status_code_is_the_cause_not_its_caller_missing_a_child():
    spans = checkout_spans(N_BASE, N_FAULT, fails=0.5)
    report = analyse(spans)
    first = report.first
    assert (first.service, first.name) == ("stock", "GET /stock"), first.deviation
    assert [d.kind for d in first.deviations] == ["failed_fast"]
    assert first.deviation.startswith("failed fast (0.1 ms vs median 3.")
    assert [c.deviation.split(" ")[0] for c in first.chain] == ["failed", "missing"]  # the gateway: explained
    assert pair(report, "gateway", "POST /checkout").root_causes == 0
    stock = pair(report, "stock", "GET /stock")
    assert stock.failed_fast == stock.root_causes > 0 and "failed fast" in stock.deviation
    assert report.suspects[0].service == "stock"
    assert json.loads(json.dumps(report.to_json()))["pairs"][0]["failed_fast"] == stock.failed_fast


def test_a_call_that_failed_fast_is_found_below_a_caller_that_did_not():
    """The stock call is made by the cart service, after 4 ms of its own work: when it fails, the cart span ends
    early but not far shorter than usual (4.6 ms against 7.5); the gateway, missing its payment call, is two
    calls above the service that failed."""
    report = analyse(checkout_spans(N_BASE, N_FAULT, fails=0.5, cart_ms=4.0))
    first = report.first
    assert (first.service, [d.kind for d in first.deviations]) == ("stock", ["failed_fast"]), first.deviation
    assert [c.service for c in first.chain] == ["stock", "cart", "gateway"]
    assert not any(p.service == "cart" for p in report.pairs)  # the cart span: not flagged
    assert report.suspects[0].service == "stock"


def test_a_caller_that_skips_a_call_after_a_normal_one_is_itself_the_cause():
    report = analyse(checkout_spans(N_BASE, N_FAULT, fails=0.0, skips=0.5))
    first = report.first
    assert (first.service, [d.kind for d in first.deviations]) == ("gateway", ["missing_child"])
    assert not any(p.failed_fast for p in report.pairs)


def test_a_child_absent_under_a_thin_baseline_is_judged_with_both_samples_sizes():
    """Four baseline parents, all with the payment call: its absence from most of the fault window is a
    finding; from a fifth of 300 fault requests it is not (a child called 80% of the time is under all of four
    parents two times in five)."""
    thin = N_BASE - 4
    crash = checkout_spans(4, 30, fails=0.0, skips=0.9)
    for s in crash:  # the baseline starts where the fault window's traces are timed from
        s["start_ns"] += int(thin * SPACING_MS * 1e6)
        s["end_ns"] += int(thin * SPACING_MS * 1e6)
    first = analyse(crash).first
    assert first is not None and first.service == "gateway" and first.deviations[0].kind == "missing_child"
    chance = checkout_spans(4, 300, fails=0.0, skips=0.2)
    for s in chance:
        s["start_ns"] += int(thin * SPACING_MS * 1e6)
        s["end_ns"] += int(thin * SPACING_MS * 1e6)
    report = analyse(chance)
    assert report.first is None, report.first and report.first.deviation


def stock_only_spans(stock_ms, *, n_base: int = N_BASE, n_fault: int = N_FAULT, seed: int = 3) -> list[dict]:
    """The gateway calls only the stock service, so nothing is ever missing; ``stock_ms(i, rng)`` gives the i-th
    fault-window request's stock time (None: it fails fast)."""
    rng = random.Random(seed)
    spans: list[dict] = []
    for i in range(n_base + n_fault):
        ms = 3 + rng.random() if i < n_base else stock_ms(i - n_base, rng)
        spans += checkout(i + 1, i * SPACING_MS, stock_ms=ms or 0.0, stock_fails=ms is None, pay=False)
    return spans


def test_a_service_whose_spans_collapsed_failed_fast_though_no_caller_stopped_calling():
    report = analyse(stock_only_spans(lambda i, rng: None if i % 2 else 3 + rng.random()))
    first = report.first
    assert (first.service, [d.kind for d in first.deviations]) == ("stock", ["failed_fast"]), first.deviation
    assert report.suspects[0].service == "stock"
    assert pair(report, "stock", "GET /stock").failed_fast == N_FAULT // 2


def test_spans_half_as_long_or_a_few_collapsed_ones_are_no_failure():
    """Half the usual time on every fault-window request is a change, not a failure; two collapsed spans in 60 are
    within what a baseline of 120 allows."""
    half = analyse(stock_only_spans(lambda i, rng: (3 + rng.random()) / 2))
    assert half.first is None or half.first.deviations[0].kind != "failed_fast"
    few = analyse(stock_only_spans(lambda i, rng: None if i in (7, 40) else 3 + rng.random()))
    assert few.first is None, few.first.deviation


def test_a_span_that_collapsed_but_made_its_usual_calls_did_not_fail():
    """A service whose own work became 5x shorter while it still called what it always calls did its work
    (a cache, a cheaper path): not a failure, whatever its time."""

    def request(i: int) -> list[dict]:
        own = (8.0 if i < N_BASE else 1.0) + (i % 7) * 0.1
        top = span(i + 1, "GET /list", service="catalog", kind="SERVER", start_ms=i * SPACING_MS,
                   end_ms=i * SPACING_MS + own + 1.2)  # fmt: skip
        child = span(i + 1, "GET /prices", service="prices", kind="SERVER", parent=top,
                     start_ms=i * SPACING_MS + own, end_ms=i * SPACING_MS + own + 1.0 + (i % 5) * 0.02)  # fmt: skip
        return [top, child]

    report = analyse([s for i in range(N_BASE + N_FAULT) for s in request(i)])
    assert report.first is None or report.first.deviations[0].kind != "failed_fast", report.first.deviation
    assert not any(p.failed_fast for p in report.pairs)


def test_path_min_caps_by_every_ancestor_and_needs_every_link_below_the_top() -> None:
    """The impact's walk up the tree: row 3's ancestors are 2, 1 and the top 0; row 4 hangs under 1, whose link to
    the top is broken (1 is off its parent's critical path), so nothing below 1 reaches the top."""
    from drill.traces.analysis import _path_min

    parent = np.array([-1, 0, 1, 2, 1, -1])
    value = np.array([9.0, 5.0, np.inf, 1.0, 2.0, 3.0])
    link = np.array([True, True, True, True, True, True])
    low, ok = _path_min(parent, value, link, np.array([3, 4, 0, 5]))
    assert low.tolist() == [5.0, 5.0, np.inf, np.inf] and ok.tolist() == [True, True, True, True]
    link[1] = False
    low, ok = _path_min(parent, value, link, np.array([3, 4, 1, 0]))
    assert ok.tolist() == [False, False, False, True] and low.tolist() == [5.0, 5.0, 9.0, np.inf]
    link[1], link[2] = True, False  # the row's own parent off the critical path, or the row itself
    assert _path_min(parent, value, link, np.array([3, 2, 4]))[1].tolist() == [False, False, True]


def _with_peer_names(spans: list[dict], peer: str) -> list[dict]:
    """The router's calls carrying the upstream's name in ``peer.service``, as the harness's router writes it
    (``peer`` formats the replica's number: ``vllm-{}``, or the router's own ``replica-{}``)."""
    for s in spans:
        if s["kind"] == "CLIENT":
            s["attributes"]["peer.service"] = peer.format(s["attributes"]["drill.upstream"].split("-")[-1])
    return spans


def test_a_slow_link_to_a_replica_whose_spans_were_all_lost_is_still_its_link_and_its_top_suspect():
    """Real vLLM in CI: one replica's exporter was backing off and exported nothing for the whole drill. Only the
    router's calls show the slow link, and they name that replica only in their attributes. (Its calls then hold
    the replica's work as well as the link, a smaller rise than the link's alone: with the heavier-tailed load of
    ``load_moved_off_a_slowed_replica`` the busier healthy replica outranks it, and there the traces cannot tell.)"""
    spans = [s for s in _with_peer_names(slow_link_to_one_vllm_replica(), "vllm-{}") if s["service"] != "vllm-0"]
    table, _ = with_phase_spans(SpanTable.from_spans(spans))
    report = find_abnormal(table, baseline_until_ns=FAULT_START, fault_start_ns=FAULT_START)
    top = report.suspects[0]
    assert top.service == "vllm-0", [(s.service, s.score) for s in report.suspects]
    assert top.evidence[0].name == "POST upstream → vllm-0", top.evidence


def test_calls_whose_callee_span_was_lost_count_for_the_service_their_peer_name_reached_before():
    """The router names upstreams its own way (``replica-0``); the answered calls show that name reaching
    ``vllm-0``. In the fault window vllm-0's spans are lost: its slow calls are judged with the baseline's calls
    to vllm-0, not as a new callee ``replica-0`` with no baseline."""
    spans, fault_start = load_moved_off_a_slowed_replica()
    spans = [
        s
        for s in _with_peer_names(spans, "replica-{}")
        if not (s["service"] == "vllm-0" and s["start_ns"] >= fault_start)
    ]
    table, _ = with_phase_spans(SpanTable.from_spans(spans))
    report = find_abnormal(table, baseline_until_ns=fault_start, fault_start_ns=fault_start)
    top = report.suspects[0]
    assert top.service == "vllm-0", [(s.service, s.score) for s in report.suspects]
    assert "replica-0" not in {s.service for s in report.suspects}
