"""A closed output pipe is a normal end for the CLI; crash logs go to the run or state directory, never the cwd."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from drill.cli.common import CrashSite, handle_errors
from drill.cli.main import cli
from tests.minimal_drill import minimal_drill

DRILL = minimal_drill("piped")


def test_plan_into_a_closed_pipe_exits_quietly_and_writes_no_crash_log(tmp_path: Path) -> None:
    (tmp_path / "d.yaml").write_text(DRILL)
    env = {**os.environ, "DRILL_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "drill", "plan", "d.yaml"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # as `| head -0` would: every write the command makes meets a closed pipe
    stderr = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert proc.returncode in (1, 141), (proc.returncode, stderr)  # not 3 (internal error)
    assert "internal error" not in stderr and "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr
    assert not list(tmp_path.rglob("drill-crash*.log")), "a closed pipe is not a crash"


def test_plan_piped_into_head_prints_its_first_lines(tmp_path: Path) -> None:
    (tmp_path / "d.yaml").write_text(DRILL)
    done = subprocess.run(
        f"{sys.executable} -m drill plan d.yaml | head -2",
        shell=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "DRILL_STATE_DIR": str(tmp_path / "state")},
    )
    assert done.returncode == 0 and done.stdout.splitlines()[0] == "drill piped", done
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not list(tmp_path.rglob("drill-crash*.log"))


def test_an_internal_error_logs_to_the_state_directory_and_says_where(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "d.yaml").write_text(DRILL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DRILL_STATE_DIR", str(tmp_path / "state"))

    def broken(loaded):
        raise RuntimeError("a bug in the plan printer")

    monkeypatch.setattr("drill.cli.plan.render_plan", broken)
    result = CliRunner().invoke(cli, ["plan", "d.yaml"])
    assert result.exit_code == 3
    (log,) = (tmp_path / "state" / "crash").glob("drill-crash-*.log")
    assert f"traceback in {log}" in result.output.replace("\n", "")
    assert "RuntimeError: a bug in the plan printer" in log.read_text()
    assert not list(tmp_path.glob("drill-crash*.log")), "nothing in the current directory"


def test_once_a_command_has_a_run_directory_the_crash_log_goes_there(tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "reports" / "x" / "run-1"
    run_dir.mkdir(parents=True)
    with pytest.raises(SystemExit) as exit_info, handle_errors() as crash:
        crash.run_dir = lambda: run_dir
        raise ValueError("boom")
    assert exit_info.value.code == 3
    (log,) = run_dir.glob("drill-crash-*.log")
    assert "ValueError: boom" in log.read_text()
    assert str(log) in capsys.readouterr().err.replace("\n", "")


def test_a_run_directory_that_does_not_exist_yet_falls_back_to_the_state_directory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DRILL_STATE_DIR", str(tmp_path / "state"))
    assert CrashSite(lambda: None).folder() == tmp_path / "state" / "crash"
    assert CrashSite(tmp_path / "missing").folder() == tmp_path / "state" / "crash"
