"""The revert stack: a fault's revert is journaled before the fault is injected, and runs on every exit path.

The runner pushes a :class:`RevertRecord` (fault kind, params, resolved targets,
saved prior state, planned end) to the journal with ``fsync`` *before* calling
``inject``. Reverts then run, most recent first, on a normal end, an exception,
a stop condition, SIGINT or SIGTERM. If the runner dies without reverting
(SIGKILL, power loss, a hung process), the watchdog or ``drill cleanup``
rebuilds the same fault from the record and calls its ``revert`` — which is why
``revert`` must need nothing but the record.

Each revert runs in a worker thread and is waited for at most ``timeout_s``;
one that fails or hangs is recorded (``revert_failed``) and the stack moves on
to the next, so one stuck backend cannot keep other faults in place.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from drill import registry
from drill.api import FaultContext, FaultTargets, TargetInfo
from drill.rundir.journal import Event, Journal, JournalEntry

__all__ = [
    "RevertOutcome",
    "RevertRecord",
    "RevertStack",
    "pending_reverts",
    "pending_teardowns",
    "revert_from_record",
    "run_bounded",
]

log = logging.getLogger(__name__)


class RevertRecord(BaseModel):
    """Everything needed to revert one fault, from the journal alone."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    fault_id: str
    kind: str
    params: dict[str, Any]
    target: TargetInfo
    targets: FaultTargets
    saved: dict[str, Any] = {}
    planned_end_ts: float | None = None  # wall clock; the watchdog's lease runs from here
    timeout_s: float = 10.0


@dataclass(frozen=True)
class RevertOutcome:
    fault_id: str
    ok: bool
    error: str | None = None
    seconds: float = 0.0


def run_bounded(fn: Callable[[], None], timeout_s: float, what: str) -> None:
    """Run ``fn`` in a daemon thread; raise TimeoutError if it takes longer than ``timeout_s``."""
    result: dict[str, BaseException | None] = {"error": None}

    def target() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller below
            result["error"] = exc

    worker = threading.Thread(target=target, name=f"revert:{what}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise TimeoutError(f"{what} did not finish within {timeout_s:g}s")
    if result["error"] is not None:
        raise result["error"]


@dataclass
class _Item:
    record: RevertRecord
    revert: Callable[[], None]


@dataclass
class RevertStack:
    """LIFO of registered reverts; each runs at most once."""

    journal: Journal
    _items: list[_Item] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def push(self, record: RevertRecord, revert: Callable[[], None]) -> None:
        """Journal (fsync) the record, then remember how to revert. Call before injecting."""
        self.journal.write(Event.REVERT_REGISTERED, **record.model_dump(mode="json"))
        with self._lock:
            self._items.append(_Item(record, revert))

    def pending(self) -> list[str]:
        with self._lock:
            return [item.record.fault_id for item in self._items]

    def revert(self, fault_id: str, reason: str) -> RevertOutcome | None:
        """Revert one fault now (e.g. at the end of its window). None if it is not on the stack."""
        with self._lock:
            item = next((i for i in self._items if i.record.fault_id == fault_id), None)
            if item is not None:
                self._items.remove(item)
        return None if item is None else self._run(item, reason)

    def revert_all(self, reason: str) -> list[RevertOutcome]:
        """Revert everything still registered, most recent first; never stops early."""
        outcomes: list[RevertOutcome] = []
        while True:
            with self._lock:
                if not self._items:
                    return outcomes
                item = self._items.pop()
            outcomes.append(self._run(item, reason))

    def _run(self, item: _Item, reason: str) -> RevertOutcome:
        start = time.monotonic()
        fid = item.record.fault_id
        try:
            run_bounded(item.revert, item.record.timeout_s * 3, f"revert of {fid}")
        except BaseException as exc:  # noqa: BLE001 - every failure is journaled, and the stack goes on
            outcome = RevertOutcome(fid, False, f"{type(exc).__name__}: {exc}", time.monotonic() - start)
            self.journal.write(
                Event.REVERT_FAILED, fault_id=fid, kind=item.record.kind, reason=reason, error=outcome.error
            )
            log.error("revert of %s failed: %s", fid, outcome.error)
            return outcome
        outcome = RevertOutcome(fid, True, None, time.monotonic() - start)
        self.journal.write(
            Event.FAULT_REVERTED, fault_id=fid, kind=item.record.kind, reason=reason, seconds=round(outcome.seconds, 4)
        )
        return outcome


def pending_reverts(entries: list[JournalEntry]) -> list[RevertRecord]:
    """Faults registered in a journal whose revert has not succeeded (in registration order)."""
    registered: dict[str, RevertRecord] = {}
    for entry in entries:
        fid = entry.get("fault_id")
        if entry.event == Event.REVERT_REGISTERED.value:
            try:
                registered[fid] = RevertRecord.model_validate(entry.data)
            except ValueError:
                log.error("unreadable revert record for %s in the journal", fid)
        elif entry.event == Event.FAULT_REVERTED.value:
            registered.pop(fid, None)
    return list(registered.values())


def pending_teardowns(entries: list[JournalEntry]) -> list[dict[str, Any]]:
    """Targets a run started and did not stop: their TARGET_STARTING data."""
    started: dict[str, dict[str, Any]] = {}
    for entry in entries:
        key = entry.get("target_id")
        if entry.event == Event.TARGET_STARTING.value and entry.get("teardown") is not None:
            started[key] = entry.data
        elif entry.event == Event.TARGET_STOPPED.value:
            started.pop(key, None)
    return list(started.values())


def revert_from_record(record: RevertRecord) -> None:
    """Rebuild the fault from the registry and revert it (watchdog and ``drill cleanup``)."""
    fault_cls = registry.faults.get(record.kind)
    params = fault_cls.Params.model_validate(record.params)
    saved = fault_cls.Saved.model_validate(record.saved) if record.saved else None
    ctx = FaultContext(
        fault_id=record.fault_id, target=record.target, targets=record.targets, saved=saved, timeout_s=record.timeout_s
    )
    try:
        fault_cls(params).revert(ctx)
    finally:
        ctx.close()
