"""Fault scheduling inside the fault phase: resolve, prepare, journal, inject, verify, revert.

For each fault, in this order and never otherwise:

1. ``resolve_all`` (right after the target is up): the selector is resolved
   against the live target; a selector that matches nothing stops the run
   before any load or fault.
2. at its start offset, inside a signal-deferring critical section:
   ``prepare`` captures prior state, the :class:`RevertRecord` is journaled
   with fsync, then ``inject`` runs. An inject that raises is journaled and
   reverted at once (revert is safe after a partial inject).
3. ``verify`` proves the fault landed; if it cannot, the fault is journaled as
   *not landed* (the ``fault_landed`` check fails: the drill tested nothing).
4. at its end offset (or when a stop condition fires, or on any exit path) the
   revert stack reverts it.
"""

from __future__ import annotations

import enum
import functools
import time
from dataclasses import dataclass

from drill import registry
from drill.api import Fault, FaultContext, FaultTargets, LandingProof, LoadControl, Selector, TargetInfo
from drill.errors import InputError
from drill.rundir.journal import Event, Journal
from drill.runner.listeners import ListenerEvent, Listeners
from drill.runner.reverts import RevertOutcome, RevertRecord, RevertStack
from drill.runner.signals import SignalGuard
from drill.runner.timeline import FaultWindow, Timeline
from drill.spec.loader import LoadedDrill

__all__ = ["FaultRunner", "FaultState", "register_and_inject", "resolve_targets", "verify_and_journal"]

FAULT_TIMEOUT_S = 10.0


class FaultState(enum.StrEnum):
    """Where a scheduled fault is in its window: pending -> active -> done."""

    PENDING = "pending"
    ACTIVE = "active"
    DONE = "done"


@dataclass
class _Scheduled:
    window: FaultWindow
    fault: Fault
    ctx: FaultContext
    state: FaultState = FaultState.PENDING


def resolve_targets(fault: Fault, selector: Selector, target: TargetInfo, default_seed: int) -> FaultTargets:
    """The blast radius of one fault on this target. Raises ValueError naming what did not match."""
    if fault.scope == "pools":
        return FaultTargets(pools=list(selector.pools or []))
    if fault.scope == "none":
        return FaultTargets()
    if not target.replicas:
        raise ValueError(f"fault {fault.kind!r} acts on replicas, but target {target.kind!r} lists none")
    replicas = selector.pick_replicas(target.replicas, default_seed)
    if fault.scope == "replicas":
        return FaultTargets(replicas=replicas)
    links = [ln for r in replicas for ln in selector.pick_links(r)]
    if not links:
        raise ValueError(f"no link of replica(s) {', '.join(r.name for r in replicas)} matches {selector.links}")
    return FaultTargets(replicas=replicas, links=links)


def register_and_inject(
    fault: Fault, ctx: FaultContext, kind: str, stack: RevertStack, journal: Journal, planned_end_ts: float
) -> str | None:
    """``prepare``, journal the revert record (fsync) on ``stack``, then ``inject``; call inside a critical section.

    Returns None once injected, or why it failed (journaled as ``fault_inject_failed``). After a failed
    ``prepare`` nothing is on the stack; after a failed ``inject`` the revert is, and the caller runs it.
    """
    fid = ctx.fault_id
    try:
        ctx.saved = fault.prepare(ctx)
    except Exception as exc:  # noqa: BLE001 - journaled; nothing was changed
        return _inject_failed(journal, fid, kind, f"prepare failed: {_describe(exc)}")
    record = RevertRecord(
        fault_id=fid,
        kind=kind,
        params=fault.params.model_dump(mode="json"),
        target=ctx.target,
        targets=ctx.targets,
        saved=ctx.saved.model_dump(mode="json"),
        planned_end_ts=planned_end_ts,
        timeout_s=ctx.timeout_s,
    )
    stack.push(record, lambda: fault.revert(ctx))
    try:
        fault.inject(ctx)
    except Exception as exc:  # noqa: BLE001 - journaled; the revert is on the stack
        return _inject_failed(journal, fid, kind, _describe(exc))
    journal.write(Event.FAULT_INJECTED, fault_id=fid, kind=kind)
    return None


def _inject_failed(journal: Journal, fid: str, kind: str, error: str) -> str:
    journal.write(Event.FAULT_INJECT_FAILED, fault_id=fid, kind=kind, error=error)
    return error


def verify_and_journal(
    fault: Fault, ctx: FaultContext, kind: str, journal: Journal
) -> tuple[LandingProof | None, str | None]:
    """``verify``, journaled as ``fault_verified`` or ``fault_not_landed``: (proof, None) or (None, why)."""
    try:
        proof = fault.verify(ctx)
    except Exception as exc:  # noqa: BLE001 - any failure means "not proven"
        journal.write(Event.FAULT_NOT_LANDED, fault_id=ctx.fault_id, kind=kind, error=_describe(exc))
        return None, _describe(exc)
    journal.write(
        Event.FAULT_VERIFIED,
        fault_id=ctx.fault_id,
        kind=kind,
        summary=proof.summary,
        observations=proof.observations,
    )
    return proof, None


class FaultRunner:
    def __init__(
        self,
        loaded: LoadedDrill,
        target: TargetInfo,
        timeline: Timeline,
        stack: RevertStack,
        journal: Journal,
        guard: SignalGuard,
        listeners: Listeners,
        load: LoadControl | None,
    ) -> None:
        self.loaded = loaded
        self.target = target
        self.timeline = timeline
        self.stack = stack
        self.journal = journal
        self.guard = guard
        self.listeners = listeners
        self.load = load
        self.scheduled: list[_Scheduled] = []
        self.failed_reverts: list[RevertOutcome] = []

    def resolve_all(self) -> None:
        problems = []
        drill = self.loaded.drill
        for window, spec, params in zip(self.timeline.faults, drill.faults, self.loaded.fault_params):
            fault = registry.faults.get(spec.kind)(params)
            try:
                targets = resolve_targets(fault, spec.selector, self.target, drill.seed)
            except ValueError as exc:
                problems.append(f"faults[{window.index}] ({window.fault_id}): {exc}")
                continue
            ctx = FaultContext(
                window.fault_id,
                self.target,
                targets,
                timeout_s=FAULT_TIMEOUT_S,
                load=self.load,
                note=functools.partial(self._note, window.fault_id),
            )
            self.scheduled.append(_Scheduled(window, fault, ctx))
        if problems:
            raise InputError("; ".join(problems), hint="fix the selectors; `drill plan` shows the target's replicas")

    def _note(self, fault_id: str, message: str) -> None:
        """A fault's note (``ctx.note``), journaled under its id."""
        self.journal.write(Event.NOTE, fault_id=fault_id, message=message)

    def next_event_in(self, t: float) -> float:
        times = [s.window.start_s for s in self.scheduled if s.state is FaultState.PENDING]
        times += [s.window.end_s for s in self.scheduled if s.state is FaultState.ACTIVE]
        return max(0.0, min(times) - t) if times else float("inf")

    def inject_and_revert_due(self, t: float) -> None:
        """Inject and revert whatever is due at fault-phase offset ``t`` (seconds)."""
        for item in self.scheduled:
            if item.state is FaultState.ACTIVE and t >= item.window.end_s:
                self._revert(item, "window ended")
        for item in self.scheduled:
            if item.state is FaultState.PENDING and t >= item.window.start_s:
                self._inject(item, t)

    def revert_all(self, reason: str) -> list[RevertOutcome]:
        with self.guard.critical():
            outcomes = self.stack.revert_all(reason)
        for item in self.scheduled:
            item.state = FaultState.DONE if item.state is not FaultState.PENDING else item.state
        for outcome in outcomes:
            self.listeners.fire(
                ListenerEvent.FAULT_REVERTED, fault_id=outcome.fault_id, ok=outcome.ok, error=outcome.error
            )
            if not outcome.ok:
                self.failed_reverts.append(outcome)
        return outcomes

    def _inject(self, item: _Scheduled, t: float) -> None:
        item.state = FaultState.ACTIVE
        fid, kind = item.window.fault_id, item.window.kind
        with self.guard.critical():
            error = register_and_inject(
                item.fault, item.ctx, kind, self.stack, self.journal, time.time() + (item.window.end_s - t)
            )
            if error is not None and fid not in self.stack.pending():  # prepare failed: nothing to revert
                item.state = FaultState.DONE
                return
        if error is not None:
            self.listeners.fire(ListenerEvent.FAULT_NOT_LANDED, fault_id=fid, error=error)
            self._revert(item, "inject failed")
            return
        self.listeners.fire(ListenerEvent.FAULT_INJECTED, fault_id=fid, kind=kind)
        proof, error = verify_and_journal(item.fault, item.ctx, kind, self.journal)
        if proof is None:
            self.listeners.fire(ListenerEvent.FAULT_NOT_LANDED, fault_id=fid, error=error)
        else:
            self.listeners.fire(ListenerEvent.FAULT_VERIFIED, fault_id=fid, summary=proof.summary)

    def _revert(self, item: _Scheduled, reason: str) -> None:
        item.state = FaultState.DONE
        with self.guard.critical():
            outcome = self.stack.revert(item.window.fault_id, reason)
        if outcome is not None:
            self.listeners.fire(
                ListenerEvent.FAULT_REVERTED, fault_id=outcome.fault_id, ok=outcome.ok, error=outcome.error
            )
            if not outcome.ok:
                self.failed_reverts.append(outcome)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
