"""Ranked suspects (drill.traces.suspects): the failure classes of microservice traces, hand-built.

A small shop: ``gateway`` (SERVER) calls ``cart`` and ``auth`` through CLIENT spans, ``cart`` calls the
database ``pg`` (no spans of its own: only cart's CLIENT span names it), and now and then the rare
``reports`` service. Latencies are lognormal with a fixed seed; the fault is applied to the spans of
traces starting at or after FAULT_S.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import numpy as np
import pytest

from drill.traces.analysis import AnalysisOptions, find_abnormal
from drill.traces.ranktest import group_medians, rank_test, sort_sides
from drill.traces.selftime import critical_children, direct_links, self_time
from drill.traces.suspects import _shrinkage
from drill.traces.table import SpanTable
from tests.traces.spankit import T0, span

FAULT_S = 60.0
GAP_MS = 100.0  # 10 requests/s


@dataclass
class Fault:
    cpu: dict[str, float] = field(default_factory=dict)  # service -> own-work factor
    ingress_ms: dict[str, float] = field(default_factory=dict)  # service -> delay on every call into it
    pg_factor: float = 1.0
    share: float = 1.0  # the share of calls a cpu / ingress fault hits (an intermittent fault: some)


def _lognormal(rng: random.Random, median_ms: float, sigma: float = 0.25) -> float:
    return median_ms * math.exp(rng.gauss(0, sigma))


def _call(rng, trace, parent, caller, callee, name, start, work_ms, fault, active, attrs=None) -> tuple[list, float]:
    """A CLIENT span of ``caller`` around ``callee``'s SERVER span doing ``work_ms`` of own work."""
    active = active and (fault.share >= 1 or rng.random() < fault.share)
    delay = fault.ingress_ms.get(callee, 0.0) if active else 0.0
    work = _lognormal(rng, work_ms) * (fault.cpu.get(callee, 1.0) if active else 1.0)
    server_start = start + _lognormal(rng, 0.3)
    server_end = server_start + work
    end = server_end + _lognormal(rng, 0.3) + delay
    client = span(
        trace,
        name,
        service=caller,
        kind="CLIENT",
        parent=parent,
        start_ms=start,
        end_ms=end,
        attributes=attrs or {"server.address": callee, "server.port": 8080},
    )
    server = span(trace, name, service=callee, kind="SERVER", parent=client, start_ms=server_start, end_ms=server_end)
    return [client, server], end


def shop(fault: Fault | None = None, *, seconds: float = 120.0, seed: int = 1, reports_every: int = 15) -> list[dict]:
    rng, fault, out = random.Random(seed), fault or Fault(), []
    for i in range(int(seconds * 1000 / GAP_MS)):
        start = i * GAP_MS
        active = start >= FAULT_S * 1000
        trace = i + 1
        gateway = span(trace, "GET /checkout", service="gateway", kind="SERVER", start_ms=start, end_ms=start)
        spans = [gateway]
        t = start + _lognormal(rng, 1.0) * (fault.cpu.get("gateway", 1.0) if active else 1.0)
        auth, t = _call(rng, trace, gateway, "gateway", "auth", "POST /verify", t, 2.0, fault, active)
        spans += auth
        cart, t = _call(rng, trace, gateway, "gateway", "cart", "GET /cart", t, 3.0, fault, active)
        spans += cart
        pg_ms = _lognormal(rng, 4.0) * (fault.pg_factor if active else 1.0)
        client, server = cart  # cart queries pg after its own work: the query moves the span's end
        back = client["end_ns"] - server["end_ns"]
        q_start = (server["end_ns"] - T0) / 1e6
        spans.append(
            span(
                trace,
                "SELECT cart",
                service="cart",
                kind="CLIENT",
                parent=server,
                start_ms=q_start,
                end_ms=q_start + pg_ms,
                attributes={"db.system": "postgresql", "server.address": "pg.shop.svc.cluster.local"},
            )
        )
        server["end_ns"] = T0 + int((q_start + pg_ms + 0.2) * 1e6)
        client["end_ns"] = server["end_ns"] + back
        t = max(t, (cart[0]["end_ns"] - T0) / 1e6)
        if i % reports_every == 0:
            rep, t = _call(rng, trace, gateway, "gateway", "reports", "GET /report", t, 20.0, fault, active)
            spans += rep
        gateway["end_ns"] = T0 + int((t + 0.5) * 1e6)
        out += spans
    return out


def analyse(spans: list[dict], **options) -> object:
    table = SpanTable.from_spans(spans)
    return find_abnormal(table, baseline_until_ns=T0 + int(FAULT_S * 1e9), options=AnalysisOptions(**options))


def services(report) -> list[str]:
    return [s.service for s in report.suspects]


def analyze_cli(path, *flags: str):
    """``drill traces analyze PATH`` with the shop's baseline end (``--baseline-until``), and ``flags``."""
    from click.testing import CliRunner

    from drill.cli.main import cli

    until = f"{(T0 + int(FAULT_S * 1e9)) / 1e9:.3f}"
    args = ["traces", "analyze", str(path), "--baseline-until", until, *flags]
    return CliRunner().invoke(cli, args, catch_exceptions=False)


# -- the statistics --------------------------------------------------------------------------------


def test_rank_test_small_samples_ties_and_direction():
    values = np.array([1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 13.0, 5.0, 5.0, 5.0, 5.0])
    group = np.array([0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1])
    fault = np.array([False, False, False, True, True, True, True, False, False, True, True])
    test = rank_test(values, group, fault, 3)
    assert test.n_base.tolist() == [3, 2, 0] and test.n_fault.tolist() == [4, 2, 0]
    assert test.z[0] > 1.9  # every fault value above every baseline one: U = 12 of 12
    assert abs(test.z[1]) < 0.5  # all ties: no evidence either way
    assert test.z[2] == 0  # an empty group
    slower = rank_test(values[::-1].copy(), group[::-1].copy(), ~fault[::-1], 3)
    assert slower.z[0] < 0  # the other way round: the fault window is faster
    assert group_medians(values, group, 3)[:2].tolist() == [10.0, 5.0] and np.isnan(group_medians(values, group, 3)[2])


def test_self_time_follows_the_critical_path_not_parallel_children():
    parent = span(1, "fan-out", start_ms=0, end_ms=100)
    a = span(1, "a", parent=parent, start_ms=10, end_ms=60)  # parallel with b, finishes first
    b = span(1, "b", parent=parent, start_ms=10, end_ms=90)  # the last-finishing child
    c = span(1, "c", parent=parent, start_ms=0, end_ms=8)  # before b started: on the path
    table = SpanTable.from_spans([parent, a, b, c])
    rows = {table.names[n]: i for i, n in enumerate(table.name)}
    critical = critical_children(table, table.parent_row)
    assert critical[rows["b"]] and critical[rows["c"]] and not critical[rows["a"]]
    own = self_time(table, table.parent_row)
    assert own[rows["fan-out"]] == pytest.approx((100 - 80 - 8) * 1e6)


def test_both_ways_of_finding_the_sibling_that_ended_before_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """The binary search over packed (parent, end) keys, and the merged sort it falls back to for times or parent
    counts the keys cannot hold, give the same critical path on a random tree (with ties and zero-length spans)."""
    from drill.traces import selftime

    rng = random.Random(5)
    spans = []
    for trace in range(60):
        root = span(trace + 1, "root", start_ms=0, end_ms=100)
        spans.append(root)
        for i in range(rng.randint(1, 6)):
            start = rng.choice([0, 10, 20, 20, 40])
            spans.append(span(trace + 1, f"c{i}", parent=root, start_ms=start, end_ms=start + rng.choice([0, 5, 20])))
    table = SpanTable.from_spans(spans)
    fast = critical_children(table, table.parent_row)
    monkeypatch.setattr(selftime, "_finished_before", lambda t, p, b, t0: selftime._finished_before_merged(t, p, b))
    merged = critical_children(table, table.parent_row)
    assert 0 < fast.sum() < len(table) - 60 and (fast == merged).all()


def test_direct_links_hold_the_time_around_a_call_without_a_client_span():
    caller = span(1, "GET /", service="web", kind="SERVER", start_ms=0, end_ms=50)
    callee = span(1, "GET /api", service="api", kind="SERVER", parent=caller, start_ms=5, end_ms=35)
    same = span(1, "render", service="web", parent=caller, start_ms=40, end_ms=48)
    table = SpanTable.from_spans([caller, callee, same])
    links = direct_links(table, table.parent_row)
    assert len(links.child) == 1 and table.span_id[links.child[0]] == callee["span_id"]
    assert links.gap[0] == pytest.approx(10e6)  # 5 ms before it, 5 ms until the next sibling


def test_a_parallel_call_s_link_time_leaves_out_the_wait_for_a_slower_sibling():
    caller = span(1, "GET /", service="web", kind="SERVER", start_ms=0, end_ms=100)
    fast = span(1, "GET /a", service="a", kind="SERVER", parent=caller, start_ms=2, end_ms=20)
    slow = span(1, "GET /b", service="b", kind="SERVER", parent=caller, start_ms=3, end_ms=97)
    table = SpanTable.from_spans([caller, fast, slow])
    links = direct_links(table, table.parent_row)
    gap = {table.services[table.service[c]]: g for c, g in zip(links.child.tolist(), links.gap.tolist())}
    assert gap["a"] == pytest.approx(2e6)  # not the 80 ms it waited for b
    assert gap["b"] == pytest.approx(6e6)  # the last to end: 3 ms before it, 3 ms after it


def test_a_large_effect_on_a_handful_of_spans_is_shrunk_below_a_clear_one_on_many():
    weight = _shrinkage(np.array([3, 30, 0]), np.array([1, 60, 5]))
    assert weight[0] == pytest.approx(0.2) and weight[1] > 0.85 and weight[2] == 0


# -- the failure classes ---------------------------------------------------------------------------


def test_a_calm_shop_has_no_suspect_and_says_what_it_judged():
    report = analyse(shop())
    assert report.suspects == () and report.inconclusive_reason is None
    assert report.ranking.judged == report.ranking.pairs and report.ranking.not_judged == ()


def test_cpu_contention_pools_a_little_slower_everywhere_over_one_noisy_pair():
    report = analyse(shop(Fault(cpu={"cart": 1.35})))
    assert services(report)[0] == "cart", [(s.service, s.why) for s in report.suspects]
    assert "own work" in report.suspects[0].why
    assert "gateway" not in services(report)[:1]  # the caller only waited for it


BACKENDS = [f"svc-{i}" for i in range(8)]


def fleet(fault: Fault, *, seconds: float = 120.0, seed: int = 3) -> list[dict]:
    """A gateway with 4 pages, each calling 2 of 8 backends in turn (20 requests/s): 9 pairs of own work, 8 links."""
    rng, out = random.Random(seed), []
    for i in range(int(seconds * 1000 / 50)):
        start, page = i * 50.0, i % 4
        active = start >= FAULT_S * 1000
        gateway = span(i + 1, f"GET /page-{page}", service="gateway", kind="SERVER", start_ms=start, end_ms=start)
        spans = [gateway]
        t = start + _lognormal(rng, 1.0) * (fault.cpu.get("gateway", 1.0) if active else 1.0)
        for backend in BACKENDS[2 * page : 2 * page + 2]:
            pair, t = _call(rng, i + 1, gateway, "gateway", backend, f"{backend}/Get", t, 2.0, fault, active)
            spans += pair
        gateway["end_ns"] = T0 + int((t + 0.5) * 1e6)
        out += spans
    return out


def test_a_load_change_slowing_every_service_s_own_work_but_not_the_network_is_no_suspect():
    """The shift every unit shares is taken per kind of time: own work 1.45x slower everywhere, links unchanged.
    One shift over both (their median: in between) left own work looking slower (two backends named)."""
    load = {service: 1.45 for service in ["gateway", *BACKENDS]}
    assert services(analyse(fleet(Fault(cpu=load)))) == []
    report = analyse(fleet(Fault(cpu={**load, "svc-3": 1.45 * 1.5})))
    assert services(report) == ["svc-3"], [(s.service, s.score) for s in report.suspects]


def test_network_delay_on_the_callee_ranks_the_callee_first_and_the_caller_after():
    report = analyse(shop(Fault(ingress_ms={"auth": 40.0})))
    ranked = services(report)
    assert ranked[0] == "auth", [(s.service, s.why) for s in report.suspects]
    assert "gateway" in ranked[1:]
    top = report.suspects[0]
    assert "links into it are slow" in top.why and top.evidence[0].role == "callee of a slow link"
    assert top.evidence[0].service == "gateway" and top.evidence[0].kind == "CLIENT"


def test_a_slow_database_without_spans_is_named_from_the_client_spans_peer():
    report = analyse(shop(Fault(pg_factor=5.0)))
    assert services(report)[0] == "pg"  # server.address pg.shop.svc.cluster.local: its first DNS label


def test_a_rare_service_with_a_thin_baseline_is_judged_and_said_to_be_thin():
    report = analyse(shop(Fault(cpu={"reports": 4.0}), reports_every=150))  # 4 baseline spans, 4 in the fault
    assert services(report)[0] == "reports", [(s.service, s.why) for s in report.suspects]
    evidence = report.suspects[0].evidence[0]
    assert evidence.thin and evidence.baseline_spans == 4 and "thin baseline: rank test on 4 spans" in evidence.text
    assert services(analyse(shop(Fault(cpu={"reports": 4.0}), reports_every=150), min_judged_spans=5)) == []


def test_mostly_unjudged_is_inconclusive_with_the_counts_never_no_deviation():
    spans = shop(Fault(), seconds=120)
    renamed = []
    for s in spans:  # every fault-window span gets names the baseline never had: nothing can be judged
        if s["start_ns"] >= T0 + int(FAULT_S * 1e9):
            s = {**s, "name": s["name"] + " v2"}
        renamed.append(s)
    report = analyse(renamed)
    assert report.suspects == () and report.first is None
    assert report.inconclusive_reason is not None
    assert f"{report.ranking.pairs} of {report.ranking.pairs} pairs had fewer than 3 baseline spans" in (
        report.inconclusive_reason
    )


def test_json_carries_the_ranking_with_evidence_text():
    data = analyse(shop(Fault(ingress_ms={"auth": 40.0}))).to_json()
    suspect = data["ranking"]["suspects"][0]
    assert suspect["service"] == "auth" and suspect["score"] > 0 and suspect["why"]
    evidence = suspect["evidence"][0]
    assert {"baseline_spans", "fault_spans", "ratio", "z", "thin", "role", "text"} <= set(evidence)
    assert data["ranking"]["inconclusive_reason"] is None


def test_without_ranking_nothing_is_ranked():
    table = SpanTable.from_spans(shop(Fault(cpu={"cart": 2.0})))
    report = find_abnormal(table, baseline_until_ns=T0 + int(FAULT_S * 1e9), rank=False)
    assert report.ranking is None and report.suspects == () and report.first is not None


def test_the_sorted_rank_test_agrees_with_the_merged_one():
    rng = np.random.default_rng(3)
    values = np.rint(rng.lognormal(10, 1, 3000) / 100) * 100  # ties
    group = rng.integers(0, 7, 3000)
    fault = rng.random(3000) < 0.4
    values[fault & (group == 2)] *= 3
    sides = sort_sides(values, group, fault, 7)
    fast, merged = sides.rank_test(1.25), rank_test(np.where(fault, values, values * 1.25), group, fault, 7)
    assert np.allclose(fast.z, merged.z) and (fast.n_base == merged.n_base).all()
    assert fast.z[2] > 5 and np.allclose(sides.medians(fault=True), group_medians(values[fault], group[fault], 7))


def test_a_rarely_called_database_is_judged_over_all_its_callers_pooled():
    """Five callers each query the database twice in the baseline (too few to judge one caller's link);
    pooled over the callers, its calls are judged together and the database is named."""
    rng = random.Random(5)
    spans: list[dict] = []
    for t in range(25):
        fault = t >= 10
        start = t * 400.0 if not fault else FAULT_S * 1000 + (t - 10) * 400.0
        caller = f"svc-{t % 5}"
        work = 2 + rng.random()
        query = (4 + rng.random()) * (5 if fault else 1)
        top = span(t + 1, "GET /", service="frontend", kind="SERVER", start_ms=start, end_ms=start + work + query + 2)
        server = span(
            t + 1, f"GET /{caller}", service=caller, kind="SERVER", parent=top, start_ms=start + 1,
            end_ms=start + 1 + work + query,
        )  # fmt: skip
        client = span(
            t + 1, "SELECT orders", service=caller, kind="CLIENT", parent=server, start_ms=start + 1 + work,
            end_ms=start + 1 + work + query, attributes={"db.system": "postgresql", "server.address": "orders-db"},
        )  # fmt: skip
        spans += [top, server, client]
    report = analyse(spans)
    assert services(report)[0] == "orders-db", [(s.service, s.why) for s in report.suspects]
    assert "pooled" in report.suspects[0].evidence[0].name


def test_a_large_change_on_a_thin_link_is_significant_though_a_rank_test_on_it_cannot_be():
    """3 baseline and 4 fault calls to a rare service, 40x slower on the wire: the rank test's smallest p is
    1/35 (z about 2.1, short of alpha 0.01); the log-scale test with the well-sampled pairs' spread is not."""
    rng = random.Random(9)
    spans: list[dict] = []
    rare = {5, 17, 29, 40, 44, 48, 52}  # 3 in the baseline (traces 0-35), 4 in the fault window
    for t in range(56):
        start = t * 500.0 + (FAULT_S * 1000 - 36 * 500.0 if t >= 36 else 0)
        top = span(t + 1, "GET /", service="web", kind="SERVER", start_ms=start, end_ms=start + 30)
        trace = [top]
        at = start + 1
        for op in range(6):
            took = 2 * rng.lognormvariate(0, 0.3)
            trace.append(span(t + 1, f"step{op}", service="web", parent=top, start_ms=at, end_ms=at + took))
            at += took + 0.1
        if t in rare:
            wire = 1 + rng.random() * 0.3 if t < 36 else 40 + rng.random()
            client = span(
                t + 1, "POST ledger", service="web", kind="CLIENT", parent=top, start_ms=at, end_ms=at + wire + 2,
                attributes={"server.address": "ledger"},
            )  # fmt: skip
            server = span(
                t + 1, "POST /entries", service="ledger", kind="SERVER", parent=client, start_ms=at + wire / 2,
                end_ms=at + wire / 2 + 2,
            )  # fmt: skip
            trace += [client, server]
        spans += trace
    report = analyse(spans)
    assert services(report)[0] == "ledger", [(s.service, s.why) for s in report.suspects]
    link = report.suspects[0].evidence[0]
    assert link.thin and (link.baseline_spans, link.fault_spans) == (3, 4)
    assert link.z > 2.33, link  # alpha 0.01, one-sided


def test_huge_units_judged_on_a_sample_keep_the_verdict_and_the_true_counts(monkeypatch):
    spans = shop(Fault(cpu={"cart": 1.35}))
    full = analyse(spans)
    monkeypatch.setattr("drill.traces.suspects._MAX_SAMPLES", 40)
    sampled, again = analyse(spans), analyse(list(reversed(spans)))
    assert services(sampled)[:1] == services(full)[:1] == services(again)[:1] == ["cart"]
    assert sampled.ranking.fault_spans == full.ranking.fault_spans
    top = sampled.suspects[0].evidence[0]
    assert top.baseline_spans > 40 and top == again.suspects[0].evidence[0]


def test_an_intermittent_fault_that_barely_moves_the_median_is_still_the_first_suspect():
    """CPU contention on auth that hits a fifth of its calls (2x): its median grows under 1.15x, under min_ratio,
    while its rank test is clear; with nothing else deviating, it is suggestive and ranks first."""
    report = analyse(shop(Fault(cpu={"auth": 2.0}, share=0.2)))
    assert services(report)[:1] == ["auth"], [(s.service, s.score, s.why) for s in report.suspects]
    evidence = report.suspects[0].evidence[0]
    assert evidence.name == "POST /verify" and evidence.ratio < 1.15 and evidence.z > 2.33


def test_a_callee_skewed_out_of_its_caller_counts_whole_in_the_caller_s_self_time():
    """The callee's clock runs 5 ms ahead: its span sticks out of its caller's. It was waited for all the same."""
    caller = span(1, "GET /cart", service="cart", kind="SERVER", start_ms=0, end_ms=20)
    callee = span(1, "GET /price", service="price", kind="SERVER", parent=caller, start_ms=8, end_ms=23)
    same = span(1, "step", service="cart", parent=caller, start_ms=15, end_ms=25)  # same clock: clipped
    table = SpanTable.from_spans([caller, callee])
    assert self_time(table, table.parent_row)[0] == pytest.approx((20 - 15) * 1e6)  # 15 ms of callee, not 12
    table = SpanTable.from_spans([caller, same])
    assert self_time(table, table.parent_row)[0] == pytest.approx((20 - 5) * 1e6)


def _rare_operations(factor: float) -> list[dict]:
    """``web`` calls one of ``search``'s six operations per request, two of each in the baseline and four in the
    fault window (too few to judge any one operation), each ``factor`` times slower in the fault window."""
    rng = random.Random(11)
    spans: list[dict] = []
    for t in range(36):
        fault = t >= 12
        start = t * 500.0 + (FAULT_S * 1000 - 12 * 500.0 if fault else 0)
        top = span(t + 1, "GET /", service="web", kind="SERVER", start_ms=start, end_ms=start + 60)
        trace, at = [top], start + 1
        for op in range(4):  # web's own steps: well sampled
            took = 2 * rng.lognormvariate(0, 0.25)
            trace.append(span(t + 1, f"step{op}", service="web", parent=top, start_ms=at, end_ms=at + took))
            at += took + 0.1
        op = f"/search/{t % 6}"
        work = (3 + t % 6) * rng.lognormvariate(0, 0.25) * (factor if fault else 1.0)
        client = span(
            t + 1, f"GET {op}", service="web", kind="CLIENT", parent=top, start_ms=at, end_ms=at + work + 0.6,
            attributes={"server.address": "search"},
        )  # fmt: skip
        server = span(t + 1, f"GET {op}", service="search", kind="SERVER", parent=client, start_ms=at + 0.3,
                      end_ms=at + 0.3 + work)  # fmt: skip
        spans += [*trace, client, server]
    return spans


def test_a_service_slower_in_every_rarely_called_operation_is_judged_over_all_of_them_pooled():
    """Two baseline spans per operation: no operation can be judged alone (3 needed); pooled over the six,
    each span scaled by its own operation's baseline median, the service's own work is."""
    report = analyse(_rare_operations(2.0))
    assert services(report)[:1] == ["search"], [(s.service, s.why) for s in report.suspects]
    evidence = report.suspects[0].evidence[0]
    assert evidence.name == "all of search's own work, pooled" and evidence.role == "own work"
    assert (evidence.baseline_spans, evidence.fault_spans) == (12, 24) and evidence.ratio > 1.6
    assert "search" not in services(analyse(_rare_operations(1.0)))


def _with_new_callee(link_ms: float) -> list[dict]:
    """The calm shop whose gateway, in five fault-window requests, also calls ``ledger``, never called in the
    baseline, with ``link_ms`` of link time (the other links: about 0.6 ms)."""
    spans = shop()
    tops = [s for s in spans if s["name"] == "GET /checkout" and s["start_ns"] >= T0 + FAULT_S * 1e9][:50:10]
    for top in tops:
        at = (top["end_ns"] - T0) / 1e6
        client = span(
            top["trace_id"], "POST /entries", service="gateway", kind="CLIENT", parent=top, start_ms=at,
            end_ms=at + 2 + link_ms, attributes={"server.address": "ledger"},
        )  # fmt: skip
        server = span(
            top["trace_id"], "POST /entries", service="ledger", kind="SERVER", parent=client,
            start_ms=at + link_ms / 2, end_ms=at + link_ms / 2 + 2,
        )  # fmt: skip
        top["end_ns"] = client["end_ns"] + 500_000
        spans += [client, server]
    return spans


def test_links_into_a_service_never_called_in_the_baseline_are_judged_against_every_link():
    report = analyse(_with_new_callee(30.0))
    assert services(report)[:1] == ["ledger"], [(s.service, s.why) for s in report.suspects]
    evidence = report.suspects[0].evidence[0]
    assert evidence.name == "calls into ledger, against every link's baseline"
    assert evidence.role == "callee of a slow link" and evidence.fault_spans == 5 and evidence.ratio > 10
    # a link only somewhat slower than the others may be so by nature: not a finding on this prior alone
    assert "ledger" not in services(analyse(_with_new_callee(1.0)))


def test_a_call_no_server_span_answers_holds_the_callee_s_work_and_weighs_less_for_the_caller():
    """cart's CLIENT span to pg has no SERVER span under it: its self time is pg's work, not only the link's,
    so cart (its only outgoing link slow) gets half the caller weight: at most 0.375 of pg's score."""
    report = analyse(shop(Fault(pg_factor=5.0)))
    score = {s.service: s.score for s in report.suspects}
    assert services(report)[0] == "pg" and "cart" in score, score
    assert score["cart"] <= 0.4 * score["pg"], score
    assert report.suspects[services(report).index("cart")].evidence[0].role == "caller of a slow link"


def _nested_step(seed: int) -> list[dict]:
    """``web`` calls ``a`` and ``b``, both 2x slower in the fault window; ``a``'s own work is split between its
    SERVER span and an INTERNAL step under it (``a.process``), ``b``'s is in its SERVER span alone."""
    rng = random.Random(seed)
    spans: list[dict] = []
    for t in range(120):
        fault = t >= 60
        start = t * 500.0 + (FAULT_S * 1000 - 60 * 500.0 if fault else 0)
        factor = 2.0 if fault else 1.0
        top = span(t + 1, "GET /", service="web", kind="SERVER", start_ms=start, end_ms=start + 80)
        trace, at = [top], start + 1
        for _ in range(3):
            took = 2 * rng.lognormvariate(0, 0.25)
            trace.append(span(t + 1, "step", service="web", parent=top, start_ms=at, end_ms=at + took))
            at += took + 0.1
        for callee in ("a", "b"):
            work = 4 * rng.lognormvariate(0, 0.25) * factor
            client = span(t + 1, f"GET /{callee}", service="web", kind="CLIENT", parent=top, start_ms=at,
                          end_ms=at + work + 0.6, attributes={"server.address": callee})  # fmt: skip
            server = span(t + 1, f"GET /{callee}", service=callee, kind="SERVER", parent=client, start_ms=at + 0.3,
                          end_ms=at + 0.3 + work)  # fmt: skip
            trace += [client, server]
            if callee == "a":  # half of a's work in a step of its own
                trace.append(span(t + 1, "a.process", service="a", parent=server, start_ms=at + 0.3,
                                  end_ms=at + 0.3 + work / 2))  # fmt: skip
            at += work + 0.7
        spans += trace
    return spans


def test_a_step_nested_in_an_operation_is_not_counted_as_a_second_operation():
    """a's SERVER span and its INTERNAL step both show the same request's work slowed: counted once, ``a``
    scores about what ``b`` does (twice it, counted twice)."""
    for seed in (1, 2, 3):
        score = {s.service: s.score for s in analyse(_nested_step(seed)).suspects}
        assert {"a", "b"} <= set(score), score
        assert score["a"] < 1.4 * score["b"], (seed, score)


def test_a_step_of_a_service_that_records_no_kinds_is_counted_once_too():
    """The same without any kind recorded (a CSV table): the step stays UNSPECIFIED, and counts as an INTERNAL one."""
    for seed in (1, 2, 3):
        spans = [{**s, "kind": "UNSPECIFIED"} for s in _nested_step(seed)]
        report = analyse(spans)
        assert report.inferred_kinds is not None and "a, b" in report.inferred_kinds
        score = {s.service: s.score for s in report.suspects}
        assert {"a", "b"} <= set(score), score
        assert score["a"] < 1.4 * score["b"], (seed, score)
