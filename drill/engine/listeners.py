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
``run_finished(status, exit_code)``.
"""

from __future__ import annotations

import logging
from typing import Callable

__all__ = ["Listeners", "RunListener"]

log = logging.getLogger(__name__)


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
    """Fans events out to listeners, isolating each one's failures."""

    def __init__(self, listeners: list[RunListener] | None = None,
                 on_error: Callable[[str, str, BaseException], None] | None = None) -> None:
        self._listeners = list(listeners or [])
        self._on_error = on_error

    def add(self, listener: RunListener) -> None:
        self._listeners.append(listener)

    def fire(self, event: str, **kwargs: object) -> None:
        for listener in self._listeners:
            handler = getattr(listener, event, None)
            if handler is None:
                continue
            try:
                handler(**kwargs)
            except Exception as exc:  # noqa: BLE001 - observers never break a run
                name = type(listener).__name__
                log.warning("listener %s raised in %s; ignored", name, event, exc_info=True)
                if self._on_error is not None:
                    try:
                        self._on_error(name, event, exc)
                    except Exception:  # noqa: BLE001
                        log.exception("error handler for listener failures raised")
