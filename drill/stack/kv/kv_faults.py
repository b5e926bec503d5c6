"""KV-transfer faults a prefill worker honours while it serves reads (set through ``PUT /admin/kv/fault``).

One :class:`KvFault` at a time per worker, named by the fault id that set it (so a revert removes only its
own). Which transfers it hits is decided from ``seed`` and the transfer id alone (:meth:`KvFault.hits`), so a
test that knows its request ids knows which transfers were hit, on any worker, in any order.
"""

from __future__ import annotations

import enum
import hashlib

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Corruption", "FailPoint", "KvFault", "KvFaultMode", "hits_share"]


class KvFaultMode(str, enum.Enum):
    STALL = "stall"  # blocks sent, the completion never comes (the "in progress forever" transfer)
    FAIL = "fail"  # the transfer fails at ``point``
    CORRUPT = "corrupt"  # stale or foreign blocks are sent as if they were the right ones


class FailPoint(str, enum.Enum):
    """Where a failed transfer breaks (TensorRT-LLM RFC #18450's three points)."""

    BEFORE_START = "before_start"  # the holder refuses the read: nothing moves
    IN_FLIGHT = "in_flight"  # the connection drops half-way through the blocks
    AFTER_DATA = "after_data"  # every block arrived; the completion reports a failure


class Corruption(str, enum.Enum):
    STALE = "stale"  # the previous version of the blocks (already consumed, then reused)
    FOREIGN = "foreign"  # another transfer's blocks (an out-of-range block id)


class KvFault(BaseModel):
    """The fault in force on one worker; ``share`` of the transfers, picked by ``seed``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    mode: KvFaultMode
    point: FailPoint = FailPoint.IN_FLIGHT
    corruption: Corruption = Corruption.STALE
    share: float = Field(1.0, ge=0, le=1)
    seed: int = 0

    def hits(self, transfer_id: str) -> bool:
        """Whether this fault hits ``transfer_id`` (deterministic: see :func:`hits_share`)."""
        return hits_share(self.seed, transfer_id, self.share)


def hits_share(seed: int, transfer_id: str, share: float) -> bool:
    """True for about ``share`` of transfer ids: ``sha256(seed:id)``'s first 8 bytes, as a fraction, below it."""
    if share >= 1:
        return True
    digest = hashlib.sha256(f"{seed}:{transfer_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share
