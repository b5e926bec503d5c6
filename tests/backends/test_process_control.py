"""ProcessControl on real child processes: find by PID / PID file / name, SIGSTOP and SIGCONT with /proc
state checks, kill, waiting for a supervisor's new PID, PID-reuse safety and bounded waits."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from drill.backends.process import ProcessControl, ProcState, read_pid_file, read_stat
from drill.errors import ProcessControlError

_SLEEPER = (
    "import signal, sys, time\nif 'deaf' in sys.argv: signal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(120)"
)


@pytest.fixture()
def spawn() -> Iterator[Callable[..., subprocess.Popen]]:
    """``spawn(*args)``: a sleeping Python child whose command line carries ``args``; killed after the test."""
    started: list[subprocess.Popen] = []

    def start(*args: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", _SLEEPER, *args])
        started.append(proc)
        deadline = time.monotonic() + 10
        while args and args[0] not in " ".join(read_stat(proc.pid).cmdline if read_stat(proc.pid) else ()):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait(10)


def test_find_by_pid_pid_file_and_unique_name(spawn, tmp_path: Path) -> None:
    token = f"drill-proc-{uuid.uuid4().hex[:8]}"
    proc = spawn(token)
    pid_file = tmp_path / "replica.pid"
    pid_file.write_text(f"{proc.pid}\n")
    control = ProcessControl(timeout_s=5)
    assert control.find(pid=proc.pid).pid == proc.pid
    assert control.find(pid_file=str(pid_file)).pid == proc.pid
    assert control.find(process_name=token).pid == proc.pid
    spawn(token)
    with pytest.raises(ProcessControlError, match=r"2 processes match name .* \(PIDs"):
        control.find(process_name=token)
    with pytest.raises(ProcessControlError, match="cannot read PID file") as missing:
        control.find(pid_file=str(tmp_path / "nope.pid"))
    assert "is the replica running" in missing.value.hint


def test_stop_shows_state_t_and_cont_resumes_idempotently(spawn) -> None:
    proc = spawn()
    control = ProcessControl(timeout_s=5)
    ref = control.find(pid=proc.pid).ref
    stopped = control.stop(ref)
    assert stopped.state is ProcState.STOPPED and read_stat(proc.pid).state.stopped
    assert control.cont(ref) is True
    assert not read_stat(proc.pid).state.stopped
    assert control.cont(ref) is True  # already running: SIGCONT is harmless


def test_kill_waits_until_gone_and_a_reused_pid_is_never_signalled(spawn) -> None:
    proc = spawn()
    control = ProcessControl(timeout_s=5)
    ref = control.find(pid=proc.pid).ref
    control.stop(ref)
    assert control.kill(ref) is True  # a stopped process dies of SIGKILL too
    assert read_stat(proc.pid) is None or read_stat(proc.pid).state.gone
    assert control.kill(ref) is False and control.cont(ref) is False
    other = spawn()
    impostor = ProcessControl.ref(other.pid, read_stat(other.pid).start_ticks + 1)  # the PID of a later process
    assert control.send(impostor, signal.SIGSTOP) is False
    assert not read_stat(other.pid).state.stopped


@pytest.mark.realtime  # the child must install its handler within 0.2 s, the kill must fail within 2 s
def test_waits_are_bounded_and_say_what_was_seen(spawn) -> None:
    proc = spawn("deaf")
    time.sleep(0.2)  # let it install its SIGTERM handler
    control = ProcessControl(timeout_s=0.3)
    ref = control.find(pid=proc.pid).ref
    start = time.monotonic()
    with pytest.raises(ProcessControlError, match=r"is not gone after 0.3s \(state S\)"):
        control.kill(ref, signal.SIGTERM)
    assert time.monotonic() - start < 2.0


def test_wait_new_sees_a_supervisor_restart_through_the_pid_file(spawn, tmp_path: Path) -> None:
    first = spawn()
    pid_file = tmp_path / "replica.pid"
    pid_file.write_text(str(first.pid))
    control = ProcessControl(timeout_s=5)
    old = control.find(pid_file=str(pid_file)).ref
    control.kill(old)
    with pytest.raises(ProcessControlError, match="no new process replaced"):
        control.wait_new(old, pid_file=str(pid_file), timeout_s=0.3)
    second = spawn()
    pid_file.write_text(str(second.pid))  # what the supervisor does
    assert control.wait_new(old, pid_file=str(pid_file)).pid == second.pid
    assert read_pid_file(pid_file) == second.pid
