"""A prefill worker's KV transfers: their lifecycle, their block version, and when their blocks are freed.

Lifecycle (the states a ``kv_transfer`` span reports as ``drill.kv.state``)::

    requested -> started -> in_flight -> done -> consumed -> freed
                                   \\-> failed (any point)      (never read: freed after ``free_after``)

A transfer is *requested* when the prefill answer announces it (its ``kv_transfer_params``), *started* when a
decode worker asks for it, *in flight* while its blocks cross the link, *done* when the completion is sent,
*consumed* when the reader acknowledges it, and then *freed*. Each registration takes the next version of the
store, which the blocks carry: a consumer that checks compares it with the version announced.
"""

from __future__ import annotations

import enum
import math
import time
from dataclasses import dataclass, field

__all__ = ["KvStore", "Transfer", "TransferState"]


class TransferState(str, enum.Enum):
    REQUESTED = "requested"
    STARTED = "started"
    IN_FLIGHT = "in_flight"
    DONE = "done"
    CONSUMED = "consumed"
    FREED = "freed"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self in (TransferState.FREED, TransferState.FAILED)


@dataclass
class Transfer:
    """One prompt's KV cache held for a decode worker. ``digest`` stands for the blocks' content."""

    transfer_id: str
    num_tokens: int
    num_blocks: int
    modelled_bytes: int
    digest: int
    version: int
    created: float = field(default_factory=time.monotonic)
    state: TransferState = TransferState.REQUESTED
    trace: object = None  # the registering request's trace context, opaque here (the holder's span parent)

    def announce(self, engine_id: str, host: str, port: int) -> dict[str, object]:
        """The ``kv_transfer_params`` of the prefill answer (NixlConnector's names, plus the version)."""
        return {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "transfer_id": self.transfer_id,
            "remote_engine_id": engine_id,
            "remote_host": host,
            "remote_port": port,
            "remote_block_ids": list(range(self.num_blocks)),
            "num_tokens": self.num_tokens,
            "version": self.version,
        }


class KvStore:
    """The transfers a prefill worker holds, by id; registering an id again replaces it with a new version."""

    def __init__(self, *, block_size: int, kv_bytes_per_token: int, free_after_s: float) -> None:
        self.block_size = block_size
        self.kv_bytes_per_token = kv_bytes_per_token
        self.free_after_s = free_after_s
        self.transfers: dict[str, Transfer] = {}
        self.version = 0
        self.counts: dict[TransferState, int] = {state: 0 for state in TransferState}
        self.expired = 0  # transfers freed unread after ``free_after_s`` (vLLM's ``nixl_num_kv_expired_reqs``)

    def register(self, transfer_id: str, num_tokens: int, digest: int, trace: object = None) -> Transfer:
        """Hold ``num_tokens`` tokens of KV cache for a decode worker (state *requested*); ``trace`` is kept with
        it (the trace context of the request that prefilled it)."""
        self.expire()
        self.version += 1
        transfer = Transfer(
            transfer_id,
            num_tokens,
            math.ceil(num_tokens / self.block_size),
            num_tokens * self.kv_bytes_per_token,
            digest,
            self.version,
            trace=trace,
        )
        self.transfers[transfer_id] = transfer
        self.counts[TransferState.REQUESTED] += 1
        return transfer

    def move(self, transfer: Transfer, state: TransferState) -> None:
        """Advance ``transfer``; a consumed or failed one is freed (dropped from the store)."""
        transfer.state = state
        self.counts[state] += 1
        if state in (TransferState.CONSUMED, TransferState.FAILED):
            if self.transfers.get(transfer.transfer_id) is transfer:
                del self.transfers[transfer.transfer_id]
            if state is TransferState.CONSUMED:
                transfer.state = TransferState.FREED
                self.counts[TransferState.FREED] += 1

    def other_than(self, transfer: Transfer) -> Transfer | None:
        """Another held transfer (the source of a foreign block), the newest first; None when none."""
        return next((t for t in reversed(self.transfers.values()) if t is not transfer), None)

    def expire(self, now: float | None = None) -> int:
        """Free transfers nobody read within ``free_after_s``; returns how many."""
        now = time.monotonic() if now is None else now
        stale = [t for t in self.transfers.values() if now - t.created > self.free_after_s]
        for transfer in stale:
            del self.transfers[transfer.transfer_id]
            transfer.state = TransferState.FREED
            self.counts[TransferState.FREED] += 1
        self.expired += len(stale)
        return len(stale)

    @property
    def pending(self) -> int:
        """Transfers held and not yet consumed."""
        return len(self.transfers)
