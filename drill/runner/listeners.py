"""Run listeners: progress displays, notifications. They observe; they can never break a run.

A listener implements any of the no-op methods of :class:`RunListener`
(chaostoolkit's ``RunEventHandler``). :class:`Listeners` calls each one in turn
and, like Locust's ``EventHook.fire``, catches and logs whatever a listener
raises (with its traceback, at WARNING, and into the journal), so a broken
listener cannot stop the run or skip a revert.

Events, in order: ``run_started(run_id, run_dir)``, ``phase_started(phase, planned_s)``,
``fault_injected(fault_id, kind)``, ``fault_verified(fault_id, summary)``,
``fault_not_landed(fault_id, error)``, ``fault_reverted(fault_id, ok, error)``,
``stop_condition(label, observed)``, ``phase_ended(phase, elapsed_s)``,
``run_finished(status, exit_code)`` — the members of :class:`ListenerEvent`, fired as
``listeners.fire(ListenerEvent.PHASE_STARTED, phase=..., planned_s=...)``.
"""

from __future__ import annotations

import difflib
import enum
import functools
import inspect
import logging
from collections.abc import Callable

__all__ = ["ListenerEvent", "Listeners", "RunListener"]

log = logging.getLogger(__name__)


class ListenerEvent(str, enum.Enum):
    """The events a :class:`RunListener` can observe; each value is the name of its method."""

    RUN_STARTED = "run_started"
    PHASE_STARTED = "phase_started"
    PHASE_ENDED = "phase_ended"
    FAULT_INJECTED = "fault_injected"
    FAULT_VERIFIED = "fault_verified"
    FAULT_NOT_LANDED = "fault_not_landed"
    FAULT_REVERTED = "fault_reverted"
    STOP_CONDITION = "stop_condition"
    TICK = "tick"
    RUN_FINISHED = "run_finished"


class RunListener:
    """Base class with a no-op for every event; override what you need."""

    def run_started(self, run_id: str, run_dir: str) -> None: ...
    def phase_started(self, phase: str, planned_s: float | None) -> None: ...
    def phase_ended(self, phase: str, elapsed_s: float) -> None: ...
    def fault_injected(self, fault_id: str, kind: str) -> None: ...
    def fault_verified(self, fault_id: str, summary: str) -> None: ...
    def fault_not_landed(self, fault_id: str, error: str) -> None: ...
    def fault_reverted(self, fault_id: str, ok: bool, error: str | None) -> None: ...
    def stop_condition(self, label: str, observed: str) -> None: ...
    def tick(self, phase: str, elapsed_s: float) -> None: ...
    def run_finished(self, status: str, exit_code: int) -> None: ...


class Listeners:
    """Fans events out to listeners, isolating each one's failures.

    What the engine gets wrong fails loudly instead: an event that is not a :class:`ListenerEvent`, arguments
    that its :class:`RunListener` method does not take, and a listener method named like an event but misspelt
    (``fault_injectd``) are ``TypeError`` at once, never an event that silently reaches nobody.
    """

    def __init__(
        self,
        listeners: list[RunListener] | None = None,
        on_error: Callable[[str, str, BaseException], None] | None = None,
    ) -> None:
        self._listeners: list[RunListener] = []
        self._on_error = on_error
        for listener in listeners or []:
            self.add(listener)

    def add(self, listener: RunListener) -> None:
        _refuse_misspelt_handlers(type(listener))  # type: ignore[arg-type]  # a class is hashable (mypy checks instances)
        self._listeners.append(listener)

    def fire(self, event: ListenerEvent, **kwargs: object) -> None:
        if not isinstance(event, ListenerEvent):
            raise TypeError(f"listener event {event!r} is not a ListenerEvent")
        _signature(event).bind(None, **kwargs)  # a misspelt or missing argument is a TypeError here
        for listener in self._listeners:
            handler = getattr(listener, event.value, None)
            if handler is None:
                continue
            try:
                handler(**kwargs)
            except Exception as exc:  # noqa: BLE001 - observers never break a run
                name = type(listener).__name__
                log.warning("listener %s raised in %s; ignored", name, event.value, exc_info=True)
                if self._on_error is not None:
                    try:
                        self._on_error(name, event.value, exc)
                    except Exception:  # noqa: BLE001
                        log.exception("error handler for listener failures raised")


@functools.cache
def _signature(event: ListenerEvent) -> inspect.Signature:
    return inspect.signature(getattr(RunListener, event.value))


_EVENT_NAMES = tuple(e.value for e in ListenerEvent)


@functools.cache
def _refuse_misspelt_handlers(cls: type) -> None:
    """A public method that is close to an event's name but is none is a misspelt handler: it would never run."""
    for name in _methods_below_run_listener(cls):
        if name.startswith("_") or name in _EVENT_NAMES:
            continue
        close = difflib.get_close_matches(name, _EVENT_NAMES, n=1, cutoff=0.8)
        if close:
            raise TypeError(f"{cls.__name__}.{name} is no listener event (did you mean {close[0]}?)")


def _methods_below_run_listener(cls: type) -> set[str]:
    """The names the classes between ``cls`` and :class:`RunListener` define."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass in (RunListener, object):
            continue
        names.update(n for n, v in vars(klass).items() if callable(v))
    return names
