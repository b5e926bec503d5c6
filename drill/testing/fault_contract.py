"""Contract tests for fault plugins, shipped for plugin authors (every built-in fault passes them).

A fault must do what ``drill.api`` promises, under live traffic, against a real target:

1. **inject → verify → effect → revert → gone**: ``verify`` proves it landed, clients see it
   (latency or errors, as the case's :data:`Effect` says), after ``revert`` the fault is no longer
   in place and the effect goes away;
2. **a second revert is a no-op** (idempotent), and so is a revert with nothing injected;
3. **revert after a failed inject leaves the target clean**: the inject is made to fail at each of
   its backend calls in turn — before the call (nothing happened) and after it (it happened, but the
   caller saw an error, like a timeout after the server acted) — and a revert from the saved state
   must clean up;
4. **revert from the journal record alone** works, as the watchdog does it: the record is journaled
   like a run's, the fault is rebuilt from the registry (so register yours, e.g. with
   ``DRILL_EXTRA_PLUGINS``) and reverted by :func:`drill.runner.cleanup.clean_run`.

Usage, in a pytest test with a running target (e.g. ``drill stack up``)::

    from drill.testing import FaultCase, latency_above, run_fault_contract

    def test_my_fault(tmp_path, target_info):
        case = FaultCase("my_fault", {"latency_ms": 400}, target_info, effect=latency_above(0.2))
        report = run_fault_contract(case, tmp_path)
        print(report.lines())

Each clause is also a function of its own (``check_*``). Failures raise :class:`ContractViolation`
(an AssertionError) naming the clause.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

from drill import errors, registry
from drill.api import Fault, FaultContext, FaultNotLanded, LoadControl, Selector, TargetInfo
from drill.rundir.journal import Journal
from drill.runner.cleanup import clean_run
from drill.runner.fault_schedule import resolve_targets
from drill.runner.reverts import RevertRecord, RevertStack

__all__ = [
    "ContractReport",
    "ContractViolation",
    "Effect",
    "FaultCase",
    "Traffic",
    "TrafficSample",
    "check_inject_verify_revert",
    "check_revert_after_failed_inject",
    "check_revert_from_journal",
    "check_revert_without_inject",
    "errors_above",
    "latency_above",
    "latency_or_errors",
    "run_fault_contract",
    "within_baseline",
]


class ContractViolation(AssertionError):
    """A fault broke its contract; the message names the clause."""


# -- live traffic ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrafficSample:
    """Requests started in one window: how many, how many failed (share), latency percentiles (s)."""

    count: int
    errors: int
    p50_s: float
    p90_s: float

    @property
    def error_share(self) -> float:
        return self.errors / self.count if self.count else 1.0

    def __str__(self) -> str:
        return (
            f"{self.count} req, {self.error_share:.0%} errors, p50 {self.p50_s * 1e3:.0f} ms, "
            f"p90 {self.p90_s * 1e3:.0f} ms"
        )


@dataclass
class _Done:
    started: float
    latency_s: float
    ok: bool


class Traffic:
    """Open-loop client traffic: ``rate_per_s`` completions a second to ``url`` from a thread pool.

    A request fails on an HTTP status ≥ 400, a transport error or ``timeout_s``. Call
    :meth:`start` once, :meth:`sample` as often as needed, :meth:`stop` at the end.
    """

    def __init__(
        self,
        url: str,
        model: str | None,
        *,
        rate_per_s: float = 10.0,
        prompt_tokens: int = 16,
        max_tokens: int = 8,
        timeout_s: float = 3.0,
    ) -> None:
        self.url = url.rstrip("/") + "/v1/completions"
        self.body = {
            "model": model or "default",
            "prompt": " ".join(["hello"] * prompt_tokens),
            "max_tokens": max_tokens,
            "temperature": 0,
        }
        self.rate_per_s, self.timeout_s = rate_per_s, timeout_s
        self._done: list[_Done] = []
        self._inflight: dict[int, float] = {}  # request number -> start (monotonic s)
        self._sent = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="drill-contract-traffic")
        self._http = httpx.Client(timeout=timeout_s, trust_env=False, limits=httpx.Limits(max_connections=32))
        self._thread = threading.Thread(target=self._arrivals, name="drill-contract-arrivals", daemon=True)

    def start(self) -> Traffic:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop new requests, wait for those in flight (at most ``timeout_s``), close the client."""
        self._stop.set()
        self._thread.join(5)
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._http.close()

    def _arrivals(self) -> None:
        interval, next_at = 1.0 / self.rate_per_s, time.monotonic()
        while not self._stop.is_set():
            started = time.monotonic()
            with self._lock:
                number, self._sent = self._sent, self._sent + 1
                self._inflight[number] = started
            self._pool.submit(self._one, number, started)
            next_at += interval
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _one(self, number: int, started: float) -> None:
        try:
            ok = self._http.post(self.url, json=self.body).status_code < 400
        except (httpx.HTTPError, RuntimeError):  # RuntimeError: the client was closed at stop
            ok = False
        with self._lock:
            self._done.append(_Done(started, time.monotonic() - started, ok))
            self._inflight.pop(number, None)

    def sample(self, seconds: float) -> TrafficSample:
        """Requests started during the next ``seconds``, once each has ended (or timed out)."""
        start = time.monotonic()
        time.sleep(seconds)
        end = time.monotonic()
        deadline = end + self.timeout_s + 1.0
        while time.monotonic() < deadline and self._pending(start, end):
            time.sleep(0.05)
        with self._lock:
            window = [d for d in self._done if start <= d.started < end]
        latencies = sorted(d.latency_s for d in window if d.ok) or [self.timeout_s]
        return TrafficSample(
            len(window),
            sum(not d.ok for d in window),
            statistics.median(latencies),
            latencies[min(len(latencies) - 1, int(0.9 * len(latencies)))],
        )

    def _pending(self, start: float, end: float) -> bool:
        with self._lock:
            return any(start <= s < end for s in self._inflight.values())


#: ``effect(baseline, sample)``: None when the fault's effect shows in ``sample``, else why not.
Effect = Callable[[TrafficSample, TrafficSample], str | None]


def latency_above(extra_s: float) -> Effect:
    """The median latency is at least ``extra_s`` seconds above the baseline's."""

    def effect(base: TrafficSample, now: TrafficSample) -> str | None:
        grown = now.p50_s - base.p50_s
        return None if grown >= extra_s and now.count else f"p50 grew by {grown * 1e3:.0f} ms, not {extra_s * 1e3:.0f}"

    return effect


def errors_above(share: float) -> Effect:
    """At least ``share`` of the requests failed (more than in the baseline)."""

    def effect(base: TrafficSample, now: TrafficSample) -> str | None:
        ok = now.error_share >= share and now.error_share > base.error_share
        return None if ok else f"{now.error_share:.0%} errors, not {share:.0%}"

    return effect


#: Latency noise a recovered median may show above the baseline's p90 (timer and scheduling jitter).
RECOVERY_LATENCY_SLACK_S = 0.02


def within_baseline(base: TrafficSample, now: TrafficSample) -> str | None:
    """None when ``now`` is back within the baseline's band, else why not.

    Measured the way the effects measure: the error share may exceed the baseline's by at most three
    binomial standard deviations of a sample this size (a share of at least one request), and the median
    latency may not rise above the baseline's p90 (its own spread) plus RECOVERY_LATENCY_SLACK_S. Falling
    back under an effect's inject threshold is not enough: with ``errors_above(0.5)``, 49% errors is
    still a faulted target.
    """
    if not now.count:
        return "no request was sent in the sample"
    share = max(base.error_share, 1.0 / now.count)
    errors_limit = base.error_share + 3.0 * math.sqrt(share * (1.0 - share) / now.count)
    if now.error_share > errors_limit:
        return f"{now.error_share:.0%} errors; the baseline's band ends at {errors_limit:.0%}"
    latency_limit = max(base.p90_s, base.p50_s) + RECOVERY_LATENCY_SLACK_S
    if now.p50_s > latency_limit:
        return f"p50 {now.p50_s * 1e3:.0f} ms; the baseline's band ends at {latency_limit * 1e3:.0f} ms"
    return None


def latency_or_errors(extra_s: float, share: float) -> Effect:
    """Either effect: slower by ``extra_s`` seconds, or ``share`` of the requests failed."""
    slow, failing = latency_above(extra_s), errors_above(share)

    def effect(base: TrafficSample, now: TrafficSample) -> str | None:
        a, b = slow(base, now), failing(base, now)
        return None if a is None or b is None else f"{a}; {b}"

    return effect


# -- the case --------------------------------------------------------------------------------------


@dataclass
class FaultCase:
    """One fault on one target, as the contract runs it.

    ``clean(ctx)`` raises AssertionError while the fault is still in place (default: ``verify``
    must raise FaultNotLanded). ``traffic`` overrides :class:`Traffic` options (rate, prompt size).
    ``runner_death()`` stops what dies with the runner in a real crash (e.g. the load generator,
    which ends a ``queue_flood`` burst); it is called before the revert from the journal.
    """

    kind: str
    params: dict[str, Any]
    target: TargetInfo
    effect: Effect
    selector: Selector = field(default_factory=Selector)
    load: LoadControl | None = None
    clean: Callable[[FaultContext], None] | None = None
    runner_death: Callable[[], None] | None = None
    traffic: dict[str, Any] = field(default_factory=dict)
    traffic_url: str | None = None
    sample_s: float = 1.2
    settle_s: float = 0.3
    recovery_timeout_s: float = 20.0
    max_partial_steps: int = 3
    fault_id: str = "contract"
    timeout_s: float = 10.0

    def fault(self) -> Fault:
        fault_cls = registry.faults.get(self.kind)
        return fault_cls(fault_cls.Params.model_validate(self.params))

    def context(self, fault: Fault, suffix: str = "", tripwire: _Tripwire | None = None) -> FaultContext:
        targets = resolve_targets(fault, self.selector, self.target, 0)
        if tripwire is None:
            return FaultContext(self.fault_id + suffix, self.target, targets, timeout_s=self.timeout_s, load=self.load)
        ctx = _TrippingContext(self.fault_id + suffix, self.target, targets, timeout_s=self.timeout_s, load=self.load)
        ctx.tripwire = tripwire
        ctx.load = tripwire.wrap("load", self.load) if self.load is not None else None
        return ctx

    def assert_clean(self, fault: Fault, ctx: FaultContext, clause: str) -> None:
        if self.clean is not None:
            try:
                self.clean(ctx)
            except AssertionError as exc:
                raise ContractViolation(f"{clause}: the fault is still in place: {exc}") from exc
            return
        try:
            evidence = fault.verify(ctx)
        except FaultNotLanded:
            return
        raise ContractViolation(f"{clause}: verify still proves the fault after revert: {evidence.summary}")


@dataclass
class ContractReport:
    kind: str
    evidence: str = ""
    baseline: TrafficSample | None = None
    faulted: TrafficSample | None = None
    recovered: TrafficSample | None = None
    recovery_s: float = 0.0
    partial_steps: int = 0
    clauses: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        return [f"{self.kind}: {c}" for c in self.clauses] + [
            f"{self.kind}: baseline {self.baseline}; faulted {self.faulted}; recovered {self.recovered} "
            f"after {self.recovery_s:.1f}s",
            f"{self.kind}: evidence: {self.evidence}",
        ]


# -- failure injection at the backend seam ----------------------------------------------------------

_ERRORS = {
    "toxiproxy": errors.ToxiproxyError,
    "docker": errors.DockerError,
    "process": errors.ProcessControlError,
    "stack_admin": errors.AdminApiError,
    "router_admin": errors.AdminApiError,
    "load": errors.LoadError,
}


class _Tripwire:
    """Counts backend calls while armed; makes call number ``trip_at`` fail, before or after it runs."""

    def __init__(self, trip_at: int | None = None, after: bool = False) -> None:
        self.trip_at, self.after = trip_at, after
        self.calls = 0
        self.armed = False
        self.tripped = False

    def wrap(self, name: str, backend: Any) -> Any:
        return _Tripped(self, name, backend)

    def call(self, name: str, method: str, fn: Callable, args: tuple, kwargs: dict) -> Any:
        if not self.armed:
            return fn(*args, **kwargs)
        index, self.calls = self.calls, self.calls + 1
        if index != self.trip_at:
            return fn(*args, **kwargs)
        self.tripped = True
        error = _ERRORS.get(name.split(":")[0], errors.BackendError)
        if self.after:
            fn(*args, **kwargs)
        raise error(f"contract: call {index} ({name}.{method}) failed {'after' if self.after else 'before'} it ran")


class _Tripped:
    def __init__(self, wire: _Tripwire, name: str, backend: Any) -> None:
        self._wire, self._name, self._backend = wire, name, backend

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._backend, attr)
        if not callable(value) or attr == "close":
            return value
        return lambda *a, **kw: self._wire.call(self._name, attr, value, a, kw)


_B = TypeVar("_B")  # a backend client


@dataclass
class _TrippingContext(FaultContext):
    tripwire: _Tripwire | None = None

    def _backend(self, name: str, factory: Callable[[], _B]) -> _B:
        backend = super()._backend(name, factory)
        return self.tripwire.wrap(name, backend) if self.tripwire is not None else backend


# -- the clauses -----------------------------------------------------------------------------------


def _sample_until(traffic: Traffic, case: FaultCase, base: TrafficSample) -> tuple[TrafficSample, float]:
    """Sample until the traffic is back within the baseline's band (:func:`within_baseline`)."""
    start = time.monotonic()
    while True:
        sample = traffic.sample(case.sample_s)
        why = within_baseline(base, sample)
        if why is None:
            return sample, time.monotonic() - start
        if time.monotonic() - start > case.recovery_timeout_s:
            raise ContractViolation(
                f"the effect did not go after revert within {case.recovery_timeout_s:g}s: "
                f"{why} (baseline {base}; now {sample})"
            )


def check_inject_verify_revert(case: FaultCase, traffic: Traffic, report: ContractReport) -> None:
    """Clauses 1 and 2: landed, visible, reverted, gone; the second revert is a no-op."""
    fault, tripwire = case.fault(), _Tripwire()
    ctx = case.context(fault, tripwire=tripwire)
    try:
        report.baseline = traffic.sample(case.sample_s)
        ctx.saved = fault.prepare(ctx)
        tripwire.armed = True
        fault.inject(ctx)
        tripwire.armed = False
        report.partial_steps = tripwire.calls
        report.evidence = fault.verify(ctx).summary
        time.sleep(case.settle_s)
        report.faulted = traffic.sample(case.sample_s)
        why = case.effect(report.baseline, report.faulted)
        if why is not None:
            raise ContractViolation(
                f"inject: clients do not see the fault ({why}; baseline {report.baseline}, faulted {report.faulted})"
            )
    finally:
        fault.revert(ctx)
    case.assert_clean(fault, ctx, "revert")
    report.recovered, report.recovery_s = _sample_until(traffic, case, report.baseline)
    fault.revert(ctx)
    case.assert_clean(fault, ctx, "second revert")
    ctx.close()
    report.clauses += ["inject, verify, effect visible, revert, effect gone", "second revert is a no-op"]


def check_revert_without_inject(case: FaultCase, report: ContractReport) -> None:
    """A revert with nothing injected changes nothing and raises nothing."""
    fault = case.fault()
    ctx = case.context(fault, "-noop")
    ctx.saved = fault.prepare(ctx)
    fault.revert(ctx)
    case.assert_clean(fault, ctx, "revert without inject")
    ctx.close()
    report.clauses.append("revert without inject is a no-op")


def check_revert_after_failed_inject(case: FaultCase, report: ContractReport) -> None:
    """Inject fails at each backend call (before and after it ran); a fresh revert leaves the target clean."""
    steps = min(report.partial_steps or 1, case.max_partial_steps)
    for index in range(steps):
        for after in (False, True):
            _one_failed_inject(case, _Tripwire(index, after), f"-fail{index}{'a' if after else 'b'}")
    report.clauses.append(f"revert after a failed inject is clean ({steps} call(s) x before/after)")


def _one_failed_inject(case: FaultCase, tripwire: _Tripwire, suffix: str) -> None:
    fault = case.fault()
    ctx = case.context(fault, suffix, tripwire=tripwire)
    ctx.saved = fault.prepare(ctx)
    tripwire.armed = True
    try:
        fault.inject(ctx)
    except errors.DrillError:
        pass
    finally:
        tripwire.armed = False
    if not tripwire.tripped:
        raise ContractViolation(f"failed inject {suffix}: the inject made fewer backend calls than before")
    fresh = case.context(fault, suffix)
    fresh.saved = ctx.saved
    fault.revert(fresh)
    case.assert_clean(fault, fresh, f"revert after a failed inject ({suffix})")
    ctx.close()
    fresh.close()


def check_revert_from_journal(case: FaultCase, traffic: Traffic, report: ContractReport, tmp_path: Path) -> None:
    """Journal the record as the runner does, inject, then revert as the watchdog does: from the journal alone."""

    fault = case.fault()
    ctx = case.context(fault, "-journal")
    run_dir = tmp_path / f"contract-{case.kind}-journal"
    run_dir.mkdir(parents=True, exist_ok=True)
    journal = Journal(run_dir / "journal.jsonl")
    ctx.saved = fault.prepare(ctx)
    record = RevertRecord(
        fault_id=ctx.fault_id,
        kind=case.kind,
        params=fault.params.model_dump(mode="json"),
        target=case.target,
        targets=ctx.targets,
        saved=ctx.saved.model_dump(mode="json"),
        planned_end_ts=time.time() + 60,
        timeout_s=ctx.timeout_s,
    )
    RevertStack(journal).push(record, lambda: None)
    journal.close()
    fault.inject(ctx)
    fault.verify(ctx)
    ctx.close()
    if case.runner_death is not None:
        case.runner_death()
    cleaned = clean_run(run_dir, by="watchdog")
    if cleaned.reverted != [ctx.fault_id]:
        raise ContractViolation(f"revert from the journal: reverted {cleaned.reverted}, failed {cleaned.failed}")
    check = case.context(fault, "-journal")
    check.saved = ctx.saved
    case.assert_clean(fault, check, "revert from the journal")
    check.close()
    _sample_until(traffic, case, report.baseline or traffic.sample(case.sample_s))
    report.clauses.append("revert from the journal record alone")


def run_fault_contract(case: FaultCase, tmp_path: Path) -> ContractReport:
    """Every clause, in order, under one stream of live traffic. Raises ContractViolation on the first breach."""
    report = ContractReport(case.kind)
    traffic = Traffic(case.traffic_url or case.target.base_url, case.target.model, **case.traffic).start()
    try:
        check_inject_verify_revert(case, traffic, report)
        check_revert_without_inject(case, report)
        check_revert_after_failed_inject(case, report)
        check_revert_from_journal(case, traffic, report, tmp_path)
    finally:
        traffic.stop()
    return report
