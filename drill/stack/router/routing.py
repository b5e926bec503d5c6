"""The router's decisions, kept apart from its I/O: which replica next, who is healthy, and
what an ``Idempotency-Key`` already produced.

:class:`ReplicaPool` is the decide half (``pick``) and the bookkeeping (``acquire``/``release``,
``mark``) that the router's handlers and health loop apply; :class:`IdempotencyStore` follows
Stripe's semantics (docs/traces-and-verdicts.md §4): the first response for a key is stored and
returned to every later request with that key, a concurrent duplicate waits for the first, and
the same key with a different body is refused (422).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from enum import StrEnum

from drill.stack.config import RouterPolicy

__all__ = [
    "CachedResponse",
    "IdempotencyStore",
    "KeyOutcome",
    "ReplicaPool",
    "ReplicaState",
    "fingerprint",
]


@dataclass
class ReplicaState:
    """What the router knows of one replica. ``url`` is how the router reaches it (maybe a proxy)."""

    name: str
    index: int
    url: str
    healthy: bool = False
    outstanding: int = 0
    last_check: float = 0.0  # UNIX s of the last health check
    last_error: str | None = None
    late_only: bool = False  # out of rotation only because its health checks timed out (weak evidence)

    def as_json(self) -> dict[str, object]:
        """The ``GET /admin/state`` entry of this replica."""
        return {
            "name": self.name,
            "index": self.index,
            "url": self.url,
            "healthy": self.healthy,
            "outstanding": self.outstanding,
            "last_check": self.last_check,
            "last_error": self.last_error,
            "late_only": self.late_only,
        }


@dataclass
class ReplicaPool:
    """The replicas behind the router and the policy that spreads requests over them."""

    replicas: list[ReplicaState]
    policy: RouterPolicy = RouterPolicy.LEAST_OUTSTANDING
    _next: int = 0

    def healthy(self) -> list[ReplicaState]:
        """Replicas currently in rotation."""
        return [r for r in self.replicas if r.healthy]

    def pick(self) -> ReplicaState | None:
        """The replica for the next attempt, or None when none is healthy.

        ``round_robin`` cycles over healthy replicas; ``least_outstanding`` takes the fewest
        requests in flight, ties broken in round-robin order so equal replicas share the load.
        """
        candidates = self.healthy() or self.panic_candidates()
        if not candidates:
            return None
        start = self._next % len(candidates)
        rotated = candidates[start:] + candidates[:start]
        self._next += 1
        if self.policy is RouterPolicy.ROUND_ROBIN:
            return rotated[0]
        return min(rotated, key=lambda r: r.outstanding)

    def panic_candidates(self) -> list[ReplicaState]:
        """With no replica in rotation, those out only for late health checks: when every check is late at once the
        checker (the router's own loop under a flood) is the likelier culprit, and refusing everything with "no
        healthy replica" would turn a slow router into an outage. Envoy routes to all hosts in the same case (its
        ``healthy_panic_threshold``); a replica that answered non-200 or refused the connection is never used."""
        return [r for r in self.replicas if r.late_only]

    def acquire(self, replica: ReplicaState) -> None:
        """An attempt to ``replica`` starts."""
        replica.outstanding += 1

    def release(self, replica: ReplicaState) -> None:
        """An attempt to ``replica`` ended (any outcome)."""
        replica.outstanding = max(0, replica.outstanding - 1)

    def mark(self, replica: ReplicaState, healthy: bool, error: str | None = None, *, late_only: bool = False) -> bool:
        """Record a health verdict (``late_only``: out for timed-out checks alone); True when the state changed."""
        changed = replica.healthy != healthy
        replica.healthy = healthy
        replica.late_only = late_only and not healthy
        replica.last_check = time.time()
        replica.last_error = error
        return changed


def fingerprint(method: str, path: str, body: bytes) -> str:
    """What must match for two requests with one key to be "the same request"."""
    return hashlib.sha256(b"%b %b\n%b" % (method.encode(), path.encode(), body)).hexdigest()


@dataclass(frozen=True)
class CachedResponse:
    """A complete response as first sent for a key (a stream is kept whole)."""

    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


class KeyOutcome(StrEnum):
    """What :meth:`IdempotencyStore.begin` decided for a request."""

    FIRST = "first"  # process it, then call finish()
    REPLAY = "replay"  # await the entry's response and send it
    MISMATCH = "mismatch"  # same key, different request: 422


@dataclass
class _Entry:
    fingerprint: str
    response: asyncio.Future[CachedResponse]
    created: float = field(default_factory=time.monotonic)


class IdempotencyStore:
    """First response per ``Idempotency-Key``, kept for ``ttl_s`` (24 h) and at most ``max_keys``."""

    def __init__(self, *, max_keys: int = 10_000, ttl_s: float = 24 * 3600.0) -> None:
        self.max_keys = max_keys
        self.ttl_s = ttl_s
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def begin(self, key: str, request_fingerprint: str) -> tuple[KeyOutcome, asyncio.Future[CachedResponse]]:
        """Decide for one request; must be called on the event loop."""
        self._expire()
        entry = self._entries.get(key)
        if entry is None:
            entry = _Entry(request_fingerprint, asyncio.get_running_loop().create_future())
            self._entries[key] = entry
            self._trim()
            return KeyOutcome.FIRST, entry.response
        if entry.fingerprint != request_fingerprint:
            return KeyOutcome.MISMATCH, entry.response
        return KeyOutcome.REPLAY, entry.response

    def finish(self, key: str, response: CachedResponse) -> None:
        """Store the first request's response and wake every waiting duplicate."""
        entry = self._entries.get(key)
        if entry is not None and not entry.response.done():
            entry.response.set_result(response)

    def __len__(self) -> int:
        return len(self._entries)

    def _expire(self) -> None:
        cutoff = time.monotonic() - self.ttl_s
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            if entry.created >= cutoff:
                break
            self._entries.pop(key)

    def _trim(self) -> None:
        while len(self._entries) > self.max_keys:
            self._entries.popitem(last=False)
