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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from pydantic import BaseModel

from drill.rundir.evidence import RunEvidence
from drill.spec.validation import SpecModel

if TYPE_CHECKING:  # the heavy parts are imported only by the checks that use them
    from drill.spec.diagnostics import KeyPath
    from drill.spec.models import Phases

__all__ = [
    "Check",
    "CheckParams",
    "EvidenceKind",
    "EvidenceRef",
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
