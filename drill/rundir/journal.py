"""``journal.jsonl``: the durable, append-only record of a run.

One JSON object per line, each with ``seq``, ``event``, ``ts`` (wall clock,
UNIX seconds), ``mono`` (the writer's monotonic clock, seconds) and ``by``
(runner, watchdog, cleanup). Every line is written with a single ``write`` on
an ``O_APPEND`` descriptor and flushed; lines that matter for safety (revert
records, reverts, the end of the run) are also ``fsync``-ed before the call
returns, so a revert is on disk *before* its fault is injected.

Readers tolerate a torn last line: a crash leaves everything up to it readable.

Each :class:`Event` has a typed payload record (:data:`PAYLOADS`, frozen dataclasses): ``Journal.write``
checks its fields against the record, so a misspelt or missing field is a ``TypeError`` at the call, not a
line that nobody reads back; ``JournalEntry.get`` refuses a key that no event has, and
``JournalEntry.payload`` gives the typed record. The lines on disk are as before: the envelope and
exactly the fields the writer gave.
"""

from __future__ import annotations

import enum
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from drill.fieldtypes import check_fields, field_rules
from drill.rundir.jsonl import ReadReport, read_jsonl

__all__ = ["Event", "Journal", "JournalEntry", "PAYLOADS", "RunStatus", "process_start_time", "read_journal"]


class Event(str, enum.Enum):
    RUN_STARTED = "run_started"
    RUN_FINISHED = "run_finished"
    PHASE_STARTED = "phase_started"
    PHASE_ENDED = "phase_ended"
    TARGET_STARTING = "target_starting"  # carries how to tear the target down after a crash
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


class RunStatus(enum.StrEnum):
    """How a run (or a fault held by hand) ended: RUN_FINISHED's ``status`` and ``verdicts.json``'s ``status``."""

    COMPLETED = "completed"
    INTERRUPTED = "interrupted"
    ERROR = "error"
    UNFINISHED = "unfinished"  # read back only: the journal has no RUN_FINISHED (the runner died)


# --- one typed payload per event (the fields after the envelope; ``None`` defaults are written only if given) ---


@dataclass(frozen=True)
class RunStarted:
    run_id: str
    pid: int  # the process that runs it (os.getpid()), with its start time: a reused PID is told apart
    pid_start: float | None  # process_start_time(pid); None off Linux
    drill: str | None = None
    argv: list[str] | None = None
    time_scale: float | None = None
    kind: str | None = None  # `drill fault inject`: the fault held by hand
    hold_s: float | None = None
    target: dict[str, Any] | None = None


@dataclass(frozen=True)
class RunFinished:
    status: str  # a RunStatus value
    exit_code: int
    stopped_by: str | None = None
    revert_failures: list[Any] | None = None

    def __post_init__(self) -> None:
        RunStatus(self.status)  # ValueError for a status that is none


@dataclass(frozen=True)
class PhaseStarted:
    phase: str
    planned_s: float | None


@dataclass(frozen=True)
class PhaseEnded:
    phase: str
    elapsed_s: float
    stopped_by: str | None = None
    planned_s: float | None = None
    summary: Any = None  # the replay phase's results


@dataclass(frozen=True)
class TargetStarting:
    target_id: str
    target_kind: str
    teardown: Any  # how to tear the target down after a crash


@dataclass(frozen=True)
class TargetReady:
    target_id: str
    base_url: str
    first_good_response_s: float
    probe_s: float
    target: dict[str, Any]


@dataclass(frozen=True)
class TargetStopped:
    target_id: str
    reason: str


@dataclass(frozen=True)
class RevertRegistered:  # drill.runner.reverts.RevertRecord, as JSON
    fault_id: str
    kind: str
    params: dict[str, Any]
    target: dict[str, Any]
    targets: dict[str, Any]
    saved: dict[str, Any] | None = None
    planned_end_ts: float | None = None
    timeout_s: float | None = None


@dataclass(frozen=True)
class FaultInjected:
    fault_id: str
    kind: str


@dataclass(frozen=True)
class FaultInjectFailed:
    fault_id: str
    kind: str
    error: str


@dataclass(frozen=True)
class FaultVerified:
    fault_id: str
    kind: str
    summary: str
    observations: dict[str, Any] | None = None


@dataclass(frozen=True)
class FaultDidNotLand:
    fault_id: str
    kind: str
    error: str


@dataclass(frozen=True)
class FaultReverted:
    fault_id: str
    kind: str
    reason: str | None = None
    seconds: float | None = None


@dataclass(frozen=True)
class RevertFailed:
    fault_id: str
    kind: str
    reason: str
    error: str | None


@dataclass(frozen=True)
class StopConditionMet:
    condition: str
    kind: str
    observed: Any


@dataclass(frozen=True)
class SignalReceived:
    signal: str


@dataclass(frozen=True)
class ListenerFailed:
    listener: str
    event_name: str
    error: str


@dataclass(frozen=True)
class Note:
    message: str
    fault_id: str | None = None
    files: list[str] | None = None
    summary: Any = None


@dataclass(frozen=True)
class CheckJudged:
    name: str
    status: str


PAYLOADS: dict[Event, type] = {
    Event.RUN_STARTED: RunStarted,
    Event.RUN_FINISHED: RunFinished,
    Event.PHASE_STARTED: PhaseStarted,
    Event.PHASE_ENDED: PhaseEnded,
    Event.TARGET_STARTING: TargetStarting,
    Event.TARGET_READY: TargetReady,
    Event.TARGET_STOPPED: TargetStopped,
    Event.REVERT_REGISTERED: RevertRegistered,
    Event.FAULT_INJECTED: FaultInjected,
    Event.FAULT_INJECT_FAILED: FaultInjectFailed,
    Event.FAULT_VERIFIED: FaultVerified,
    Event.FAULT_NOT_LANDED: FaultDidNotLand,
    Event.FAULT_REVERTED: FaultReverted,
    Event.REVERT_FAILED: RevertFailed,
    Event.STOP_CONDITION: StopConditionMet,
    Event.SIGNAL: SignalReceived,
    Event.LISTENER_ERROR: ListenerFailed,
    Event.NOTE: Note,
    Event.CHECK: CheckJudged,
}
_FIELDS = {event: frozenset(f.name for f in fields(record)) for event, record in PAYLOADS.items()}
_ANY_FIELD = frozenset().union(*_FIELDS.values())


def check_payload(event: Event, data: dict[str, Any]) -> None:
    """``TypeError`` unless ``data`` has exactly the fields of ``event``'s record (the optional ones may go);
    ``ValueError`` for a value the record refuses (a RUN_FINISHED status that is no :class:`RunStatus`)."""
    if not isinstance(event, Event):
        raise TypeError(f"journal event {event!r} is not an Event")
    try:
        PAYLOADS[event](**data)
    except (TypeError, ValueError) as exc:
        raise type(exc)(
            f"journal event {event.value}: {exc}; its fields are {', '.join(sorted(_FIELDS[event]))}"
        ) from None


_DURABLE = {
    Event.REVERT_REGISTERED,
    Event.FAULT_REVERTED,
    Event.REVERT_FAILED,
    Event.RUN_FINISHED,
    Event.TARGET_STARTING,
    Event.TARGET_STOPPED,
    Event.FAULT_INJECTED,
}


@dataclass(frozen=True)
class JournalEntry:
    seq: int
    event: str
    ts: float
    mono: float
    by: str
    data: dict[str, Any]

    def get(self, key: str, default: Any = None) -> Any:
        """The field ``key`` (``default`` when this entry lacks it); a key that no event has is a ``KeyError``."""
        if key not in _ANY_FIELD:
            raise KeyError(f"no journal event has a field {key!r}")
        return self.data.get(key, default)

    @property
    def payload(self) -> Any:
        """The typed record of a known event (fields it does not know are left out); ``None`` for others."""
        try:
            event = Event(self.event)
        except ValueError:
            return None
        return PAYLOADS[event](**{k: v for k, v in self.data.items() if k in _FIELDS[event]})


class Journal:
    """Appends events to ``path``; safe to share between threads of one process."""

    def __init__(self, path: Path, *, by: str = "runner") -> None:
        self.path = path
        self.by = by
        self._lock = threading.Lock()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)  # never through a link
        self._seq = _last_seq(path)

    def write(self, event: Event, **data: Any) -> JournalEntry:
        """Append one event; fsync it when it matters for reverting. Fields not of its record: ``TypeError``."""
        check_payload(event, data)
        with self._lock:
            self._seq += 1
            entry = JournalEntry(self._seq, event.value, time.time(), time.monotonic(), self.by, data)
            line = json.dumps(
                {"seq": entry.seq, "event": entry.event, "ts": entry.ts, "mono": entry.mono, "by": entry.by, **data},
                default=_json_default,
                separators=(",", ":"),
            )
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
    """Entries in order; a torn or garbled line is counted in ``report`` (see :mod:`drill.rundir.jsonl`)."""
    return read_jsonl(path, _entry, report)


_ENVELOPE_RULES = {name: rule for name, rule in field_rules(JournalEntry).items() if name in _ENVELOPE}
_PAYLOAD_RULES = {event: field_rules(record) for event, record in PAYLOADS.items()}


def _entry(raw: dict) -> JournalEntry:
    """One journal line; ValueError naming the field when the envelope or a known event's field has a value of
    another type than the event's record documents (the line is then counted unreadable, never half-used)."""
    check_fields(_ENVELOPE_RULES, raw)
    data = {k: v for k, v in raw.items() if k not in _ENVELOPE}
    try:
        event = Event(raw["event"])
    except ValueError:
        event = None  # an event this version does not know: kept, its fields unchecked
    if event is not None:
        check_fields(_PAYLOAD_RULES[event], data)
    return JournalEntry(
        int(raw.get("seq", 0)),
        str(raw["event"]),
        float(raw.get("ts", 0.0)),
        float(raw.get("mono", 0.0)),
        str(raw.get("by", "?")),
        data,
    )


def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused PID apart: RUN_STARTED's
    ``pid_start`` (and the active-run registry's), read back by ``drill cleanup``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])
