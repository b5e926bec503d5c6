"""The runner: one drill, phase by phase, with every fault reverted on every exit path.

Order of a run::

    open       run directory, journal, watchdog, active-run registry, signal handlers
    receiver   OTLP/HTTP span receiver (spans.jsonl)
    cold start start or attach the target; time to the first good response
    scraper    /metrics every second, or the user's Prometheus (metrics.jsonl)
    load       the scenario's open-loop load, from warmup to the end of recovery (requests.jsonl)
    warmup, baseline, fault (faults on their schedule; stop conditions may end it early), recovery
    replay     once recovery is observed (queue depth and error rate back in the baseline band, or a bounded wait:
               drill.runner.recovery_gate), the original failing requests and baseline controls sent again
               (replay.jsonl)
    shutdown   revert everything left, stop load, scraper, target, receiver (always, in this order)
    evaluate   checks -> verdicts.json, summary.md

Phases run on the monotonic clock; the journal stamps both clocks. Shutdown
runs in a ``finally`` with signals deferred, so neither an exception nor Ctrl-C
nor SIGTERM skips a revert; SIGKILL is the watchdog's job.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drill import registry
from drill.api import Capability, Status, Target, TargetContext, TargetInfo, Verdict
from drill.checks.health import HEALTH_FILE
from drill.errors import DrillError, RunInterrupted
from drill.load.driver import LoadDriver, LoadPlan, SpawnedGenerator, spawn_generator
from drill.load.replay import ReplayPlan, baseline_rate, choose_control_ids, choose_repeats, replay_after_recovery
from drill.load.tokenizing import read_fit
from drill.report import render
from drill.rundir.directory import RunDir, environment, open_run
from drill.rundir.evidence import RunEvidence
from drill.rundir.journal import Event, Journal, RunStatus
from drill.rundir.redact import Redactor, run_redactor, scrub_logs, secret_values
from drill.runner import active
from drill.runner.fault_schedule import FaultRunner
from drill.runner.health_probes import HealthProber
from drill.runner.listeners import ListenerEvent, Listeners, RunListener
from drill.runner.prometheus import PrometheusMetrics
from drill.runner.recovery_gate import (
    RecoveryWait,
    live_queue_depth,
    recent_error_rate,
    recovery_band,
    wait_for_recovery,
)
from drill.runner.reverts import RevertStack
from drill.runner.scraper import MetricsScraper
from drill.runner.signals import SignalGuard
from drill.runner.stopconditions import StopMonitor, StopTrigger
from drill.runner.timeline import Timeline, plan_timeline
from drill.runner.verdicts import evaluate_checks, write_verdicts
from drill.runner.watchdog import Watchdog
from drill.serving_metrics import QUANTITIES, wanted_sample_names
from drill.spec.loader import LoadedDrill, fault_key_positions
from drill.spec.models import Phase, PrometheusSourceSpec, StopKind
from drill.targets.probe import first_good_response, served_model
from drill.traces.receiver import OtlpReceiver

if TYPE_CHECKING:
    from drill.load.driver import LoadDriver

__all__ = ["RunOptions", "RunResult", "Runner", "resolved_inputs"]

log = logging.getLogger(__name__)

TICK_S = 0.25
RECENT_WINDOW_S = 10.0  # recovery_time's window: the recovery phase's last seconds whose error rate gates the replay


@dataclass(frozen=True)
class RunOptions:
    out_dir: Path = Path("reports")
    workers: int = 0
    progress: bool = False
    argv: tuple[str, ...] = ()
    heartbeat_timeout_s: float = 15.0
    lease_grace_s: float = 30.0
    drain_s: float = 30.0


@dataclass
class RunResult:
    run_dir: Path | None
    status: RunStatus = RunStatus.ERROR
    exit_code: int = 3
    verdicts: list[Verdict] = field(default_factory=list)
    stopped_by: str | None = None
    message: str = ""
    revert_failures: list[str] = field(default_factory=list)
    reports: list[Path] = field(default_factory=list)  # report.md, report.html (none when rendering failed)


class _DrillStopped(Exception):
    """``max_duration`` fired: skip the remaining phases and shut down."""


class Runner:
    def __init__(
        self, loaded: LoadedDrill, options: RunOptions = RunOptions(), listeners: list[RunListener] | None = None
    ) -> None:
        self.loaded = loaded
        self.drill = loaded.drill
        self.options = options
        self.timeline: Timeline = plan_timeline(loaded)
        self.listeners = Listeners(listeners, on_error=self._listener_failed)
        self.guard = SignalGuard(on_signal=self._signal_received)
        self.result = RunResult(None)
        self.rundir: RunDir  # from _open on, which run() calls first
        self.redactor = Redactor()  # the run's, with its secrets, from _open on
        self.journal: Journal  # from _open on
        self.watchdog: Watchdog | None = None
        self.receiver: OtlpReceiver | None = None
        self.scraper: MetricsScraper | PrometheusMetrics | None = None
        self.health: HealthProber | None = None  # health.jsonl, when the drill names health_truth
        self.target: Target | None = None
        self.target_info: TargetInfo  # from _start_target on, which _execute calls before anything reads it
        self.load: LoadDriver | None = None
        self.generator: SpawnedGenerator | None = None  # spawned beside the target start, until the load takes it
        self.faults: FaultRunner | None = None
        self.monitor: StopMonitor | None = None
        self.started_mono = time.monotonic()
        self._run_stopped = False  # max_duration ended the whole run

    # --- the run ----------------------------------------------------------------------------------

    def run(self) -> RunResult:
        self._open()
        self.guard.install()
        try:
            self._execute()
            self.result.status = RunStatus.COMPLETED
        except RunInterrupted as exc:
            self._fail(RunStatus.INTERRUPTED, exc.exit_code, str(exc))
        except DrillError as exc:
            self._fail(RunStatus.ERROR, exc.exit_code, str(exc), exc)
        except Exception as exc:  # noqa: BLE001 - an internal error still reverts and is logged
            self._fail(RunStatus.ERROR, 3, f"internal error: {type(exc).__name__}: {exc}", exc)
        finally:
            self._shutdown()
        if self.result.status is RunStatus.COMPLETED:
            self._evaluate()
        self._finish()
        return self.result

    def _execute(self) -> None:
        self._start_receiver()
        # the load generator imports Locust (about 1 s) while the target starts; it waits for its plan
        self.generator = spawn_generator(self.rundir.path)
        self._start_target()
        self._write_env()
        self._start_scraper()
        self._start_health_prober()
        self._start_load()
        try:
            self._timed_phase(Phase.WARMUP, self.drill.phases.warmup)
            self._timed_phase(Phase.BASELINE, self.drill.phases.baseline)
            self._fault_phase()
            self._timed_phase(Phase.RECOVERY, self.drill.phases.recovery)
        except _DrillStopped:
            pass
        self._stop_load()
        if self.drill.phases.replay.enabled and not self._run_stopped:
            self._replay_phase()

    # --- opening and closing ---------------------------------------------------------------------

    def _open(self) -> None:
        self.redactor = self._initial_redactor()
        argv = [self.redactor.value(arg) for arg in self.options.argv]
        self.rundir, self.journal = open_run(
            self.options.out_dir, self.drill.name, argv, time_scale=self.loaded.time_scale
        )
        self.result.run_dir = self.rundir.path
        self._write_inputs()
        active.register(self.rundir.run_id, self.rundir.path)
        self.watchdog = Watchdog(
            self.rundir.path,
            heartbeat_timeout_s=self.options.heartbeat_timeout_s,
            lease_grace_s=self.options.lease_grace_s,
        )
        self.listeners.fire(ListenerEvent.RUN_STARTED, run_id=self.rundir.run_id, run_dir=str(self.rundir.path))

    def _write_inputs(self) -> None:
        loaded = self.loaded
        self.rundir.write_text("drill.yaml", self.redactor.value(loaded.text))  # as given, credentials scrubbed
        self.rundir.write_json("resolved.json", self.redactor.data(resolved_inputs(loaded)))
        if loaded.runbook_path is not None and loaded.runbook_path.is_file():
            # the runbook as this run used it: the report shows it from the run directory, not the working tree
            self.rundir.write_text("runbook.md", loaded.runbook_path.read_text(encoding="utf-8"))

    def _initial_redactor(self) -> Redactor:
        """Scrubs the secrets of the environment and the target's config from every file the run writes."""
        config = [_dump(self.loaded.target_params), _dump(self.drill.metrics)]  # the target's, the metrics source's
        return run_redactor(config, include_text=self.drill.report.include_text)

    def _headers(self) -> dict[str, str]:
        """The target's request headers (credentials); never journaled."""
        return self.target.request_headers() if self.target is not None else {}

    def _write_env(self) -> None:
        seeds = {"drill": self.drill.seed, "scenario": self.loaded.scenario.seed}
        model, version = served_model(self.target_info.base_url, headers=self._headers())
        self.rundir.write_json(
            "env.json",
            environment(
                self.rundir.run_id,
                list(self.options.argv),
                seeds,
                redactor=self.redactor,
                extra={
                    "target": {
                        "kind": self.target_info.kind,
                        "base_url": self.target_info.base_url,
                        "model": model,
                        "version": version,
                        "runtime": self.target_info.runtime,
                        "replicas": [r.name for r in self.target_info.replicas],
                    },
                },
            ),
        )
        if self.target_info.model is None and model:
            self.target_info = self.target_info.model_copy(update={"model": model})

    def _shutdown(self) -> None:
        """Revert, then stop everything started — each step isolated so one failure cannot skip the next."""
        self.guard.shutting_down()
        if self.faults is not None:
            self.faults.revert_all("run ended")
            self.result.revert_failures = [f"{o.fault_id}: {o.error}" for o in self.faults.failed_reverts]
        self._safely("stop load", self._stop_load)
        if self.generator is not None:  # the run ended before its load started
            generator, self.generator = self.generator, None
            self._safely("close the load generator", generator.close)
        if self.scraper is not None:
            self._safely("stop scraper", self.scraper.stop)
        if self.health is not None:
            self._safely("stop health prober", self.health.stop)
        self._safely("collect target evidence", self._collect_target_evidence)
        self._safely("stop target", self._stop_target)
        if self.receiver is not None:
            self._safely("stop receiver", self.receiver.stop)

    def _finish(self) -> None:
        code = self._exit_code()
        self.result.exit_code = code
        self.journal.write(
            Event.RUN_FINISHED,
            status=self.result.status,
            exit_code=code,
            stopped_by=self.result.stopped_by,
            revert_failures=self.result.revert_failures,
        )
        self._render_reports()
        self.journal.close()
        if self.watchdog is not None:
            self.watchdog.finish()
        scrub_logs(self.rundir.path, self.redactor)
        if not self.result.revert_failures:
            active.unregister(self.rundir.run_id)
        self.guard.uninstall()
        self.listeners.fire(ListenerEvent.RUN_FINISHED, status=self.result.status, exit_code=code)

    def _safely(self, what: str, step: Callable[[], object]) -> None:
        try:
            step()
        except BaseException as exc:  # noqa: BLE001 - the rest of shutdown must still run
            log.error("%s failed: %s", what, exc)
            self.journal.write(Event.NOTE, message=f"{what} failed: {type(exc).__name__}: {exc}")

    def _warn(self, message: str) -> None:
        """Something the run's reader must know (a stop condition that cannot trigger): the log and the journal."""
        log.warning("%s", message)
        self.journal.write(Event.NOTE, message=message)

    def _fail(self, status: RunStatus, code: int, message: str, exc: BaseException | None = None) -> None:
        self.result.status, self.result.exit_code, self.result.message = status, code, message
        self.journal.write(Event.NOTE, message=message)
        if exc is not None and code == 3:
            (self.rundir.path / "error.log").write_text("".join(traceback.format_exception(exc)))

    def _exit_code(self) -> int:
        if self.result.revert_failures:
            return 4
        if self.result.status is not RunStatus.COMPLETED:
            return self.result.exit_code
        bad = [v for v in self.result.verdicts if v.status is not Status.PASS]
        return 1 if bad else 0

    # --- parts ------------------------------------------------------------------------------------

    def _start_receiver(self) -> None:
        spec = self.drill.otlp
        if spec.enabled:
            self.receiver = OtlpReceiver(self.rundir.file("spans.jsonl"), spec.host, spec.port).start()
            self.journal.write(Event.NOTE, message=f"OTLP receiver at {self.receiver.endpoint}")

    def _start_target(self) -> None:
        kind = self.drill.target.kind
        ctx = TargetContext(
            self.rundir.run_id,
            str(self.rundir.path),
            self.receiver.endpoint if self.receiver else None,
            self.drill.seed,
            faults=tuple((f.kind, p) for f, p in zip(self.drill.faults, self.loaded.fault_params, strict=True)),
            fault_at=fault_key_positions(self.loaded, "params", "method"),
        )
        self.target = target = registry.targets.get(kind)(self.loaded.target_params, ctx)
        self.redactor = self.redactor.with_secrets(secret_values(self._headers()))
        self.journal.write(Event.TARGET_STARTING, target_id="target", target_kind=kind, teardown=target.teardown_data())
        cold = self.drill.phases.cold_start
        if cold.enabled:
            self._phase_started(Phase.COLD_START, None)
        t0 = time.monotonic()
        self.target_info = target.start()
        seconds = first_good_response(
            self.target_info.base_url, self.target_info.model, timeout_s=cold.timeout, headers=self._headers()
        )
        self.journal.write(
            Event.TARGET_READY,
            target_id="target",
            base_url=self.target_info.base_url,
            first_good_response_s=round(time.monotonic() - t0, 3),
            probe_s=round(seconds, 3),
            target=self.target_info.model_dump(mode="json"),
        )
        if cold.enabled:
            self._phase_ended(Phase.COLD_START, time.monotonic() - t0)

    def _collect_target_evidence(self) -> None:
        """The target's own records (the embedded stack's ledgers) into the run directory, before it stops."""
        if self.target is not None:
            files = self.target.collect_evidence(str(self.rundir.path))
            if files:
                self.journal.write(Event.NOTE, message="target evidence collected", files=files)

    def _stop_target(self) -> None:
        if self.target is not None:
            target, self.target = self.target, None
            target.stop()
            self.journal.write(Event.TARGET_STOPPED, target_id="target", reason="run ended")

    def _prometheus_source(self, spec: PrometheusSourceSpec) -> PrometheusMetrics:
        """The user's Prometheus as the metrics source; its credentials join the run's redactor first."""
        self.redactor = self.redactor.with_secrets(secret_values(spec.request_headers()))
        raw = [str(c.metric) for c in self.drill.stop_conditions if c.kind is StopKind.METRIC]
        return PrometheusMetrics(
            spec,
            self.rundir.file("metrics.jsonl"),
            self.drill.metrics.interval,
            names=[*wanted_sample_names(), *(n for n in raw if n not in QUANTITIES)],
            metrics_urls=self.target_info.metrics_urls,
        )

    def _start_scraper(self) -> None:
        spec = self.drill.metrics
        if spec.enabled and spec.prometheus is not None:
            self.scraper = self._prometheus_source(spec.prometheus).start()
            self.journal.write(Event.NOTE, message=f"metrics from Prometheus at {spec.prometheus.url}")
        elif spec.enabled and self.target_info.metrics_urls:
            self.scraper = MetricsScraper(
                self.target_info.metrics_urls, self.rundir.file("metrics.jsonl"), self.drill.metrics.interval
            ).start()

    def _start_health_prober(self) -> None:
        """``GET /health`` of the router and of each replica into health.jsonl, for a ``health_truth`` check."""
        if not any(c.kind == "health_truth" for c in self.drill.checks):
            return
        info = self.target_info
        endpoints = {"router": info.base_url.rstrip("/") + "/health"}
        endpoints.update({r.name: (r.direct_url or r.url).rstrip("/") + "/health" for r in info.replicas})
        self.health = HealthProber(endpoints, self.rundir.file(HEALTH_FILE), self.drill.metrics.interval / 2).start()

    def _start_load(self) -> None:
        plan = LoadPlan(
            scenario=self.loaded.scenario,
            target_url=self.target_info.base_url,
            model=self.target_info.model or self.loaded.scenario.model,
            duration_s=self.timeline.load_length_s,
            run_dir=self.rundir.path,
            seed=self.drill.seed,
            workers=self.options.workers,
            progress=self.options.progress,
            headers=self._headers(),
            control_ids=tuple(self._control_ids()),
            capture_outputs=any(c.kind == "output_correctness" for c in self.drill.checks),
            repeat_of=self._golden_repeats(),
            keep_text=self.drill.report.include_text,
            # token-exact prompts: the embedded stack keeps its one-token-per-word rule unless the scenario asks
            tokenizer=self.loaded.scenario.tokenizer or ("words" if self.target_info.kind == "embedded" else "server"),
        )
        generator, self.generator = self.generator, None
        self.load = LoadDriver(plan, generator)
        self.load.start()
        fit = self.load.prompt_fit
        assert fit is not None  # start() fits the prompts
        self.journal.write(Event.NOTE, message=fit.describe(), summary=fit.summary())
        self.monitor = StopMonitor(
            list(self.drill.stop_conditions),
            self.rundir.file("requests.jsonl"),
            self.scraper.readings if self.scraper else dict,
            self.started_mono,
            self._warn,
        )
        info = self.target_info.model_copy(
            update={"capabilities": self.target_info.capabilities | {Capability.LOAD_CONTROL}}
        )
        self.faults = FaultRunner(
            self.loaded,
            info,
            self.timeline,
            RevertStack(self.journal),
            self.journal,
            self.guard,
            self.listeners,
            self.load.control,
        )
        self.faults.resolve_all()

    def _stop_load(self) -> None:
        if self.load is not None:
            load, self.load = self.load, None
            summary = load.stop(drain_s=self.options.drain_s)
            self.journal.write(Event.NOTE, message="load stopped", summary=_dump(summary))

    # --- phases -----------------------------------------------------------------------------------

    def _phase_started(self, phase: Phase, planned_s: float | None) -> None:
        self.journal.write(Event.PHASE_STARTED, phase=phase.value, planned_s=planned_s)
        self.listeners.fire(ListenerEvent.PHASE_STARTED, phase=phase.value, planned_s=planned_s)

    def _phase_ended(self, phase: Phase, elapsed_s: float, **extra: object) -> None:
        self.journal.write(Event.PHASE_ENDED, phase=phase.value, elapsed_s=round(elapsed_s, 3), **extra)
        self.listeners.fire(ListenerEvent.PHASE_ENDED, phase=phase.value, elapsed_s=elapsed_s)

    def _timed_phase(self, phase: Phase, length_s: float) -> None:
        if length_s <= 0:
            return
        self._phase_started(phase, length_s)
        start = time.monotonic()
        end = start + length_s
        while (now := time.monotonic()) < end:
            self._poll_stop(fault_phase=False)
            self.listeners.fire(ListenerEvent.TICK, phase=phase.value, elapsed_s=now - start)
            time.sleep(min(TICK_S, end - now))
        self._phase_ended(phase, time.monotonic() - start)

    def _fault_phase(self) -> None:
        length = self.drill.phases.fault
        faults = self.faults
        if length <= 0:
            return
        assert faults is not None  # _start_load resolved them
        self._phase_started(Phase.FAULT, length)
        start = time.monotonic()
        end = start + length
        trigger = None
        while (now := time.monotonic()) < end and trigger is None:
            faults.inject_and_revert_due(now - start)
            trigger = self._poll_stop(fault_phase=True)
            self.listeners.fire(ListenerEvent.TICK, phase=Phase.FAULT.value, elapsed_s=now - start)
            time.sleep(max(0.0, min(TICK_S, end - time.monotonic(), faults.next_event_in(now - start))))
        faults.revert_all("fault phase ended" if trigger is None else "stop condition")
        extra = {"stopped_by": trigger.condition.label(), "planned_s": length} if trigger else {}
        self._phase_ended(Phase.FAULT, time.monotonic() - start, **extra)

    def _poll_stop(self, fault_phase: bool) -> StopTrigger | None:
        if self.monitor is None:
            return None
        trigger = self.monitor.poll(fault_phase=fault_phase)
        if trigger is None:
            return None
        label = trigger.condition.label()
        self.result.stopped_by = label
        self.journal.write(
            Event.STOP_CONDITION, condition=label, kind=trigger.condition.kind.value, observed=trigger.observed
        )
        self.listeners.fire(ListenerEvent.STOP_CONDITION, label=label, observed=trigger.observed)
        if trigger.condition.kind is StopKind.MAX_DURATION:
            self._run_stopped = True
            raise _DrillStopped()
        return trigger

    def _control_ids(self) -> list[str]:
        """The baseline requests whose output the load generator digests: the replay's control candidates."""
        spec = self.drill.phases.replay
        slot = next((s for s in self.timeline.phases if s.phase is Phase.BASELINE), None)
        if not spec.enabled or slot is None:
            return []
        end_s = slot.end_s
        assert end_s is not None  # the baseline is a timed phase
        seed = self.drill.seed if spec.seed is None else spec.seed
        return choose_control_ids(
            self.loaded.scenario,
            self.timeline.load_length_s,
            self.drill.seed,
            (slot.start_s, end_s),
            spec.controls,
            sample_seed=seed,
        )

    def _golden_repeats(self) -> dict[str, str]:
        """Later requests that re-send baseline bodies, as golden controls for an ``output_correctness`` check."""
        checks = [c for c in self.drill.checks if c.kind == "output_correctness"]
        share = max((float(c.params.get("control_share", 0.25)) for c in checks), default=0.0)
        slot = next((s for s in self.timeline.phases if s.phase is Phase.BASELINE), None)
        if slot is None or share <= 0:
            return {}
        assert slot.end_s is not None  # the baseline is a timed phase
        window = (slot.start_s, slot.end_s)
        return choose_repeats(self.loaded.scenario, self.timeline.load_length_s, self.drill.seed, window, share)

    def _replay_phase(self) -> None:
        """After recovery: the original failing requests and the baseline controls, at the baseline's rate."""
        spec = self.drill.phases.replay
        fit = read_fit(self.rundir.path)
        evidence = RunEvidence(self.rundir.path)
        window = evidence.phases.get(Phase.BASELINE.value)
        baseline = (window.start_ts, window.end_ts) if window is not None else None
        rate = spec.rate or (baseline_rate(evidence.requests, baseline) if baseline else None)
        plan = ReplayPlan(
            target_url=self.target_info.base_url,
            timeout_s=spec.timeout,
            concurrency=spec.concurrency,
            max_samples=spec.max_samples,
            controls=spec.controls,
            seed=self.drill.seed if spec.seed is None else spec.seed,
            rate=rate,
            repetitions=spec.repetitions,
            headers=self._headers(),
        )
        recovery = self._wait_for_recovery(evidence)
        self._phase_started(Phase.REPLAY, None)
        start = time.monotonic()
        summary = replay_after_recovery(
            self.rundir.file("failing_samples.jsonl"),
            evidence.requests,
            self.rundir.file("replay.jsonl"),
            plan,
            scenario=self.loaded.scenario,
            model=self.target_info.model or self.loaded.scenario.model or "",
            load_seed=self.drill.seed,
            baseline_ts=baseline,
            prompt_shapes=fit.shapes if fit is not None else None,
        )
        self._phase_ended(
            Phase.REPLAY, time.monotonic() - start, summary={**_dump(summary), "recovery": recovery.summary()}
        )

    def _wait_for_recovery(self, evidence: RunEvidence) -> RecoveryWait:
        """Hold the replay until recovery is observed, up to ``phases.replay.wait_for_recovery`` (journaled)."""
        interval = self.drill.metrics.interval
        readings = self.scraper.readings if self.scraper is not None else dict
        wait = wait_for_recovery(
            recovery_band(evidence),
            recent_error_rate(evidence, RECENT_WINDOW_S),
            lambda: live_queue_depth(readings()),
            max_wait_s=self.drill.phases.replay.wait_for_recovery,
            hold_s=2 * interval,
            poll_s=min(0.5, interval),
        )
        how = _recovery_outcome(wait)
        self.journal.write(
            Event.NOTE,
            message=f"replay starts {wait.waited_s:.1f}s after the load stopped: {how} ({wait.reason})",
            summary=wait.summary(),
        )
        return wait

    # --- verdicts ---------------------------------------------------------------------------------

    def _evaluate(self) -> None:
        evidence = RunEvidence(self.rundir.path)  # SLOs and params as resolved.json has them, like `drill judge`
        self.result.verdicts = evaluate_checks(self.loaded, evidence)
        write_verdicts(self.rundir, self.loaded, self.result, evidence)

    def _render_reports(self) -> None:
        """``report.md`` and ``report.html`` from the finished run directory; a broken report never breaks the run.

        Rendered after ``run_finished`` is journaled, so the report shows the whole journal and ``drill report``
        renders the same bytes later.
        """
        try:
            self.result.reports = render.write_reports(self.rundir.path)
        except Exception as exc:  # noqa: BLE001 - the run's evidence and verdicts stand without a report
            log.error("rendering the report failed: %s", exc)
            self.journal.write(
                Event.NOTE,
                message=f"report not rendered: {type(exc).__name__}: {exc} (`drill report RUN_DIR` renders it again)",
            )

    def _listener_failed(self, name: str, event: str, exc: BaseException) -> None:
        if self.journal is not None:
            self.journal.write(
                Event.LISTENER_ERROR, listener=name, event_name=event, error=f"{type(exc).__name__}: {exc}"
            )

    def _signal_received(self, name: str) -> None:
        if self.journal is not None:
            self.journal.write(Event.SIGNAL, signal=name)


def _recovery_outcome(wait: RecoveryWait) -> str:
    if wait.observed:
        return "recovery observed"
    if wait.queue_held:
        return "recovery not observed (the errors at the recovery phase's end were out of band)"
    return f"recovery not observed, gave up waiting after {wait.max_wait_s:g}s"


def resolved_inputs(loaded: LoadedDrill) -> dict:
    """The drill as resolved (file, overrides, time scale, validated params): ``resolved.json`` before redaction."""
    return {
        "drill_file": str(loaded.path),
        "overrides": list(loaded.overrides),
        "time_scale": loaded.time_scale,
        "drill": loaded.drill.model_dump(mode="json", by_alias=True),
        "scenario_file": str(loaded.scenario_path) if loaded.scenario_path else None,
        "scenario": loaded.scenario.model_dump(mode="json", by_alias=True),
        "target_params": _dump(loaded.target_params),
        "fault_params": [_dump(p) for p in loaded.fault_params],
        "check_params": [_dump(p) for p in loaded.check_params],
    }


def _dump(value: object) -> Any:  # JSON-shaped: a dict for a model or a dataclass, else the value itself
    if value is None:
        return None
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True)
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return value
