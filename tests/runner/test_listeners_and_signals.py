"""Observers never break a run; signals never interrupt a revert."""

from __future__ import annotations

import os
import signal
import time

import pytest

from drill.errors import RunInterrupted
from drill.runner.listeners import ListenerEvent, Listeners, RunListener
from drill.runner.signals import SignalGuard


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
    listeners = Listeners(
        [Broken(), recorder], on_error=lambda name, event, exc: errors.append((name, event, str(exc)))
    )
    listeners.fire(ListenerEvent.PHASE_STARTED, phase="fault", planned_s=1.0)
    assert recorder.seen == ["fault"]
    assert errors == [("Broken", "phase_started", "listener bug")]


def test_every_listener_event_is_a_run_listener_method_and_back() -> None:
    methods = {name for name, value in vars(RunListener).items() if callable(value) and not name.startswith("_")}
    assert methods == {event.value for event in ListenerEvent}


def test_a_misspelt_event_name_is_an_error_not_silence() -> None:
    listeners = Listeners([Recorder()])
    with pytest.raises(TypeError, match="not a ListenerEvent"):
        listeners.fire("phase_startd", phase="fault", planned_s=1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a ListenerEvent"):
        listeners.fire("phase_started", phase="fault", planned_s=1.0)  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        ListenerEvent.PHASE_STARTD  # type: ignore[attr-defined]  # noqa: B018


def test_a_misspelt_argument_is_an_error_before_any_listener_runs() -> None:
    recorder = Recorder()
    listeners = Listeners([recorder])
    with pytest.raises(TypeError):
        listeners.fire(ListenerEvent.PHASE_STARTED, phase="fault", planed_s=1.0)
    with pytest.raises(TypeError):
        listeners.fire(ListenerEvent.PHASE_STARTED, phase="fault")
    assert recorder.seen == []


class Misspelt(RunListener):
    def fault_injectd(self, fault_id: str, kind: str) -> None: ...


def test_a_listener_method_named_like_a_misspelt_event_is_refused() -> None:
    with pytest.raises(TypeError, match="Misspelt.fault_injectd is no listener event .did you mean fault_injected"):
        Listeners([Misspelt()])
    with pytest.raises(TypeError, match="fault_injectd"):
        Listeners().add(Misspelt())


def test_a_signal_outside_a_critical_section_interrupts_at_once() -> None:
    guard = SignalGuard()
    guard.install()
    try:
        with pytest.raises(RunInterrupted) as info:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this returns
        assert info.value.exit_code == 130 and info.value.signal_name == "SIGTERM"
    finally:
        guard.uninstall()


def test_a_signal_inside_a_critical_section_waits_for_its_end() -> None:
    guard = SignalGuard()
    guard.install()
    done = []
    try:
        with pytest.raises(RunInterrupted), guard.critical():
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
