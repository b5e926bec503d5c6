"""One short ``drill capacity`` run against the real embedded stack: two listed rates, one below the knee and one
far past it. It writes every point's raw evidence and the reports, and goodput stops following the offered rate
once the rate passes capacity."""

from __future__ import annotations

import json
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "scenarios" / "chat-azure-conv.yaml"
LOW, HIGH = 3.0, 30.0


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    cwd = tmp_path_factory.mktemp("capacity")
    args = [
        "capacity",
        str(SCENARIO),
        *("--rates", f"{LOW:g},{HIGH:g}", "--repetitions", "1"),
        *("--warmup", "1s", "--measure", "5s", "--tail", "1s", "--drain", "2s"),
        *("--headroom", "25%", "--gpu-hour-price", "2.5"),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "drill", *args], cwd=cwd, capture_output=True, text=True, timeout=240, check=False
    )
    runs = sorted((cwd / "reports" / "capacity").iterdir())
    assert len(runs) == 1, done.stdout + done.stderr
    return done, runs[0]


def _doc(run_dir: Path) -> dict:
    return json.loads((run_dir / "capacity.json").read_text())


def test_exit_0_and_the_summary(run):
    done, run_dir = run
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"measured bracket: {LOW:g}/s held at every repetition, {HIGH:g}/s failed" in done.stdout
    assert "naive estimate's error" in done.stdout
    assert f"run directory: {run_dir.relative_to(run_dir.parents[2])}" in done.stdout


def test_every_point_keeps_its_raw_evidence(run):
    _, run_dir = run
    doc = _doc(run_dir)
    assert doc["schema"] == "llm-drill/capacity/v1"
    points = doc["sweeps"][0]["points"]
    assert [p["rate"] for p in points] == [LOW, HIGH]
    for p in points:
        folder = run_dir / p["directory"]
        for name in ("requests.jsonl", "spans.jsonl", "metrics.jsonl"):
            assert (folder / name).stat().st_size > 0, f"{folder.name}/{name}"
        assert (folder / "load-driver.log").is_file()
    assert (run_dir / "spans.jsonl").stat().st_size > 0
    assert (run_dir / "naive" / "requests.jsonl").stat().st_size > 0
    assert (run_dir / "journal.jsonl").is_file() and (run_dir / "env.json").is_file()


def test_goodput_falls_behind_the_offered_rate_past_capacity(run):
    _, run_dir = run
    low, high = _doc(run_dir)["sweeps"][0]["points"]
    assert low["holds"] and not high["holds"]
    share_low = low["goodput_per_s"] / low["arrivals_per_s"]
    share_high = high["goodput_per_s"] / high["arrivals_per_s"]
    assert share_low > 0.9 and share_high < 0.6, (share_low, share_high)
    assert high["binding"]["observed_ms"] is None or high["binding"]["observed_ms"] > high["binding"]["bound_ms"]


def test_ttft_is_split_into_queueing_and_prefill_from_the_spans(run):
    _, run_dir = run
    low, high = _doc(run_dir)["sweeps"][0]["points"]
    split_low, split_high = low["split"][0], high["split"][0]
    assert split_low["joined"] >= 0.9 * split_low["of"] > 0
    assert split_low["prefill_p50_ms"] > 0
    # past capacity requests wait: queueing dominates the time to first token
    assert split_high["queue_p95_ms"] > 5 * split_low["queue_p95_ms"]


def test_the_reports_show_the_knee_the_naive_error_and_the_cost(run):
    _, run_dir = run
    md = (run_dir / "capacity.md").read_text()
    html = unescape((run_dir / "capacity.html").read_text())
    doc = _doc(run_dir)
    assert LOW <= doc["comparison"]["knee"] <= HIGH and doc["comparison"]["naive_rate"] > 0
    assert doc["headroom"]["safe_rate"] == pytest.approx(LOW * 0.75)
    assert doc["cost"]["per_successful_request"] > 0
    for text in (md, html):
        assert "naive estimate's error" in text and "safe operating rate" in text
        assert "cost per successful request" in text
    assert "<svg" in html and 'id="goodput-curve-title"' in html


def test_drill_report_renders_the_same_markdown_again(run):
    _, run_dir = run
    before = (run_dir / "capacity.md").read_bytes()
    done = subprocess.run(
        [sys.executable, "-m", "drill", "report", str(run_dir), "--format", "md"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == before
