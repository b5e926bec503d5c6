"""A capacity run, applied: the receiver, the target, the planner's points, the naive estimate, the N-1 sweep.

``reports/capacity/<UTC time>-<id>/`` holds ``journal.jsonl`` (the target is journaled before it starts, so the
run's watchdog process, or ``drill cleanup``, stops it after a crash; ``watchdog.log``), ``env.json``,
``spans.jsonl`` (every span the target exported), ``naive/`` (the one-at-a-time requests), ``points/<sweep>/<point>/``
(each point's raw evidence, :mod:`drill.capacity.point`), ``target/<sweep>/`` (the target's own records, e.g. the
replicas' ledgers), ``capacity.json`` (:data:`SCHEMA`: inputs, every point, each sweep's knee, the naive estimate,
headroom and cost) and the rendered ``capacity.md`` and ``capacity.html``. Nothing in it is overwritten.

Sweeps: ``full`` (the target as configured) and, with ``--headroom n-1``, ``n-1``: the embedded stack started
again with one replica fewer and measured the same way (the N-1 knee is measured, never the full knee divided).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, is_dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from drill import registry
from drill.api import TargetContext
from drill.capacity.attainment import AttainmentRule, SloOutcome
from drill.capacity.naive import NaiveEstimate, measure_naive
from drill.capacity.planner import Done, Knee, Next, Observation, SearchConfig, decide, knee_of
from drill.capacity.point import PointRequest, PointRunner, PointTiming, RatePoint
from drill.capacity.reporting import write_capacity_reports
from drill.capacity.ttft_split import split_spans, ttft_split
from drill.errors import DrillError
from drill.rundir.directory import environment, open_run
from drill.rundir.journal import Event, Journal, RunStatus
from drill.rundir.records import read_records
from drill.rundir.redact import run_redactor, scrub_logs, secret_values
from drill.runner import active
from drill.runner.watchdog import Watchdog
from drill.spec.scenario import Scenario
from drill.targets.probe import first_good_response
from drill.traces.receiver import OtlpReceiver

if TYPE_CHECKING:
    from drill.api import Target, TargetInfo
    from drill.rundir.journal import Journal
    from drill.rundir.records import RequestRecord

__all__ = ["SCHEMA", "CapacityOptions", "CapacityResult", "CapacityRun", "SweepResult", "TargetChoice", "to_json"]

SCHEMA = "llm-drill/capacity/v1"
FULL, N_MINUS_1 = "full", "n-1"
START_TIMEOUT_S = 300.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TargetChoice:
    """What ``--target`` resolved to: a target kind and its validated params."""

    kind: str  # "embedded", "openai", or a drill's target kind
    params: BaseModel
    label: str  # how the report names it
    gpus: int | None = None  # GPUs behind the target (the embedded stack's: replicas × TP × PP)

    @property
    def replicas(self) -> int:
        value = getattr(self.params, "replicas", 1)
        return value if isinstance(value, int) else max(1, len(value))

    def minus_one(self) -> TargetChoice:
        """The same embedded stack with one replica fewer."""
        params = self.params.model_copy(update={"replicas": self.replicas - 1})
        per_replica = (self.gpus or self.replicas) // self.replicas
        return replace(self, params=params, gpus=per_replica * (self.replicas - 1))


@dataclass(frozen=True)
class CapacityOptions:
    scenario: Scenario
    scenario_path: str
    target: TargetChoice
    search: SearchConfig
    timing: PointTiming
    rule: AttainmentRule
    seed: int
    headroom_n_minus_1: bool = False
    headroom_fraction: float | None = None
    gpu_hour_price: float | None = None
    naive: bool = True
    out_dir: Path = Path("reports")
    argv: tuple[str, ...] = ()


@dataclass(frozen=True)
class SweepResult:
    name: str
    replicas: int
    gpus: int | None
    points: tuple[RatePoint, ...]
    knee: Knee
    reason: str  # why the search ended
    binding: SloOutcome | None  # at the lowest failing rate: which pool's SLO broke first
    goodput_at_knee: float | None  # mean goodput/s over the knee's repetitions


@dataclass
class CapacityResult:
    run_dir: Path
    sweeps: list[SweepResult] = field(default_factory=list)
    naive: NaiveEstimate | None = None
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)

    def sweep(self, name: str) -> SweepResult | None:
        return next((s for s in self.sweeps if s.name == name), None)


class CapacityRun:
    """Runs one capacity measurement; ``echo`` gets one line per step (the CLI prints them)."""

    def __init__(self, options: CapacityOptions, echo: Callable[[str], None] = lambda _line: None) -> None:
        self.options = options
        self.echo = echo

    def run(self) -> CapacityResult:
        # as drill run's: the secrets of the environment, the target's config and (once expanded) its headers
        self.redactor = run_redactor(self.options.target.params.model_dump(mode="json", by_alias=True))
        argv = [self.redactor.value(arg) for arg in self.options.argv]
        rundir, journal = open_run(self.options.out_dir, "capacity", argv)
        self.rundir = rundir
        result = CapacityResult(rundir.path)
        active.register(rundir.run_id, rundir.path)
        watchdog = Watchdog(rundir.path)  # stops the target if this process dies (drill/runner/watchdog.py)
        self.echo(f"run directory: {rundir.path}")
        receiver = OtlpReceiver(rundir.file("spans.jsonl"), "127.0.0.1", 0).start()
        status, failure = RunStatus.ERROR, None
        try:
            self._sweeps(result, journal, receiver.endpoint)
            status = RunStatus.COMPLETED
        except KeyboardInterrupt:
            result.interrupted = True
            status = RunStatus.INTERRUPTED
            result.notes.append("interrupted: the figures cover the points measured before Ctrl-C")
        except DrillError as exc:
            failure = exc
            result.notes.append(f"the run failed: {exc} (the figures cover the points measured before)")
        finally:
            receiver.stop()
            code = 0 if status is RunStatus.COMPLETED else (130 if result.interrupted else 3)
            journal.write(Event.RUN_FINISHED, status=status, exit_code=code)
            journal.close()
            watchdog.finish()
            active.unregister(rundir.run_id)
        self._finish(result)
        if failure is not None:
            raise failure
        return result

    # --- sweeps -----------------------------------------------------------------------------------

    def _sweeps(self, result: CapacityResult, journal: Journal, otlp: str) -> None:
        opts = self.options
        full = self._sweep(FULL, opts.target, opts.search, journal, otlp, result, naive=opts.naive)
        if not opts.headroom_n_minus_1:
            return
        knee = full.knee.knee or full.knee.upper or opts.search.start
        n = opts.target.replicas
        start = knee * (n - 1) / n  # only where the N-1 search starts: its knee is measured
        search = replace(opts.search, start=start) if not opts.search.rates else opts.search
        self._sweep(N_MINUS_1, opts.target.minus_one(), search, journal, otlp, result, naive=False)

    def _sweep(
        self,
        name: str,
        choice: TargetChoice,
        search: SearchConfig,
        journal: Journal,
        otlp: str,
        result: CapacityResult,
        *,
        naive: bool,
    ) -> SweepResult:
        run_id = self.rundir.run_id if name == FULL else f"{self.rundir.run_id}-n1"
        target = registry.targets.get(choice.kind)(choice.params, TargetContext(run_id, str(self.rundir.path), otlp, 0))
        journal.write(Event.TARGET_STARTING, target_id=name, target_kind=choice.kind, teardown=target.teardown_data())
        self.echo(f"[{name}] starting the target: {choice.label}, {choice.replicas} replica(s)")
        points: list[RatePoint] = []
        try:
            started = time.monotonic()
            info = target.start()
            headers = target.request_headers()
            self.redactor = self.redactor.with_secrets(secret_values(headers))
            probe = first_good_response(info.base_url, info.model, timeout_s=START_TIMEOUT_S, headers=headers)
            journal.write(
                Event.TARGET_READY,
                target_id=name,
                base_url=info.base_url,
                first_good_response_s=round(time.monotonic() - started, 3),
                probe_s=round(probe, 3),
                target=info.model_dump(mode="json"),
            )
            if name == FULL:
                self._write_env(info, choice)
            runner = PointRunner(
                run_dir=self.rundir.path,
                scenario=self.options.scenario,
                target_url=info.base_url,
                model=info.model or self.options.scenario.model,
                slos={p.name: dict(p.slo) for p in self.options.scenario.pools if p.slo},
                timing=self.options.timing,
                rule=self.options.rule,
                headers=headers,
                metrics_urls=dict(info.metrics_urls),
            )
            if naive:
                result.naive = self._naive(info.base_url, runner.model, headers, choice.replicas)
            try:
                done = self._search(name, search, runner, points)
            except (KeyboardInterrupt, DrillError) as exc:
                why = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"stopped: {exc}"
                result.sweeps.append(_summarize(name, choice, points, Done(False, why), search.repetitions))
                raise
        finally:
            self._stop_target(target, name, journal)
        sweep = _summarize(name, choice, points, done, search.repetitions)
        result.sweeps.append(sweep)
        return sweep

    def _search(self, name: str, search: SearchConfig, runner: PointRunner, points: list[RatePoint]) -> Done:
        while True:
            step = decide(search, [_observation(p) for p in points])
            if isinstance(step, Done):
                self.echo(f"[{name}] {step.reason}")
                return step
            assert isinstance(step, Next)
            request = PointRequest(name, len(points), step.rate, step.repetition, self.options.seed + step.repetition)
            point = runner.measure(request)
            points.append(point)
            self.echo(_point_line(point, step.why))

    def _naive(self, url: str, model: str | None, headers: dict[str, str], replicas: int) -> NaiveEstimate:
        self.echo("[naive] one request at a time, to make the naive estimate from one request's peak tokens/s")
        estimate = measure_naive(
            self.rundir.path,
            self.options.scenario,
            target_url=url,
            model=model,
            headers=headers,
            seed=self.options.seed,
            replicas=replicas,
        )
        peak = "-" if estimate.peak_tokens_per_s is None else f"{estimate.peak_tokens_per_s:.1f}"
        rate = "-" if estimate.rate is None else f"{estimate.rate:.3g}/s"
        self.echo(f"[naive] {estimate.requests} request(s), peak {peak} tokens/s -> naive rate {rate}")
        return estimate

    def _stop_target(self, target: Target, name: str, journal: Journal) -> None:
        try:
            target.collect_evidence(str(self.rundir.path / "target" / name))
        except Exception as exc:  # noqa: BLE001 - the target still has to stop
            journal.write(Event.NOTE, message=f"collecting the target's evidence failed: {exc}")
        target.stop()
        journal.write(Event.TARGET_STOPPED, target_id=name, reason="sweep ended")

    def _write_env(self, info: TargetInfo, choice: TargetChoice) -> None:

        extra = {"target": {"kind": info.kind, "base_url": info.base_url, "model": info.model, "label": choice.label}}
        self.rundir.write_json(
            "env.json",
            environment(
                self.rundir.run_id,
                list(self.options.argv),
                {"scenario": self.options.seed},
                extra=extra,
                redactor=self.redactor,
            ),
        )

    # --- finishing ----------------------------------------------------------------------------------

    def _finish(self, result: CapacityResult) -> None:

        self._attach_spans(result)
        self.rundir.write_json("capacity.json", self.redactor.data(to_json(self.options, result)))
        paths = write_capacity_reports(result.run_dir)
        scrub_logs(result.run_dir, self.redactor)
        for path in paths:
            self.echo(f"report: {path}")

    def _attach_spans(self, result: CapacityResult) -> None:
        """Split the run's spans per point and attach each point's TTFT split (queueing, prefill)."""

        owners: dict[str, Path] = {}
        records: dict[tuple[str, int], list[RequestRecord]] = {}
        for sweep in result.sweeps:
            for p in sweep.points:
                folder = result.run_dir / p.directory
                rows = list(read_records(folder / "requests.jsonl"))
                records[(sweep.name, p.index)] = rows
                owners.update({r.trace_id.lower(): folder for r in rows if r.trace_id})
        split = split_spans(result.run_dir / "spans.jsonl", owners)
        if split.unreadable:
            result.notes.append(f"{split.unreadable} span line(s) of spans.jsonl could not be read")
        for i, sweep in enumerate(result.sweeps):
            points = tuple(
                replace(
                    p,
                    split=tuple(
                        ttft_split(o.pool, _judged(records[(sweep.name, p.index)], o.pool, p), split.durations)
                        for o in p.pools
                    ),
                )
                for p in sweep.points
            )
            result.sweeps[i] = replace(sweep, points=points)


def _judged(rows: list[RequestRecord], pool: str, point: RatePoint) -> list[RequestRecord]:
    """The pool's attempts intended inside the point's judged window."""
    start, end = point.window_ts
    return [r for r in rows if r.pool == pool and start <= r.intended_ts < end]


def _observation(point: RatePoint) -> Observation:
    return Observation(point.rate, point.repetition, point.holds, point.ratio)


def _summarize(name: str, choice: TargetChoice, points: list[RatePoint], done: Done, repetitions: int) -> SweepResult:
    knee = knee_of([_observation(p) for p in points], bracketed=done.bracketed, repetitions=repetitions)
    binding = None
    if knee.upper is not None:
        failing = [p for p in points if p.rate == knee.upper and not p.holds]
        binding = failing[0].binding if failing else None
    at_knee = [p.goodput_per_s for p in points if knee.knee is not None and p.rate == knee.knee]
    goodput = sum(at_knee) / len(at_knee) if at_knee else None
    return SweepResult(name, choice.replicas, choice.gpus, tuple(points), knee, done.reason, binding, goodput)


def _point_line(point: RatePoint, why: str) -> str:
    binding = point.binding
    what = (
        "-"
        if binding is None
        else f"{binding.pool} {binding.key} {_ms(binding.observed_ms)} of {binding.bound_ms:g} ms"
    )
    verdict = "holds" if point.holds else "FAILS"
    flags = " (harness-limited)" if point.harness_limited else ""
    return (
        f"[{point.sweep}] #{point.index:02d} {point.rate:8.3f}/s rep {point.repetition}: {verdict:5} "
        f"goodput {point.goodput_per_s:6.2f}/s, binding {what}{flags}  [{why}]"
    )


def _ms(value: float) -> str:
    return "over (failures at the percentile)" if math.isinf(value) else f"{value:.0f} ms"


# --- capacity.json ------------------------------------------------------------------------------------


def to_json(options: CapacityOptions, result: CapacityResult) -> dict[str, Any]:
    """The ``capacity.json`` document (infinite figures — failures at the percentile — are ``null``)."""
    full = result.sweep(FULL)
    n1 = result.sweep(N_MINUS_1)
    knee = full.knee.estimate if full else None
    naive = result.naive
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "run_id": result.run_dir.name,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "interrupted": result.interrupted,
        "inputs": _inputs(options),
        "sweeps": [_sweep_json(s) for s in result.sweeps],
        "naive": _plain(naive) if naive else None,
        "comparison": _comparison(knee, naive),
        "headroom": _headroom(options, full, n1),
        "cost": _cost(options, full),
        "notes": list(result.notes),
    }
    return doc


def _inputs(options: CapacityOptions) -> dict[str, Any]:
    return {
        "scenario_file": options.scenario_path,
        "scenario": options.scenario.model_dump(mode="json", by_alias=True),
        "target": {
            "kind": options.target.kind,
            "label": options.target.label,
            "replicas": options.target.replicas,
            "gpus": options.target.gpus,
        },
        "seed": options.seed,
        "search": _plain(options.search),
        "timing": {**_plain(options.timing), "arrivals_s": options.timing.arrivals_s},
        "attainment": {"rule": options.rule.kind, "share": options.rule.share, "described": options.rule.describe()},
        "headroom": {"n_minus_1": options.headroom_n_minus_1, "fraction": options.headroom_fraction},
        "gpu_hour_price": options.gpu_hour_price,
    }


def _sweep_json(sweep: SweepResult) -> dict[str, Any]:
    return {
        "name": sweep.name,
        "replicas": sweep.replicas,
        "gpus": sweep.gpus,
        "reason": sweep.reason,
        "knee": _plain(sweep.knee),
        "binding": _slo_json(sweep.binding),
        "goodput_at_knee": sweep.goodput_at_knee,
        "points": [_point_json(p) for p in sweep.points],
    }


def _point_json(point: RatePoint) -> dict[str, Any]:
    data = _plain(point)
    data["goodput_per_s"] = point.goodput_per_s
    data["binding"] = _slo_json(point.binding)
    for pool, raw in zip(point.pools, data["pools"]):
        raw["slos"] = [_slo_json(s) for s in pool.slos]
    return data


def _slo_json(slo: SloOutcome | None) -> dict[str, Any] | None:
    if slo is None:
        return None
    return {**_plain(slo), "ratio": _finite(slo.ratio)}


def _comparison(knee: float | None, naive: NaiveEstimate | None) -> dict[str, Any] | None:
    if knee is None or naive is None or naive.rate is None or knee <= 0:
        return None
    return {"knee": knee, "naive_rate": naive.rate, "ratio": naive.rate / knee, "error": naive.rate / knee - 1}


def _headroom(options: CapacityOptions, full: SweepResult | None, n1: SweepResult | None) -> dict[str, Any]:
    base = n1.knee.knee if n1 is not None and n1.knee.knee is not None else (full.knee.knee if full else None)
    basis = N_MINUS_1 if n1 is not None and n1.knee.knee is not None else FULL
    fraction = options.headroom_fraction
    safe = base * (1 - fraction) if base is not None and fraction is not None else None
    return {
        "n_minus_1_knee": n1.knee.knee if n1 else None,
        "n_minus_1_share": (n1.knee.knee / full.knee.knee) if n1 and full and n1.knee.knee and full.knee.knee else None,
        "fraction": fraction,
        "basis": basis if base is not None else None,
        "safe_rate": safe if fraction is not None else base,
    }


def _cost(options: CapacityOptions, full: SweepResult | None) -> dict[str, Any] | None:
    price, gpus = options.gpu_hour_price, options.target.gpus
    if price is None or full is None:
        return None
    goodput = full.goodput_at_knee
    per_request = price * gpus / (goodput * 3600.0) if gpus and goodput else None
    return {"gpu_hour_price": price, "gpus": gpus, "goodput_at_knee": goodput, "per_successful_request": per_request}


def _finite(value: float) -> float | None:
    return None if math.isinf(value) or math.isnan(value) else value


def _plain(value: object) -> Any:
    """Dataclasses, tuples and floats as JSON values (inf and nan -> null)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {k: _plain(v) for k, v in asdict(value).items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return _finite(value)
    return value
