"""Continuous batching over the virtual GPU, laid out like vLLM V1's ``Scheduler``.

Called by the engine loop (:mod:`drill.stack.inference.core`) once per step: :meth:`Scheduler.schedule`
*decides* the batch, the executor runs it, and :meth:`Scheduler.update_from_output` *applies* the
result. Tests drive the same two calls step by step with a fake clock.

Semantics follow docs/serving-facts.md §4 ("Defaults", "Chunked prefill", "Preemption = recompute"):
there is no prefill or decode phase, only each request's ``num_computed_tokens`` catching up with
its ``num_tokens``; a per-step token budget (``max_num_batched_tokens``) is spent on RUNNING requests
first (decodes take 1 token, unfinished prefills a chunk), then on WAITING ones, up to
``max_num_seqs``. When blocks run out, the newest running request (FCFS) or the one with the
largest ``(priority, arrival_time)`` (PRIORITY) is preempted by recompute: its blocks are freed,
``num_computed_tokens`` goes to 0 and it returns to the head of the waiting queue. No waiting
request is admitted in a step that preempted.

Admission control (vLLM ≥ 0.29, §3.2) happens in :meth:`add_request`: ``max_num_queued_reqs`` caps
waiting + running requests (a new one is refused when it would exceed the cap), ``max_num_queued_tokens`` the
prompt tokens of requests still in their prefill (a new one is refused once that backlog has reached the cap, its
own prompt not counted: vLLM's ``AsyncLLM.check_admission``); both refuse at once. ``max_queue_wait`` aborts a
request that was never scheduled once it has waited longer (:meth:`expire_waiting`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from drill.stack.config import EngineConfig, SchedulingPolicy
from drill.stack.inference.cost_model import BatchShape
from drill.stack.inference.exceptions import MaxQueuedTokensError, QueueOverflowError
from drill.stack.inference.kv_cache import KVCacheManager
from drill.stack.inference.request import Request, RequestStatus
from drill.stack.inference.request_queue import create_request_queue
from drill.stack.inference.sched_output import EngineCoreOutput, ModelRunnerOutput, SchedulerOutput

__all__ = ["Scheduler"]


class Scheduler:
    """Waiting and running queues, the token budget, preemption and admission control."""

    def __init__(
        self, config: EngineConfig, kv_cache: KVCacheManager, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self.kv_cache = kv_cache
        self.clock = clock
        self.waiting = create_request_queue(config.scheduling_policy)
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self.num_preemptions = 0  # vllm:num_preemptions_total

    # admission -------------------------------------------------------------------------------
    def add_request(self, request: Request) -> None:
        """Queue a validated request. Raises :class:`AdmissionRefused` when a bounded queue is full."""
        self.check_admission(request.num_prompt_tokens)
        request.status = RequestStatus.WAITING
        request.queued_ts = request.arrival_time
        self.requests[request.request_id] = request
        self.waiting.add_request(request)

    def check_admission(self, num_prompt_tokens: int) -> None:
        """Raise QueueOverflowError / MaxQueuedTokensError when a new request would exceed a limit."""
        limit = self.config.max_num_queued_reqs
        if limit is not None and len(self.requests) >= limit:
            raise QueueOverflowError(len(self.requests), limit)
        token_limit = self.config.max_num_queued_tokens
        if token_limit is not None:
            # vLLM's AsyncLLM.check_admission: the backlog as it is, without the new request's prompt (which
            # may take it past the limit; the next request is then refused)
            backlog = self.prefill_backlog_tokens()
            if backlog >= token_limit:
                raise MaxQueuedTokensError(backlog, token_limit)

    def prefill_backlog_tokens(self) -> int:
        """Prompt tokens of requests still in their prefill phase (waiting or partly prefilled)."""
        waiting = sum(request.num_prompt_tokens for request in self.waiting)
        running = sum(
            request.num_prompt_tokens
            for request in self.running
            if request.num_computed_tokens < request.num_prompt_tokens
        )
        return waiting + running

    def expire_waiting(self) -> list[Request]:
        """Abort never-scheduled requests that waited longer than ``max_queue_wait``; returns them."""
        limit = self.config.max_queue_wait
        if limit is None or not self.waiting:
            return []
        deadline = self.clock() - limit
        expired = [r for r in self.waiting if r.first_scheduled_ts is None and r.arrival_time < deadline]
        for request in expired:
            self.finish_request(request, RequestStatus.FINISHED_ABORTED)
        return expired

    # decide ----------------------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        """Decide the next step's batch (see the module docstring); mutates queues and KV blocks."""
        out = SchedulerOutput()
        budget = self.config.max_num_batched_tokens
        self._pay_memory_deficit(out)
        budget = self._schedule_running(out, budget)
        if not out.preempted_reqs:
            self._schedule_waiting(out, budget)
        self._update_after_schedule(out)
        return out

    def _pay_memory_deficit(self, out: SchedulerOutput) -> None:
        while self.kv_cache.deficit and self.running:
            self._preempt(self._pick_victim(), out)

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        running, allocate = self.running, self.kv_cache.allocate_slots
        scheduled, num_scheduled = out.scheduled, out.num_scheduled_tokens
        threshold = self.config.long_prefill_token_threshold
        index = 0
        while index < len(running) and budget > 0:
            request = running[index]
            num_new = request.num_tokens - request.num_computed_tokens  # 1 for a decode
            if threshold and num_new > threshold:
                num_new = threshold
            if num_new > budget:
                num_new = budget
            if num_new <= 0:
                index += 1
                continue
            while not allocate(request, num_new):
                victim = self._pick_victim()
                if running.index(victim) < index:
                    index -= 1  # an already scheduled request left the list before this one
                    budget += num_scheduled.get(victim.request_id, 0)
                self._preempt(victim, out)
                if victim is request:
                    return budget
            scheduled.append(request)
            num_scheduled[request.request_id] = num_new
            budget -= num_new
            index += 1
        return budget

    def _schedule_waiting(self, out: SchedulerOutput, budget: int) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            request = self.waiting.peek_request()
            computed_blocks: list[int] = []
            num_cached = 0
            if request.num_computed_tokens == 0:
                computed_blocks, num_cached = self.kv_cache.get_computed_blocks(request)
                request.num_computed_tokens = num_cached
            num_new = self._chunk(request, budget)
            if not self.kv_cache.allocate_slots(request, num_new, computed_blocks):
                request.num_computed_tokens = 0
                break
            self.waiting.pop_request()
            if request.status == RequestStatus.PREEMPTED:
                out.scheduled_resumed_reqs.append(request)
            else:
                request.num_cached_tokens = num_cached
                self.kv_cache.record_prefix_lookup(request.num_tokens, num_cached)
                out.scheduled_new_reqs.append(request)
            request.status = RequestStatus.RUNNING
            request.scheduled_ts = self.clock()
            if request.first_scheduled_ts is None:
                request.first_scheduled_ts = request.scheduled_ts
            self.running.append(request)
            out.scheduled.append(request)
            out.num_scheduled_tokens[request.request_id] = num_new
            budget -= num_new

    def _chunk(self, request: Request, budget: int) -> int:
        """New tokens to compute for ``request`` this step: its backlog, capped by the threshold and budget."""
        num_new = request.num_tokens - request.num_computed_tokens
        threshold = self.config.long_prefill_token_threshold
        if threshold and num_new > threshold:
            num_new = threshold
        return num_new if num_new < budget else budget

    def _update_after_schedule(self, out: SchedulerOutput) -> None:
        """Derive the step's totals and batch shape; advance ``num_computed_tokens`` (vLLM does it here too)."""
        context = pairs = total = prefill = 0
        sampling = out.sampling
        num_scheduled = out.num_scheduled_tokens
        for request in out.scheduled:
            num_new = num_scheduled[request.request_id]
            computed = request.num_computed_tokens
            total += num_new
            if computed < request.num_prompt_tokens:
                prefill += min(num_new, request.num_prompt_tokens - computed)
            computed += num_new
            if computed >= request.num_tokens:
                sampling.append(request)
            context += computed
            pairs += num_new * (computed - num_new) + num_new * (num_new + 1) // 2
            request.num_computed_tokens = computed
        out.total_num_scheduled_tokens = total
        out.num_prefill_tokens = prefill
        out.batch = BatchShape(len(out.scheduled), total, len(sampling), context, pairs)

    def _pick_victim(self) -> Request:
        if self.config.scheduling_policy is SchedulingPolicy.PRIORITY:
            return max(self.running, key=lambda r: (r.priority, r.arrival_time))
        return self.running[-1]

    def _preempt(self, request: Request, out: SchedulerOutput) -> None:
        self.running.remove(request)
        if out.num_scheduled_tokens.pop(request.request_id, None) is not None:
            out.scheduled.remove(request)  # already in this step's batch: take it out again
        self.kv_cache.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.prepend_request(request)
        out.preempted_reqs.append(request)

    # apply -----------------------------------------------------------------------------------
    def update_from_output(self, out: SchedulerOutput, runner: ModelRunnerOutput, now: float) -> list[EngineCoreOutput]:
        """Apply a step's sampled tokens at time ``now``: append, check stop conditions, free finished.

        Returns one :class:`EngineCoreOutput` per request that got a token this step.
        """
        outputs: list[EngineCoreOutput] = []
        append = outputs.append
        running = RequestStatus.RUNNING
        for request, token_id in zip(out.sampling, runner.sampled_token_ids):
            if request.status is not running:
                continue  # aborted while the step ran
            last = request.last_token_ts
            request.append_token(token_id)
            if last is None:
                request.first_token_ts = now
            request.last_token_ts = now
            status = self._stop_status(request)
            if status is not None:
                self.finish_request(request, status, now)
            append(EngineCoreOutput(request, [token_id], status is not None, None if last is None else now - last))
        return outputs

    def _stop_status(self, request: Request) -> RequestStatus | None:
        produced = request.num_tokens - request.num_prompt_tokens
        if produced >= request.max_tokens or request.num_tokens >= self.config.max_model_len:
            return RequestStatus.FINISHED_LENGTH
        if request.stop_after is not None and produced >= request.stop_after and produced >= request.min_tokens:
            return RequestStatus.FINISHED_STOPPED
        return None

    def finish_request(self, request: Request, status: RequestStatus, now: float | None = None) -> None:
        """Finish a request (stopped, length, aborted, error) wherever it is and free its blocks."""
        if request.is_finished:
            return
        if request.status == RequestStatus.RUNNING:
            self.running.remove(request)
        else:
            self.waiting.remove_request(request)
        self.kv_cache.free(request)
        request.status = status
        request.finished_ts = self.clock() if now is None else now
        self.requests.pop(request.request_id, None)

    # state -----------------------------------------------------------------------------------
    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    @property
    def num_running(self) -> int:
        """``vllm:num_requests_running``."""
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        """``vllm:num_requests_waiting``."""
        return len(self.waiting)
