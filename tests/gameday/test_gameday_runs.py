"""``drill gameday`` end to end: real catalogue drills (the embedded stack, Toxiproxy, Locust, the OTLP receiver).

Two of the fastest catalogue drills (slow-replica, gpu-oom: about 18 s each at time scale 0.1 on the project's
2-vCPU machine, most of it the fixed cost of a run: a stack's start, the replay, the report) make a game day; run
twice into the same reports folder, the second game day's trend view shows both. Two drills are what the pages'
rows, links and trend sections need (a third one, run twice more, asserted the same again); the weights load in
200 ms instead of the drills' 2 s (the cold start, and gpu-oom's restart): the pages, not the drills, are under
test. Their verdicts at that scale are whatever the drills make of 4 s phases (some are INCONCLUSIVE: too few
requests); what is asserted is that the pages carry exactly the verdicts each run's ``verdicts.json`` has. The
abort test runs a drill whose fault cannot be reverted (the test plugin ``test_raising_revert``): the game day
exits 4 after it, says ``drill cleanup``, and never starts the next drill.
Measured: about 1 min 25 s for the pair of game days (2 min 30 s with three drills), 11 s for the abort test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
GAMEDAY_TIMEOUT_S = 400

DRILLS = ("slow-replica", "gpu-oom")
GAMEDAY = """\
name: ci-smoke
owner: ci
cooldown: 10s
set: [phases.replay.max_samples=5, phases.replay.controls=2, target.config.engine.weight_load_time=200ms]
drills:
""" + "".join(f"  - drill: {name}\n" for name in DRILLS)


def _gameday(path: Path, out: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "drill", "gameday", str(path), "--out", str(out), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=GAMEDAY_TIMEOUT_S,
        env={**os.environ, "DRILL_STATE_DIR": str(out / "state")},
    )
    return proc, time.monotonic() - start


def _verdicts(folder: Path, drill: dict) -> list[dict]:
    return json.loads((folder / drill["run_dir"] / "verdicts.json").read_text())["checks"]


def test_catalogue_drills_write_the_index_and_run_twice_a_trend_of_both(tmp_path: Path) -> None:
    path = tmp_path / "ci-smoke.yaml"
    path.write_text(GAMEDAY)
    out = tmp_path / "reports"
    stamps, folders = [], []
    for _ in range(2):
        proc, took = _gameday(path, out, "--time-scale", "0.1")
        print(f"game day: exit {proc.returncode} in {took:.0f}s")
        assert proc.returncode in (0, 1), proc.stdout[-4000:] + proc.stderr[-4000:]
        (folder,) = [f for f in (out / "gamedays" / "ci-smoke").iterdir() if f.name not in stamps]
        stamps.append(folder.name)
        folders.append(folder)
        record = json.loads((folder / "gameday.json").read_text())
        assert [d["label"] for d in record["drills"]] == list(DRILLS)
        assert record["exit_code"] == proc.returncode and record["status"] == "completed"
        index = (folder / "index.md").read_text()
        for drill in record["drills"]:
            checks = _verdicts(folder, drill)
            assert [c["status"] for c in drill["checks"]] == [c["status"] for c in checks]
            for line, verdict in zip(drill["checks"], checks):  # headline figures: the verdicts' own numbers
                assert all(verdict["observed"][f["name"]] == f["value"] for f in line["figures"]), line
            expected = "PASS" if all(c["status"] == "PASS" for c in checks) else drill["result"]
            assert drill["result"] == expected and drill["exit_code"] == (0 if expected == "PASS" else 1)
            link = next(name for name in ("report.md", "summary.md") if (folder / drill["run_dir"] / name).is_file())
            assert f"| {drill['label']} | {drill['result']} |" in index
            assert f"]({drill['run_dir']}/{link})" in index
        html = (folder / "index.html").read_text()
        assert html.count("<tr>") == 1 + len(DRILLS) and "trend.html" in html
    trend = (folders[1] / "trend.md").read_text()
    first, second = (json.loads((f / "gameday.json").read_text()) for f in folders)
    for label in DRILLS:
        section = trend.split(f"## {label}\n", 1)[1].split("\n## ", 1)[0]
        for stamp, record in ((stamps[0], first), (stamps[1], second)):
            drill = next(d for d in record["drills"] if d["label"] == label)
            rows = [line for line in section.splitlines() if f"[{stamp}](../{stamp}/index.md)" in line]
            assert f"[{drill['result']}](../{stamp}/{drill['run_dir']}/" in rows[0]
            assert [c.strip() for c in rows[0].split("|")[3:-1]] == [c["status"] for c in drill["checks"]], rows[0]
            figures = [f for c in drill["checks"] for f in c["figures"]]
            # the headline figures row: the values verdicts.json has, as the page formats them; "—" where none
            if len(rows) == 1:
                assert not figures and "No headline figures." in section
            else:
                cells = [c.strip() for c in rows[1].split("|")[2:-1]]
                assert sorted(f"{f['value']:.4g}" for f in figures) == sorted(c for c in cells if c != "—"), rows[1]
    assert "2 game day(s) named `ci-smoke`" in trend
    assert f"**[{stamps[1]}](../{stamps[1]}/index.md)**" in trend
    with_figures = len(DRILLS) - trend.count("No headline figures.")  # a drill with no numbers has no table
    assert (folders[1] / "trend.html").read_text().count('<tr class="current">') == len(DRILLS) + with_figures


def _reverting_drill(path: Path) -> Path:
    drill = {
        "name": "cannot-revert",
        "target": {"kind": "embedded", "config": {"replicas": 1, "engine": {"weight_load_time": "200ms"}}},
        "scenario": {
            "seed": 1,
            "arrival": {"process": "poisson", "rate": 4},
            "pools": [
                {
                    "name": "chat",
                    "input_tokens": {"dist": "fixed", "value": 50},
                    "output_tokens": {"dist": "fixed", "value": 8},
                }
            ],
        },
        "phases": {"warmup": "1s", "baseline": "2s", "fault": "2s", "recovery": "1s", "replay": False},
        "faults": [{"kind": "test_raising_revert", "start": "0s", "duration": "1s"}],
        "otlp": {"port": 0},
    }
    path.write_text(yaml.safe_dump(drill, sort_keys=False))
    return path


def test_a_drill_whose_revert_fails_stops_the_game_day_with_exit_4(tmp_path: Path) -> None:
    _reverting_drill(tmp_path / "cannot-revert.yaml")
    path = tmp_path / "abort.yaml"
    path.write_text("name: abort\ncooldown: 1s\ndrills:\n  - drill: cannot-revert.yaml\n  - drill: slow-replica\n")
    out = tmp_path / "reports"
    proc, took = _gameday(path, out)
    print(f"abort game day: exit {proc.returncode} in {took:.0f}s")
    assert proc.returncode == 4, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "REVERT FAILED" in proc.stdout and "drill cleanup --run-dir" in proc.stdout + proc.stderr
    (folder,) = (out / "gamedays" / "abort").iterdir()
    record = json.loads((folder / "gameday.json").read_text())
    assert [d["result"] for d in record["drills"]] == ["REVERT FAILED", "NOT RUN"]
    assert record["status"] == "aborted" and record["exit_code"] == 4
    assert not (folder / "02-slow-replica").exists(), "the drill after a failed revert must never start"
    assert "revert failed: the target may still be faulted" in (folder / "index.md").read_text()
    cleanup = subprocess.run(
        [sys.executable, "-m", "drill", "cleanup", "--run-dir", str(folder / record["drills"][0]["run_dir"])],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "DRILL_STATE_DIR": str(out / "state")},
    )
    assert "FAILED to revert test_raising_revert-0" in cleanup.stdout, cleanup.stdout + cleanup.stderr
