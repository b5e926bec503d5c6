"""KV block accounting (reference counts, prefix-cache eviction, capacity changes) and the waiting queues."""

from __future__ import annotations

import pytest

from drill.stack.config import SchedulingPolicy
from drill.stack.inference.kv_cache import KVCacheManager
from drill.stack.inference.request_queue import FCFSRequestQueue, PriorityRequestQueue, create_request_queue
from tests.stack.inference.sched_factories import create_requests


def test_allocation_rounds_up_to_blocks_and_refuses_without_change() -> None:
    kv = KVCacheManager(num_blocks=4, block_size=16)
    first, second = create_requests(2, num_tokens=40)
    assert kv.allocate_slots(first, 40)  # 3 blocks
    assert kv.num_blocks_of(first) == 3 and kv.num_free_blocks == 1
    assert not kv.allocate_slots(second, 40)  # needs 3, 1 free: refused
    assert kv.num_free_blocks == 1 and kv.num_blocks_of(second) == 0
    first.num_computed_tokens = 40
    assert kv.allocate_slots(first, 8)  # 48 tokens still fit in 3 blocks
    assert kv.num_blocks_of(first) == 3
    kv.free(first)
    assert kv.num_free_blocks == 4 and kv.usage == 0.0


def test_prefix_blocks_are_shared_and_evicted_least_recently_freed_first() -> None:
    kv = KVCacheManager(num_blocks=6, block_size=4, enable_prefix_caching=True)
    a, b = create_requests(2, num_tokens=9, same_prompt=True)
    assert kv.allocate_slots(a, 9)  # 3 blocks; the 2 full ones are cached
    blocks, tokens = kv.get_computed_blocks(b)
    assert tokens == 8 and len(blocks) == 2
    b.num_computed_tokens = tokens
    assert kv.allocate_slots(b, 1, blocks)
    assert kv.num_used_blocks == 4  # 2 shared + a tail each
    kv.free(a)
    kv.free(b)
    assert kv.num_free_blocks == 6
    (c,) = create_requests(1, num_tokens=9, same_prompt=True, prefix="c")
    assert kv.get_computed_blocks(c)[1] == 8  # freed but still cached
    others = create_requests(1, num_tokens=24, prefix="x")
    assert kv.allocate_slots(others[0], 24)  # takes all 6 blocks: the cached ones are evicted
    assert kv.get_computed_blocks(c)[1] == 0


def test_capacity_shrinks_free_blocks_first_then_owes_held_ones() -> None:
    kv = KVCacheManager(num_blocks=10, block_size=16)
    (held,) = create_requests(1, num_tokens=16 * 6)
    assert kv.allocate_slots(held, 16 * 6)
    kv.set_capacity(2)  # 4 free blocks go at once, 4 held ones are owed
    assert (kv.num_free_blocks, kv.deficit, kv.capacity) == (0, 4, 2)
    assert kv.usage == 1.0
    kv.free(held)  # 4 of its blocks pay the debt, 2 come back free
    assert (kv.num_free_blocks, kv.deficit) == (2, 0)
    kv.set_capacity(10)
    assert kv.num_free_blocks == 10 and kv.capacity == 10


def test_fcfs_queue_prepend_and_remove() -> None:
    queue = FCFSRequestQueue()
    a, b, c = create_requests(3)
    for request in (a, b):
        queue.add_request(request)
    queue.prepend_request(c)
    assert list(queue) == [c, a, b] and queue.peek_request() is c
    queue.remove_request(a)
    queue.remove_request(a)  # absent: ignored
    assert [queue.pop_request(), queue.pop_request()] == [c, b] and not queue


def test_priority_queue_orders_by_priority_then_arrival_with_lazy_removal() -> None:
    queue = create_request_queue(SchedulingPolicy.PRIORITY)
    assert isinstance(queue, PriorityRequestQueue)
    low, urgent, mid, urgent_later = create_requests(4, priorities=[5, 0, 3, 0])
    for request in (low, urgent, mid, urgent_later):
        queue.add_request(request)
    assert list(queue) == [urgent, urgent_later, mid, low]
    queue.remove_request(urgent)
    assert len(queue) == 3 and queue.peek_request() is urgent_later
    queue.remove_request(urgent)
    assert len(queue) == 3
    assert [queue.pop_request() for _ in range(3)] == [urgent_later, mid, low]
    with pytest.raises(IndexError):
        queue.pop_request()


def test_unknown_policy_is_an_error() -> None:
    with pytest.raises(ValueError, match="Unknown scheduling policy"):
        create_request_queue("sjf")  # type: ignore[arg-type]
