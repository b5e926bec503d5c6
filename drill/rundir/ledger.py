"""The stack's side-effect ledgers as a run directory holds them: ``ledger/<replica>.jsonl``.

A replica of the embedded stack (:mod:`drill.stack.replica.ledger`) appends one :class:`LedgerRecord` per request it
processed (stack-contracts.md §6); the runner copies each replica's file into the run directory
before it stops the stack (:meth:`drill.api.Target.collect_evidence`). The ledger is the server's
side-effect truth: what was executed and billed, whatever the client saw. Any target that writes
lines of the same shape to ``ledger/*.jsonl`` gets the same checks.

Every file is read through :meth:`~drill.rundir.evidence.RunEvidence.read`, so each keeps its own
:class:`~drill.rundir.jsonl.ReadReport` (``ledger/replica-0.jsonl``), and the union is reported under
``ledger``: a check that lists ``"ledger"`` in its ``reads`` becomes INCONCLUSIVE when a line of any
replica's ledger could not be read.

What counts as a side effect: a record with status ``ok``, or any other status (``aborted``,
``timeout``, ``error``) whose ``billed_tokens`` is positive — the stack billed it, so the work
happened as far as the user's bill is concerned. A request the stack refused before admission is
not in the ledger at all.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

from drill.rundir.jsonl import BadLine, ReadReport, read_jsonl

if TYPE_CHECKING:
    from drill.rundir.evidence import RunEvidence

__all__ = [
    "LEDGER_DIR",
    "LEDGER_READS",
    "LedgerRecord",
    "LedgerStatus",
    "RunLedger",
    "is_side_effect",
    "load_run_ledger",
    "parse_ledger_record",
]

#: Where the run directory keeps the ledgers, and the name their union is reported under.
LEDGER_DIR = "ledger"
LEDGER_READS = "ledger"


class LedgerStatus(str, enum.Enum):
    """How a processed request ended."""

    OK = "ok"  # finished by stop or length
    ABORTED = "aborted"  # the client went away
    TIMEOUT = "timeout"  # waited longer than max_queue_wait (503)
    ERROR = "error"  # the engine died (500)


@dataclass(frozen=True, slots=True)
class LedgerRecord:
    """One processed request. Times are UNIX seconds; token counts follow the stack's tokenizer."""

    seq: int
    ts: float
    replica: str
    request_id: str
    idempotency_key: str | None
    trace_id: str | None
    prompt_tokens: int
    completion_tokens: int
    billed_tokens: int
    finish_reason: str
    status: LedgerStatus
    arrival_ts: float
    first_token_ts: float | None
    finish_ts: float
    cached_tokens: int = 0
    num_preemptions: int = 0
    priority: int = 0

    def to_json(self) -> dict:
        """The record as a JSON-ready dict (``status`` as its string). Not ``asdict``: that deep-copies, ~1 ms."""
        data = {name: getattr(self, name) for name in _FIELDS}
        data["status"] = self.status.value
        return data


_FIELDS = tuple(f.name for f in fields(LedgerRecord))


_KNOWN = frozenset(_FIELDS)
_REQUIRED = ("seq", "ts", "replica", "request_id", "status")


def parse_ledger_record(raw: dict) -> LedgerRecord:
    """One ledger line; unknown fields are ignored, missing required ones raise KeyError."""
    missing = [name for name in _REQUIRED if name not in raw]
    if missing:
        raise KeyError(f"a ledger record needs {', '.join(missing)}")
    values = {k: v for k, v in raw.items() if k in _KNOWN}
    values["status"] = LedgerStatus(values["status"])
    defaults = {
        "idempotency_key": None,
        "trace_id": None,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "billed_tokens": 0,
        "finish_reason": "",
        "arrival_ts": values["ts"],
        "first_token_ts": None,
        "finish_ts": values["ts"],
    }
    for name, default in defaults.items():
        values.setdefault(name, default)
    return LedgerRecord(**values)


def is_side_effect(record: LedgerRecord) -> bool:
    """True when the record is an execution that counts: finished ``ok``, or billed (``billed_tokens`` > 0)."""
    return record.status is LedgerStatus.OK or record.billed_tokens > 0


@dataclass(frozen=True)
class RunLedger:
    """Every replica's ledger records of one run, and how completely they could be read."""

    files: tuple[str, ...]  # run-directory names, e.g. "ledger/replica-0.jsonl"
    records: tuple[LedgerRecord, ...]
    replicas_expected: int | None = None  # from the run's target, when it says
    reports: dict[str, ReadReport] = field(default_factory=dict)

    @property
    def present(self) -> bool:
        """True when the run directory holds at least one ledger file."""
        return bool(self.files)

    @property
    def replicas(self) -> tuple[str, ...]:
        """The replicas that have a ledger file (``replica-0``...)."""
        return tuple(Path(name).stem for name in self.files)

    @property
    def missing_replicas(self) -> tuple[str, ...]:
        """Replicas the target had that have no ledger file (only when the target says how many)."""
        if self.replicas_expected is None:
            return ()
        have = set(self.replicas)
        return tuple(f"replica-{i}" for i in range(self.replicas_expected) if f"replica-{i}" not in have)

    def side_effects(self) -> list[LedgerRecord]:
        """The records that count as executions (:func:`is_side_effect`)."""
        return [r for r in self.records if is_side_effect(r)]

    def by_key(self) -> dict[str, list[LedgerRecord]]:
        """Side-effect records per idempotency key, oldest first (records without a key are left out)."""
        out: dict[str, list[LedgerRecord]] = defaultdict(list)
        for record in sorted(self.side_effects(), key=lambda r: (r.arrival_ts, r.replica, r.seq)):
            if record.idempotency_key:
                out[record.idempotency_key].append(record)
        return dict(out)

    def unkeyed(self) -> int:
        """How many side-effect records carry no idempotency key (health probes, clients that send none)."""
        return sum(1 for r in self.side_effects() if not r.idempotency_key)


def load_run_ledger(evidence: RunEvidence) -> RunLedger:
    """Read ``ledger/*.jsonl`` of the run directory; an absent directory is an empty :class:`RunLedger`."""
    folder = evidence.run_dir / LEDGER_DIR
    names = sorted(f"{LEDGER_DIR}/{p.name}" for p in folder.glob("*.jsonl")) if folder.is_dir() else []
    records: list[LedgerRecord] = []
    for name in names:
        records.extend(evidence.read(name, _read_ledger_file))
    reports = {name: evidence.reports[name] for name in names}
    evidence.reports[LEDGER_READS] = _union(folder, reports)
    return RunLedger(
        files=tuple(names), records=tuple(records), replicas_expected=_replicas_expected(evidence), reports=reports
    )


def _read_ledger_file(path: Path, report: ReadReport) -> Iterator[LedgerRecord]:
    return read_jsonl(path, parse_ledger_record, report)


def _union(folder: Path, reports: dict[str, ReadReport]) -> ReadReport:
    """One report for all the ledgers; each unreadable line names its file."""
    union = ReadReport(folder, exists=bool(reports))
    for name, report in reports.items():
        union.lines_read += report.lines_read
        for bad in report.bad_lines:
            union.add_bad(BadLine(bad.line, f"{Path(name).name}: {bad.reason}"))
        union.bad_count += report.bad_count - len(report.bad_lines)
        if report.torn_last_line is not None and union.torn_last_line is None:
            torn = report.torn_last_line
            union.torn_last_line = BadLine(torn.line, f"{Path(name).name}: {torn.reason}")
    return union


def _replicas_expected(evidence: RunEvidence) -> int | None:
    """How many replicas the run's embedded target had (from ``resolved.json``), else None."""
    resolved = evidence.resolved
    target = (resolved.get("drill") or {}).get("target") or {}
    replicas = (resolved.get("target_params") or {}).get("replicas")
    if target.get("kind") == "embedded" and isinstance(replicas, int) and not isinstance(replicas, bool):
        return replicas
    return None
