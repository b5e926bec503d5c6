"""The index and trend pages as views of game-day folders: links, the trend across records, what could not be read."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from drill.gameday.headline import headline_figures
from drill.gameday.pages import write_pages
from drill.gameday.record import (
    CheckLine,
    DrillOutcome,
    DrillResult,
    GameDayRecord,
    GameDayStatus,
    read_history,
    write_record,
)


def _record(stamp: str, p99: float, status: str = "PASS") -> GameDayRecord:
    figures = headline_figures(
        "fast_failure",
        {"refusal_ttf_p99_ms": p99, "waited_share": 0.1, "refused": 30},
        {"refusal_ttf_p99_ms": "ms", "waited_share": "ratio"},
    )
    queue = DrillOutcome(
        1,
        "unbounded-queue",
        "unbounded-queue",
        "drills/unbounded-queue.yaml",
        result=DrillResult.PASS if status == "PASS" else DrillResult.FAIL,
        exit_code=0,
        wall_s=61.0,
        run_dir="01-unbounded-queue/unbounded-queue/run-1",
        log="01-unbounded-queue/drill-run.log",
        checks=(CheckLine("fast_failure", "fast_failure", status, "refused fast", figures),),
    )
    crash = DrillOutcome(2, "replica-crash", "replica-crash", "drills/replica-crash.yaml")
    return GameDayRecord(
        "weekly",
        stamp,
        "2026-01-01T00:00:00Z",
        "gamedays/weekly.yaml",
        owner="sre",
        status=GameDayStatus.COMPLETED,
        exit_code=0,
        drills=(queue, crash),
    )


def _folder(base: Path, record: GameDayRecord, *files: str) -> Path:
    folder = base / "gamedays" / record.name / record.stamp
    run_dir = folder / "01-unbounded-queue" / "unbounded-queue" / "run-1"
    run_dir.mkdir(parents=True)
    for name in files:
        (run_dir / name).write_text("x")
    write_record(folder, record)
    return folder


def test_headline_figures_are_the_kinds_own_and_never_invented() -> None:
    figures = headline_figures(
        "slo",
        {
            "chat.ttft_p95": 41.7,
            "chat.tpot_p95": None,
            "goodput.baseline.chat.share": 1.0,
            "measurement_truth.joined": 40,
        },
        {"chat.ttft_p95": "ms"},
    )
    assert [(f.name, f.value, f.unit) for f in figures] == [("chat.ttft_p95", 41.7, "ms")]
    assert headline_figures("fault_landed", {"planned": 1, "landed": 1}, {}) == ()
    assert [f.shown() for f in headline_figures("x", {"a": 1234567.0, "b": 0.114349, "c": 480.5}, {})] == [
        "1,234,567",
        "0.1143",
        "480.5",
    ]
    assert [f.name for f in headline_figures("some_plugin", {"b": 2, "a": True, "c.d": 3, "e": 1.5}, {})] == ["b", "e"]


def test_the_index_links_the_report_else_the_summary_else_the_verdicts_else_the_log(tmp_path: Path) -> None:
    record = _record("20260101T000000Z", 120.0)
    folder = _folder(tmp_path, record, "report.md", "report.html", "summary.md", "verdicts.json")
    write_pages(folder, record)
    assert "[report.md](01-unbounded-queue/unbounded-queue/run-1/report.md)" in (folder / "index.md").read_text()
    assert 'href="01-unbounded-queue/unbounded-queue/run-1/report.html"' in (folder / "index.html").read_text()
    run_dir = folder / record.drills[0].run_dir
    for gone, then in (("report.md", "report.html"), ("report.html", "summary.md"), ("summary.md", "verdicts.json")):
        (run_dir / gone).unlink()
        write_pages(folder, record)
        assert f"[{then}](01-unbounded-queue/unbounded-queue/run-1/{then})" in (folder / "index.md").read_text()
    (run_dir / "verdicts.json").unlink()
    (folder / "01-unbounded-queue" / "drill-run.log").write_text("log")
    write_pages(folder, record)
    assert "[log](01-unbounded-queue/drill-run.log)" in (folder / "index.md").read_text()
    assert "| 2 | replica-crash | NOT RUN | not run |" in (folder / "index.md").read_text()


def test_the_trend_shows_every_game_day_of_the_name_and_counts_unreadable_records(tmp_path: Path) -> None:
    older, newer = _record("20260101T000000Z", 120.0), _record("20260108T000000Z", 480.5, status="FAIL")
    _folder(tmp_path, older, "report.md")
    folder = _folder(tmp_path, newer, "report.md")
    other = _record("20260102T000000Z", 1.0)
    _folder(tmp_path, GameDayRecord(**{**other.__dict__, "name": "nightly"}))  # another game day's name
    broken = tmp_path / "gamedays" / "weekly" / "20260105T000000Z"
    broken.mkdir()
    (broken / "gameday.json").write_text('{"schema": "llm-drill/gameday/v1", "name": "weekly", "sta')
    write_pages(folder, read_history(tmp_path / "gamedays", "weekly").records[-1])
    trend = (folder / "trend.md").read_text()
    rows = [line for line in trend.splitlines() if line.startswith("| ") and "20260" in line]
    assert len([r for r in rows if "[PASS](../20260101T000000Z/01-unbounded-queue" in r]) == 1
    assert len([r for r in rows if "[FAIL](../20260108T000000Z/01-unbounded-queue" in r]) == 1
    assert "| [20260101T000000Z](../20260101T000000Z/index.md) | 120 | 0.1 |" in trend
    assert "| **[20260108T000000Z](../20260108T000000Z/index.md)** | 480.5 | 0.1 |" in trend  # this one, in bold
    assert "fast_failure: refusal_ttf_p99_ms (ms)" in trend and "20260102T000000Z" not in trend
    assert "1 earlier game-day record(s) could not be read" in trend and "20260105T000000Z/gameday.json" in trend
    assert "## replica-crash" in trend and "| NOT RUN |" in trend
    html = (folder / "trend.html").read_text()
    assert html.count("<polyline") == 2, "a line per figure column: refusal p99 and waited share"
    assert 'aria-label="from 120 to 480.5"' in html


def test_drill_gameday_on_a_folder_renders_its_pages_again(tmp_path: Path) -> None:
    record = _record("20260101T000000Z", 120.0)
    folder = _folder(tmp_path, record, "summary.md")
    proc = subprocess.run(
        [sys.executable, "-m", "drill", "gameday", str(folder)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "[summary.md](01-unbounded-queue/unbounded-queue/run-1/summary.md)" in (folder / "index.md").read_text()
    assert (folder / "trend.html").is_file() and f"wrote {folder / 'trend.md'}" in proc.stdout


def test_pages_are_deterministic_and_self_contained(tmp_path: Path) -> None:
    record = _record("20260101T000000Z", 120.0)
    folder = _folder(tmp_path, record, "report.html")
    first = {p.name: p.read_bytes() for p in write_pages(folder, record)}
    second = {p.name: p.read_bytes() for p in write_pages(folder, record)}
    assert first == second
    for name in ("index.html", "trend.html"):
        html = first[name].decode()
        assert "<script" not in html and not re.search(r"""(src|href)=["']?(https?:)?//""", html), name
        assert "<style>" in html and html.count("<table") >= 1
    assert json.loads((folder / "gameday.json").read_text())["drills"][0]["checks"][0]["figures"][0] == {
        "name": "refusal_ttf_p99_ms",
        "value": 120.0,
        "unit": "ms",
    }
