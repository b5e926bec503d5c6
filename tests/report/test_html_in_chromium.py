"""``report.html`` of a real run, opened in a real headless Chromium: it loads with no console error and no
network request, every section and chart is there, and a screenshot is kept.

The browser is the system's (Debian's ``chromium``; ``scripts/setup.sh`` installs it, ``CHROMIUM_BIN`` points at
another), driven by Playwright through ``executable_path``: Playwright never downloads a browser here. The run is
the catalogue's ``unbounded-queue`` drill at ``--time-scale 0.2`` with the shorter warm-up, baseline and recovery
and the smaller replay of tests/e2e (``RUN_SETS``: the flood and its fault phase are the drill's own; a report
needs a replay, not 200 replayed samples). Measured on the project's 2-vCPU machine: 75 s (19 s of it the load
draining the flood's backlog), where the drill's whole timeline at 0.2 took about 2 min. The screenshot is written
to ``reports/test-artifacts/`` (``DRILL_TEST_ARTIFACTS`` overrides it) and its path printed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DRILL = Path(sys.executable).with_name("drill")
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
    "verdicts",
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
)
#: Its charts: a <figure> each, holding an inline <svg> when the run has data for it.
CHARTS = ("latency_over_time", "errors_over_time", "trace_waterfall", "queue_and_kv", "latency_distributions")
#: The charts this run has data for (a flood on the embedded stack: latency, errors, queue and KV, distributions).
CHARTS_WITH_DATA = ("latency_over_time", "errors_over_time", "queue_and_kv", "latency_distributions")
#: The run's ``--set``s: 2 s warm-up, 8 s baseline and recovery at 0.2; the 18 s fault phase and its flood as written.
RUN_SETS = (
    "phases.warmup=10s",
    "phases.baseline=40s",
    "phases.recovery=40s",
    "phases.replay.max_samples=20",
    "phases.replay.controls=4",
)

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
def report_html(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("chromium-run")
    argv = [
        str(DRILL),
        "run",
        str(REPO / "drills" / "unbounded-queue.yaml"),
        "--time-scale",
        "0.2",
        "--out",
        str(out),
        "--no-progress",
        "--set",
        "otlp.port=0",
    ]
    for assignment in RUN_SETS:
        argv += ["--set", assignment]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stdout[-4000:] + done.stderr[-4000:]
    found = sorted(out.glob("unbounded-queue/*/report.html"))
    assert len(found) == 1, (found, done.stdout[-2000:])
    return found[0]


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
