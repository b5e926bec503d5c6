"""Checks turn a run's evidence into verdicts. A check is a pure function of the evidence.

A ``drill.checks`` plugin has a ``kind``, a frozen ``Params`` model (its
thresholds) and ``evaluate(evidence) -> Verdict``: no I/O beyond what
:class:`Evidence` already read, no clock, no mutation — so a past run can be
re-judged from its directory alone. Missing data is ``INCONCLUSIVE``, never
``PASS``.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel

from drill.engine.journal import Event, JournalEntry, read_journal
from drill.load.records import RequestRecord, read_records
from drill.spec.validation import SpecModel

__all__ = ["Check", "CheckParams", "Evidence", "FaultOutcome", "PhaseWindow", "Status", "Verdict"]


class Status(str, enum.Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"
    ERROR = "ERROR"


@dataclass(frozen=True)
class Verdict:
    check: str                # the check's kind
    name: str                 # its name in the drill (default: kind)
    status: Status
    message: str
    observed: dict = field(default_factory=dict)
    expected: dict = field(default_factory=dict)
    window: str | None = None  # the phase it judged

    def to_json(self) -> dict:
        data = asdict(self)
        data["status"] = self.status.value
        return data


class CheckParams(SpecModel):
    """Base of every check's Params: frozen, unknown keys are errors."""


@dataclass(frozen=True)
class PhaseWindow:
    phase: str
    start_ts: float
    end_ts: float

    def contains(self, ts: float) -> bool:
        return self.start_ts <= ts < self.end_ts


@dataclass(frozen=True)
class FaultOutcome:
    fault_id: str
    kind: str
    injected: bool
    landed: bool | None          # None: never verified
    evidence: str | None
    error: str | None
    reverted: bool


class Evidence:
    """Everything a check may look at, read once from a run directory."""

    def __init__(self, run_dir: Path, slo_by_pool: dict[str, dict[str, float]] | None = None) -> None:
        self.run_dir = run_dir
        self.slo_by_pool = slo_by_pool or {}

    @cached_property
    def journal(self) -> list[JournalEntry]:
        return list(read_journal(self.run_dir / "journal.jsonl"))

    @cached_property
    def requests(self) -> list[RequestRecord]:
        return list(read_records(self.run_dir / "requests.jsonl"))

    @cached_property
    def phases(self) -> dict[str, PhaseWindow]:
        starts: dict[str, float] = {}
        windows: dict[str, PhaseWindow] = {}
        for entry in self.journal:
            phase = entry.get("phase")
            if entry.event == Event.PHASE_STARTED.value:
                starts[phase] = entry.ts
            elif entry.event == Event.PHASE_ENDED.value and phase in starts:
                windows[phase] = PhaseWindow(phase, starts[phase], entry.ts)
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
            s = state.setdefault(fid, {"kind": entry.get("kind"), "injected": False, "landed": None,
                                       "evidence": None, "error": None, "reverted": False})
            _apply_fault_event(s, entry)
        return [FaultOutcome(fid, **s) for fid, s in state.items()]


def _apply_fault_event(state: dict, entry: JournalEntry) -> None:
    event = entry.event
    if event == Event.FAULT_INJECTED.value:
        state["injected"] = True
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


class Check(abc.ABC):
    kind: ClassVar[str]
    Params: ClassVar[type[BaseModel]] = CheckParams

    def __init__(self, params: BaseModel, name: str | None = None) -> None:
        self.params = params
        self.name = name or self.kind

    @abc.abstractmethod
    def evaluate(self, evidence: Evidence) -> Verdict:
        """Judge the evidence; never raise for missing data (return INCONCLUSIVE)."""

    def verdict(self, status: Status, message: str, **kwargs) -> Verdict:
        return Verdict(self.kind, self.name, status, message, **kwargs)
