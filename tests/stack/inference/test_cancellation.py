"""Cancellation as vLLM does it: a request whose client has gone is aborted wherever it is — waiting, in its
prefill, decoding — and its KV blocks are freed (stack-contracts.md §4 "Cancellation").

First step-driven, at the scheduler (vLLM's decide/apply split: ``schedule`` → ``Engine.abort_request`` →
``update_from_output``), then over real HTTP against an in-process replica: the client closes its connection
and the replica has aborted the request within 100 ms, in each state, streamed or not. With
``abort_abandoned: false`` the replica keeps computing what nobody waits for any more.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from drill.stack.inference.core import Engine
from drill.stack.inference.request import FinishReason, Request, RequestStatus
from tests.stack.inference.sched_factories import create_requests, create_scheduler, step

ABORT_WITHIN_S = 0.1  # the bound: aborted within 100 ms of the client closing its connection


class _Finished:
    """An engine listener that keeps the requests it is told finished."""

    def __init__(self) -> None:
        self.requests: list[Request] = []

    def request_finished(self, request: Request) -> None:
        self.requests.append(request)

    def step_finished(self, record: object) -> None:
        pass


def _engine(**engine: object) -> tuple[Engine, _Finished]:
    finished = _Finished()
    return Engine(create_scheduler(**engine), executor=None, listeners=[finished]), finished  # type: ignore[arg-type]


# step-driven ---------------------------------------------------------------------------------------------


def test_abort_while_waiting_leaves_the_queue_and_is_reported() -> None:
    engine, finished = _engine(max_num_seqs=1)
    running, waiting = create_requests(2, num_tokens=40, max_tokens=50)
    engine.add_request(running)
    engine.add_request(waiting)
    step(engine.scheduler)
    used = engine.scheduler.kv_cache.num_used_blocks
    engine.abort_request(waiting)
    assert waiting.finish_reason is FinishReason.ABORT and waiting.aborted_in == "waiting"
    assert engine.scheduler.num_waiting == 0 and finished.requests == [waiting]
    assert engine.scheduler.kv_cache.num_used_blocks == used  # it held none; the running one keeps its own
    assert waiting not in step(engine.scheduler).out.scheduled


def test_abort_during_a_chunked_prefill_frees_its_blocks() -> None:
    engine, _ = _engine(long_prefill_token_threshold=16)
    (request,) = create_requests(1, num_tokens=200, max_tokens=20)
    engine.add_request(request)
    step(engine.scheduler)
    step(engine.scheduler)
    assert 0 < request.num_computed_tokens < request.num_prompt_tokens and request.num_output_tokens == 0
    assert engine.scheduler.kv_cache.num_used_blocks > 0
    engine.abort_request(request)
    assert request.aborted_in == "prefill" and request.status is RequestStatus.FINISHED_ABORTED
    assert engine.scheduler.kv_cache.num_used_blocks == 0 and not engine.scheduler.has_unfinished_requests()
    assert step(engine.scheduler).out.is_empty


def test_abort_while_decoding_frees_its_blocks() -> None:
    engine, _ = _engine()
    (request,) = create_requests(1, num_tokens=40, max_tokens=100)
    engine.add_request(request)
    for _ in range(5):
        step(engine.scheduler)
    assert request.num_output_tokens == 5
    engine.abort_request(request)
    assert request.aborted_in == "decode" and request.finish_reason is FinishReason.ABORT
    assert engine.scheduler.kv_cache.num_used_blocks == 0 and engine.scheduler.num_running == 0


def test_abort_between_decide_and_apply_drops_the_steps_output() -> None:
    """The client goes while a step runs: the step's token for it is dropped, its blocks are already free."""
    from drill.stack.inference.sched_output import ModelRunnerOutput
    from tests.stack.inference.sched_factories import _ZERO_COST

    engine, _ = _engine()
    kept, aborted = create_requests(2, num_tokens=40, max_tokens=100)
    engine.add_request(kept)
    engine.add_request(aborted)
    step(engine.scheduler)
    out = engine.scheduler.schedule()  # decide: both in the batch
    engine.abort_request(aborted)
    sampled = [request.sampler.next_token() for request in out.sampling]
    outputs = engine.scheduler.update_from_output(out, ModelRunnerOutput(sampled, _ZERO_COST), 1.0)  # apply
    assert [o.request for o in outputs] == [kept] and aborted.num_output_tokens == 1
    assert engine.scheduler.kv_cache.num_used_blocks == engine.scheduler.kv_cache.num_blocks_of(kept)


# over real HTTP ------------------------------------------------------------------------------------------

HOG = {"prompt": "hold the only seat", "max_tokens": 4000, "ignore_eos": True}


async def _send_raw(replica, body: dict, request_id: str) -> asyncio.StreamWriter:
    """Send one completion over a socket of our own (so the test decides when the connection closes)."""
    _, writer = await asyncio.open_connection(replica.server.host, replica.server.port)
    payload = json.dumps(body).encode()
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Request-Id: %b\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (request_id.encode(), len(payload), payload)
    )
    await writer.drain()
    return writer


async def _request(replica, request_id: str, until, timeout_s: float = 20.0) -> Request:
    """The replica's engine request for ``request_id``, once ``until(request)`` holds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for request in list(replica.scheduler.requests.values()):
            if request.request_id.startswith(request_id + "#") and until(request):
                return request
        await asyncio.sleep(0.002)
    raise AssertionError(f"request {request_id} never reached the state asked for")


async def _seconds_until_finished(request: Request, limit_s: float = 5.0) -> float:
    start = time.monotonic()
    while not request.is_finished and time.monotonic() - start < limit_s:
        await asyncio.sleep(0.001)
    return time.monotonic() - start


_STATES = {
    # state: (engine options, request body, the state reached)
    "waiting": ({"max_num_seqs": 1}, {"prompt": "wait in line", "max_tokens": 50}, lambda r: True),
    "prefill": (
        {"long_prefill_token_threshold": 16, "max_num_seqs": 1},
        {"prompt": "word " * 7000, "max_tokens": 50},
        lambda r: r.status is RequestStatus.RUNNING and r.num_computed_tokens > 0,
    ),
    "decode": ({}, {"prompt": "go on", "max_tokens": 4000, "ignore_eos": True}, lambda r: r.num_output_tokens >= 3),
}


@pytest.mark.anyio
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("state", sorted(_STATES))
async def test_a_replica_aborts_a_request_within_100ms_of_its_client_closing(
    start_replica, state: str, stream: bool
) -> None:
    engine, body, reached = _STATES[state]
    exporter = InMemorySpanExporter()
    async with start_replica(engine=engine, span_processor=SimpleSpanProcessor(exporter)) as replica:
        hog = await _send_raw(replica, HOG, "hog") if state == "waiting" else None
        if hog is not None:
            await _request(replica, "hog", lambda r: r.status is RequestStatus.RUNNING)
        writer = await _send_raw(replica, {**body, "stream": stream}, "gone")
        request = await _request(replica, "gone", reached)
        assert request.phase == state
        writer.close()
        took = await _seconds_until_finished(request)
        await asyncio.sleep(0.05)  # let the handler end its spans
        kv_left = replica.scheduler.kv_cache.num_used_blocks
        hog_blocks = sum(replica.scheduler.kv_cache.num_blocks_of(r) for r in replica.scheduler.running)
        metrics = replica.metrics.render().decode()
        if hog is not None:
            hog.close()
    assert took < ABORT_WITHIN_S, f"aborted {took * 1e3:.0f} ms after the client closed ({state})"
    assert request.finish_reason is FinishReason.ABORT and request.aborted_in == state
    assert kv_left == hog_blocks  # its own blocks are free again
    assert 'finished_reason="abort",model_name="llama-3-8b"} 1.0' in metrics
    (llm,) = [
        s
        for s in exporter.get_finished_spans()
        if s.name == "llm_request" and s.attributes["gen_ai.request.id"] == "gone"
    ]
    assert llm.attributes["gen_ai.response.finish_reasons"] == '["abort"]'
    assert llm.attributes["drill.aborted_in"] == state
    assert llm.status.status_code is StatusCode.ERROR and llm.status.description == f"client disconnected ({state})"


@pytest.mark.anyio
async def test_with_abort_abandoned_off_the_replica_computes_for_nobody(start_replica) -> None:
    """Today's behaviour on demand: the closed connection of a waiting plain request goes unnoticed."""
    async with start_replica(engine={"max_num_seqs": 1}, abort_abandoned=False) as replica:
        hog = await _send_raw(replica, HOG, "hog")
        await _request(replica, "hog", lambda r: r.status is RequestStatus.RUNNING)
        writer = await _send_raw(replica, {"prompt": "wait in line", "max_tokens": 50}, "gone")
        request = await _request(replica, "gone", lambda r: True)
        writer.close()
        await asyncio.sleep(0.3)
        finished, still_waiting = request.is_finished, replica.scheduler.num_waiting
        hog.close()
    assert not finished and still_waiting == 1
