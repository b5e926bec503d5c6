"""The replay phase's files: ``replay.jsonl`` (what was re-sent after recovery) read back with the failing samples.

``replay.jsonl`` (one :class:`ReplayResult` per line): ``set`` (original |
control), ``repetition``, ``request_id``, ``original_request_id``,
``logical_id``, ``pool``, ``trace_id``, ``original_trace_id``,
``idempotency_key``, ``original_error``, ``original_status``,
``payload_digest`` (sha256 of the bytes actually sent), ``deterministic``
(temperature 0), ``planned_ts`` / ``sent_ts`` (UNIX s), ``status``, ``error``,
``error_detail``, ``ttft_ms`` / ``e2e_ms`` (from the send), ``chunks``,
``completion_tokens``, ``output_digest`` (sha256 of the generated text).

:class:`ReplayResults` is what ``evidence.replay`` (:class:`~drill.rundir.evidence.RunEvidence`) gives the checks
and the report: the phase's window, its lines, the failing samples it replayed from (``failing_samples.jsonl``,
:mod:`drill.rundir.samples`) and the phase's summary in the journal. The replay itself is sent by
:mod:`drill.load.replay` and judged by :mod:`drill.checks.replay`.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from drill.rundir.journal import Event
from drill.rundir.jsonl import ReadReport, read_jsonl
from drill.rundir.samples import FailingSample, read_samples

if TYPE_CHECKING:
    from drill.rundir.evidence import PhaseWindow, RunEvidence

__all__ = ["CONTROL", "ORIGINAL", "ReplayResult", "ReplayResults", "ReplaySet", "load_replay_results", "read_replay"]


class ReplaySet(str, enum.Enum):
    """Which set a replayed request belongs to (``set`` in ``replay.jsonl``)."""

    ORIGINAL = "original"  # a request that failed during the run
    CONTROL = "control"  # a request that succeeded in the baseline


ORIGINAL, CONTROL = ReplaySet.ORIGINAL, ReplaySet.CONTROL


@dataclass(frozen=True)
class ReplayResult:
    """One replayed request (a line of ``replay.jsonl``); times in ms from its send."""

    request_id: str
    original_request_id: str
    logical_id: str
    pool: str
    trace_id: str
    original_trace_id: str
    idempotency_key: str
    original_error: str | None
    original_status: int | None
    payload_digest: str  # of the bytes sent
    sent_ts: float
    set: ReplaySet = ORIGINAL
    repetition: int = 1
    deterministic: bool = False
    planned_ts: float | None = None
    status: int | None = None
    error: str | None = None
    error_detail: str | None = None
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    chunks: int = 0
    completion_tokens: int | None = None
    output_digest: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.status is not None and self.status < 400

    @property
    def reproduced(self) -> bool:
        return self.error is not None and self.error == self.original_error

    def to_json(self) -> str:
        data = asdict(self)
        data["set"] = self.set.value
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict) -> ReplayResult:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["set"] = ReplaySet(values.get("set", ReplaySet.ORIGINAL.value))
        return cls(**values)


def read_replay(path: Path, report: ReadReport | None = None) -> Iterator[ReplayResult]:
    """Lines of a ``replay.jsonl``; unreadable lines are counted in ``report``."""
    return read_jsonl(path, ReplayResult.from_dict, report)


@dataclass(frozen=True)
class ReplayResults:
    """What the run's replay phase left: its window, its lines and the samples it replayed from."""

    window: PhaseWindow | None  # the replay phase (None: it did not run)
    results: tuple[ReplayResult, ...]  # replay.jsonl
    samples: tuple[FailingSample, ...]  # failing_samples.jsonl
    summary: dict | None  # the phase's summary in the journal
    stopped_by: str | None  # a stop condition that ended the run early, if any

    @property
    def ran(self) -> bool:
        return self.window is not None

    @property
    def recovery(self) -> dict | None:
        """How the replay's start was decided (:class:`drill.runner.recovery_gate.RecoveryWait`), if recorded."""
        found = (self.summary or {}).get("recovery") if isinstance(self.summary, dict) else None
        return found if isinstance(found, dict) else None

    @property
    def started_unrecovered(self) -> bool:
        """The replay started after waiting in vain for recovery (runs before the wait existed: False)."""
        return self.recovery is not None and self.recovery.get("observed") is False

    @property
    def originals(self) -> list[ReplayResult]:
        return [r for r in self.results if r.set == ORIGINAL]

    @property
    def controls(self) -> list[ReplayResult]:
        return [r for r in self.results if r.set == CONTROL]


def load_replay_results(evidence: RunEvidence) -> ReplayResults:
    """Read the replay's files through ``evidence`` (each read is counted in ``evidence.reports``)."""
    results = evidence.read("replay.jsonl", read_replay)
    samples = evidence.read("failing_samples.jsonl", read_samples)
    summary = next(
        (
            e.get("summary")
            for e in evidence.journal
            if e.event == Event.PHASE_ENDED.value and e.get("phase") == "replay"
        ),
        None,
    )
    stops = [e.get("condition") for e in evidence.journal if e.event == Event.STOP_CONDITION.value]
    return ReplayResults(
        evidence.phases.get("replay"), tuple(results), tuple(samples), summary, stops[-1] if stops else None
    )
