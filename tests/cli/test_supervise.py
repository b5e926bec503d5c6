"""``drill supervise``: restarts a command that exits, keeps its PID file, stops it on SIGTERM (real processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from drill.backends.process import read_stat

pytestmark = pytest.mark.integration


def _until(condition: Callable[[], object], timeout_s: float, what: str) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            found = condition()
        except (OSError, ValueError):
            found = None
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"not within {timeout_s:g} s: {what}")


def _pid(pid_file: Path) -> int:
    return int(pid_file.read_text())


def _alive(pid: int) -> bool:
    info = read_stat(pid)
    return info is not None and not info.state.gone


def _supervise(tmp_path: Path, *command: str) -> tuple[subprocess.Popen[bytes], Path]:
    pid_file = tmp_path / "server.pid"
    process = subprocess.Popen(
        [sys.executable, "-m", "drill", "supervise", "--pid-file", str(pid_file), "--", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    _until(pid_file.exists, 10, "the PID file")
    return process, pid_file


def test_a_killed_command_is_started_again_with_a_new_pid_and_sigterm_stops_it(tmp_path: Path) -> None:
    process, pid_file = _supervise(tmp_path, "sleep", "300")
    first = _pid(pid_file)
    assert read_stat(first).ppid == process.pid  # the PID file names the command, not the supervisor
    os.kill(first, signal.SIGKILL)
    second = _until(lambda: _pid(pid_file) != first and _pid(pid_file), 10, "a new PID")
    assert _alive(second)
    os.kill(second, signal.SIGSTOP)  # stopped is not exited: no restart
    time.sleep(0.5)
    assert _pid(pid_file) == second and read_stat(second).state.stopped
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0  # a stopped command still gets the SIGTERM (SIGCONT follows it)
    assert not _alive(second) and not pid_file.exists()
    output = process.stdout.read().decode()
    assert "exited with code -9; restarting" in output and "stopping sleep" in output
    assert (tmp_path / "server.log").exists()


def test_the_workers_a_sigkilled_command_leaves_are_killed_before_the_restart_and_at_stop(tmp_path: Path) -> None:
    # a server with a worker process, as vLLM's API server has its engine core: SIGKILL reaches the server alone
    worker_file = tmp_path / "worker.pid"
    script = f"sleep 300 & echo $! > {worker_file}.tmp && mv {worker_file}.tmp {worker_file}; wait"
    process, pid_file = _supervise(tmp_path, "sh", "-c", script)
    first = _pid(pid_file)
    worker = _until(lambda: worker_file.exists() and _pid(worker_file), 10, "the first worker")
    worker_file.unlink()
    os.kill(first, signal.SIGKILL)
    _until(lambda: not _alive(worker), 5, "the SIGKILLed server's worker gone")
    second = _until(lambda: _pid(pid_file) != first and _pid(pid_file), 10, "a new PID")
    second_worker = _until(lambda: worker_file.exists() and _pid(worker_file), 10, "the restarted server's worker")
    assert _alive(second) and _alive(second_worker)
    process.send_signal(signal.SIGTERM)  # sh waits for its worker: SIGTERM ends sh, the group's rest is killed
    assert process.wait(timeout=15) == 0
    _until(lambda: not _alive(second_worker), 5, "the worker gone at stop")


def test_the_command_dies_with_a_sigkilled_supervisor(tmp_path: Path) -> None:
    process, pid_file = _supervise(tmp_path, "sleep", "300")
    child = _pid(pid_file)
    process.kill()
    process.wait(timeout=10)
    _until(lambda: not _alive(child), 10, "the command gone with its supervisor")


def test_a_command_that_cannot_start_is_bad_input_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "drill", "supervise", "--pid-file", str(tmp_path / "p"), "--", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "COMMAND" in done.stderr and "cannot start" in done.stderr
