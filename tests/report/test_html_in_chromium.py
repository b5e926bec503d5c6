"""``report.html`` of a real run, opened in a real headless Chromium: it loads with no console error and no
network request, every section and chart is there, and a screenshot is kept.

The browser is the system's (Debian's ``chromium``; ``scripts/setup.sh`` installs it, ``CHROMIUM_BIN`` points at
another), driven by Playwright through ``executable_path``: Playwright never downloads a browser here. The run is
the baseline of the flagship's comparison that tests/e2e/test_drill_verdicts.py asserts (tests/conftest.py's
``unbounded_queue_compare``, made once a session): the catalogue's ``unbounded-queue`` drill at ``--time-scale
0.3`` with the shorter warm-up, baseline and recovery and the smaller replay of tests/compare/compare_run.py's
``QUEUE_CI`` (the flood and its fault phase are the drill's own; a report needs a replay, not 200 replayed
samples). Whichever of the two tests runs first waits for it (about 3 minutes on the project's 2-vCPU machine);
a run of its own here cost 75 s more. The screenshot is written to ``reports/test-artifacts/``
(``DRILL_TEST_ARTIFACTS`` overrides it) and its path printed.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.compare.compare_run import COMPARE_TIMEOUT_S, ComparedPair

REPO = Path(__file__).resolve().parents[2]
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: The report's sections, by the ids the template (drill/report/templates/report.html.j2) puts on them.
SECTIONS = (
    "summary",
    "headline",
    "verdicts",
    "run-details",
    "verdict-details",
    "impact",
    "timeline",
    "detection",
    "fault",
    "metrics",
    "replay",
    "runbook",
    "actions",
    "decision",
    "not-covered",
    "measurement-truth",
)
#: Its charts: a <figure> each, holding an inline <svg> when the run has data for it.
CHARTS = ("latency_over_time", "errors_over_time", "trace_waterfall", "queue_and_kv", "latency_distributions")
#: The charts this run has data for (a flood on the embedded stack: latency, errors, queue and KV, distributions).
CHARTS_WITH_DATA = ("latency_over_time", "errors_over_time", "queue_and_kv", "latency_distributions")
pytestmark = [pytest.mark.integration, pytest.mark.chromium]


def _chromium() -> str:
    for candidate in (os.environ.get("CHROMIUM_BIN"), "chromium", "chromium-browser"):
        found = candidate and shutil.which(candidate)
        if found:
            return found
    pytest.fail("no Chromium: run ./dev setup (it installs Debian's chromium) or set CHROMIUM_BIN")


def _artifacts() -> Path:
    folder = Path(os.environ.get("DRILL_TEST_ARTIFACTS", REPO / "reports" / "test-artifacts"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def report_html(unbounded_queue_compare: ComparedPair) -> Path:
    found = unbounded_queue_compare.baseline.run_dir / "report.html"
    assert found.is_file(), (found, unbounded_queue_compare.output[-2000:])
    return found


@dataclass
class PageFindings:
    """What opening one page found."""

    url: str
    requests: list[str] = field(default_factory=list)  # every request other than the page's own file
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    missing_sections: list[str] = field(default_factory=list)
    missing_charts: list[str] = field(default_factory=list)
    empty_charts: list[str] = field(default_factory=list)
    title: str = ""


def open_in_chromium(path: Path, screenshot: Path | None = None) -> PageFindings:
    """Open ``path`` in headless Chromium with every request but the file itself aborted, and report."""
    from playwright.sync_api import Route, sync_playwright

    found = PageFindings(path.resolve().as_uri())
    seen: list[str] = []

    def route(r: Route) -> None:  # the file itself may load; anything else is aborted (and counted below)
        if r.request.url == found.url:
            r.continue_()
        else:
            r.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=LAUNCH_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: found.console_errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: found.page_errors.append(str(e)))
            page.on("request", lambda r: seen.append(r.url))  # every request, file:// ones included
            page.route("**/*", route)
            response = page.goto(found.url, wait_until="load")
            assert response is not None and response.ok
            page.wait_for_load_state("networkidle")
            found.missing_sections = [s for s in SECTIONS if page.locator(f"#{s}").count() == 0]
            found.missing_charts = [c for c in CHARTS if page.locator(f"#chart-{c}").count() != 1]
            found.empty_charts = [c for c in CHARTS_WITH_DATA if page.locator(f"#chart-{c} svg").count() == 0]
            found.title = page.title()
            if screenshot is not None:
                page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    assert found.url in seen, seen
    found.requests = [u for u in seen if u != found.url]
    return found


#: The first screen a reviewer sees: a laptop's browser window.
FIRST_SCREEN = {"width": 1400, "height": 900}
#: What must be on it, by CSS selector: the headline and the latency-over-time chart (its SVG), whole.
ON_THE_FIRST_SCREEN = ("#headline", "#chart-latency_over_time svg")


def first_screen(path: Path, screenshot: Path | None = None) -> dict[str, dict[str, float] | None]:
    """The bounding client rectangle (CSS px: top, bottom, left, right) of each of ``ON_THE_FIRST_SCREEN`` and of
    the verdict table (``#verdicts table``) when ``path`` opens at :data:`FIRST_SCREEN`, unscrolled; None for an
    element the page lacks."""
    from playwright.sync_api import sync_playwright

    script = """selectors => Object.fromEntries(selectors.map(s => {
        const e = document.querySelector(s);
        if (!e) return [s, null];
        const r = e.getBoundingClientRect();
        return [s, {top: r.top, bottom: r.bottom, left: r.left, right: r.right}];
    }))"""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=LAUNCH_ARGS, headless=True)
        try:
            page = browser.new_page(viewport=FIRST_SCREEN)
            page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort())
            page.goto(path.resolve().as_uri(), wait_until="load")
            rects = page.evaluate(script, [*ON_THE_FIRST_SCREEN, "#verdicts table"])
            if screenshot is not None:
                page.screenshot(path=str(screenshot))  # the viewport only: the first screen as a reviewer sees it
        finally:
            browser.close()
    return rects


def _off_the_first_screen(rects: dict[str, dict[str, float] | None]) -> list[str]:
    """The selectors of ``ON_THE_FIRST_SCREEN`` that are missing or not wholly inside the first screen."""
    out = []
    for selector in ON_THE_FIRST_SCREEN:
        r = rects.get(selector)
        inside = r is not None and r["top"] >= 0 and r["left"] >= 0 and r["bottom"] <= FIRST_SCREEN["height"]
        if not inside or r is None or r["right"] > FIRST_SCREEN["width"] or r["bottom"] - r["top"] < 50:
            out.append(f"{selector}: {r}")
    return out


def _assert_leads_with_the_finding(rects: dict[str, dict[str, float] | None]) -> None:
    assert _off_the_first_screen(rects) == [], rects
    headline, chart, verdicts = rects["#headline"], rects["#chart-latency_over_time svg"], rects["#verdicts table"]
    assert headline is not None and chart is not None and verdicts is not None
    assert headline["bottom"] <= chart["top"] <= chart["bottom"] <= verdicts["top"], rects
    assert verdicts["top"] < FIRST_SCREEN["height"], "the verdict table starts on the first screen"


def test_the_first_screen_check_sees_a_chart_below_the_fold(tmp_path):
    """The check can fail: a headline whose chart is a screen further down is caught."""
    page = tmp_path / "late-chart.html"
    page.write_text(
        '<!doctype html><html><body><div id="headline"><p>FAIL</p><p>what happened</p><p>more</p></div>'
        '<div style="height:1200px"></div><figure id="chart-latency_over_time">'
        '<svg width="600" height="300"></svg></figure><section id="verdicts"><table><tr><td>x</td></tr>'
        "</table></section></body></html>"
    )
    rects = first_screen(page)
    assert _off_the_first_screen(rects) == [f"#chart-latency_over_time svg: {rects['#chart-latency_over_time svg']}"]


def test_the_first_screen_shows_the_headline_and_the_latency_chart(tmp_path):
    """A hand-built flood run with three pools (three chart panels, taller than the screen's share for the chart at
    its own size, so it is scaled down): headline, chart, verdict table at 1400 x 900."""
    from drill.api import Status
    from drill.report.render import write_reports
    from tests.report.test_first_screen import flood_run

    kit = flood_run(tmp_path)
    kit.pool("background", slo={"e2e_p95": 120.0})
    for i in range(20):
        kit.request(i * 1.5, pool="batch", ttft_ms=900, e2e_ms=8000)
        kit.request(i * 1.5, pool="background", ttft_ms=2000, e2e_ms=30000)
    kit.verdict(
        "fast_failure",
        Status.FAIL,
        "100.0% of the failures were timeouts — 0 refused, 6 timed out",
        window="fault",
        observed={"refused": 0, "not_on_time": 6, "timeout_share": 1.0},
        expected={"timeout_share": "<= 0.01"},
    )
    kit.verdict("error_rate", Status.PASS, "error rate 0.00% in recovery", name="recovered", window="recovery")
    run_dir = kit.write()
    (html,) = [p for p in write_reports(run_dir) if p.suffix == ".html"]
    _assert_leads_with_the_finding(first_screen(html, screenshot=_artifacts() / "first-screen-kit.png"))


def test_the_inspection_sees_requests_console_errors_and_missing_parts(tmp_path):
    """The checks below can fail: a page with an external image, a script error and no sections is caught."""
    page = tmp_path / "bad.html"
    page.write_text(
        "<!doctype html><html><head><title>bad</title></head><body>"
        '<img src="https://example.invalid/pixel.png"><link rel="stylesheet" href="other.css">'
        "<script>console.error('boom'); undefinedFunction();</script>"
        '<section id="verdicts"></section><figure id="chart-errors_over_time"></figure></body></html>'
    )
    found = open_in_chromium(page)
    assert "https://example.invalid/pixel.png" in found.requests
    assert any(u.endswith("/other.css") for u in found.requests)
    assert any("boom" in e for e in found.console_errors)
    assert any("undefinedFunction" in e for e in found.page_errors)
    assert "verdicts" not in found.missing_sections and "impact" in found.missing_sections
    assert "latency_over_time" in found.missing_charts and "errors_over_time" in found.empty_charts


@pytest.mark.slow
@pytest.mark.timeout(COMPARE_TIMEOUT_S + 60)  # the first to take report_html waits for the comparison
def test_report_opens_offline_with_every_section_and_chart(report_html: Path):
    shot = _artifacts() / f"report-{report_html.parent.name}.png"
    found = open_in_chromium(report_html, screenshot=shot)
    print(f"screenshot: {shot}")
    assert found.requests == [], "the report made requests beyond its own file"
    assert found.console_errors == [] and found.page_errors == [], (found.console_errors, found.page_errors)
    assert found.missing_sections == [], found.missing_sections
    assert found.missing_charts == [], found.missing_charts
    assert found.empty_charts == [], f"charts without an inline SVG: {found.empty_charts}"
    assert "unbounded-queue" in found.title
    assert shot.stat().st_size > 10_000


@pytest.mark.slow
@pytest.mark.timeout(COMPARE_TIMEOUT_S + 60)
def test_the_real_reports_first_screen_shows_the_headline_and_the_latency_chart(report_html: Path):
    shot = _artifacts() / f"first-screen-{report_html.parent.name}.png"
    rects = first_screen(report_html, screenshot=shot)
    print(f"first screen: {shot}")
    _assert_leads_with_the_finding(rects)
