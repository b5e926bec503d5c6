"""The dead-man watchdog reverts a SIGKILLed runner's faults from the journal; cleanup then has nothing to do."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from drill.backends.docker import DockerBackend
from drill.cli.main import cli
from drill.runner.cleanup import dead_runs

REPO = Path(__file__).resolve().parents[2]


def _wait_for(predicate, timeout_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"condition not met within {timeout_s}s")


@pytest.mark.integration
@pytest.mark.docker
def test_sigkill_of_runner_is_reverted_by_watchdog_within_5s(
    tmp_path: Path, toxiproxy_server, proxy, container
) -> None:
    client, proxy_name = proxy
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    runner = subprocess.Popen(
        [sys.executable, "-m", "tests.runner.fake_runner", str(run_dir), toxiproxy_server.url, proxy_name, container],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert runner.stdout.readline().strip() == "READY"
        docker = DockerBackend()
        assert [t.name for t in client.toxics(proxy_name)] == ["drill-latency"]
        assert str(docker.info(container).state) == "paused"

        os.kill(runner.pid, signal.SIGKILL)
        runner.wait(5)
        elapsed = _wait_for(
            lambda: not client.toxics(proxy_name) and str(docker.info(container).state) == "running", 5.0
        )
        assert elapsed < 5.0
    finally:
        runner.kill()
    journal = (run_dir / "journal.jsonl").read_text()
    assert journal.count('"event":"fault_reverted"') == 2 and '"by":"watchdog"' in journal
    assert run_dir not in dead_runs()
    result = CliRunner().invoke(cli, ["cleanup", "--run-dir", str(run_dir)])
    assert result.exit_code == 0 and "nothing to do" in result.output


def test_watchdog_exits_quietly_when_runner_finishes(tmp_path: Path) -> None:
    from drill.rundir.journal import Journal
    from drill.runner.watchdog import Watchdog

    Journal(tmp_path / "journal.jsonl").close()
    dog = Watchdog(tmp_path)
    dog.finish()
    assert dog.process.returncode == 0
    assert "nothing to do" in (tmp_path / "watchdog.log").read_text()
