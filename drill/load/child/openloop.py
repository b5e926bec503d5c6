"""The open-loop generator that runs inside each load-generating process.

Created by :mod:`drill.load.child.locustfile` (the local runner, or each distributed
worker) once the plan is known; its :meth:`OpenLoop.run` is the body of the
Locust user's task. Arrivals come from the schedule decided in advance
(:mod:`drill.load.schedule`); each one is spawned on its own greenlet at its
intended time, whatever the server is doing, so a stalled server shows up as
slow requests rather than as fewer requests (``docs/dependencies.md`` §1.3).
Latency is measured from the intended start, and the gap to the actual send is
recorded. Beyond the in-flight cap an arrival is recorded as a client-side
drop, never delayed. Retries follow the pool's policy (exponential backoff with
jitter) and reuse the body and ``Idempotency-Key``; each attempt has its own
``traceparent`` and ``X-Request-Id``.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol, TypedDict

from gevent.event import Event
from gevent.pool import Group

from drill.load.child.bursts import Burst, BurstParams
from drill.load.child.streaming import Cancelled, ClientOutcome, Transport, send_attempt
from drill.load.control import GeneratorPlan
from drill.load.payload import (
    PromptShape,
    PromptText,
    attempt_headers,
    build_body,
    endpoint_path,
    new_trace_ids,
    payload_digest,
)
from drill.load.schedule import PlannedRequest, build_schedule
from drill.load.tokenizing import shapes_from_text
from drill.rundir.records import ErrorClass, RequestRecord
from drill.rundir.redact import drop_secret_headers
from drill.rundir.samples import FailingSample
from drill.spec.scenario import ClientRetryOn, Pool, RetryPolicy

__all__ = ["OpenLoop", "Sink", "Counters"]

_RETRYABLE = {
    ErrorClass.REFUSED: ClientRetryOn.REFUSED,
    ErrorClass.SERVER_ERROR: ClientRetryOn.SERVER_ERROR,
    ErrorClass.TIMEOUT: ClientRetryOn.TIMEOUT,
    ErrorClass.CONNECTION_RESET: ClientRetryOn.CONNECTION,
    ErrorClass.CONNECTION_ERROR: ClientRetryOn.CONNECTION,
}


class Sink(Protocol):
    """Where finished records go (a file, or a batch for the master)."""

    def add(self, record: str, sample: str | None) -> None: ...


@dataclass
class Counters:
    """What this process has done so far; reported in status messages and the summary."""

    scheduled: int = 0  # arrivals of this process's share in [0, duration)
    due: int = 0  # arrivals whose intended time has come
    sent: int = 0  # logical requests sent (first attempts)
    attempts: int = 0  # every attempt sent, retries included
    dropped: int = 0  # client-side drops at the in-flight cap
    finished: int = 0  # logical requests done (any outcome)
    ok: int = 0  # logical requests that ended in success
    in_flight: int = 0
    records: int = 0
    samples: int = 0
    errors: Counter = field(default_factory=Counter)  # attempt-level, by error class value

    def snapshot(self) -> dict:
        data = {k: v for k, v in self.__dict__.items() if k != "errors"}
        data["errors"] = dict(self.errors)
        return data


class _RecordIdentity(TypedDict):
    """The fields of a :class:`RequestRecord` that say which attempt it is, sent or not."""

    request_id: str
    logical_id: str
    pool: str
    attempt: int
    intended_ts: float
    planned_input_tokens: int
    planned_output_tokens: int
    trace_id: str
    idempotency_key: str
    payload_digest: str
    endpoint: str
    stream: bool
    burst: str | None
    worker: str | None


@dataclass(frozen=True, slots=True)
class _Job:
    """A logical request ready to send: its plan, exact body, and origin."""

    planned: PlannedRequest
    logical_id: str
    body: bytes
    digest: str
    pool: Pool
    burst: str | None = None


class OpenLoop:
    """One process's share of the schedule, its bursts, and its in-flight requests."""

    def __init__(
        self,
        plan: GeneratorPlan,
        sink: Sink,
        *,
        partition: tuple[int, int] = (0, 1),
        worker: str | None = None,
        on_attempt: Callable[[str, float, str | None], None] | None = None,
        shapes: Mapping[str, PromptShape] | None = None,
    ) -> None:
        self.plan = plan
        self.scenario = plan.scenario_model()
        self.sink = sink
        self.partition = partition
        self.worker = worker
        self.on_attempt = on_attempt
        self.pools = {p.name: p for p in self.scenario.pools}
        self.schedule = build_schedule(self.scenario, plan.duration_s, plan.seed)
        self.mine = self.schedule.partition(*partition)
        self.controls = frozenset(plan.control_ids)  # requests whose output is digested (recovery replay)
        by_id = {r.logical_id: r for r in self.schedule.requests}
        self.repeated = {later: by_id[source] for later, source in plan.repeat_of.items() if source in by_id}
        self.text = PromptText(plan.seed)
        self.shapes = shapes if shapes is not None else _read_shapes(plan.prompts_file)
        self.cap = max(1, math.ceil(self.scenario.max_in_flight / partition[1]))
        self.transport = Transport(plan.target_url, self.cap)
        self.counters = Counters(scheduled=len(self.mine))
        self.group = Group()
        self.bursts: dict[str, Burst] = {}
        self.stopping = Event()
        self.started = Event()
        self.generated = Event()
        self.stop_mono = float("inf")
        self.t0_mono = self.t0_wall = 0.0
        self._ran = False

    # ----------------------------------------------------------------- timing
    def set_start(self, t0_wall: float) -> None:
        """Fix the run's start: ``t0_wall`` (UNIX s) is offset 0 of the schedule."""
        self.t0_mono = time.perf_counter() + (t0_wall - time.time())
        self.t0_wall = t0_wall
        self.started.set()

    def wall(self, mono: float) -> float:
        return self.t0_wall + (mono - self.t0_mono)

    def offset_now(self) -> float:
        return time.perf_counter() - self.t0_mono

    # ------------------------------------------------------------- generation
    def run(self) -> None:
        """Issue this process's arrivals at their intended times; returns when done or stopping.

        Called from the Locust user's task; a second call returns at once. Arrivals whose
        intended time came before the stop command are still issued (late, with their lag).
        """
        if self._ran:
            return
        self._ran = True
        try:
            self.started.wait()
            for planned in self.mine:
                intended = self.t0_mono + planned.offset_s
                job = self.job(planned, planned.logical_id)
                delay = intended - time.perf_counter()
                if delay > 0:
                    self.stopping.wait(delay)
                if self.stopping.is_set() and intended > self.stop_mono:
                    return
                self.launch(job, intended)
        finally:
            self.generated.set()

    def job(self, planned: PlannedRequest, logical_id: str, burst: str | None = None) -> _Job:
        """The exact request for ``planned`` (built before its time comes, so it adds no lag)."""
        pool = self.pools[planned.pool]
        source = self.repeated.get(logical_id) if burst is None else None
        if source is not None:  # a golden control: a baseline request's exact bytes again (output_correctness)
            planned = replace(planned, input_tokens=source.input_tokens, output_tokens=source.output_tokens)
        key = logical_id if source is None else source.logical_id
        shape = self.shapes.get(key) if burst is None else None  # bursts are made up now, not fitted
        body = build_body(pool, self.plan.model, key, planned.input_tokens, planned.output_tokens, self.text, shape)
        return _Job(planned, logical_id, body, payload_digest(body), pool, burst)

    def launch(self, job: _Job, intended: float) -> None:
        """Start ``job`` now on its own greenlet, or record a client drop at the in-flight cap."""
        self.counters.due += 1
        if self.counters.in_flight >= self.cap:
            self.counters.dropped += 1
            self._emit(
                job,
                1,
                intended,
                None,
                "",
                "",
                error=(ErrorClass.CLIENT_DROP, f"max_in_flight ({self.cap} in this process) reached"),
            )
            return
        self.counters.in_flight += 1
        self.group.spawn(self._logical, job, intended)

    def _logical(self, job: _Job, intended: float) -> None:
        idem = f"{self.plan.run_nonce}-{job.logical_id}"
        attempt, policy = 1, job.pool.retry
        try:
            while True:
                outcome = self._attempt(job, attempt, intended, idem)
                if not self._should_retry(outcome, attempt, policy):
                    self.counters.ok += outcome.error is None
                    return
                delay = _backoff(policy, attempt, outcome.retry_after_s)
                intended = time.perf_counter() + delay
                if self.stopping.wait(delay):
                    return
                attempt += 1
        except Cancelled:
            return
        finally:
            self.counters.in_flight -= 1
            self.counters.finished += 1

    def _attempt(self, job: _Job, attempt: int, intended: float, idem: str) -> ClientOutcome:
        trace_id, span_id = new_trace_ids()
        request_id = f"{idem}-{attempt}"
        headers = attempt_headers(
            trace_id=trace_id,
            span_id=span_id,
            idempotency_key=idem,
            request_id=request_id,
            priority=job.pool.priority,
            stream=job.pool.stream,
            extra=self.plan.headers,
        )
        self.counters.attempts += 1
        self.counters.sent += attempt == 1
        outcome = send_attempt(
            self.transport,
            endpoint_path(job.pool.endpoint),
            job.body,
            headers,
            stream=job.pool.stream,
            timeout_s=job.pool.timeout,
            capture=self._captures(job),
        )
        self._emit(job, attempt, intended, outcome, trace_id, idem, headers=headers)
        return outcome

    def _captures(self, job: _Job) -> bool:
        """Whether this attempt's answer is digested: a replay control, or (on demand) any temperature-0 answer."""
        if self.plan.capture_outputs and job.pool.sampling.temperature == 0:
            return True
        return job.burst is None and job.logical_id in self.controls

    def _should_retry(self, outcome: ClientOutcome, attempt: int, policy: RetryPolicy) -> bool:
        reason = _RETRYABLE.get(outcome.error) if outcome.error is not None else None
        return reason is not None and reason in policy.on and attempt <= policy.attempts and not self.stopping.is_set()

    # ---------------------------------------------------------------- records
    def _emit(
        self,
        job: _Job,
        attempt: int,
        intended: float,
        outcome: ClientOutcome | None,
        trace_id: str,
        idem: str,
        *,
        headers: dict[str, str] | None = None,
        error: tuple[ErrorClass, str] | None = None,
    ) -> None:
        record = self._record(
            job, attempt, intended, outcome, trace_id, idem or f"{self.plan.run_nonce}-{job.logical_id}", error
        )
        sample = None
        if outcome is not None and record.error not in (None, ErrorClass.CANCELLED):
            sample = self._sample(job, record, headers or {}).to_json()
            self.counters.samples += 1
        if record.error is not None:
            self.counters.errors[record.error.value] += 1
        self.counters.records += 1
        self.sink.add(record.to_json(), sample)
        if self.on_attempt is not None:
            self.on_attempt(job.pool.name, record.e2e_ms or 0.0, record.error.value if record.error else None)

    def _record(
        self,
        job: _Job,
        attempt: int,
        intended: float,
        outcome: ClientOutcome | None,
        trace_id: str,
        idem: str,
        error: tuple[ErrorClass, str] | None,
    ) -> RequestRecord:
        base = _RecordIdentity(
            request_id=f"{idem}-{attempt}",
            logical_id=job.logical_id,
            pool=job.pool.name,
            attempt=attempt,
            intended_ts=round(self.wall(intended), 6),
            planned_input_tokens=job.planned.input_tokens,
            planned_output_tokens=job.planned.output_tokens,
            trace_id=trace_id,
            idempotency_key=idem,
            payload_digest=job.digest,
            endpoint=job.pool.endpoint.value,
            stream=job.pool.stream,
            burst=job.burst,
            worker=self.worker,
        )
        if outcome is None:
            assert error is not None  # _emit passes the error of an attempt that was never sent
            return RequestRecord(sent_ts=None, schedule_lag_ms=None, error=error[0], error_detail=error[1], **base)
        ms = lambda t: None if t is None else round((t - intended) * 1000.0, 3)  # noqa: E731
        chunks = [round((t - intended) * 1000.0, 3) for t in outcome.chunk_times]
        completion = outcome.completion_tokens
        if completion is None and outcome.error is None and chunks:
            completion = len(chunks) - (1 if outcome.role_only_first else 0)
        return RequestRecord(
            sent_ts=round(self.wall(outcome.sent_at), 6),
            schedule_lag_ms=ms(outcome.sent_at),
            status=outcome.status,
            error=outcome.error,
            error_detail=outcome.detail,
            headers_ms=ms(outcome.headers_at),
            ttft_ms=chunks[0] if chunks else None,
            e2e_ms=ms(outcome.end_at),
            chunk_offsets_ms=chunks,
            prompt_tokens=outcome.prompt_tokens,
            completion_tokens=completion,
            retry_after_s=outcome.retry_after_s,
            stream_error_code=outcome.stream_error_code,
            output_digest=outcome.output.value() if outcome.output is not None and outcome.error is None else None,
            output_head=(
                outcome.output.first_tokens(self.plan.keep_text)
                if outcome.output is not None and outcome.error is None
                else None
            ),
            server_timings=outcome.server_timings,
            **base,
        )

    def _sample(self, job: _Job, record: RequestRecord, headers: dict[str, str]) -> FailingSample:
        return FailingSample(
            request_id=record.request_id,
            logical_id=job.logical_id,
            pool=job.pool.name,
            attempt=record.attempt,
            trace_id=record.trace_id,
            idempotency_key=record.idempotency_key,
            payload_digest=job.digest,
            method="POST",
            endpoint=endpoint_path(job.pool.endpoint),
            headers=drop_secret_headers(headers),  # the replay adds the target's credentials again
            body_b64=FailingSample.encode_body(job.body),
            stream=job.pool.stream,
            timeout_s=job.pool.timeout,
            error=record.error.value if record.error else None,
            status=record.status,
            intended_ts=record.intended_ts,
            burst=job.burst,
        )

    # ----------------------------------------------------------------- bursts
    def start_burst(self, params: BurstParams) -> None:
        """Start (or restart with new parameters) burst ``params.burst_id``; idempotent for a running one."""
        current = self.bursts.get(params.burst_id)
        if current is not None and current.active:
            current.stop()
        burst = Burst(params, self, random.Random(f"{self.plan.seed}:burst:{params.burst_id}:{self.partition[0]}"))
        self.bursts[params.burst_id] = burst
        burst.start()

    def end_burst(self, burst_id: str) -> None:
        burst = self.bursts.get(burst_id)
        if burst is not None:
            burst.stop()

    def burst_status(self, burst_id: str) -> dict[str, float]:
        burst = self.bursts.get(burst_id)
        return burst.status() if burst is not None else {"active": 0, "sent": 0, "offered_rate": 0.0}

    # ------------------------------------------------------------------- stop
    def drain(self, drain_s: float) -> int:
        """Stop arrivals and bursts, wait up to ``drain_s`` s for in-flight requests, cancel the rest.

        Cancelled attempts are recorded with ``ErrorClass.CANCELLED``. Returns how
        many were cancelled.
        """
        self.stop_mono = time.perf_counter()
        self.stopping.set()
        self.started.set()
        for burst in list(self.bursts.values()):
            burst.stop()
        if self._ran:
            self.generated.wait(timeout=5.0)
        self.group.join(timeout=max(0.0, drain_s))
        left = len(self.group)
        if left:
            self.group.kill(exception=Cancelled, block=True, timeout=5.0)
        self.transport.close()
        return left


def _read_shapes(path: str | None) -> Mapping[str, PromptShape]:
    """The fitted prompts the harness wrote at plan time (none: one token per word)."""
    if path is None:
        return {}

    return shapes_from_text(Path(path).read_text(encoding="utf-8"))


def _backoff(policy: RetryPolicy, attempt: int, retry_after_s: float | None) -> float:
    """Seconds before attempt ``attempt + 1``: exponential, capped, jittered; at least Retry-After."""
    delay = min(policy.max_backoff, policy.backoff * policy.multiplier ** (attempt - 1))
    if policy.jitter == "full":
        delay = random.uniform(0.0, delay)
    elif policy.jitter == "equal":
        delay = delay / 2 + random.uniform(0.0, delay / 2)
    if retry_after_s is not None:
        delay = max(delay, min(retry_after_s, policy.max_backoff))
    return delay
