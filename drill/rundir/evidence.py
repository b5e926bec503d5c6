"""The checks' view of a run: :class:`RunEvidence`, everything a check may read of one run directory.

A check is a pure function of the run directory (:mod:`drill.api.check_sdk`); ``RunEvidence`` is how it reads it:
lazily and once, every JSON-lines file through :meth:`RunEvidence.read`, which keeps a
:class:`~drill.rundir.jsonl.ReadReport` per file in :attr:`RunEvidence.reports`, so what could not be read is
counted and named in the verdicts that used it. The files and their line types are described in
``docs/run-directory.md``.

What a package above makes of a run (the traces' :func:`drill.traces.run_traces.run_traces`: the spans as one
table joined to the requests) is made once through :meth:`RunEvidence.derived`, so this package needs nothing
from the packages that read it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from drill.rundir.journal import Event, JournalEntry, read_journal
from drill.rundir.jsonl import ReadReport
from drill.rundir.ledger import RunLedger, load_run_ledger
from drill.rundir.records import RequestRecord, read_records
from drill.rundir.replay_results import ReplayResults, load_replay_results
from drill.rundir.resolved import read_resolved
from drill.units import parse_duration

__all__ = ["FaultOutcome", "PhaseWindow", "RunEvidence"]

T = TypeVar("T")


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
    landing_proof: str | None  # what verify observed (FAULT_VERIFIED's summary)
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
        self._derived: dict[Callable[[RunEvidence], Any], Any] = {}

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

    def derived(self, build: Callable[[RunEvidence], T]) -> T:
        """``build(self)``, made once for this run: a view of it that a package above defines (the traces'
        :func:`drill.traces.run_traces.run_traces`), kept like the files it reads."""
        if build not in self._derived:
            self._derived[build] = build(self)
        return self._derived[build]

    @cached_property
    def ledger(self) -> RunLedger:
        """The stack's side-effect ledgers copied into the run directory (``ledger/*.jsonl``)."""
        return load_run_ledger(self)

    @cached_property
    def replay(self) -> ReplayResults:
        """``replay.jsonl``: the recovery replay's originals and controls."""
        return load_replay_results(self)

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
                    "landing_proof": None,
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
        state["landing_proof"] = entry.get("summary")
    elif event == Event.FAULT_NOT_LANDED.value:
        state["landed"] = False
        state["error"] = entry.get("error")
    elif event == Event.FAULT_REVERTED.value:
        state["reverted"] = True
        state["reverted_ts"] = entry.ts
