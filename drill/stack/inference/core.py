"""The engine loop of one replica: schedule → execute → sleep out the step → apply, in real time.

Started by the replica (:meth:`Engine.run` as an asyncio task); the API layer calls
:meth:`Engine.add_request` and :meth:`Engine.abort_request`; the admin API changes
:attr:`Engine.gpu` and calls :meth:`Engine.stall` / :meth:`Engine.kill`.

Real time: each step has a scheduled window ``[start, start + duration]`` on the loop's monotonic
clock, where ``duration`` is the cost model's step time plus the interconnect's excess
(stack-contracts.md §8) and ``start`` is the previous step's *scheduled* end when the engine is
busy (so an overshoot is paid back by the next step instead of accumulating; debts over 50 ms are
forgiven) or *now* after idling. The loop sleeps until the scheduled end, aiming early by the
recent mean wake-up overshoot, then applies the step's outputs. The lateness of each step's
actual end over its scheduled end is kept (:class:`StepTimer`; p50/p99 in ``/admin/state``).
TTFT and TPOT a client measures are therefore real latencies.

On :class:`EngineDeadError` (simulated CUDA OOM, XID, broken link) every unfinished request gets
its error (HTTP 500 or a mid-stream error event), :attr:`dead` is set and the loop returns; the
replica then exits non-zero (docs/serving-facts.md §4 "Engine death").
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from drill.stack.inference.exceptions import AdmissionRefused, EngineDeadError
from drill.stack.inference.executor import Executor
from drill.stack.inference.gpu import GpuState
from drill.stack.inference.request import Request, RequestStatus
from drill.stack.inference.sched_output import EngineCoreOutput, SchedulerOutput
from drill.stack.inference.scheduler import Scheduler
from drill.stack.interconnect.step_exchange import Interconnect, NoopInterconnect

__all__ = ["Engine", "EngineListener", "StepTimer", "StepRecord"]

log = logging.getLogger(__name__)

MAX_CATCH_UP_S = 0.05
_IDLE_POLL_S = 0.05
_BLOCKED_RETRY_S = 0.005


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One finished step, for listeners: its batch, outputs and timing (seconds)."""

    out: SchedulerOutput
    outputs: list[EngineCoreOutput]
    scheduled_s: float
    lateness_s: float
    end_time: float


class EngineListener(Protocol):
    """Observes the engine (metrics, ledger, tracing); called synchronously from the loop."""

    def request_finished(self, request: Request) -> None:
        """A request finished for any reason (stop, length, abort, error, queue timeout)."""

    def step_finished(self, record: StepRecord) -> None:
        """A step's outputs were applied."""


class StepTimer:
    """Scheduled-versus-actual step timing over the last ``window`` steps."""

    def __init__(self, window: int = 20_000) -> None:
        self.lateness: deque[float] = deque(maxlen=window)
        self.scheduled: deque[float] = deque(maxlen=window)
        self.steps = 0
        self.wake_bias = 0.0  # how early to aim: recent mean overshoot of the wake-up, seconds

    def record(self, lateness_s: float, overshoot_s: float, scheduled_s: float = 0.0) -> None:
        """Keep one step's lateness (actual − scheduled end, s) and length; learn the wake-up overshoot."""
        self.steps += 1
        self.lateness.append(lateness_s)
        self.scheduled.append(scheduled_s)
        self.wake_bias = min(0.002, max(0.0, 0.95 * self.wake_bias + 0.05 * overshoot_s))

    def percentiles_ms(self, last: int | None = None) -> dict[str, float]:
        """|lateness| p50/p99/max and the mean scheduled step length over the last ``last`` steps, in ms."""
        count = len(self.lateness) if last is None else max(0, min(last, len(self.lateness)))
        if count == 0:
            return {"steps": 0, "p50": 0.0, "p99": 0.0, "max": 0.0, "mean_step": 0.0}
        window = list(self.lateness)[-count:]
        values = sorted(abs(value) for value in window)
        pick = lambda q: values[min(count - 1, int(q * count))] * 1e3  # noqa: E731
        mean_step = sum(list(self.scheduled)[-count:]) / count * 1e3
        return {"steps": count, "p50": pick(0.50), "p99": pick(0.99), "max": values[-1] * 1e3, "mean_step": mean_step}


class Engine:
    """One replica's engine core: a scheduler and an executor driven by an asyncio loop."""

    def __init__(
        self,
        scheduler: Scheduler,
        executor: Executor,
        *,
        interconnect: Interconnect | None = None,
        listeners: Sequence[EngineListener] = (),
    ) -> None:
        self.scheduler = scheduler
        self.executor = executor
        self.interconnect = interconnect or NoopInterconnect()
        self._talks = not isinstance(self.interconnect, NoopInterconnect)
        self.listeners = list(listeners)
        self.timer = StepTimer()
        self.dead: EngineDeadError | None = None
        self.dead_event = asyncio.Event()
        self._wakeup = asyncio.Event()
        self._next_start: float | None = None

    def set_interconnect(self, interconnect: Interconnect) -> None:
        """Use ``interconnect`` for the steps' TP/PP communication (called once, before :meth:`run`)."""
        self.interconnect = interconnect
        self._talks = not isinstance(interconnect, NoopInterconnect)

    @property
    def gpu(self) -> GpuState:
        return self.executor.gpu

    @property
    def alive(self) -> bool:
        return self.dead is None

    # called by the API and admin layers --------------------------------------------------------
    def add_request(self, request: Request) -> None:
        """Queue a request. Raises AdmissionRefused (503) or EngineDeadError when the engine is dead."""
        if self.dead is not None:
            raise self.dead
        self.scheduler.add_request(request)
        self._wakeup.set()

    def check_admission(self, request: Request) -> None:
        """Raise what :meth:`add_request` would (AdmissionRefused, EngineDeadError) without queueing: vLLM's
        early check before the response starts; it reserves nothing, so add_request checks again."""
        if self.dead is not None:
            raise self.dead
        self.scheduler.check_admission(request.num_prompt_tokens)

    def abort_request(self, request: Request) -> None:
        """Abort a request whose client went away (finish reason ``abort``) wherever it is — waiting, in its
        prefill or decoding — freeing its KV blocks at once, as vLLM's ``AsyncLLM.abort`` does; a step that is
        running drops its output (:meth:`Scheduler.update_from_output`). No-op when already finished."""
        if request.is_finished:
            return
        request.aborted_in = request.phase
        self.scheduler.finish_request(request, RequestStatus.FINISHED_ABORTED)
        self._notify_finished(request)

    def stall(self, seconds: float) -> None:
        """Take no step for ``seconds`` (0 resumes at once). HTTP keeps answering."""
        now = asyncio.get_running_loop().time()
        self.gpu.stall_until = now + seconds if seconds > 0 else None
        self._wakeup.set()

    def kill(self, error: EngineDeadError) -> None:
        """Make the engine die now with ``error`` (used for XID errors)."""
        self._die(error)
        self._wakeup.set()

    # the loop ----------------------------------------------------------------------------------
    async def run(self) -> None:
        """Run steps until the engine dies or the task is cancelled."""
        try:
            while self.dead is None:
                if not await self._ready_for_step():
                    continue
                await self._step()
        except EngineDeadError as error:
            self._die(error)
        except Exception as exc:  # a bug in the simulator must still fail requests, not hang them
            log.exception("engine loop crashed")
            self._die(EngineDeadError(f"internal error in the simulated engine: {exc!r}"))

    async def _ready_for_step(self) -> bool:
        """Wait while stalled or idle; expire queued requests. True when a step should run now."""
        loop = asyncio.get_running_loop()
        self._expire_waiting()
        stall_until = self.gpu.stall_until
        if stall_until is not None:
            if loop.time() < stall_until:
                await self._wait(min(_IDLE_POLL_S, stall_until - loop.time()))
                return False
            self.gpu.stall_until = None
        if not self.scheduler.has_unfinished_requests():
            self._next_start = None
            await self._wait(_IDLE_POLL_S if self.scheduler.config.max_queue_wait else None)
            return False
        return self.dead is None

    async def _wait(self, timeout: float | None) -> None:
        self._wakeup.clear()
        try:
            await asyncio.wait_for(self._wakeup.wait(), timeout)
        except TimeoutError:
            pass

    async def _step(self) -> None:
        loop = asyncio.get_running_loop()
        self.gpu.check_step_memory(1)  # a hog past the KV cache leaves no room for any step: CUDA OOM
        out = self.scheduler.schedule()
        if out.is_empty:  # nothing fits (e.g. the KV cache is taken by another process)
            self._next_start = None
            await self._wait(_BLOCKED_RETRY_S)
            return
        now = loop.time()
        start = self._next_start if self._next_start is not None and now - self._next_start < MAX_CATCH_UP_S else now
        runner = self.executor.execute_model(out)
        excess = await self._exchange(out) if self._talks else 0.0
        scheduled = runner.cost.total_s + excess
        deadline = start + scheduled
        target = deadline - self.timer.wake_bias
        delay = target - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        end = loop.time()
        self.timer.record(end - deadline, end - target if delay > 0 else 0.0, scheduled)
        self._next_start = deadline
        if self.dead is not None:
            return
        outputs = self.scheduler.update_from_output(out, runner, end)
        self._deliver(outputs)
        record = StepRecord(out, outputs, scheduled, end - deadline, end)
        for listener in self.listeners:
            listener.step_finished(record)

    async def _exchange(self, out: SchedulerOutput) -> float:
        plan = self.executor.cost_model.exchange_plan(out.total_num_scheduled_tokens)
        try:
            return max(0.0, await self.interconnect.exchange(plan))
        except (ConnectionError, OSError) as exc:
            raise EngineDeadError(f"RuntimeError: Worker proc VllmWorker-1 died unexpectedly ({exc})") from exc

    def _deliver(self, outputs: list[EngineCoreOutput]) -> None:
        for output in outputs:
            request = output.request
            if request.sink is not None:
                request.sink.on_tokens(request, output.new_token_ids, output.finished)
            if output.finished:
                self._notify_finished(request)

    def _expire_waiting(self) -> None:
        for request in self.scheduler.expire_waiting():
            if request.sink is not None:
                request.sink.on_error(
                    request,
                    503,
                    _queue_timeout_message(self.scheduler.config.max_queue_wait),
                    AdmissionRefused.error_type,
                )
            self._notify_finished(request)

    def _die(self, error: EngineDeadError) -> None:
        if self.dead is not None:
            return
        self.dead = error
        log.error("engine core died: %s", error.cause)
        for request in list(self.scheduler.requests.values()):
            self.scheduler.finish_request(request, RequestStatus.FINISHED_ERROR)
            if request.sink is not None:
                request.sink.on_error(request, 500, EngineDeadError.CLIENT_MESSAGE, "InternalServerError")
            self._notify_finished(request)
        self.dead_event.set()

    def _notify_finished(self, request: Request) -> None:
        for listener in self.listeners:
            try:
                listener.request_finished(request)
            except Exception:  # a listener must not break the engine
                log.exception("listener failed on request %s", request.request_id)


def _queue_timeout_message(limit: float | None) -> str:
    return (
        f"The request waited longer than max_queue_wait ({limit:g}s) in the queue and was aborted. "
        "Please try again later or on a different instance."
    )
