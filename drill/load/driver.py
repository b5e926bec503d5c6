"""The load driver as the harness sees it: start open-loop load in a child process, steer it, stop it.

Called by the runner (and ``drill load``) in the harness process, which never
imports Locust: :class:`LoadDriver` spawns ``python -m drill.load.child.locustfile``
(one local Locust runner, or a master with ``workers`` worker processes), hands
it a :class:`~drill.load.control.GeneratorPlan` over a socketpair, and reads its
status. Records are appended by the child to ``requests.jsonl`` and
``failing_samples.jsonl`` in ``run_dir`` while the run goes. The child watches
this process: if it dies, even by SIGKILL, the control socket reaches EOF and
the load stops within a fraction of a second.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from drill.api import LoadControl
from drill.errors import DrillError, InputError, LoadError
from drill.load.control import Channel, GeneratorPlan, Msg
from drill.load.live_status import LiveProgress
from drill.load.replay import ReplaySummary, replay_failing
from drill.load.schedule import Schedule, build_schedule
from drill.load.tokenizing import FITTED_PROMPTS_FILE, PromptFit, PromptPlan, TokenizerChoice, plan_prompts
from drill.spec.scenario import Scenario

if TYPE_CHECKING:
    from drill.load.live_status import LiveProgress

__all__ = [
    "LoadDriver",
    "LoadPlan",
    "LoadSummary",
    "ReplaySummary",
    "SpawnedGenerator",
    "replay_failing",
    "resolve_model",
    "spawn_generator",
]

_LOG_NAME = "load-driver.log"
_STOP_MARGIN_S = 30.0


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadPlan:
    """What to run: the scenario against ``target_url`` for ``duration_s`` seconds of arrivals."""

    scenario: Scenario
    target_url: str  # base URL, e.g. http://127.0.0.1:8000 (OpenAI-compatible)
    model: str | None  # None: scenario.model, else the first of GET /v1/models
    duration_s: float  # how long arrivals run (the runner may stop earlier)
    run_dir: Path  # requests.jsonl and failing_samples.jsonl are appended here
    seed: int
    workers: int = 0  # 0: one local Locust runner in one child process; N: master + N worker processes
    progress: bool = False  # the rich live status line (on a TTY)
    headers: dict[str, str] = field(default_factory=dict)  # extra headers, e.g. Authorization
    expect_remote_workers: int = 0  # also wait for this many `drill worker --master HOST:PORT` processes
    master_bind: str = "127.0.0.1:0"  # where the master listens for workers (0: a free port)
    control_ids: tuple[str, ...] = ()  # logical ids whose output is digested (the recovery replay's controls)
    capture_outputs: bool = False  # digest every temperature-0 answer too, with its first tokens (output_correctness)
    keep_text: bool = False  # keep those first tokens as text (the drill's report.include_text), else digests
    repeat_of: dict[str, str] = field(default_factory=dict)  # later requests that re-send baseline bodies
    #: ``server``, ``words`` or ``file:<path>`` (drill.load.tokenizing); None: the scenario's, else ``server``.
    tokenizer: str | None = None


@dataclass(frozen=True)
class LoadSummary:
    """What the load generator did, from its own counters (latencies: see :mod:`drill.load.summary`)."""

    duration_s: float  # planned arrival window (s)
    elapsed_s: float  # from the run's start to the stop command (s)
    scheduled: int  # arrivals planned in the window
    due: int  # arrivals whose intended time came before the stop (drops included)
    sent: int  # logical requests sent (first attempts)
    attempts: int  # attempts sent, retries included
    ok: int  # logical requests that succeeded (possibly after retries)
    client_drops: int  # arrivals dropped at max_in_flight, never sent
    cancelled: int  # attempts cancelled when the drain period ran out
    errors: dict[str, int]  # attempts by error class
    records_written: int  # lines appended to requests.jsonl
    failing_samples: int  # lines appended to failing_samples.jsonl
    records_lost: int  # records made by a generator that never reached the file (should be 0)
    target_rate: float  # due / elapsed (requests/s offered by the schedule)
    achieved_rate: float  # sent / elapsed (requests/s actually sent)
    workers: int  # 0: local runner
    bursts: dict[str, dict] = field(default_factory=dict)
    #: Messages from the generator that could not be read (first few, with why); their content is lost.
    unreadable_messages: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return asdict(self)

    def shortfall(self) -> str | None:
        """Why fewer requests went out than the schedule planned, or None when every planned arrival was sent.

        An arrival is missing when its time never came before the stop (the load stopped early: Ctrl-C, the
        generator died or fell behind), or it came and was dropped at ``max_in_flight``. Either way the run offered
        less load than its plan, and a verdict on it judges a lighter load than the drill describes.
        """
        never_due = max(0, self.scheduled - self.due)
        if never_due == 0 and self.client_drops == 0:
            return None
        why = []
        if never_due:
            why.append(
                f"{never_due} never came due (the load stopped {self.elapsed_s:.1f} s into its "
                f"{self.duration_s:.1f} s window)"
            )
        if self.client_drops:
            why.append(f"{self.client_drops} dropped at max_in_flight")
        return f"sent fewer requests than planned: {self.sent} of {self.scheduled} planned arrivals; " + ", ".join(why)

    @classmethod
    def from_child(cls, data: dict, duration_s: float, scheduled: int, unreadable: tuple[str, ...] = ()) -> LoadSummary:
        c = data.get("counters") or {}
        elapsed = max(1e-9, min(float(data.get("elapsed_s", duration_s)), duration_s))
        return cls(
            duration_s=duration_s,
            elapsed_s=float(data.get("elapsed_s", 0.0)),
            scheduled=scheduled,
            due=int(c.get("due", 0)),
            sent=int(c.get("sent", 0)),
            attempts=int(c.get("attempts", 0)),
            ok=int(c.get("ok", 0)),
            client_drops=int(c.get("dropped", 0)),
            cancelled=int(data.get("cancelled", 0)),
            errors={k: int(v) for k, v in (c.get("errors") or {}).items()},
            records_written=int(data.get("records_written", 0)),
            failing_samples=int(data.get("samples_written", 0)),
            records_lost=int(data.get("records_lost", 0)),
            target_rate=round(int(c.get("due", 0)) / elapsed, 3),
            achieved_rate=round(int(c.get("sent", 0)) / elapsed, 3),
            workers=int(data.get("workers", 0)),
            bursts=dict(data.get("bursts") or {}),
            unreadable_messages=unreadable,
        )


def resolve_model(target_url: str, headers: dict[str, str], timeout_s: float = 10.0) -> str:
    """The first model id of ``GET /v1/models``; raises LoadError when there is none or no answer."""
    url = target_url.rstrip("/") + "/v1/models"
    try:
        response = httpx.get(url, headers=headers, timeout=timeout_s)
        response.raise_for_status()
        models = response.json().get("data") or []
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        raise LoadError(
            f"cannot list the target's models at {url}: {exc}",
            hint="set 'model:' in the scenario or pass the model explicitly",
        ) from exc
    if not models:
        raise LoadError(f"{url} lists no models", hint="set 'model:' in the scenario")
    return str(models[0]["id"])


@dataclass
class SpawnedGenerator:
    """A load generator process started before its plan: it imports Locust (about 1 s) while the target starts,
    and waits for the plan on its control channel. :class:`LoadDriver` takes it over; one never taken is closed,
    and the process, finding its channel closed before a plan came, exits."""

    proc: subprocess.Popen
    channel: Channel
    run_dir: Path

    def usable(self, run_dir: Path) -> bool:
        """Still waiting for a plan, and logging into ``run_dir``."""
        return self.proc.poll() is None and self.run_dir == run_dir

    def close(self) -> None:
        """Close the channel (the process exits on it) and reap the process, killing it after 5 s."""
        self.channel.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def spawn_generator(run_dir: Path) -> SpawnedGenerator:
    """Start ``python -m drill.load.child.locustfile``, logging into ``run_dir``'s ``load-driver.log``; it waits
    for a plan (:meth:`LoadDriver.start`). Raises LoadError when the process cannot start."""
    run_dir.mkdir(parents=True, exist_ok=True)
    ours, theirs = socket.socketpair()
    cmd = [
        sys.executable,
        "-m",
        "drill.load.child.locustfile",
        "--control-fd",
        str(theirs.fileno()),
        "--parent-pid",
        str(os.getpid()),
    ]
    try:
        with open(run_dir / _LOG_NAME, "ab") as log:
            proc = subprocess.Popen(
                cmd,
                pass_fds=(theirs.fileno(),),
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
    except OSError as exc:
        ours.close()
        raise LoadError(f"cannot start the load generator ({cmd[0]}): {exc}") from exc
    finally:
        theirs.close()
    return SpawnedGenerator(proc, Channel(ours), run_dir)


class LoadDriver:
    """One load run: ``start``, optional bursts through ``control``, ``stop``.

    ``generator``: a process :func:`spawn_generator` started ahead (the runner starts it beside the target); the
    driver takes it over at :meth:`start` when it is still waiting for a plan in the plan's run directory, else it
    closes it and spawns its own.
    """

    def __init__(self, plan: LoadPlan, generator: SpawnedGenerator | None = None) -> None:
        self.plan = plan
        self._generator = generator
        self._proc: subprocess.Popen | None = None
        self._channel: Channel | None = None
        self._ready = threading.Event()
        self._finished = threading.Event()
        self._replies: dict[str, dict] = {}
        self._reply_cond = threading.Condition()
        self._ready_info: dict = {}
        self._status: dict = {}
        self._summary_data: dict | None = None
        self._error: str | None = None
        self._summary: LoadSummary | None = None
        self._unreadable: list[str] = []  # control messages that were not JSON objects, counted and described
        self._closing = False
        self._scheduled = 0
        self.prompt_fit: PromptFit | None = None  # set by start(): how the prompts were fitted
        self._progress: LiveProgress | None = None
        self._control = _Control(self)

    # ------------------------------------------------------------------ start
    def start(self, timeout_s: float = 60) -> None:
        """Spawn the load generator and return once its arrivals are scheduled and running.

        Raises InputError for a scenario that cannot be scheduled and LoadError when
        the model cannot be resolved or the child fails or takes over ``timeout_s`` s.
        """
        if self._proc is not None:
            raise LoadError("this LoadDriver was already started; make a new one per run")
        plan = self.plan
        plan.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            model = plan.model or plan.scenario.model or resolve_model(plan.target_url, plan.headers)
            schedule = build_schedule(plan.scenario, plan.duration_s, plan.seed)
            self._scheduled = len(schedule.requests)
            self.prompt_fit = self._fit_prompts(model, schedule)
        except BaseException:
            if self._generator is not None:
                self._generator.close()
                self._generator = None
            raise
        wire = GeneratorPlan(
            scenario=plan.scenario.model_dump(mode="json", by_alias=True),
            target_url=plan.target_url,
            model=model,
            duration_s=plan.duration_s,
            seed=plan.seed,
            run_nonce=uuid.uuid4().hex[:12],
            run_dir=str(plan.run_dir),
            workers=plan.workers,
            expect_remote_workers=plan.expect_remote_workers,
            master_bind=plan.master_bind,
            headers=dict(plan.headers),
            control_ids=list(plan.control_ids),
            capture_outputs=plan.capture_outputs,
            keep_text=plan.keep_text,
            repeat_of=dict(plan.repeat_of),
            prompts_file=str(plan.run_dir / FITTED_PROMPTS_FILE) if self.prompt_fit.fitted else None,
        )
        self._spawn(wire)
        self._await_ready(timeout_s)
        if plan.progress:
            self._start_progress()

    def _fit_prompts(self, model: str, schedule: Schedule) -> PromptFit:
        """Token-exact prompts for the schedule (plan time, before the generator starts); see drill.load.tokenizing."""
        plan = self.plan
        choice = TokenizerChoice.parse(plan.tokenizer or plan.scenario.tokenizer or "server")
        requests = [(r.logical_id, r.pool, r.input_tokens) for r in schedule.requests]
        fit = plan_prompts(
            PromptPlan(plan.scenario, choice, plan.target_url, model, plan.headers, requests, plan.seed, plan.run_dir)
        )
        log.info("%s", fit.describe())
        return fit

    def _spawn(self, wire: GeneratorPlan) -> None:
        generator, self._generator = self._generator, None
        if generator is not None and not generator.usable(self.plan.run_dir):
            generator.close()
            generator = None
        if generator is None:
            generator = spawn_generator(self.plan.run_dir)
        self._proc, self._channel = generator.proc, generator.channel
        self._channel.send(Msg.PLAN, plan=wire.to_dict())
        threading.Thread(target=self._read_loop, name="drill-load-control", daemon=True).start()

    def _await_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.05):
            if self._error is not None or self._finished.is_set() or time.monotonic() > deadline:
                why = self._error or ("it exited" if self._finished.is_set() else f"no answer within {timeout_s:g}s")
                why += self._unreadable_note()
                self._kill()
                raise LoadError(f"the load generator did not start: {why}", hint=self._log_hint())

    def _read_loop(self) -> None:
        """Dispatch the generator's messages. A line that is not a JSON object is counted and described
        (it reaches the summary and any error), then reading goes on; a broken channel is the error."""
        channel = self._channel
        assert channel is not None  # start() opens the channel before it starts this thread
        try:
            while True:
                try:
                    msg = channel.recv()
                except ValueError as exc:
                    self._unreadable_message(f"not JSON ({exc})")
                    continue
                if msg is None:
                    break
                if isinstance(msg, dict):
                    self._dispatch(msg)
                else:
                    self._unreadable_message(f"a JSON {type(msg).__name__}, not an object")
        except OSError as exc:
            if not self._closing and self._error is None:
                self._error = f"the control channel from the load generator broke: {exc}"
        finally:
            self._finished.set()
            with self._reply_cond:
                self._reply_cond.notify_all()

    def _unreadable_message(self, why: str) -> None:
        self._unreadable.append(why)
        log.warning("unreadable message %d from the load generator: %s", len(self._unreadable), why)

    def _unreadable_note(self) -> str:
        if not self._unreadable:
            return ""
        return (
            f"; {len(self._unreadable)} message(s) from the generator could not be read (first: {self._unreadable[0]})"
        )

    def _dispatch(self, msg: dict) -> None:
        kind = msg.pop("type", None)
        if kind == Msg.READY.value:
            self._ready_info = msg
            self._ready.set()
        elif kind == Msg.STATUS.value:
            self._status = msg
        elif kind == Msg.ERROR.value:
            self._error = str(msg.get("message"))
        elif kind == Msg.SUMMARY.value:
            self._summary_data = msg
        elif kind == Msg.REPLY.value:
            with self._reply_cond:
                self._replies[str(msg.get("id"))] = msg.get("value") or {}
                self._reply_cond.notify_all()

    # ---------------------------------------------------------------- running
    @property
    def control(self) -> LoadControl:
        """Bursts for the ``queue_flood`` fault."""
        return self._control

    def alive(self) -> bool:
        """Whether the generator process is running and has not finished."""
        return self._proc is not None and self._proc.poll() is None and self._summary_data is None

    def status(self) -> dict:
        """The child's latest counters (``{"counters": {...}, "bursts": {...}, "offset_s": s}``)."""
        return dict(self._status)

    @property
    def t0(self) -> float | None:
        """The run's start (UNIX s): offset 0 of the schedule."""
        return self._ready_info.get("t0")

    def send(self, kind: Msg, **data: object) -> None:
        if not self.alive() or self._channel is None:
            raise LoadError("the load generator is not running", hint=self._log_hint())
        try:
            self._channel.send(kind, **data)
        except OSError as exc:
            raise LoadError(f"the load generator's control channel failed: {exc}", hint=self._log_hint()) from exc

    def request(self, kind: Msg, timeout_s: float = 5.0, **data: object) -> dict:
        """Send a command and wait for its reply; raises LoadError on timeout."""
        request_id = uuid.uuid4().hex[:8]
        self.send(kind, id=request_id, **data)
        deadline = time.monotonic() + timeout_s
        with self._reply_cond:
            while request_id not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or self._finished.is_set():
                    raise LoadError(f"the load generator did not answer {kind.value} within {timeout_s:g}s")
                self._reply_cond.wait(left)
            return self._replies.pop(request_id)

    # ------------------------------------------------------------------- stop
    def stop(self, drain_s: float = 30) -> LoadSummary:
        """Stop new arrivals, let in-flight requests finish for up to ``drain_s`` s, cancel the rest.

        Returns once the child has flushed its records and exited. Idempotent.
        Raises LoadError if the generator died before it could report.
        """
        if self._summary is not None:
            return self._summary
        self._stop_progress()
        try:
            if self.alive():
                self.send(Msg.STOP, drain_s=drain_s)
                self._await_summary(drain_s + _STOP_MARGIN_S)
        finally:
            self._reap()
        if self._summary_data is None:
            why = f": {self._error}" if self._error else ""
            raise LoadError(
                f"the load generator stopped without a summary{why}{self._unreadable_note()}", hint=self._log_hint()
            )
        self._summary = LoadSummary.from_child(
            self._summary_data,
            self.plan.duration_s,
            self._scheduled,
            tuple(self._unreadable[:20]) + self._more_unreadable(),
        )
        return self._summary

    def _await_summary(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self._summary_data is None and time.monotonic() < deadline:
            if self._finished.wait(0.05) and self._summary_data is None:
                break

    def _more_unreadable(self) -> tuple[str, ...]:
        extra = len(self._unreadable) - 20
        return (f"... and {extra} more",) if extra > 0 else ()

    def _reap(self) -> None:
        if self._proc is None:
            return
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._kill()
        if self._channel is not None:
            self._closing = True
            self._channel.close()

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=10)
        if self._channel is not None:
            self._closing = True
            self._channel.close()

    def _log_hint(self) -> str:
        return f"see {self.plan.run_dir / _LOG_NAME}"

    # --------------------------------------------------------------- progress
    def _start_progress(self) -> None:
        if sys.stderr.isatty():
            self._progress = LiveProgress(self, self.plan.run_dir / "requests.jsonl")
            self._progress.start()

    def _stop_progress(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __enter__(self) -> LoadDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._summary is None:
            try:
                self.stop(drain_s=0)
            except DrillError:
                self._kill()


class _Control(LoadControl):
    """``LoadControl`` over the driver's control channel."""

    def __init__(self, driver: LoadDriver) -> None:
        self.driver = driver

    def start_burst(self, burst_id: str, *, rate_multiplier: float, prompt_multiplier: float, pools: list[str]) -> None:
        known = [p.name for p in self.driver.plan.scenario.pools]
        unknown = [p for p in pools if p not in known]
        if unknown:
            raise InputError(f"burst {burst_id!r} names unknown pools {unknown}; the scenario has {known}")
        if rate_multiplier < 1 or prompt_multiplier <= 0:
            raise InputError(
                f"burst {burst_id!r}: rate_multiplier must be >= 1 and prompt_multiplier > 0, "
                f"got {rate_multiplier:g} and {prompt_multiplier:g}"
            )
        self.driver.send(
            Msg.START_BURST,
            burst_id=burst_id,
            rate_multiplier=rate_multiplier,
            prompt_multiplier=prompt_multiplier,
            pools=list(pools),
        )

    def end_burst(self, burst_id: str) -> None:
        if self.driver.alive():
            self.driver.send(Msg.END_BURST, burst_id=burst_id)

    def burst_status(self, burst_id: str) -> dict[str, float]:
        value = self.driver.request(Msg.BURST_STATUS, burst_id=burst_id)
        return {
            "active": float(value.get("active", 0)),
            "sent": float(value.get("sent", 0)),
            "offered_rate": float(value.get("offered_rate", 0.0)),
        }
