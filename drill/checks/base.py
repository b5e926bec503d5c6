"""Checks turn a run's evidence into verdicts. A check is a pure function of the run directory.

A ``drill.checks`` plugin has a ``kind``, a frozen ``Params`` model (its
thresholds), the files it ``reads`` and ``evaluate(evidence) -> Verdict``: no
I/O beyond what :class:`RunEvidence` reads from the run directory, no clock, no
mutation — so a past run can be re-judged from its directory alone
(``drill judge``). Missing or thin data is ``INCONCLUSIVE``, never ``PASS``.

Every verdict carries what it observed and what it expected (with units) and
the evidence it used — trace, span, request and idempotency ids, journal
sequence numbers — so a reviewer can follow it back to the raw records. A line
of a file the check reads that could not be parsed makes the check
INCONCLUSIVE (see :func:`drill.engine.verdicts.evaluate_checks`).
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from pydantic import BaseModel

from drill.rundir.journal import Event, JournalEntry, read_journal
from drill.rundir.jsonl import ReadReport
from drill.rundir.records import RequestRecord, read_records
from drill.rundir.resolved import read_resolved
from drill.spec.validation import SpecModel
from drill.units import parse_duration

if TYPE_CHECKING:  # the heavy parts are imported only by the checks that use them
    from drill.checks.ledger import RunLedger
    from drill.checks.replay import ReplayEvidence
    from drill.spec.diagnostics import KeyPath
    from drill.spec.models import Phases
    from drill.traces.evidence import TraceEvidence

__all__ = [
    "Check",
    "CheckParams",
    "RunEvidence",
    "EvidenceKind",
    "EvidenceRef",
    "FaultOutcome",
    "PhaseWindow",
    "Status",
    "Verdict",
]

T = TypeVar("T")

#: How many evidence references a verdict keeps (the count of all is in ``observed``).
MAX_EVIDENCE = 50


class Status(str, enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"
    ERROR = "ERROR"


class EvidenceKind(str, enum.Enum):
    """What an :class:`EvidenceRef` points at in the run directory."""

    TRACE = "trace_id"  # spans.jsonl / requests.jsonl trace_id
    SPAN = "span_id"  # spans.jsonl span_id
    REQUEST = "request_id"  # requests.jsonl request_id (one attempt)
    LOGICAL = "logical_id"  # requests.jsonl logical_id (all attempts of one request)
    IDEMPOTENCY_KEY = "idempotency_key"
    REPLAY = "replay_request_id"  # replay.jsonl request_id
    JOURNAL = "journal_seq"  # journal.jsonl seq
    FILE = "file"  # a file (and line) of the run directory
    MEASUREMENT = "measurement"  # a derived figure the verdict relied on (e.g. client vs server TTFT)


@dataclass(frozen=True)
class EvidenceRef:
    kind: EvidenceKind
    value: str
    note: str = ""

    def to_json(self) -> dict:
        data = {"kind": self.kind.value, "value": self.value}
        if self.note:
            data["note"] = self.note
        return data

    @classmethod
    def from_json(cls, data: dict) -> EvidenceRef:
        return cls(EvidenceKind(data["kind"]), str(data["value"]), str(data.get("note", "")))


@dataclass(frozen=True)
class Verdict:
    kind: str  # the check's kind
    name: str  # its name in the drill (default: kind)
    status: Status
    message: str
    observed: dict[str, Any] = field(default_factory=dict)  # figure -> value (numbers stay numbers)
    expected: dict[str, Any] = field(default_factory=dict)  # figure -> the condition it had to meet
    units: dict[str, str] = field(default_factory=dict)  # figure -> unit of its observed/expected value
    evidence: tuple[EvidenceRef, ...] = ()
    window: str | None = None  # the phase it judged
    notes: tuple[str, ...] = ()  # e.g. what could not be read, how complete the traces were

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "status": self.status.value,
            "message": self.message,
            "observed": self.observed,
            "expected": self.expected,
            "units": self.units,
            "evidence": [e.to_json() for e in self.evidence],
            "window": self.window,
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, data: dict) -> Verdict:
        return cls(
            kind=data["kind"],
            name=data["name"],
            status=Status(data["status"]),
            message=data["message"],
            observed=dict(data.get("observed") or {}),
            expected=dict(data.get("expected") or {}),
            units=dict(data.get("units") or {}),
            evidence=tuple(EvidenceRef.from_json(e) for e in data.get("evidence") or ()),
            window=data.get("window"),
            notes=tuple(data.get("notes") or ()),
        )


class CheckParams(SpecModel):
    """Base of every check's Params: frozen, unknown keys are errors."""


@dataclass(frozen=True)
class PhaseWindow:
    phase: str
    start_ts: float
    end_ts: float
    planned_s: float | None = None
    stopped_by: str | None = None  # a stop condition ended it early

    def contains(self, ts: float) -> bool:
        return self.start_ts <= ts < self.end_ts

    @property
    def length_s(self) -> float:
        return self.end_ts - self.start_ts


@dataclass(frozen=True)
class FaultOutcome:
    fault_id: str
    kind: str
    injected: bool
    landed: bool | None  # None: never verified
    evidence: str | None
    error: str | None
    reverted: bool
    injected_ts: float | None = None
    reverted_ts: float | None = None


class RunEvidence:
    """A finished run's evidence: everything a check may look at, read lazily and once from a run directory.

    Every JSON-lines file is read through :meth:`read`, which keeps a :class:`ReadReport` per file in
    :attr:`reports`, so what could not be read is counted and named in the verdicts that used it.
    """

    def __init__(self, run_dir: Path, slo_by_pool: dict[str, dict[str, float]] | None = None) -> None:
        self.run_dir = Path(run_dir)
        self._slo_by_pool = slo_by_pool
        self.reports: dict[str, ReadReport] = {}

    @cached_property
    def slo_by_pool(self) -> dict[str, dict[str, float]]:
        """Each pool's SLO in seconds (``ttft_p95`` -> 2.0): the pool's own, else the drill's default.

        Given to the constructor, or read from ``resolved.json`` — so a re-judged run uses the SLOs it ran with.
        """
        if self._slo_by_pool is not None:
            return self._slo_by_pool
        default = (self.resolved.get("drill") or {}).get("slo") or {}
        pools = (self.resolved.get("scenario") or {}).get("pools") or []
        return {p["name"]: {k: parse_duration(v) for k, v in (p.get("slo") or default).items()} for p in pools}

    def read(self, name: str, reader: Callable[[Path, ReadReport], Iterator[T]]) -> list[T]:
        """Read ``name`` (a file of the run directory) with ``reader``, recording its report."""
        report = ReadReport(self.run_dir / name, root=self.run_dir)
        items = list(reader(self.run_dir / name, report))
        self.reports[name] = report
        return items

    @cached_property
    def resolved(self) -> dict:
        """``resolved.json``: the drill, scenario and plugin params as the run used them ({} if absent);
        InputError (exit 2) when it is damaged (:mod:`drill.rundir.resolved`)."""
        try:
            return read_resolved(self.run_dir / "resolved.json", root=self.run_dir)
        except FileNotFoundError:
            return {}

    @cached_property
    def journal(self) -> list[JournalEntry]:
        return self.read("journal.jsonl", read_journal)

    @cached_property
    def requests(self) -> list[RequestRecord]:
        return self.read("requests.jsonl", read_records)

    @cached_property
    def traces(self) -> TraceEvidence:
        """The run's spans as one table, how complete they are, and client records joined to them."""
        from drill.traces.evidence import load_trace_evidence

        return load_trace_evidence(self)

    @cached_property
    def ledger(self) -> RunLedger:
        """The stack's side-effect ledgers copied into the run directory (``ledger/*.jsonl``)."""
        from drill.checks.ledger import load_run_ledger

        return load_run_ledger(self)

    @cached_property
    def replay(self) -> ReplayEvidence:
        """``replay.jsonl``: the recovery replay's originals and controls."""
        from drill.checks.replay import load_replay_evidence

        return load_replay_evidence(self)

    @cached_property
    def phases(self) -> dict[str, PhaseWindow]:
        starts: dict[str, JournalEntry] = {}
        windows: dict[str, PhaseWindow] = {}
        for entry in self.journal:
            phase = entry.get("phase")
            if entry.event == Event.PHASE_STARTED.value:
                starts[phase] = entry
            elif entry.event == Event.PHASE_ENDED.value and phase in starts:
                start = starts[phase]
                windows[phase] = PhaseWindow(phase, start.ts, entry.ts, start.get("planned_s"), entry.get("stopped_by"))
        return windows

    def requests_in(self, phase: str) -> list[RequestRecord]:
        """Requests whose intended start falls in the phase (first attempts and retries alike)."""
        window = self.phases.get(phase)
        if window is None:
            return []
        return [r for r in self.requests if window.contains(r.intended_ts)]

    @cached_property
    def faults(self) -> list[FaultOutcome]:
        state: dict[str, dict] = {}
        for entry in self.journal:
            fid = entry.get("fault_id")
            if fid is None:
                continue
            s = state.setdefault(
                fid,
                {
                    "kind": entry.get("kind"),
                    "injected": False,
                    "landed": None,
                    "evidence": None,
                    "error": None,
                    "reverted": False,
                    "injected_ts": None,
                    "reverted_ts": None,
                },
            )
            _apply_fault_event(s, entry)
        return [FaultOutcome(fid, **s) for fid, s in state.items()]

    @cached_property
    def fault_window(self) -> tuple[float, float] | None:
        """From the first fault's injection to the last fault's revert (UNIX s), else the fault phase."""
        injected = [f.injected_ts for f in self.faults if f.injected_ts is not None]
        if injected:
            reverted = [f.reverted_ts for f in self.faults if f.reverted_ts is not None]
            end = max(reverted) if reverted else self.phases.get("fault", PhaseWindow("", 0, max(injected))).end_ts
            return min(injected), end
        window = self.phases.get("fault")
        return (window.start_ts, window.end_ts) if window else None


def _apply_fault_event(state: dict, entry: JournalEntry) -> None:
    event = entry.event
    if event == Event.FAULT_INJECTED.value:
        state["injected"] = True
        state["injected_ts"] = entry.ts
    elif event == Event.FAULT_INJECT_FAILED.value:
        state["error"] = entry.get("error")
        state["landed"] = False
    elif event == Event.FAULT_VERIFIED.value:
        state["landed"] = True
        state["evidence"] = entry.get("summary")
    elif event == Event.FAULT_NOT_LANDED.value:
        state["landed"] = False
        state["error"] = entry.get("error")
    elif event == Event.FAULT_REVERTED.value:
        state["reverted"] = True
        state["reverted_ts"] = entry.ts


class Check(abc.ABC):
    kind: ClassVar[str]
    Params: ClassVar[type[BaseModel]] = CheckParams
    #: Files of the run directory the verdict depends on; an unreadable line in one makes it INCONCLUSIVE.
    reads: tuple[str, ...] = ("journal.jsonl", "requests.jsonl")  # a check may add what its params make it read

    def __init__(self, params: BaseModel, name: str | None = None) -> None:
        self.params = params
        self.name = name or self.kind

    @classmethod
    def plan_problems(cls, params: BaseModel, phases: Phases) -> list[tuple[KeyPath, str, str | None]]:
        """What validation refuses in these params given the drill's phases (a step too fine for the phases it
        judges): ``(key path under params, message, hint)`` each. None by default."""
        return []

    @abc.abstractmethod
    def evaluate(self, evidence: RunEvidence) -> Verdict:
        """Judge the evidence; never raise for missing data (return INCONCLUSIVE)."""

    def verdict(
        self, status: Status, message: str, *, evidence: list[EvidenceRef] | tuple[EvidenceRef, ...] = (), **kwargs
    ) -> Verdict:
        return Verdict(self.kind, self.name, status, message, evidence=tuple(evidence)[:MAX_EVIDENCE], **kwargs)
