"""Replay after recovery: the original failing requests, byte for byte, and a control set, at the baseline's rate.

Called by the runner's replay phase (after the revert and the recovery phase) and
by tests, in the harness process, with plain threads and ``http.client`` (no
gevent). Two sets of requests go out, tagged in ``replay.jsonl``:

- ``original``: the failed requests of the run, from ``failing_samples.jsonl``,
  one per failed logical request (its first failed attempt; retries re-send the
  same bytes), all of them or a seeded sample of ``max_samples``. The body is
  the stored one, sent only if it still matches its ``payload_digest``.
- ``control``: requests that succeeded in the baseline and whose generated text
  the load generator digested (the plan's ``control_ids``, chosen by
  :func:`choose_control_ids`), a seeded sample of ``controls``. Their bodies are
  rebuilt from the scenario, the model and the seed (:func:`drill.load.payload.build_body`
  is a pure function of them) and sent only if the rebuilt bytes have the
  record's ``payload_digest``. Each control is sent ``repetitions`` times (2 by
  default): the baseline's output digest is what a deterministic (temperature 0)
  answer must equal, and the two replays' disagreement is the noise floor for the
  others (Diffy's primary/secondary, see :mod:`drill.checks.replay`).

Sends are paced at ``rate`` requests per second (the baseline's arrival rate,
:func:`baseline_rate`), evenly spaced, never a burst; originals and the first
control repetition are interleaved in a seeded order, the second repetition
follows. Headers are the original's except:

- ``traceparent``: a fresh trace id, recorded next to the original one, so the
  replay's server spans are told apart from the run's;
- ``X-Request-Id``: ``<original>-replay`` (``<original>-replay-<n>`` for
  repetition ``n`` > 1);
- ``Idempotency-Key``: by default a new key, the original's with the same
  suffix. A replay is a new request made after the run: with the original key, a
  server or router that deduplicates would answer from (or refuse because of)
  the run's attempt and the replay would test nothing. Pass
  ``same_idempotency_key=True`` to re-send the original key instead, which is
  how one checks that deduplication works.

``replay.jsonl`` holds one :class:`~drill.rundir.replay_results.ReplayResult` per line (its fields are
described there and in ``docs/run-directory.md``).
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypedDict
from urllib.parse import urlsplit

from drill.load.output import OutputDigest
from drill.load.payload import (
    PromptShape,
    PromptText,
    attempt_headers,
    build_body,
    endpoint_path,
    new_trace_ids,
    payload_digest,
    traceparent,
)
from drill.load.schedule import build_schedule
from drill.load.sse import LineKind, carries_usage, classify_line, parse_error_code, parse_error_message, parse_usage
from drill.rundir.records import ErrorClass, RequestRecord, classify_status, classify_stream_error
from drill.rundir.replay_results import CONTROL, ORIGINAL, ReplayResult, ReplaySet
from drill.rundir.samples import FailingSample, read_samples
from drill.spec.scenario import Scenario

__all__ = [
    "ReplayItem",
    "ReplayPlan",
    "ReplaySummary",
    "baseline_rate",
    "choose_control_ids",
    "choose_repeats",
    "control_items",
    "original_items",
    "replay_after_recovery",
    "replay_failing",
]


@dataclass(frozen=True)
class ReplayItem:
    """One request to replay: its exact bytes and what the run saw of it."""

    set: ReplaySet
    original_request_id: str
    logical_id: str
    pool: str
    original_trace_id: str
    idempotency_key: str
    recorded_digest: str  # the run's payload_digest of this request
    method: str
    endpoint: str  # path, e.g. /v1/chat/completions
    headers: dict[str, str]
    body: bytes
    stream: bool
    original_error: str | None = None
    original_status: int | None = None

    @property
    def intact(self) -> bool:
        """The bytes are the ones the run sent."""
        return payload_digest(self.body) == self.recorded_digest

    @property
    def deterministic(self) -> bool:
        """Greedy sampling (temperature 0): the same request must give the same text."""
        try:
            return float(json.loads(self.body).get("temperature", 1.0)) == 0.0
        except (ValueError, TypeError, AttributeError):
            return False


@dataclass(frozen=True)
class ReplaySummary:
    """How the replays went: counts by outcome (``ok`` or an error class)."""

    samples: int  # samples in the file
    replayed: int
    skipped_digest_mismatch: int  # samples whose stored body no longer matches its digest (not sent)
    outcomes: dict[str, int] = field(default_factory=dict)
    reproduced: int = 0  # replays that failed with the original error class
    out_path: str = ""
    originals: int = 0  # original requests chosen (distinct failed logical requests)
    controls: int = 0  # control requests chosen
    control_candidates: int = 0  # baseline successes with a digested output
    controls_skipped_digest_mismatch: int = 0
    rate: float | None = None  # sends per second (None: not paced)
    elapsed_s: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ReplayPlan:
    """How to replay: where, how many, how fast."""

    target_url: str
    timeout_s: float  # per request
    concurrency: int  # requests in flight at most
    max_samples: int  # originals at most (a seeded sample when there are more)
    controls: int  # controls at most
    seed: int  # the sampling seed (the drill's)
    rate: float | None  # sends per second; None: as fast as ``concurrency`` allows
    repetitions: int = 2  # sends of each control
    headers: dict[str, str] = field(default_factory=dict)
    same_idempotency_key: bool = False


# --- choosing what to replay ---------------------------------------------------------------------------


def choose_control_ids(
    scenario: Scenario,
    duration_s: float,
    seed: int,
    window_s: tuple[float, float],
    count: int,
    *,
    sample_seed: int | None = None,
) -> list[str]:
    """Logical ids of the planned requests the load generator watches as control candidates.

    A sample of ``2 * count`` (spares for the ones that fail), seeded by ``sample_seed`` (default
    ``seed``), of the requests of the schedule (``seed``: the load's) whose intended start falls
    in ``window_s`` (offsets from the start of load: the baseline).
    """
    if count <= 0:
        return []
    start, end = window_s
    planned = [r.logical_id for r in build_schedule(scenario, duration_s, seed).requests if start <= r.offset_s < end]
    salt = f"{seed if sample_seed is None else sample_seed}:replay:control-candidates"
    return sorted(_sample(planned, 2 * count, salt))


def choose_repeats(
    scenario: Scenario, duration_s: float, seed: int, baseline_s: tuple[float, float], share: float
) -> dict[str, str]:
    """Golden controls for ``output_correctness``: ``share`` of the planned requests after the baseline (seeded by
    their ids) re-send the exact body of a baseline request of their pool, so each has a golden answer in the
    same run. Only temperature-0 pools; logical id -> the baseline logical id whose body it sends."""
    if share <= 0:
        return {}
    greedy = {pool.name for pool in scenario.pools if pool.sampling.temperature == 0}
    start, end = baseline_s
    planned = [r for r in build_schedule(scenario, duration_s, seed).requests if r.pool in greedy]
    baseline: dict[str, list[str]] = {}
    for r in planned:
        if start <= r.offset_s < end:
            baseline.setdefault(r.pool, []).append(r.logical_id)
    repeats = {}
    for r in planned:
        sources = baseline.get(r.pool)
        pick = random.Random(f"{seed}:repeat:{r.logical_id}")
        if r.offset_s >= end and sources and pick.random() < share:
            repeats[r.logical_id] = sources[pick.randrange(len(sources))]
    return repeats


def original_item(s: FailingSample) -> ReplayItem:
    """A failing sample as a replay item: its exact bytes, headers and original outcome."""
    return ReplayItem(
        ORIGINAL,
        s.request_id,
        s.logical_id,
        s.pool,
        s.trace_id,
        s.idempotency_key,
        s.payload_digest,
        s.method,
        s.endpoint,
        dict(s.headers),
        s.body,
        s.stream,
        s.error,
        s.status,
    )


def original_items(samples: Iterable[FailingSample]) -> list[ReplayItem]:
    """One item per failed logical request: its first failed attempt."""
    first: dict[str, FailingSample] = {}
    for sample in sorted(samples, key=lambda s: (s.intended_ts, s.attempt, s.request_id)):
        first.setdefault(sample.logical_id, sample)
    return [original_item(s) for s in first.values()]


def control_items(
    records: Iterable[RequestRecord],
    window_ts: tuple[float, float],
    scenario: Scenario,
    model: str,
    seed: int,
    shapes: Mapping[str, PromptShape] | None = None,
) -> list[ReplayItem]:
    """The baseline successes whose output was digested, with their bodies rebuilt from the plan (``seed``:
    the load's; ``shapes``: its fitted prompts, :mod:`drill.load.tokenizing`). Headers are rebuilt as the load
    generator makes them (trace and request ids are replaced per replay)."""
    start, end = window_ts
    pools = {p.name: p for p in scenario.pools}
    text = PromptText(seed)
    items = []
    for r in records:
        if not (
            r.ok
            and r.output_digest
            and r.attempt == 1
            and r.burst is None
            and start <= r.intended_ts < end
            and r.pool in pools
            and r.planned_input_tokens is not None
            and r.planned_output_tokens is not None
        ):
            continue
        pool = pools[r.pool]
        shape = (shapes or {}).get(r.logical_id)
        body = build_body(pool, model, r.logical_id, r.planned_input_tokens, r.planned_output_tokens, text, shape)
        headers = attempt_headers(
            trace_id=r.trace_id,
            span_id="0" * 16,
            idempotency_key=r.idempotency_key,
            request_id=r.request_id,
            priority=pool.priority,
            stream=pool.stream,
            extra={},
        )
        items.append(
            ReplayItem(
                CONTROL,
                r.request_id,
                r.logical_id,
                r.pool,
                r.trace_id,
                r.idempotency_key,
                r.payload_digest,
                "POST",
                endpoint_path(pool.endpoint),
                headers,
                body,
                pool.stream,
            )
        )
    return items


def baseline_rate(records: Iterable[RequestRecord], window_ts: tuple[float, float]) -> float | None:
    """Logical requests per second that arrived in the window (first attempts, bursts included); None if none."""
    start, end = window_ts
    arrivals = sum(1 for r in records if r.attempt == 1 and start <= r.intended_ts < end)
    return arrivals / (end - start) if arrivals and end > start else None


def _sample(items: Sequence, count: int, salt: str) -> list:
    """All of ``items`` or a seeded sample of ``count`` of them, in their order, independent of input order."""
    ordered = sorted(items, key=_sort_key)
    if len(ordered) <= count:
        return ordered
    chosen = set(random.Random(salt).sample(range(len(ordered)), count))
    return [item for i, item in enumerate(ordered) if i in chosen]


def _sort_key(item: object) -> str:
    return item.original_request_id if isinstance(item, ReplayItem) else str(item)


# --- replaying ----------------------------------------------------------------------------------------


def replay_after_recovery(
    samples_path: Path,
    records: Sequence[RequestRecord],
    out_path: Path,
    plan: ReplayPlan,
    *,
    scenario: Scenario,
    model: str,
    load_seed: int,
    baseline_ts: tuple[float, float] | None,
    prompt_shapes: Mapping[str, PromptShape] | None = None,
) -> ReplaySummary:
    """Replay the originals and the controls (see the module docstring); appends to ``out_path``.

    ``scenario``, ``model``, ``load_seed`` and ``prompt_shapes`` (its fitted prompts) are the load's (they
    rebuild the controls' bodies);
    ``baseline_ts`` is the baseline phase (UNIX s), where controls come from (None: no controls).
    Never raises for request failures (they are outcomes).
    """
    samples = list(read_samples(samples_path))
    distinct = original_items(samples)
    originals = _sample([i for i in distinct if i.intact], plan.max_samples, f"{plan.seed}:replay:originals")
    candidates = (
        control_items(records, baseline_ts, scenario, model, load_seed, prompt_shapes)
        if baseline_ts is not None and plan.controls > 0
        else []
    )
    controls = _sample([i for i in candidates if i.intact], plan.controls, f"{plan.seed}:replay:controls")
    first = originals + controls
    random.Random(f"{plan.seed}:replay:order").shuffle(first)
    sends = [(item, 1) for item in first] + [(item, n) for n in range(2, plan.repetitions + 1) for item in controls]
    results, elapsed = _send_paced(sends, out_path, plan)
    outcomes = Counter(r.error or "ok" for r in results)
    return ReplaySummary(
        samples=len(samples),
        replayed=len(results),
        skipped_digest_mismatch=sum(not i.intact for i in distinct),
        outcomes=dict(outcomes),
        reproduced=sum(r.reproduced for r in results),
        out_path=str(out_path),
        originals=len(originals),
        controls=len(controls),
        control_candidates=len(candidates),
        controls_skipped_digest_mismatch=sum(not i.intact for i in candidates),
        rate=plan.rate,
        elapsed_s=round(elapsed, 3),
    )


def replay_failing(
    samples_path: Path,
    out_path: Path,
    target_url: str,
    *,
    concurrency: int,
    timeout_s: float,
    max_samples: int,
    headers: dict[str, str] | None = None,
    same_idempotency_key: bool = False,
) -> ReplaySummary:
    """Re-send the first ``max_samples`` failed attempts (every attempt, no controls, not paced).

    Appends one line per replay to ``out_path``; samples whose body no longer matches its
    digest are not sent.
    """
    samples = list(read_samples(samples_path))
    items = [original_item(s) for s in samples]
    chosen = [i for i in items if i.intact][:max_samples]
    plan = ReplayPlan(
        target_url=target_url,
        timeout_s=timeout_s,
        concurrency=concurrency,
        max_samples=max_samples,
        controls=0,
        seed=0,
        rate=None,
        repetitions=1,
        headers=dict(headers or {}),
        same_idempotency_key=same_idempotency_key,
    )
    results, elapsed = _send_paced([(i, 1) for i in chosen], out_path, plan)
    return ReplaySummary(
        samples=len(samples),
        replayed=len(results),
        skipped_digest_mismatch=sum(not i.intact for i in items),
        outcomes=dict(Counter(r.error or "ok" for r in results)),
        reproduced=sum(r.reproduced for r in results),
        out_path=str(out_path),
        originals=len(chosen),
        elapsed_s=round(elapsed, 3),
    )


def _send_paced(
    sends: list[tuple[ReplayItem, int]], out_path: Path, plan: ReplayPlan
) -> tuple[list[ReplayResult], float]:
    """Send ``sends`` in order, the i-th at ``i / rate`` s, at most ``concurrency`` at once; write each result."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    cancel = threading.Event()
    results: list[ReplayResult] = []
    start_mono, start_wall = time.monotonic() + 0.05, time.time() + 0.05
    gap = 1.0 / plan.rate if plan.rate else 0.0
    with out_path.open("a", encoding="utf-8") as out, ThreadPoolExecutor(max(1, plan.concurrency)) as pool:

        def one(index: int, item: ReplayItem, repetition: int) -> None:
            delay = start_mono + index * gap - time.monotonic()
            if (delay > 0 and cancel.wait(delay)) or cancel.is_set():
                return
            result = _replay_one(item, repetition, plan, planned_ts=round(start_wall + index * gap, 6))
            with lock:
                out.write(result.to_json() + "\n")
                out.flush()
                results.append(result)

        futures = [pool.submit(one, i, item, rep) for i, (item, rep) in enumerate(sends)]
        try:
            for future in futures:
                future.result()
        except BaseException:
            cancel.set()  # an interrupt: requests not yet sent are not sent
            raise
    return results, time.monotonic() - start_mono


def _replay_one(item: ReplayItem, repetition: int, plan: ReplayPlan, *, planned_ts: float) -> ReplayResult:
    trace_id, span_id = new_trace_ids()
    suffix = "-replay" if repetition == 1 else f"-replay-{repetition}"
    key = item.idempotency_key if plan.same_idempotency_key else f"{item.idempotency_key}{suffix}"
    headers = {
        **item.headers,
        **plan.headers,
        "traceparent": traceparent(trace_id, span_id),
        "X-Request-Id": f"{item.original_request_id}{suffix}",
        "Idempotency-Key": key,
    }
    return ReplayResult(
        request_id=headers["X-Request-Id"],
        original_request_id=item.original_request_id,
        logical_id=item.logical_id,
        pool=item.pool,
        trace_id=trace_id,
        original_trace_id=item.original_trace_id,
        idempotency_key=key,
        original_error=item.original_error,
        original_status=item.original_status,
        payload_digest=payload_digest(item.body),
        set=item.set,
        repetition=repetition,
        deterministic=item.deterministic,
        planned_ts=planned_ts,
        sent_ts=round(time.time(), 6),
        **_exchange(plan.target_url, item, headers, plan.timeout_s),
    )


class _ReplyFields(TypedDict, total=False):
    """The fields of a :class:`ReplayResult` that the exchange with the target fills."""

    status: int
    error: str
    error_detail: str
    ttft_ms: float
    e2e_ms: float
    chunks: int
    completion_tokens: int | None
    output_digest: str | None


def _exchange(target_url: str, item: ReplayItem, headers: dict[str, str], timeout_s: float) -> _ReplyFields:
    url = urlsplit(target_url)
    assert url.hostname is not None  # the target's base URL is an http(s)://host URL
    conn_cls = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(url.hostname, url.port, timeout=timeout_s)
    start = time.perf_counter()
    deadline = start + timeout_s
    try:
        conn.request(item.method, url.path.rstrip("/") + item.endpoint, body=item.body, headers=headers)
        response = conn.getresponse()
        return _read_response(response, item.stream, start, deadline)
    except TimeoutError as exc:
        return {"error": ErrorClass.TIMEOUT.value, "error_detail": f"{type(exc).__name__}: {exc}"}
    except ConnectionRefusedError as exc:
        return {"error": ErrorClass.CONNECTION_ERROR.value, "error_detail": f"{type(exc).__name__}: {exc}"}
    except (OSError, http.client.HTTPException) as exc:
        return {"error": ErrorClass.CONNECTION_RESET.value, "error_detail": f"{type(exc).__name__}: {exc}"}
    finally:
        conn.close()


def _read_response(response: http.client.HTTPResponse, stream: bool, start: float, deadline: float) -> _ReplyFields:
    status = response.status
    error = classify_status(status)
    if error is not None or not stream:
        data = response.read()
        out: _ReplyFields = {"status": status, "e2e_ms": _ms(start)}
        if error is not None:
            return {**out, "error": error.value, "error_detail": f"HTTP {status}: {parse_error_message(data)}"}
        output = OutputDigest()
        output.feed_body(data)
        return {**out, "completion_tokens": parse_usage(data)[1], "output_digest": output.value()}
    return {"status": status, **_read_stream(response, start, deadline)}


def _read_stream(response: http.client.HTTPResponse, start: float, deadline: float) -> _ReplyFields:
    out: _ReplyFields = {"chunks": 0}
    output = OutputDigest()
    while True:
        if time.perf_counter() > deadline:
            return {**out, "error": ErrorClass.TIMEOUT.value, "error_detail": "replay timeout"}
        line = response.readline()
        if not line:
            return {
                **out,
                "error": ErrorClass.CONNECTION_RESET.value,
                "error_detail": "the stream ended before data: [DONE]",
                "e2e_ms": _ms(start),
            }
        kind = classify_line(line)
        if kind is LineKind.CONTENT:
            out["chunks"] += 1
            out.setdefault("ttft_ms", _ms(start))
            output.feed_chunk(line)
            if carries_usage(line):  # llama.cpp's streamed completions: usage rides on the last content chunk
                out["completion_tokens"] = parse_usage(line)[1]
        elif kind is LineKind.USAGE:
            out["completion_tokens"] = parse_usage(line)[1]
        elif kind is LineKind.ERROR and "error" not in out:
            code = parse_error_code(line)  # vLLM's refusal after the 200: code 503 in the event
            out["error"], out["error_detail"] = classify_stream_error(code).value, parse_error_message(line)
        elif kind is LineKind.DONE:
            out["e2e_ms"] = _ms(start)
            if "error" not in out:
                out["output_digest"] = output.value()
            return out


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000.0, 3)
