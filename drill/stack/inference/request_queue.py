"""The waiting queue of the scheduler, laid out like vLLM's ``vllm/v1/core/sched/request_queue.py``.

:class:`FCFSRequestQueue` serves in arrival order; :class:`PriorityRequestQueue` serves the lowest
``(priority, arrival_time)`` first. A preempted request goes back with :meth:`prepend_request`: at
the head under FCFS, by its (unchanged) key under PRIORITY. Built by :func:`create_request_queue`.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterator

from drill.stack.config import SchedulingPolicy
from drill.stack.inference.request import Request

__all__ = ["FCFSRequestQueue", "PriorityRequestQueue", "RequestQueue", "create_request_queue"]


class RequestQueue(ABC):
    """The waiting requests, in the order the scheduler will consider them."""

    @abstractmethod
    def add_request(self, request: Request) -> None:
        """Enqueue a new request."""

    @abstractmethod
    def pop_request(self) -> Request:
        """Remove and return the next request (IndexError when empty)."""

    @abstractmethod
    def peek_request(self) -> Request:
        """The next request without removing it (IndexError when empty)."""

    @abstractmethod
    def prepend_request(self, request: Request) -> None:
        """Put a preempted request back so it is served before newer ones."""

    @abstractmethod
    def remove_request(self, request: Request) -> None:
        """Remove a request (aborted or timed out) wherever it is; missing requests are ignored."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def __iter__(self) -> Iterator[Request]:
        """The requests in serving order."""

    def __bool__(self) -> bool:
        return len(self) > 0


class FCFSRequestQueue(RequestQueue):
    """First come, first served (a deque)."""

    def __init__(self) -> None:
        self._queue: deque[Request] = deque()

    def add_request(self, request: Request) -> None:
        self._queue.append(request)

    def pop_request(self) -> Request:
        return self._queue.popleft()

    def peek_request(self) -> Request:
        return self._queue[0]

    def prepend_request(self, request: Request) -> None:
        self._queue.appendleft(request)

    def remove_request(self, request: Request) -> None:
        try:
            self._queue.remove(request)
        except ValueError:
            pass

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._queue)


class PriorityRequestQueue(RequestQueue):
    """Lowest ``(priority, arrival_time)`` first (a heap; removal is lazy)."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, Request]] = []
        self._counter = 0
        self._removed: set[int] = set()
        self._size = 0

    def add_request(self, request: Request) -> None:
        self._counter += 1
        heapq.heappush(self._heap, (request.priority, request.arrival_time, self._counter, request))
        self._size += 1

    def _drop_removed(self) -> None:
        while self._heap and id(self._heap[0][3]) in self._removed:
            self._removed.discard(id(heapq.heappop(self._heap)[3]))

    def pop_request(self) -> Request:
        self._drop_removed()
        request = heapq.heappop(self._heap)[3]
        self._size -= 1
        return request

    def peek_request(self) -> Request:
        self._drop_removed()
        return self._heap[0][3]

    def prepend_request(self, request: Request) -> None:
        self.add_request(request)

    def remove_request(self, request: Request) -> None:
        if id(request) in self._removed or not any(entry[3] is request for entry in self._heap):
            return
        self._removed.add(id(request))
        self._size -= 1

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Request]:
        live = [entry for entry in self._heap if id(entry[3]) not in self._removed]
        return iter(entry[3] for entry in sorted(live, key=lambda entry: entry[:3]))


def create_request_queue(policy: SchedulingPolicy) -> RequestQueue:
    """The queue for a scheduling policy. Raises ValueError for an unknown one."""
    if policy is SchedulingPolicy.FCFS:
        return FCFSRequestQueue()
    if policy is SchedulingPolicy.PRIORITY:
        return PriorityRequestQueue()
    raise ValueError(f"Unknown scheduling policy: {policy}")
