"""The decode worker's side of a KV transfer: read the blocks a prefill answer announced, within a lease.

:func:`read_transfer` dials the prefill worker (through the pair's Toxiproxy proxy when the stack has one),
reads the ``started`` frame, the blocks and the completion, acknowledges it, and returns a :class:`KvLoad`. It
takes at least the modelled link time (``modelled bytes × 8 / link_gbps``). With ``lease_s`` it gives up after
that many seconds, wherever the transfer is; without one it waits as long as the transfer does (forever, for a
transfer whose completion never comes, as vLLM #50754's decode side does). With ``check`` it compares each
block's owner and version with the announcement and refuses stale or foreign blocks.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from drill.errors import StackError
from drill.stack.kv.transfers import TransferState
from drill.stack.kv.wire import KvWireError, encode_frame, link_seconds, read_frame

__all__ = ["FAILURE_POINTS", "KvLoad", "KvReadPlan", "KvTransferError", "read_transfer"]

#: Where a failed transfer broke, as the decode worker sees it: the holder refused it before any block moved
#: (``before_start``), the link broke while blocks moved (``in_flight``), every block came and then a failed
#: completion (``after_data``), the lease ran out (``lease_expired``, a stalled transfer with a lease), or the
#: checked blocks were stale or foreign (``block_check``).
FAILURE_POINTS = ("before_start", "in_flight", "after_data", "lease_expired", "block_check")

_CHUNK = 256 * 1024


class KvTransferError(StackError):
    """A KV transfer failed; ``state`` is the last state it reached, ``reason`` what broke it."""

    def __init__(self, reason: str, state: TransferState, *, cause: str = "error", after_data: bool = False) -> None:
        super().__init__(f"KV transfer failed ({state.value}): {reason}")
        self.reason = reason
        self.state = state
        self.cause = cause  # "error", "lease_expired" or "block_check"
        self.after_data = after_data  # every block came, then the completion reported a failure

    @property
    def point(self) -> str:
        """Where the transfer broke: one of :data:`FAILURE_POINTS`."""
        if self.cause != "error":
            return self.cause
        if self.after_data:
            return "after_data"
        return "before_start" if self.state is TransferState.REQUESTED else "in_flight"


@dataclass(frozen=True)
class KvReadPlan:
    """What the decode worker reads: from the prefill answer's ``kv_transfer_params`` and its own config."""

    address: tuple[str, int]
    transfer_id: str
    version: int
    consumer: str
    lease_s: float | None
    check: bool
    link_gbps: float


@dataclass(frozen=True)
class KvLoad:
    """A finished transfer: the blocks' content (``digest``), sizes, the time it took, whether it was checked."""

    digest: int
    blocks: int
    payload_bytes: int
    modelled_bytes: int
    seconds: float
    owner: str
    version: int


class _Progress:
    state = TransferState.REQUESTED


async def read_transfer(plan: KvReadPlan) -> KvLoad:
    """Read one transfer; KvTransferError when it fails, its lease runs out or (checking) a block is wrong."""
    progress = _Progress()
    started = time.monotonic()
    try:
        async with asyncio.timeout(plan.lease_s):
            load = await _read(plan, progress, started)
    except TimeoutError as exc:
        raise KvTransferError(f"lease of {plan.lease_s:g}s expired", progress.state, cause="lease_expired") from exc
    except (OSError, KvWireError) as exc:
        raise KvTransferError(f"{type(exc).__name__}: {exc}", progress.state) from exc
    return load


async def _read(plan: KvReadPlan, progress: _Progress, started: float) -> KvLoad:
    reader, writer = await asyncio.open_connection(*plan.address)
    try:
        writer.write(encode_frame({"op": "read", "transfer_id": plan.transfer_id, "consumer": plan.consumer}))
        await writer.drain()
        head = await read_frame(reader)
        if head.get("state") != "started":
            raise KvTransferError(str(head.get("reason", head)), progress.state)
        progress.state = TransferState.IN_FLIGHT
        size = _int(head, "payload_bytes")
        await _drain_blocks(reader, size)
        tail = await read_frame(reader)
        if tail.get("state") != "done":
            raise KvTransferError(str(tail.get("reason", tail)), progress.state, after_data=True)
        progress.state = TransferState.DONE
        load = _load(head, size, started)
        _check(plan, load, progress)
        await _hold_link(reader, link_seconds(load.modelled_bytes, plan.link_gbps) - (time.monotonic() - started))
        writer.write(encode_frame({"op": "consumed"}))
        await writer.drain()
        progress.state = TransferState.CONSUMED
        return KvLoad(**{**load.__dict__, "seconds": time.monotonic() - started})
    finally:
        writer.close()


async def _hold_link(reader: asyncio.StreamReader, seconds: float) -> None:
    """The rest of the modelled transfer time: the blocks are still moving over the modelled link, so a holder
    that closes the connection now (its process died) breaks the transfer, as a peer lost mid-transfer does."""
    if seconds <= 0:
        return
    try:
        data = await asyncio.wait_for(reader.read(1), timeout=seconds)
    except TimeoutError:
        return  # the modelled time ran out with the link intact
    if data:
        raise KvWireError("the KV link sent bytes after the transfer's done frame")
    raise KvWireError("the KV link closed before the modelled transfer time ended (the holder went away)")


def _check(plan: KvReadPlan, load: KvLoad, progress: _Progress) -> None:
    if not plan.check:
        return
    if load.owner != plan.transfer_id or load.version != plan.version:
        raise KvTransferError(
            f"block check failed: blocks of {load.owner} version {load.version}, "
            f"expected {plan.transfer_id} version {plan.version}",
            progress.state,
            cause="block_check",
        )


async def _drain_blocks(reader: asyncio.StreamReader, size: int) -> None:
    left = size
    while left > 0:
        chunk = await reader.read(min(_CHUNK, left))
        if not chunk:
            raise KvWireError(f"the KV link closed with {left} of {size} block bytes still to come")
        left -= len(chunk)


def _int(message: dict[str, object], key: str) -> int:
    value = message.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise KvWireError(f"KV frame's {key} is not a non-negative integer: {value!r}")
    return value


def _load(head: dict[str, object], size: int, started: float) -> KvLoad:
    return KvLoad(
        digest=_int(head, "digest"),
        blocks=_int(head, "blocks"),
        payload_bytes=size,
        modelled_bytes=_int(head, "modelled_bytes"),
        seconds=time.monotonic() - started,
        owner=str(head.get("owner")),
        version=_int(head, "version"),
    )
