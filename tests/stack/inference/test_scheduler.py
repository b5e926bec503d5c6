"""Step-driven scheduler tests (no sleeping): admission, chunked prefill, preemption, queues, priorities,
KV accounting and prefix caching. Semantics: docs/serving-facts.md §4."""

from __future__ import annotations

import pytest

from drill.stack.inference.exceptions import MaxQueuedTokensError, QueueOverflowError
from drill.stack.inference.request import FinishReason, RequestStatus
from tests.stack.inference.sched_factories import FakeClock, create_requests, create_scheduler, step


def test_admits_up_to_max_num_seqs_and_decodes_one_token_per_step() -> None:
    scheduler = create_scheduler(max_num_seqs=4)
    for request in create_requests(6, num_tokens=10, max_tokens=3):
        scheduler.add_request(request)
    first = step(scheduler)
    assert [r.request_id for r in first.out.scheduled_new_reqs] == ["req0", "req1", "req2", "req3"]
    assert first.out.num_scheduled_tokens == {f"req{i}": 10 for i in range(4)}
    assert scheduler.num_running == 4 and scheduler.num_waiting == 2
    second = step(scheduler)
    assert second.out.num_scheduled_tokens == {f"req{i}": 1 for i in range(4)}
    assert all(len(o.new_token_ids) == 1 for o in second.outputs)


def test_finishes_by_length_and_then_admits_waiting() -> None:
    scheduler = create_scheduler(max_num_seqs=2)
    for request in create_requests(3, num_tokens=5, max_tokens=2):
        scheduler.add_request(request)
    step(scheduler)  # prefill + first token
    done = step(scheduler)  # second token: max_tokens reached
    assert sorted(done.finished_ids) == ["req0", "req1"]
    assert all(o.request.finish_reason is FinishReason.LENGTH for o in done.outputs)
    third = step(scheduler)
    assert [r.request_id for r in third.out.scheduled_new_reqs] == ["req2"]
    assert scheduler.kv_cache.num_used_blocks == 1  # only req2's one block is held


def test_natural_stop_respects_min_tokens() -> None:
    scheduler = create_scheduler()
    (request,) = create_requests(1, num_tokens=4, max_tokens=10, stop_after=2)
    request.min_tokens = 3
    scheduler.add_request(request)
    for _ in range(3):
        result = step(scheduler)
    assert result.finished_ids == ["req0"] and request.finish_reason is FinishReason.STOP
    assert request.num_output_tokens == 3


def test_chunked_prefill_splits_long_prompt_over_token_budget() -> None:
    scheduler = create_scheduler(max_num_batched_tokens=64, max_num_seqs=4)
    long, short = create_requests(2, num_tokens=150, max_tokens=4)
    scheduler.add_request(long)
    first = step(scheduler)
    assert first.out.num_scheduled_tokens == {"req0": 64} and first.outputs == []
    scheduler.add_request(short)
    second = step(scheduler)
    assert second.out.num_scheduled_tokens == {"req0": 64}  # running prefill takes the whole budget
    third = step(scheduler)
    assert third.out.num_scheduled_tokens == {"req0": 22, "req1": 42}
    assert [o.request.request_id for o in third.outputs] == ["req0"]  # req0's prompt completed: first token
    assert third.out.num_prefill_tokens == 64


def test_long_prefill_token_threshold_caps_chunks() -> None:
    scheduler = create_scheduler(max_num_batched_tokens=256, long_prefill_token_threshold=32)
    (request,) = create_requests(1, num_tokens=100)
    scheduler.add_request(request)
    assert step(scheduler).out.num_scheduled_tokens == {"req0": 32}


def test_preemption_newest_first_by_recompute_and_back_at_head() -> None:
    # 2 blocks of 16 per request at start; 5 blocks in all: the third request's second block fails later
    scheduler = create_scheduler(num_blocks=5, block_size=16, max_num_seqs=8)
    requests = create_requests(3, num_tokens=16, max_tokens=40)
    for request in requests:
        scheduler.add_request(request)
    step(scheduler)  # each takes 1 block (16 tokens computed), samples token 1
    assert scheduler.kv_cache.num_used_blocks == 3
    result = step(scheduler)  # each needs a 2nd block: 2 free -> the newest (req2) is preempted
    assert [r.request_id for r in result.out.preempted_reqs] == ["req2"]
    assert requests[2].status is RequestStatus.PREEMPTED and requests[2].num_computed_tokens == 0
    assert scheduler.num_preemptions == 1 and requests[2].num_preemptions == 1
    assert scheduler.waiting.peek_request() is requests[2]
    assert result.out.scheduled_new_reqs == []  # no admission in a step that preempted
    assert scheduler.kv_cache.num_used_blocks == 4


def test_preempted_request_recomputes_prompt_and_output() -> None:
    scheduler = create_scheduler(num_blocks=4, block_size=16, max_num_seqs=8)
    first, second = create_requests(2, num_tokens=16, max_tokens=20)
    for request in (first, second):
        scheduler.add_request(request)
    for _ in range(30):  # at 33 tokens each needs a 3rd block: 4 blocks in all -> the second is preempted
        step(scheduler)
        if second.num_preemptions:
            break
    assert second.num_preemptions == 1 and second.num_output_tokens == 17
    while first.status is RequestStatus.RUNNING:
        step(scheduler)
    to_recompute = second.num_tokens
    resumed = step(scheduler)
    assert second in resumed.out.scheduled_resumed_reqs
    assert resumed.out.num_scheduled_tokens[second.request_id] == to_recompute == 16 + 17  # prompt + generated


def test_priority_policy_serves_and_preempts_by_priority() -> None:
    scheduler = create_scheduler(policy="priority", max_num_seqs=1)
    low, high = create_requests(2, num_tokens=8, priorities=[5, 0])
    scheduler.add_request(low)
    scheduler.add_request(high)
    assert step(scheduler).out.scheduled_new_reqs == [high]

    scheduler = create_scheduler(policy="priority", num_blocks=3, block_size=16, max_num_seqs=4)
    urgent, batch, mid = create_requests(3, num_tokens=16, max_tokens=30, priorities=[0, 9, 1])
    for request in (urgent, batch, mid):
        scheduler.add_request(request)
    step(scheduler)
    result = step(scheduler)
    assert batch in result.out.preempted_reqs and urgent not in result.out.preempted_reqs


def test_unbounded_queue_accepts_everything() -> None:
    scheduler = create_scheduler(max_num_seqs=1)
    for request in create_requests(500):
        scheduler.add_request(request)
    assert scheduler.num_waiting == 500


def test_bounded_queue_refuses_with_vllm_messages() -> None:
    scheduler = create_scheduler(max_num_queued_reqs=2)
    a, b, c = create_requests(3)
    scheduler.add_request(a)
    scheduler.add_request(b)
    with pytest.raises(QueueOverflowError) as info:
        scheduler.add_request(c)
    assert info.value.status == 503 and info.value.error_type == "Service Unavailable"
    assert str(info.value).startswith("The engine is currently busy and cannot accept new requests.")
    assert scheduler.num_waiting == 2

    # vLLM's check (AsyncLLM.check_admission): refuse once the backlog has reached the cap, the new prompt not counted
    tokens = create_scheduler(max_num_queued_tokens=25)
    x, y, z = create_requests(3, num_tokens=20)
    tokens.add_request(x)
    tokens.add_request(y)  # a backlog of 20 < 25 admits it, though it takes the backlog to 40
    with pytest.raises(MaxQueuedTokensError, match="prefill token backlog limit"):
        tokens.add_request(z)
    step(tokens)  # x and y prefilled: the backlog is empty again
    tokens.add_request(z)


def test_max_queue_wait_expires_never_scheduled_requests() -> None:
    clock = FakeClock()
    scheduler = create_scheduler(max_num_seqs=1, max_queue_wait="2s", clock=clock)
    first, second = create_requests(2, max_tokens=100)
    scheduler.add_request(first)
    scheduler.add_request(second)
    step(scheduler)
    clock.now = 1.9
    assert scheduler.expire_waiting() == []
    clock.now = 2.1
    assert scheduler.expire_waiting() == [second]
    assert second.finish_reason is FinishReason.ABORT and scheduler.num_waiting == 0
    assert first.status is RequestStatus.RUNNING  # a running request is never expired


def test_abort_frees_blocks_wherever_the_request_is() -> None:
    scheduler = create_scheduler(max_num_seqs=1)
    running, waiting = create_requests(2, num_tokens=40)
    scheduler.add_request(running)
    scheduler.add_request(waiting)
    step(scheduler)
    scheduler.finish_request(running, RequestStatus.FINISHED_ABORTED)
    scheduler.finish_request(waiting, RequestStatus.FINISHED_ABORTED)
    assert scheduler.kv_cache.num_used_blocks == 0 and not scheduler.has_unfinished_requests()


def test_kv_usage_and_memory_hog_deficit_forces_preemption() -> None:
    scheduler = create_scheduler(num_blocks=10, block_size=16, max_num_seqs=8)
    requests = create_requests(4, num_tokens=30, max_tokens=50)
    for request in requests:
        scheduler.add_request(request)
    step(scheduler)
    kv = scheduler.kv_cache
    assert kv.num_used_blocks == 8 and kv.usage == pytest.approx(0.8)
    kv.set_capacity(5)  # another process takes 5 blocks: 2 free ones now, 3 owed
    assert kv.deficit == 3 and kv.capacity == 5
    result = step(scheduler)
    assert [r.request_id for r in result.out.preempted_reqs] == ["req3", "req2"]
    assert kv.deficit == 0 and kv.num_used_blocks <= 5
    kv.set_capacity(10)
    assert kv.capacity == 10 and kv.num_free_blocks >= 5


def test_prefix_caching_hits_shared_prompt_blocks() -> None:
    scheduler = create_scheduler(enable_prefix_caching=True, block_size=16)
    first, second = create_requests(2, num_tokens=50, same_prompt=True, max_tokens=5)
    scheduler.add_request(first)
    step(scheduler)
    scheduler.add_request(second)
    result = step(scheduler)
    assert second.num_cached_tokens == 48  # 3 full blocks of 16
    assert result.out.num_scheduled_tokens["req1"] == 2
    kv = scheduler.kv_cache
    assert (kv.prefix_queries, kv.prefix_hits) == (100, 48)
    assert kv.num_used_blocks == 4 + 1  # 3 shared + one tail block each


def test_prefix_cache_survives_free_until_evicted() -> None:
    scheduler = create_scheduler(enable_prefix_caching=True, block_size=16, num_blocks=8)
    first, second = create_requests(2, num_tokens=33, same_prompt=True, max_tokens=1)
    scheduler.add_request(first)
    step(scheduler)  # finishes at once (max_tokens=1), blocks freed but still cached
    assert scheduler.kv_cache.num_used_blocks == 0
    scheduler.add_request(second)
    step(scheduler)
    assert second.num_cached_tokens == 32


def test_prefix_caching_off_never_hits() -> None:
    scheduler = create_scheduler(enable_prefix_caching=False)
    first, second = create_requests(2, num_tokens=50, same_prompt=True)
    scheduler.add_request(first)
    step(scheduler)
    scheduler.add_request(second)
    step(scheduler)
    assert second.num_cached_tokens == 0 and scheduler.kv_cache.prefix_queries == 0


def test_batch_shape_counts_context_and_sampling() -> None:
    scheduler = create_scheduler()
    for request in create_requests(2, num_tokens=10):
        scheduler.add_request(request)
    first = step(scheduler).out.batch
    assert (first.num_seqs, first.num_tokens, first.num_sampled, first.context_tokens) == (2, 20, 2, 20)
    assert first.attention_pairs == 2 * 55
    second = step(scheduler).out.batch
    assert (second.num_tokens, second.context_tokens, second.attention_pairs) == (2, 22, 22)
