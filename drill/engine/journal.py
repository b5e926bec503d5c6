"""``journal.jsonl``: the durable, append-only record of a run.

One JSON object per line, each with ``seq``, ``event``, ``ts`` (wall clock,
UNIX seconds), ``mono`` (the writer's monotonic clock, seconds) and ``by``
(runner, watchdog, cleanup). Every line is written with a single ``write`` on
an ``O_APPEND`` descriptor and flushed; lines that matter for safety (revert
records, reverts, the end of the run) are also ``fsync``-ed before the call
returns, so a revert is on disk *before* its fault is injected.

Readers tolerate a torn last line: a crash leaves everything up to it readable.
"""

from __future__ import annotations

import enum
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from drill.jsonl import ReadReport, read_jsonl

__all__ = ["Event", "Journal", "JournalEntry", "read_journal"]


class Event(str, enum.Enum):
    RUN_STARTED = "run_started"
    RUN_FINISHED = "run_finished"
    PHASE_STARTED = "phase_started"
    PHASE_ENDED = "phase_ended"
    TARGET_STARTING = "target_starting"      # carries how to tear the target down after a crash
    TARGET_READY = "target_ready"
    TARGET_STOPPED = "target_stopped"
    REVERT_REGISTERED = "revert_registered"  # written (fsync) before a fault is injected
    FAULT_INJECTED = "fault_injected"
    FAULT_INJECT_FAILED = "fault_inject_failed"
    FAULT_VERIFIED = "fault_verified"
    FAULT_NOT_LANDED = "fault_not_landed"
    FAULT_REVERTED = "fault_reverted"
    REVERT_FAILED = "revert_failed"
    STOP_CONDITION = "stop_condition"
    SIGNAL = "signal"
    LISTENER_ERROR = "listener_error"
    NOTE = "note"
    CHECK = "check"


_DURABLE = {Event.REVERT_REGISTERED, Event.FAULT_REVERTED, Event.REVERT_FAILED, Event.RUN_FINISHED,
            Event.TARGET_STARTING, Event.TARGET_STOPPED, Event.FAULT_INJECTED}


@dataclass(frozen=True)
class JournalEntry:
    seq: int
    event: str
    ts: float
    mono: float
    by: str
    data: dict[str, Any]

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)


class Journal:
    """Appends events to ``path``; safe to share between threads of one process."""

    def __init__(self, path: Path, *, by: str = "runner") -> None:
        self.path = path
        self.by = by
        self._lock = threading.Lock()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._seq = _last_seq(path)

    def write(self, event: Event, **data: Any) -> JournalEntry:
        """Append one event; fsync it when it matters for reverting."""
        with self._lock:
            self._seq += 1
            entry = JournalEntry(self._seq, event.value, time.time(), time.monotonic(), self.by, data)
            line = json.dumps({"seq": entry.seq, "event": entry.event, "ts": entry.ts, "mono": entry.mono,
                               "by": entry.by, **data}, default=_json_default, separators=(",", ":"))
            os.write(self._fd, (line + "\n").encode("utf-8"))
            if event in _DURABLE:
                os.fsync(self._fd)
        return entry

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.fsync(self._fd)
                os.close(self._fd)
                self._fd = -1


def _json_default(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, Path):
        return str(value)
    return str(value)


def _last_seq(path: Path) -> int:
    last = 0
    for entry in read_journal(path):
        last = max(last, entry.seq)
    return last


_ENVELOPE = ("seq", "event", "ts", "mono", "by")


def read_journal(path: Path, report: ReadReport | None = None) -> Iterator[JournalEntry]:
    """Entries in order; a torn or garbled line is counted in ``report`` (see :mod:`drill.jsonl`)."""
    return read_jsonl(path, _entry, report)


def _entry(raw: dict) -> JournalEntry:
    data = {k: v for k, v in raw.items() if k not in _ENVELOPE}
    return JournalEntry(int(raw.get("seq", 0)), str(raw["event"]), float(raw.get("ts", 0.0)),
                        float(raw.get("mono", 0.0)), str(raw.get("by", "?")), data)
