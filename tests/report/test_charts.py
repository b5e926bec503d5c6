"""The report's charts on hand-built run directories: valid SVG with the series, labels and shading a reader needs,
None where there is nothing to draw, and byte-identical output for the same run directory."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from drill.report import charts
from drill.rundir.evidence import RunEvidence
from drill.traces.run_traces import run_traces
from drill.traces.table import SpanTable
from tests.checks.rundir_kit import T0, RunKit

SVG = "{http://www.w3.org/2000/svg}"
ROUTER, REPLICA = "drill-router", "drill-replica-0"


def _drill(kit: RunKit, n: int = 600, *, refusals: bool = True, timeouts: bool = True) -> RunKit:
    """Baseline 0-60 s, fault 60-120 s (injected at 65, reverted at 110), recovery 120-180 s; two pools.

    In the fault window TTFT is eight times the baseline's; every third request there is refused and every
    seventeenth times out (when asked)."""
    kit.phases(baseline=(0, 60), fault=(60, 120), recovery=(120, 180))
    kit.fault("flood-0", injected=65, reverted=110)
    kit.pool("interactive", slo={"ttft_p95": 1.0, "e2e_p95": 4.0})
    kit.pool("batch", slo={"ttft_p95": 5.0})
    for i in range(n):
        at = 180 * i / n
        pool = "batch" if i % 3 == 0 else "interactive"
        faulty = 65 <= at < 110
        if faulty and refusals and i % 3 == 1:
            kit.request(at, pool=pool, status=503, error="refused", headers_ms=12)
        elif faulty and timeouts and i % 17 == 0:
            kit.request(at, pool=pool, status=None, error="timeout")
        else:
            ttft = (80 + (i * 37) % 50) * (8 if faulty else 1)
            kit.request(at, pool=pool, ttft_ms=ttft, e2e_ms=ttft + 900 + (i * 13) % 400, completion_tokens=40)
    return kit


def _trace(
    kit: RunKit, trace_id: str, at: float, *, slow: float = 1.0, error: bool = False, retry: bool = False
) -> None:
    """The embedded stack's spans of one request: router SERVER > CLIENT > replica SERVER > llm_request >
    queue, prefill, decode (a second router CLIENT attempt when ``retry``)."""
    sid = trace_id[:14]
    status = "ERROR" if error else "UNSET"
    kit.span(
        trace_id=trace_id,
        span_id=sid + "01",
        name="POST /v1/chat/completions",
        service=ROUTER,
        kind="SERVER",
        start=at,
        end=at + 0.5 * slow,
    )
    kit.span(
        trace_id=trace_id,
        span_id=sid + "02",
        parent_id=sid + "01",
        name="upstream",
        service=ROUTER,
        kind="CLIENT",
        start=at + 0.001,
        end=at + 0.49 * slow,
        status=status,
    )
    if retry:
        kit.span(
            trace_id=trace_id,
            span_id=sid + "08",
            parent_id=sid + "01",
            name="upstream",
            service=ROUTER,
            kind="CLIENT",
            start=at + 0.002,
            end=at + 0.003,
        )
    kit.span(
        trace_id=trace_id,
        span_id=sid + "03",
        parent_id=sid + "02",
        name="POST /v1/chat/completions",
        service=REPLICA,
        kind="SERVER",
        start=at + 0.002,
        end=at + 0.48 * slow,
    )
    kit.span(
        trace_id=trace_id,
        span_id=sid + "04",
        parent_id=sid + "03",
        name="llm_request",
        service=REPLICA,
        start=at + 0.003,
        end=at + 0.47 * slow,
        status=status,
    )
    queued = 0.3 * (slow - 1)
    for k, (name, start, end) in enumerate(
        (
            ("queue", 0.003, 0.013 + queued),
            ("prefill", 0.013 + queued, 0.05 + queued),
            ("decode", 0.05 + queued, 0.47 * slow),
        )
    ):
        kit.span(
            trace_id=trace_id,
            span_id=sid + f"1{k}",
            parent_id=sid + "04",
            name=name,
            service=REPLICA,
            start=at + start,
            end=at + end,
        )


def _root(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return root


def _texts(svg: str) -> list[str]:
    return ["".join(t.itertext()) for t in _root(svg).iter(f"{SVG}text")]


def _ids(svg: str) -> set[str]:
    return {e.get("id") for e in _root(svg).iter() if e.get("id")}


def _has_id(svg: str, fragment: str) -> bool:
    return any(fragment in i for i in _ids(svg))


@pytest.fixture
def run(tmp_path: Path) -> RunEvidence:
    return _drill(RunKit(tmp_path)).evidence()


# --- every chart ---------------------------------------------------------------------------------------------


CHARTS = [charts.latency_over_time, charts.errors_over_time, charts.latency_distributions]


@pytest.mark.parametrize("chart", CHARTS, ids=lambda c: c.__name__)
def test_a_chart_is_inline_svg_with_a_title_and_description(run: RunEvidence, chart) -> None:
    svg = chart(run)
    assert svg is not None and svg.startswith("<svg ")  # no XML prolog: ready to inline into HTML
    root = _root(svg)
    title, desc = root.find(f"{SVG}title"), root.find(f"{SVG}desc")
    assert title is not None and title.text and desc is not None and desc.text
    assert root.get("role") == "img"
    assert set(root.get("aria-labelledby", "").split()) == {title.get("id"), desc.get("id")}


@pytest.mark.parametrize("chart", CHARTS, ids=lambda c: c.__name__)
def test_the_same_run_directory_renders_byte_identical_svg(tmp_path: Path, chart) -> None:
    kit = _drill(RunKit(tmp_path))
    first = chart(kit.evidence())
    second = chart(RunEvidence(kit.run_dir, kit.slo_by_pool))
    assert first is not None and first == second


def test_another_process_renders_the_same_bytes(tmp_path: Path, run: RunEvidence) -> None:
    """The SVG backend hashes ids with a random salt unless told otherwise: a fresh process must agree."""
    here = {c.__name__: c(run) for c in CHARTS}
    code = (
        "import json, sys; from drill.rundir.evidence import RunEvidence; from drill.report import charts; "
        "ev = RunEvidence(sys.argv[1], json.loads(sys.argv[2])); "
        f"print(json.dumps({{n: getattr(charts, n)(ev) for n in {sorted(here)!r}}}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(run.run_dir), json.dumps(run.slo_by_pool)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert json.loads(out.stdout) == here


@pytest.mark.parametrize("chart", CHARTS, ids=lambda c: c.__name__)
def test_a_run_without_client_records_has_no_chart(tmp_path: Path, chart) -> None:
    kit = RunKit(tmp_path)
    kit.phases(baseline=(0, 60), fault=(60, 120))
    assert chart(kit.evidence()) is None


def test_ids_are_scoped_to_their_chart_and_every_reference_resolves(run: RunEvidence) -> None:
    """Several charts inline into one page: an id shared by two of them would make one draw the other's clip."""
    svgs = [c(run) for c in CHARTS]
    seen: set[str] = set()
    for svg in svgs:
        assert svg is not None
        ids = _ids(svg)
        assert not ids & seen
        seen |= ids
        references = set(re.findall(r'url\(#([^)]+)\)|href="#([^"]+)"', svg))
        assert references and {a or b for a, b in references} <= ids


def test_rendering_leaves_matplotlib_settings_as_they_were(run: RunEvidence) -> None:
    import matplotlib as mpl

    before = dict(mpl.rcParams)
    charts.latency_over_time(run)
    assert dict(mpl.rcParams) == before


def test_importing_the_charts_does_not_import_matplotlib() -> None:
    code = "import sys, drill.report.charts; print('matplotlib' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.stdout.strip() == "False"


# --- latency over time ---------------------------------------------------------------------------------------


def test_latency_over_time_has_a_panel_per_pool_with_its_slo_and_the_fault_window(run: RunEvidence) -> None:
    svg = charts.latency_over_time(run)
    assert svg is not None
    texts = _texts(svg)
    assert "pool batch (" in " ".join(texts) and "pool interactive (" in " ".join(texts)
    assert {"SLO ttft_p95 = 1 s", "SLO e2e_p95 = 4 s", "SLO ttft_p95 = 5 s"} <= set(texts)
    assert {"TTFT p50", "TTFT p95", "E2E p95", "fault window"} <= set(texts)
    assert {"latency (ms)", "time since the run started (s)"} <= set(texts)
    assert {"baseline", "fault", "recovery"} <= set(texts)  # the phases, named over the top panel
    for pool in ("batch", "interactive"):
        assert _has_id(svg, f"series-{pool}-ttft-p95") and _has_id(svg, f"slo-{pool}-ttft_p95")
    assert _has_id(svg, "fault-window-0") and _has_id(svg, "fault-window-1")


def test_latency_over_time_counts_only_successful_requests(tmp_path: Path) -> None:
    kit = _drill(RunKit(tmp_path), n=300)
    ok = {pool: sum(1 for r in kit.records if r.pool == pool and r.ok) for pool in ("batch", "interactive")}
    svg = charts.latency_over_time(kit.evidence())
    assert svg is not None
    assert {f"pool {pool} ({count} successful requests)" for pool, count in ok.items()} <= set(_texts(svg))


def test_the_fault_window_is_shaded_from_injection_to_revert(tmp_path: Path) -> None:
    """The shaded band spans 65-110 s of a 0-180 s axis: its width is 45/180 of the data's width."""
    kit = RunKit(tmp_path)
    kit.phases(baseline=(0, 90), fault=(90, 180))
    kit.fault("f", injected=65, reverted=110)
    for at in range(0, 181, 1):
        kit.request(at, ttft_ms=100.0)
    svg = charts.latency_over_time(kit.evidence())
    assert svg is not None
    band = _path_xs(svg, "fault-window-0")
    line = _path_xs(svg, "series-interactive-ttft-p50-0")
    assert (band.max() - band.min()) / (line.max() - line.min()) == pytest.approx(45 / 180, rel=0.02)


def test_a_run_whose_requests_all_failed_has_no_latency_chart(tmp_path: Path) -> None:
    kit = RunKit(tmp_path)
    kit.phases(baseline=(0, 60))
    for at in range(10):
        kit.request(at, status=503, error="refused")
    evidence = kit.evidence()
    assert charts.latency_over_time(evidence) is None
    assert charts.latency_distributions(evidence) is None
    assert charts.errors_over_time(evidence) is not None


def test_a_series_never_draws_more_than_max_points(tmp_path: Path) -> None:
    kit = RunKit(tmp_path)
    kit.phases(baseline=(0, 6000))
    for i in range(6000):
        kit.request(float(i), ttft_ms=150.0 + 80 * math.sin(i / 37), e2e_ms=900.0)
    evidence = kit.evidence()
    for chart, fragment in (
        (charts.latency_over_time, "series-interactive-ttft-p95"),
        (charts.latency_distributions, "ecdf-ttft-baseline"),
    ):
        svg = chart(evidence)
        assert svg is not None
        assert 10 <= len(_path_xs(svg, fragment)) <= charts.MAX_POINTS


def test_a_lone_bin_between_empty_ones_is_drawn_as_a_dot(tmp_path: Path) -> None:
    """A line through one point draws nothing; a bin whose neighbours are empty gets a marker."""
    kit = RunKit(tmp_path)
    kit.phases(baseline=(0, 100))
    for at in (*range(0, 40), 70, *range(90, 100)):
        kit.request(at, ttft_ms=100.0)
    svg = charts.latency_over_time(kit.evidence())
    assert svg is not None
    assert _has_id(svg, "series-interactive-ttft-p95-0-isolated")


# --- errors over time ------------------------------------------------------------------------------------------


def test_errors_over_time_shows_the_error_rate_refusals_and_each_error_class(run: RunEvidence) -> None:
    svg = charts.errors_over_time(run)
    assert svg is not None
    texts = set(_texts(svg))
    assert {"error rate (all classes)", "refused (429/503)", "ok", "refused", "timeout", "fault window"} <= texts
    assert {"attempts per second", "share of attempts (%)"} <= texts
    assert _has_id(svg, "error-rate") and _has_id(svg, "refusal-rate") and _has_id(svg, "outcome-refused")


def test_errors_over_time_stacks_only_the_classes_that_occurred(tmp_path: Path) -> None:
    svg = charts.errors_over_time(_drill(RunKit(tmp_path), refusals=False).evidence())
    assert svg is not None
    assert _has_id(svg, "outcome-timeout") and not _has_id(svg, "outcome-refused")
    assert "refused" not in _texts(svg)  # the stacked class; the refusal-rate line is still drawn


def test_the_error_rate_peaks_in_the_fault_window(tmp_path: Path) -> None:
    """Half the attempts fail from 60 s to 120 s and none before or after: the line is high only there."""
    kit = RunKit(tmp_path)
    kit.phases(baseline=(0, 60), fault=(60, 120), recovery=(120, 180))
    for i in range(1800):
        at = i / 10
        failed = 60 <= at < 120 and i % 2 == 0
        kit.request(at, status=503 if failed else 200, error="refused" if failed else None)
    svg = charts.errors_over_time(kit.evidence())
    assert svg is not None
    xs, ys = _path_points(svg, "error-rate")
    high = xs[ys < (ys.min() + ys.max()) / 2]  # SVG y grows downwards: a high rate has a small y
    span = xs.max() - xs.min()
    assert (high.min() - xs.min()) / span == pytest.approx(60 / 180, abs=0.03)
    assert (high.max() - xs.min()) / span == pytest.approx(120 / 180, abs=0.03)


# --- queue depth and KV cache ----------------------------------------------------------------------------------


def _scrapes(kit: RunKit, *, kv: bool = True) -> None:
    for t in range(0, 180, 2):
        waiting = 40 if 65 <= t < 110 else 1
        samples = {"vllm:num_requests_waiting": waiting, "vllm:num_requests_running": 8}
        if kv:
            samples["vllm:kv_cache_usage_perc"] = 0.9 if 65 <= t < 110 else 0.3
        line = {
            "ts": kit.ts(t),
            "source": "replica-0",
            "url": "http://replica-0/metrics",
            "ok": True,
            "samples": samples,
        }
        kit.raw_line("metrics.jsonl", json.dumps(line) + "\n")


def test_queue_and_kv_draws_the_exported_gauges(tmp_path: Path) -> None:
    kit = _drill(RunKit(tmp_path), n=60)
    _scrapes(kit)
    svg = charts.queue_and_kv(kit.evidence())
    assert svg is not None
    texts = set(_texts(svg))
    assert {"waiting (queue depth)", "running", "KV-cache use", "KV-cache use (%)", "requests", "fault window"} <= texts
    assert _has_id(svg, "gauge-waiting") and _has_id(svg, "gauge-kv-cache")


def test_queue_and_kv_leaves_out_what_the_target_does_not_export(tmp_path: Path) -> None:
    kit = _drill(RunKit(tmp_path), n=60)
    _scrapes(kit, kv=False)
    svg = charts.queue_and_kv(kit.evidence())
    assert svg is not None
    assert _has_id(svg, "gauge-waiting") and not _has_id(svg, "gauge-kv-cache")


def test_a_long_gauge_series_is_binned_and_keeps_its_peak(tmp_path: Path) -> None:
    """5,000 scrapes draw at most MAX_POINTS steps, and a one-scrape spike to 100 still sets the axis."""
    kit = RunKit(tmp_path)
    kit.phases(baseline=(0, 5000))
    for t in range(5000):
        samples = {"vllm:num_requests_waiting": 100 if t == 2500 else 1 + t % 2}
        line = {"ts": kit.ts(t), "source": "replica-0", "url": "u", "ok": True, "samples": samples}
        kit.raw_line("metrics.jsonl", json.dumps(line) + "\n")
    svg = charts.queue_and_kv(kit.evidence())
    assert svg is not None
    assert len(_path_xs(svg, "gauge-waiting")) <= 2 * charts.MAX_POINTS  # steps: two vertices a point
    assert "100" in _texts(svg)  # a y tick at the spike


def test_queue_and_kv_is_none_without_scraped_metrics(run: RunEvidence) -> None:
    assert charts.queue_and_kv(run) is None


# --- distributions ---------------------------------------------------------------------------------------------


def test_latency_distributions_has_a_line_per_phase_and_the_slos(tmp_path: Path) -> None:
    kit = _drill(RunKit(tmp_path))
    evidence = kit.evidence()
    svg = charts.latency_distributions(evidence)
    assert svg is not None
    texts = set(_texts(svg))
    for phase in ("baseline", "fault", "recovery"):
        n = sum(1 for r in evidence.requests_in(phase) if r.ok)
        assert f"{phase} (n={n})" in texts
        assert _has_id(svg, f"ecdf-ttft-{phase}") and _has_id(svg, f"ecdf-tpot-{phase}")
    assert {"SLO ttft_p95 = 1 s (interactive)", "SLO ttft_p95 = 5 s (batch)", "TTFT (ms)", "TPOT (ms)"} <= texts


def test_a_run_without_phases_has_one_distribution_of_all_requests(tmp_path: Path) -> None:
    kit = RunKit(tmp_path)
    for at in range(30):
        kit.request(at, ttft_ms=100.0 + at)
    svg = charts.latency_distributions(kit.evidence())
    assert svg is not None and "all requests (n=30)" in _texts(svg)


def test_a_phase_with_one_request_still_draws_its_step(tmp_path: Path) -> None:
    kit = RunKit(tmp_path)
    kit.phases(baseline=(0, 60), fault=(60, 120))
    for at in range(20):
        kit.request(at, ttft_ms=100.0 + at)
    kit.request(70, ttft_ms=900.0)
    svg = charts.latency_distributions(kit.evidence())
    assert svg is not None and "fault (n=1)" in _texts(svg)
    xs, ys = _path_points(svg, "ecdf-ttft-fault")
    assert len(xs) >= 2 and ys.max() - ys.min() > 50  # a riser from 0 to 1, in SVG points


# --- trace waterfall -------------------------------------------------------------------------------------------


AFFECTED = "f" * 32


@pytest.fixture
def spans(tmp_path: Path) -> SpanTable:
    kit = RunKit(tmp_path)
    for k in range(5):
        _trace(kit, f"{k + 1:032x}", 10 + k, slow=1.0 + 0.1 * k)
    _trace(kit, AFFECTED, 70, slow=3.0, error=True)
    return run_traces(kit.evidence()).table


def test_the_waterfall_shows_both_traces_indented_with_error_spans_marked(spans: SpanTable) -> None:
    baseline = f"{3:032x}"
    svg = charts.trace_waterfall(spans, AFFECTED, baseline)
    assert svg is not None
    texts = _texts(svg)
    assert f"affected trace {AFFECTED} (1500.0 ms, 7 spans)" in texts
    assert f"baseline trace {baseline} (600.0 ms, 7 spans)" in texts
    assert texts.count(f"{ROUTER} · POST /v1/chat/completions") == 2
    assert {f"{REPLICA} · llm_request", "error span", ROUTER, REPLICA, "time since the trace started (ms)"} <= set(
        texts
    )
    assert sum("✕ error" in t for t in texts) == 2  # the CLIENT attempt and llm_request of the affected
    assert (
        _indent(svg, f"{REPLICA} · queue")
        > _indent(svg, f"{REPLICA} · llm_request")
        > _indent(svg, f"{ROUTER} · upstream")
        > _indent(svg, f"{ROUTER} · POST /v1/chat/completions")
    )


def test_the_waterfall_without_a_baseline_says_so(spans: SpanTable) -> None:
    svg = charts.trace_waterfall(spans, AFFECTED, None)
    assert svg is not None
    assert "Affected trace beside a baseline trace (no baseline trace of the same shape)" in _texts(svg)
    assert not any(t.startswith("baseline trace") for t in _texts(svg))


def test_the_waterfall_of_an_unknown_trace_is_none(spans: SpanTable) -> None:
    assert charts.trace_waterfall(spans, "e" * 32, f"{1:032x}") is None
    assert charts.trace_waterfall(SpanTable.empty(), AFFECTED, None) is None


def test_the_waterfall_renders_byte_identical_svg(spans: SpanTable) -> None:
    assert charts.trace_waterfall(spans, AFFECTED, f"{2:032x}") == charts.trace_waterfall(spans, AFFECTED, f"{2:032x}")


def test_a_long_trace_is_capped_and_says_how_many_spans_are_not_shown(tmp_path: Path) -> None:
    kit = RunKit(tmp_path)
    kit.span(trace_id=AFFECTED, span_id="a" * 16, name="root", service=ROUTER, start=0, end=10)
    for k in range(120):
        kit.span(
            trace_id=AFFECTED,
            span_id=f"{k + 1:016x}",
            parent_id="a" * 16,
            name="step",
            service=REPLICA,
            start=k * 0.08,
            end=k * 0.08 + 0.05,
        )
    svg = charts.trace_waterfall(run_traces(kit.evidence()).table, AFFECTED)
    assert svg is not None
    assert f"{121 - charts.MAX_WATERFALL_SPANS} more spans not shown" in _texts(svg)


def test_spans_whose_parents_form_a_cycle_are_still_drawn(tmp_path: Path) -> None:
    """Nothing is dropped silently: spans the tree walk cannot reach are listed after it, unindented."""
    kit = RunKit(tmp_path)
    kit.span(trace_id=AFFECTED, span_id="a" * 16, name="root", service=ROUTER, start=0, end=1)
    kit.span(
        trace_id=AFFECTED, span_id="b" * 16, parent_id="c" * 16, name="loop-b", service=REPLICA, start=0.1, end=0.2
    )
    kit.span(
        trace_id=AFFECTED, span_id="c" * 16, parent_id="b" * 16, name="loop-c", service=REPLICA, start=0.2, end=0.3
    )
    svg = charts.trace_waterfall(run_traces(kit.evidence()).table, AFFECTED)
    assert svg is not None
    assert {f"{ROUTER} · root", f"{REPLICA} · loop-b", f"{REPLICA} · loop-c"} <= set(_texts(svg))
    assert f"affected trace {AFFECTED} (1000.0 ms, 3 spans)" in _texts(svg)


# --- picking a baseline trace ----------------------------------------------------------------------------------


def _table(tmp_path: Path, traces: dict[str, dict]) -> SpanTable:
    kit = RunKit(tmp_path)
    for trace_id, options in traces.items():
        _trace(kit, trace_id, **options)
    return run_traces(kit.evidence()).table


def _tid(n: int) -> str:
    return f"{n:032x}"


def test_the_baseline_has_the_same_spans_and_typical_duration(tmp_path: Path) -> None:
    table = _table(
        tmp_path,
        {
            _tid(1): {"at": 1, "slow": 1.0},
            _tid(2): {"at": 2, "slow": 1.4},
            _tid(3): {"at": 3, "slow": 1.2},
            _tid(4): {"at": 4, "retry": True},
            AFFECTED: {"at": 70, "slow": 3.0, "error": True},
        },
    )
    assert charts.pick_baseline_trace(table, AFFECTED) == _tid(3)  # of 1.0, 1.2 and 1.4: the median


def test_a_trace_with_an_extra_attempt_matches_by_the_set_of_spans(tmp_path: Path) -> None:
    table = _table(tmp_path, {_tid(1): {"at": 1}, _tid(2): {"at": 2}, AFFECTED: {"at": 70, "retry": True}})
    assert charts.pick_baseline_trace(table, AFFECTED) == _tid(1)  # same set; equal durations: smallest id


def test_the_exact_shape_is_preferred_to_the_same_set(tmp_path: Path) -> None:
    table = _table(
        tmp_path, {_tid(1): {"at": 1}, _tid(2): {"at": 2, "retry": True}, AFFECTED: {"at": 70, "retry": True}}
    )
    assert charts.pick_baseline_trace(table, AFFECTED) == _tid(2)


def test_a_trace_cut_short_matches_by_its_root(tmp_path: Path) -> None:
    """A request the router failed before any replica saw it: only the router's spans, same root."""
    kit = RunKit(tmp_path)
    _trace(kit, _tid(1), 1)
    kit.span(
        trace_id=AFFECTED,
        span_id="a" * 16,
        name="POST /v1/chat/completions",
        service=ROUTER,
        kind="SERVER",
        start=70,
        end=70.01,
        status="ERROR",
    )
    kit.span(trace_id=_tid(9), span_id="b" * 16, name="GET /health", service=ROUTER, kind="SERVER", start=2, end=2.1)
    table = run_traces(kit.evidence()).table
    assert charts.pick_baseline_trace(table, AFFECTED) == _tid(1)


def test_only_traces_in_the_baseline_mask_are_picked(tmp_path: Path) -> None:
    table = _table(tmp_path, {_tid(1): {"at": 1}, _tid(2): {"at": 80}, AFFECTED: {"at": 70, "slow": 2.0}})
    before_fault = table.start_ns < int((T0 + 60) * 1e9)
    assert charts.pick_baseline_trace(table, AFFECTED, before_fault) == _tid(1)
    assert charts.pick_baseline_trace(table, AFFECTED, np.zeros(len(table), dtype=bool)) is None


def test_no_baseline_for_an_unknown_trace_or_one_of_another_shape(tmp_path: Path) -> None:
    kit = RunKit(tmp_path)
    _trace(kit, _tid(1), 1)
    kit.span(trace_id=AFFECTED, span_id="a" * 16, name="GET /health", service=ROUTER, start=70, end=70.01)
    table = run_traces(kit.evidence()).table
    assert charts.pick_baseline_trace(table, AFFECTED) is None
    assert charts.pick_baseline_trace(table, "e" * 32) is None


# --- helpers reading the SVG back ------------------------------------------------------------------------------


def _group(svg: str, fragment: str) -> ET.Element:
    found = [e for e in _root(svg).iter() if fragment in (e.get("id") or "")]
    assert found, f"no element with id containing {fragment!r}"
    return found[0]


def _path_points(svg: str, fragment: str) -> tuple[np.ndarray, np.ndarray]:
    """The vertices of the first path inside the element whose id contains ``fragment``."""
    path = next(_group(svg, fragment).iter(f"{SVG}path"))
    numbers = np.array([float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", path.get("d", ""))])
    return numbers[0::2], numbers[1::2]


def _path_xs(svg: str, fragment: str) -> np.ndarray:
    return _path_points(svg, fragment)[0]


def _indent(svg: str, label: str) -> float:
    """The x of the first text element reading ``label`` (the waterfall indents labels by depth)."""
    for text in _root(svg).iter(f"{SVG}text"):
        if "".join(text.itertext()) == label:
            return float(text.get("x") or _translate_x(text.get("transform", "")))
    raise AssertionError(f"no text {label!r}")


def _translate_x(transform: str) -> float:
    match = re.search(r"translate\(([-\d.]+)", transform)
    assert match, transform
    return float(match.group(1))
