"""Observers never break a run; signals never interrupt a revert."""

from __future__ import annotations

import os
import signal
import time

import pytest

from drill.engine.listeners import Listeners, RunListener
from drill.engine.signals import SignalGuard
from drill.errors import RunInterrupted


class Broken(RunListener):
    def phase_started(self, phase: str, planned_s: float | None) -> None:
        raise ValueError("listener bug")


class Recorder(RunListener):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def phase_started(self, phase: str, planned_s: float | None) -> None:
        self.seen.append(phase)


def test_a_raising_listener_is_isolated_and_reported() -> None:
    errors = []
    recorder = Recorder()
    listeners = Listeners([Broken(), recorder], on_error=lambda name, event, exc: errors.append((name, event, str(exc))))
    listeners.fire("phase_started", phase="fault", planned_s=1.0)
    assert recorder.seen == ["fault"]
    assert errors == [("Broken", "phase_started", "listener bug")]


def test_a_signal_outside_a_critical_section_interrupts_at_once() -> None:
    guard = SignalGuard()
    guard.install()
    try:
        with pytest.raises(RunInterrupted) as info:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)   # the handler raises before this returns
        assert info.value.exit_code == 130 and info.value.signal_name == "SIGTERM"
    finally:
        guard.uninstall()


def test_a_signal_inside_a_critical_section_waits_for_its_end() -> None:
    guard = SignalGuard()
    guard.install()
    done = []
    try:
        with pytest.raises(RunInterrupted):
            with guard.critical():
                os.kill(os.getpid(), signal.SIGINT)
                done.append("revert finished")
        assert done == ["revert finished"]
    finally:
        guard.uninstall()


def test_while_shutting_down_signals_are_only_recorded() -> None:
    guard = SignalGuard()
    guard.install()
    try:
        guard.shutting_down()
        os.kill(os.getpid(), signal.SIGINT)
        with guard.critical():
            pass
        assert guard.received == "SIGINT"
    finally:
        guard.uninstall()
