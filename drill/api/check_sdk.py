"""The check SDK: what a ``drill.checks`` plugin is written against, beside the fault SDK (:mod:`drill.api`).

A **check** turns a finished run's evidence into a :class:`Verdict`. It has a ``kind``, a frozen ``Params``
model (its thresholds, a :class:`CheckParams`), the run-directory files it ``reads`` and
``evaluate(evidence) -> Verdict``: no I/O beyond what :class:`~drill.api.RunEvidence` reads from the run
directory, no clock, no mutation — so a past run can be re-judged from its directory alone
(``drill judge``). Missing or thin data is ``INCONCLUSIVE``, never ``PASS``, and never an exception.

Every verdict carries what it observed and what it expected (with units) and the evidence it used — trace,
span, request and idempotency ids, journal sequence numbers — as :class:`EvidenceRef`\\ s, so a reviewer can
follow it back to the raw records. A line of a file the check ``reads`` that could not be parsed makes the
check INCONCLUSIVE (the engine sees to that: :func:`drill.runner.verdicts.evaluate_checks`).

Import everything from :mod:`drill.api`; :mod:`drill.testing` has the contract kit a check must pass.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

__all__ = ["MAX_EVIDENCE", "Check", "CheckParams", "EvidenceKind", "EvidenceRef", "Status", "Verdict"]

#: How many evidence references a verdict keeps (the count of all is in ``observed``).
MAX_EVIDENCE = 50


class Status(str, enum.Enum):
    """A verdict's outcome. INCONCLUSIVE: the evidence cannot decide (missing, thin, unreadable);
    ERROR: the check itself failed (the engine's answer to a check that raised)."""

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
    """One raw record a verdict relied on: its kind, its id (or path), and why it matters."""

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
    """One check's judgement of one run, as ``verdicts.json`` and the report keep it."""

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


class CheckParams(BaseModel):
    """Base of every check's Params: frozen, unknown keys are errors, no NaN or infinity (as every model read
    from a drill file: :class:`drill.spec.validation.SpecModel`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, allow_inf_nan=False)


class Check(abc.ABC):
    """Base class of every check. See the module docstring for the contract."""

    kind: ClassVar[str]
    Params: ClassVar[type[BaseModel]] = CheckParams
    #: Files of the run directory the verdict depends on; an unreadable line in one makes it INCONCLUSIVE.
    reads: tuple[str, ...] = ("journal.jsonl", "requests.jsonl")  # a check may add what its params make it read

    def __init__(self, params: BaseModel, name: str | None = None) -> None:
        self.params = params
        self.name = name or self.kind

    @classmethod
    def plan_problems(cls, params: BaseModel, phases: Any) -> list[tuple[tuple[str | int, ...], str, str | None]]:
        """What validation refuses in these params given the drill's phases (a step too fine for the phases it
        judges): ``(key path under params, message, hint)`` each. None by default.

        ``phases`` is the drill's :class:`drill.spec.models.Phases` (``phases.fault`` and the others, in seconds);
        typed ``Any`` here so the SDK imports nothing from the drill models above it."""
        return []

    @abc.abstractmethod
    def evaluate(self, evidence: Any) -> Verdict:
        """Judge ``evidence``, a :class:`drill.api.RunEvidence` (annotate it so in a check); never raise for
        missing data (return INCONCLUSIVE). Typed ``Any`` here: the run's readers sit above the SDK."""

    def verdict(
        self, status: Status, message: str, *, evidence: list[EvidenceRef] | tuple[EvidenceRef, ...] = (), **kwargs: Any
    ) -> Verdict:
        """A verdict of this check (its kind and name), keeping the first :data:`MAX_EVIDENCE` references."""
        return Verdict(self.kind, self.name, status, message, evidence=tuple(evidence)[:MAX_EVIDENCE], **kwargs)
