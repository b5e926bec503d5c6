"""The conductor's order, cooldown, abort rule and exit codes, with ``drill run`` replaced at the process seam.

The child is ``fake_drill_run.py`` (it writes a run directory the way ``drill run`` does and exits as the test
plans); the real drills, end to end, are in ``test_gameday_runs.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from drill.gameday.conductor import GameDayOptions, GameDayRunner
from drill.gameday.definition import load_gameday
from drill.gameday.record import DrillResult, GameDayStatus

REPO = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).with_name("fake_drill_run.py")


@pytest.fixture()
def fake_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An executable that runs the fake ``drill run`` with this interpreter."""
    script = tmp_path / "fake-python"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
    script.chmod(0o755)
    monkeypatch.setenv("FAKE_DRILL_CALLS", str(tmp_path / "calls.jsonl"))
    monkeypatch.chdir(REPO)
    return script


def _gameday(tmp_path: Path, *drills: str, cooldown: str = "0s", on_first_fail: bool = False) -> Path:
    entries = "".join(f"  - drill: {d}\n" for d in drills)
    path = tmp_path / "g.yaml"
    path.write_text(
        f"name: nightly\nowner: sre\ncooldown: {cooldown}\nabort: {{on_first_fail: {str(on_first_fail).lower()}}}\n"
        f"set: [phases.replay.max_samples=5]\ndrills:\n{entries}"
    )
    return path


def _run(tmp_path: Path, fake_python: Path, plan: dict, *drills: str, monkeypatch: pytest.MonkeyPatch, **kw):
    monkeypatch.setenv("FAKE_DRILL_PLAN", json.dumps(plan))
    loaded = load_gameday(_gameday(tmp_path, *drills, **kw), time_scale=0.5)
    lines: list[str] = []
    runner = GameDayRunner(
        loaded, GameDayOptions(out_dir=tmp_path / "reports", python=str(fake_python)), say=lines.append
    )
    return runner.run(), runner.folder, lines


def _calls(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_drills_run_in_order_each_as_drill_run_into_its_own_folder(tmp_path, fake_python, monkeypatch) -> None:
    record, folder, lines = _run(tmp_path, fake_python, {}, "slow-replica", "gpu-oom", monkeypatch=monkeypatch)
    assert record.exit_code == 0 and record.status is GameDayStatus.COMPLETED
    calls = _calls(tmp_path)
    assert [Path(c[3]).stem for c in calls] == ["slow-replica", "gpu-oom"]
    first = calls[0]
    assert first[first.index("--out") + 1] == str(folder / "01-slow-replica")
    assert first[first.index("--time-scale") + 1] == "0.5" and "--no-progress" in first
    assert first[first.index("--set") + 1] == "phases.replay.max_samples=5"
    assert [d.result for d in record.drills] == [DrillResult.PASS, DrillResult.PASS]
    assert record.drills[0].run_dir.startswith("01-slow-replica/slow-replica/")
    assert "running slow-replica" in (folder / record.drills[0].log).read_text()
    assert any("running gpu-oom" in line for line in lines), "the drill's output is echoed"
    on_disk = json.loads((folder / "gameday.json").read_text())
    assert on_disk["schema"] == "llm-drill/gameday/v1" and on_disk["exit_code"] == 0 and on_disk["owner"] == "sre"
    for name in ("index.md", "index.html", "trend.md", "trend.html", "gameday.yaml"):
        assert (folder / name).is_file(), name


def test_a_fail_gives_exit_1_and_the_next_drill_still_runs(tmp_path, fake_python, monkeypatch) -> None:
    plan = {
        "slow-replica": {"exit": 1, "checks": {"recovered": "FAIL", "slo": "PASS"}},
        "gpu-oom": {"exit": 1, "checks": {"slo": "INCONCLUSIVE"}},
    }
    record, folder, _ = _run(
        tmp_path, fake_python, plan, "slow-replica", "gpu-oom", "nccl-degradation", monkeypatch=monkeypatch
    )
    assert record.exit_code == 1 and record.stopped_by is None
    assert [d.result for d in record.drills] == [DrillResult.FAIL, DrillResult.INCONCLUSIVE, DrillResult.PASS]
    index = (folder / "index.md").read_text()
    assert "1 of 2 checks did not pass (recovered FAIL): recovered was FAIL" in index
    assert "| 3 | nccl-degradation | PASS | all 1 checks passed |" in index


def test_a_failed_revert_stops_the_game_day_at_once_and_says_drill_cleanup(tmp_path, fake_python, monkeypatch) -> None:
    plan = {"slow-replica": {"exit": 4, "checks": {"slo": "PASS"}}}
    record, folder, lines = _run(
        tmp_path, fake_python, plan, "slow-replica", "gpu-oom", cooldown="30s", monkeypatch=monkeypatch
    )
    assert record.exit_code == 4 and record.status is GameDayStatus.ABORTED
    assert [Path(c[3]).stem for c in _calls(tmp_path)] == ["slow-replica"], "nothing runs after a failed revert"
    assert [d.result for d in record.drills] == [DrillResult.REVERT_FAILED, DrillResult.NOT_RUN]
    run_dir = folder / record.drills[0].run_dir
    assert f"drill cleanup --run-dir {run_dir}" in record.stopped_by
    assert any("drill cleanup" in line for line in lines)
    index = (folder / "index.md").read_text()
    assert "Stopped early" in index and "| 2 | gpu-oom | NOT RUN | not run: the game day stopped" in index


def test_on_first_fail_stops_after_the_first_drill_that_does_not_pass(tmp_path, fake_python, monkeypatch) -> None:
    plan = {"gpu-oom": {"exit": 1, "checks": {"recovered": "FAIL"}}}
    record, _, _ = _run(
        tmp_path,
        fake_python,
        plan,
        "slow-replica",
        "gpu-oom",
        "nccl-degradation",
        on_first_fail=True,
        monkeypatch=monkeypatch,
    )
    assert record.exit_code == 1 and record.status is GameDayStatus.ABORTED
    assert [d.result for d in record.drills] == [DrillResult.PASS, DrillResult.FAIL, DrillResult.NOT_RUN]
    assert record.stopped_by == "abort.on_first_fail: drill 2 (gpu-oom) ended FAIL"


def test_a_drill_that_could_not_run_is_an_error_with_its_log_linked(tmp_path, fake_python, monkeypatch) -> None:
    record, folder, _ = _run(
        tmp_path, fake_python, {"slow-replica": {"exit": 3}}, "slow-replica", "gpu-oom", monkeypatch=monkeypatch
    )
    assert record.exit_code == 3
    assert record.drills[0].result is DrillResult.ERROR and "no verdicts.json" in record.drills[0].problem
    assert record.drills[1].result is DrillResult.PASS
    assert "[log](01-slow-replica/drill-run.log)" in (folder / "index.md").read_text()


def test_the_cooldown_is_waited_between_drills_scaled_by_the_time_scale(tmp_path, fake_python, monkeypatch) -> None:
    start = time.monotonic()
    record, _, lines = _run(
        tmp_path, fake_python, {}, "slow-replica", "gpu-oom", cooldown="3s", monkeypatch=monkeypatch
    )
    assert record.cooldown_s == 1.5 and "cooldown 1.5s" in lines
    assert time.monotonic() - start >= 1.5


def test_sigterm_goes_to_the_running_drill_and_stops_the_game_day(tmp_path, fake_python) -> None:
    path = _gameday(tmp_path, "slow-replica", "gpu-oom")
    code = (
        "import sys; from pathlib import Path; from drill.gameday.conductor import GameDayRunner, GameDayOptions; "
        "from drill.gameday.definition import load_gameday; "
        f"r = GameDayRunner(load_gameday({str(path)!r}), GameDayOptions(out_dir=Path({str(tmp_path / 'reports')!r}), "
        f"python={str(fake_python)!r})).run(); sys.exit(r.exit_code)"
    )
    env = {**os.environ, "FAKE_DRILL_PLAN": json.dumps({"slow-replica": {"hang": True}})}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    deadline = time.monotonic() + 30
    while not _calls(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    assert "SIGTERM: stopping the running drill" in output and "reverted; interrupted" in output
    (record_file,) = (tmp_path / "reports" / "gamedays" / "nightly").glob("*/gameday.json")
    record = json.loads(record_file.read_text())
    assert record["status"] == "interrupted" and [d["result"] for d in record["drills"]] == ["INTERRUPTED", "NOT RUN"]
    assert len(_calls(tmp_path)) == 1


def test_a_page_that_cannot_be_written_never_hides_a_failed_revert(tmp_path, fake_python, monkeypatch) -> None:
    def broken(folder, record):
        raise RuntimeError("template bug")

    monkeypatch.setattr("drill.gameday.pages.write_pages", broken)
    record, folder, lines = _run(
        tmp_path, fake_python, {"slow-replica": {"exit": 4}}, "slow-replica", monkeypatch=monkeypatch
    )
    assert record.exit_code == 4 and "template bug" in (folder / "pages-error.log").read_text()
    assert any("internal error writing the pages" in line for line in lines)
    passed, folder, _ = _run(tmp_path, fake_python, {}, "slow-replica", monkeypatch=monkeypatch)
    assert passed.exit_code == 3, "a game day whose pages are missing is not a clean pass"
    assert json.loads((folder / "gameday.json").read_text())["exit_code"] == 3
