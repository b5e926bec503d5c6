"""Game-day files are validated like every other input file: every problem located, exit 2, nothing started."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from drill.errors import SpecError
from drill.gameday.definition import load_gameday

REPO = Path(__file__).resolve().parents[2]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _problems(path: Path, *overrides: str) -> list[str]:
    with pytest.raises(SpecError) as caught:
        load_gameday(path, overrides=overrides)
    return [d.render() for d in caught.value.diagnostics]


def _one(problems: list[str], needle: str) -> str:
    found = [p for p in problems if needle in p]
    assert len(found) == 1, f"{needle!r} in {problems}"
    return found[0]


def test_every_problem_of_the_game_day_is_located_at_its_line_and_column(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "g.yaml",
        (
            "name: weekly\n"
            "cooldwn: 30s\n"
            "abort: {on_revert_failure: false}\n"
            "drills:\n"
            "  - drill: slow-replca\n"
            "  - drill: slow-replica\n"
            "    time_scale: -1\n"
            "  - drill: gpu-oom\n"
            "  - drill: gpu-oom\n"
        ),
    )
    problems = _problems(path, "cooldown=soon")
    assert _one(problems, "cooldwn").startswith(f"{path}:2:1: error: cooldwn: unknown key")
    assert "did you mean 'cooldown'?" in _one(problems, "cooldwn")
    assert _one(problems, "on_revert_failure").startswith(f"{path}:3:28: error: abort.on_revert_failure:")
    unknown = _one(problems, "slow-replca")
    assert unknown.startswith(f"{path}:5:12: error: drills[0].drill: no drill file") and "'slow-replica'?" in unknown
    assert _one(problems, "time_scale").startswith(f"{path}:7:17: error: drills[1].time_scale: expected a value")
    twice = _one(problems, "already drill 3")
    assert twice.startswith(f"{path}:9:12: error: drills[3].drill:") and "name:" in twice
    assert _one(problems, "soon").startswith("<--set>:1:10: error: cooldown:")
    assert len(problems) == 6, problems


def test_a_drills_set_problem_is_located_at_the_set_item_that_wrote_it(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "g.yaml",
        (
            "name: weekly\n"
            "set: [phases.recovery=-3s]\n"
            "drills:\n"
            "  - drill: unbounded-queue\n"
            "    set: [phases.baseline=fast, nokey, 'faults[0].params.rat=2']\n"
            "  - drill: slow-replica\n"
        ),
    )
    problems = _problems(path)
    shared = _one(problems, "negative time")  # the same problem in both drills, reported once
    assert shared.startswith(f"{path}:2:7: error: set[0]: phases.recovery:"), shared
    assert _one(problems, "'fast'").startswith(f"{path}:5:11: error: drills[0].set[0]: phases.baseline:")
    assert _one(problems, "KEY=VALUE").startswith(f"{path}:5:33: error: drills[0].set[1]:")
    rat = _one(problems, "'rat'")
    assert (
        rat.startswith(f"{path}:5:40: error: drills[0].set[2]: faults[0].params.rat: unknown key")
        and "rate_multiplier" in rat
    )
    assert len(problems) == 4, problems


def test_a_problem_inside_a_drill_file_is_located_in_that_file(tmp_path: Path) -> None:
    _write(tmp_path / "broken.yaml", "name: broken\ntarget: {kind: embeded}\n")
    path = _write(tmp_path / "g.yaml", "name: weekly\ndrills:\n  - drill: broken.yaml\n")  # next to the game day
    problems = _problems(path)
    kind = _one(problems, "embeded")
    assert kind.startswith(f"{tmp_path / 'broken.yaml'}:2:16: error: target.kind:") and "'embedded'?" in kind
    assert _one(problems, "'scenario'").startswith(f"{tmp_path / 'broken.yaml'}:1:1:")


def test_a_drill_is_found_next_to_the_game_day_or_by_its_catalogue_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    local = tmp_path / "mine.yaml"
    local.write_text((REPO / "drills" / "slow-replica.yaml").read_text().replace("name: slow-replica", "name: mine"))
    path = _write(
        tmp_path / "g.yaml",
        (
            "name: weekly\ncooldown: 10s\ntime_scale: 0.5\nset: [phases.replay.max_samples=5]\n"
            "drills:\n"
            "  - {drill: mine.yaml, time_scale: 0.5}\n"
            "  - {drill: unbounded-queue, name: admission, set: [target.config.engine.max_num_queued_reqs=128]}\n"
        ),
    )
    loaded = load_gameday(path, time_scale=0.5)
    first, second = loaded.drills
    assert (first.label, first.path, first.time_scale) == ("mine", local.resolve(), 0.125)
    assert (second.label, second.path) == ("admission", (REPO / "drills" / "unbounded-queue.yaml").resolve())
    assert second.overrides == ("phases.replay.max_samples=5", "target.config.engine.max_num_queued_reqs=128")
    assert second.loaded.target_params.engine.max_num_queued_reqs == 128
    assert loaded.cooldown_s == 5.0  # the cooldown is scaled like the drills' timelines


def test_the_command_exits_2_and_starts_nothing(tmp_path: Path) -> None:
    path = _write(tmp_path / "g.yaml", "name: weekly\ndrills:\n  - drill: slow-replica\n    tme_scale: 0.1\n")
    out = tmp_path / "reports"
    proc = subprocess.run(
        [sys.executable, "-m", "drill", "gameday", str(path), "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"{path}:4:5: error: drills[0].tme_scale: unknown key" in proc.stderr
    assert "did you mean 'time_scale'?" in proc.stderr and "nothing was run" in proc.stderr
    assert not out.exists(), "a game day refused at validation must not create its folder"


def test_dry_run_lists_each_drill_as_it_would_run(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "drill",
            "gameday",
            "gamedays/weekly.yaml",
            "--dry-run",
            "--time-scale",
            "0.5",
            "--out",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "game day weekly" in proc.stdout and "cooldown 15s" in proc.stdout
    assert (
        "unbounded-queue-admission: " in proc.stdout
        and "--set target.config.engine.max_num_queued_reqs=128" in proc.stdout
    )
    for pd in ("kv-transfer-stall", "kv-block-corruption-checked", "prefill-crash"):  # issue 19's P/D drills
        assert f"{pd}: " in proc.stdout, proc.stdout
    assert not list(tmp_path.iterdir())
