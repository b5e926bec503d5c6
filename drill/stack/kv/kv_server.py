"""The prefill worker's KV side channel: a TCP server that hands a transfer's blocks to the decode worker reading it.

One connection per transfer (:mod:`drill.stack.kv.wire`). The fault in force (:mod:`drill.stack.kv.kv_faults`)
is applied here, where a real connector's sender would misbehave: refuse the read, drop the connection half-way,
send every block and then a failed completion, send the blocks and never the completion, or send stale or
foreign blocks under the right name.

Each read of a held transfer ends in a :class:`Served` (what the holder saw: the state it reached, the block
bytes it sent, where and why it failed), handed to ``on_served``: the prefill worker records it as its
``kv_transfer`` span (:mod:`drill.stack.replica.kv_worker`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from drill.stack.kv.kv_faults import Corruption, FailPoint, KvFault, KvFaultMode
from drill.stack.kv.transfers import KvStore, Transfer, TransferState
from drill.stack.kv.wire import KvWireError, encode_frame, link_seconds, payload_bytes, read_frame

__all__ = ["HOLDER_FAILURES", "KvServer", "Served"]

log = logging.getLogger("drill.stack.kv")
_CHUNK = 64 * 1024

#: Why a transfer failed, as the holder sees it: it reported a failure itself (``error``, the injected
#: ``kv_transfer_fail``), or the connection ended before the reader acknowledged the blocks (``link_closed``: the
#: reader's lease ran out, its request was aborted, it refused the blocks, it crashed). A stalled read is not one:
#: the holder's part ends when its blocks are sent (:attr:`Served.stalled`); the wait is the reader's.
HOLDER_FAILURES = ("error", "link_closed")


@dataclass(eq=False)  # one read is one object: the server keeps those under way in a set
class Served:
    """One read of a held transfer, as the holder saw it; ``started``/``ended`` are UNIX seconds."""

    transfer: Transfer
    consumer: str
    started: float
    ended: float = 0.0
    wire_bytes: int = 0  # block bytes sent
    size: int | None = None  # block bytes to send, once started
    state: TransferState = TransferState.REQUESTED  # the last state reached before a failure; FREED when consumed
    stalled: bool = False  # every block sent, the completion withheld (``kv_transfer_stall``)
    failure: str | None = None  # one of HOLDER_FAILURES
    point: str | None = None  # where it broke: before_start, in_flight or after_data
    reason: str | None = None
    modelled_end: float | None = None  # when the modelled link is done with it (UNIX seconds), once started

    def fail(self, failure: str, reason: str) -> None:
        """Mark the read failed (the first failure wins): before it started, with blocks still to send, or after."""
        if self.failure is not None:
            return
        self.failure, self.reason = failure, reason
        if self.size is None:
            self.point = "before_start"
        else:
            self.point = "after_data" if self.wire_bytes >= self.size else "in_flight"


class KvServer:
    """Serves reads of ``store``'s transfers on ``host:port`` (0: a free port, see :attr:`port`)."""

    def __init__(
        self,
        store: KvStore,
        *,
        host: str,
        port: int,
        byte_scale: float,
        link_gbps: float = 400.0,
        on_served: Callable[[Served], None] | None = None,
    ) -> None:
        self.store = store
        self.on_served = on_served
        self.host = host
        self.port = port
        self.byte_scale = byte_scale
        self.link_gbps = link_gbps
        self.fault: KvFault | None = None
        self.in_flight = 0
        self._reads: set[Served] = set()
        self._server: asyncio.Server | None = None
        self._stalled: set[asyncio.StreamWriter] = set()

    def longest_left(self, now: float) -> float:
        """The most modelled link time, in seconds, any read under way still has (0 with none): how long a
        transfer in flight now has before it completes (``prefill_crash`` lands its kill in one with time left)."""
        ends = (r.modelled_end for r in self._reads if r.modelled_end is not None and r.failure is None)
        return max((end - now for end in ends if end > now), default=0.0)

    async def start(self) -> None:
        """Bind and listen (call inside the replica's loop)."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and close every connection, stalled ones too."""
        for writer in list(self._stalled):
            writer.close()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.in_flight += 1
        served: Served | None = None
        try:
            request = await read_frame(reader)
            transfer = self.store.transfers.get(str(request.get("transfer_id")))
            if transfer is None:
                await _send(writer, {"state": "error", "reason": f"unknown transfer {request.get('transfer_id')!r}"})
                return
            served = Served(transfer, str(request.get("consumer", "")), time.time(), state=transfer.state)
            self._reads.add(served)
            await self._send_transfer(served, reader, writer)
        except (KvWireError, ConnectionError) as exc:
            log.info("KV read ended early: %s", exc)
            if served is not None:
                served.fail("link_closed", f"the KV link closed mid-transfer: {exc}")
        finally:
            self.in_flight -= 1
            if served is not None:
                self._reads.discard(served)
            self._stalled.discard(writer)
            writer.close()
            if served is not None and not served.ended:
                self._end(served)

    def _end(self, served: Served) -> None:
        """The holder is done with this read (a stalled one: its blocks are sent); hand it to ``on_served``."""
        served.ended = time.time()
        if served.failure is None and served.state is not TransferState.FREED and not served.stalled:  # cancelled
            served.fail("link_closed", "the KV server closed mid-transfer")
        if self.on_served is not None:
            self.on_served(served)

    def _move(self, served: Served, state: TransferState) -> None:
        """Advance the transfer; the read's state follows it, up to the last state before a failure."""
        self.store.move(served.transfer, state)
        if state is not TransferState.FAILED:
            served.state = served.transfer.state

    def _fail(self, served: Served, failure: str, reason: str) -> None:
        served.fail(failure, reason)
        self._move(served, TransferState.FAILED)

    def _fault_for(self, transfer: Transfer) -> KvFault | None:
        fault = self.fault
        return fault if fault is not None and fault.hits(transfer.transfer_id) else None

    async def _send_transfer(self, served: Served, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        transfer = served.transfer
        fault = self._fault_for(transfer)
        if fault is not None and fault.mode is KvFaultMode.FAIL and fault.point is FailPoint.BEFORE_START:
            reason = "the prefill worker failed to start the transfer"
            self._fail(served, "error", reason)
            await _send(writer, {"state": "error", "reason": reason})
            return
        self._move(served, TransferState.STARTED)
        size = served.size = payload_bytes(transfer.modelled_bytes, self.byte_scale)
        served.modelled_end = served.started + link_seconds(transfer.modelled_bytes, self.link_gbps)
        await _send(writer, self._started(transfer, fault, size))
        self._move(served, TransferState.IN_FLIGHT)
        if fault is not None and fault.mode is KvFaultMode.FAIL and fault.point is FailPoint.IN_FLIGHT:
            await _send_blocks(writer, size // 2, served)
            self._fail(served, "error", "the prefill worker dropped the link mid-transfer")
            writer.transport.abort()  # a reset mid-transfer, as a dying NIC or process gives
            return
        await _send_blocks(writer, size, served)
        if fault is not None and fault.mode is KvFaultMode.STALL:
            self._stalled.add(writer)
            served.stalled = True
            self._end(served)
            with contextlib.suppress(ConnectionError):
                await reader.read()  # the completion never comes; wait until the reader gives up
            self.store.move(transfer, TransferState.FAILED)
            return
        if fault is not None and fault.mode is KvFaultMode.FAIL:  # after the data moved
            reason = "the transfer's completion reported a failure"
            self._fail(served, "error", reason)
            await _send(writer, {"state": "error", "reason": reason})
            return
        self._move(served, TransferState.DONE)
        await _send(writer, {"state": "done"})
        try:
            ack = await read_frame(reader)
        except KvWireError:
            ack = {}  # the reader refused the blocks (a failed check) or went away
        if ack.get("op") == "consumed":
            self._move(served, TransferState.CONSUMED)
        else:
            self._fail(served, "link_closed", "the reader closed the link without acknowledging the blocks")

    def _started(self, transfer: Transfer, fault: KvFault | None, size: int) -> dict[str, object]:
        owner, version, digest = transfer.transfer_id, transfer.version, transfer.digest
        if fault is not None and fault.mode is KvFaultMode.CORRUPT:
            if fault.corruption is Corruption.STALE:
                version, digest = version - 1, _other_content(digest, "stale")
            else:
                other = self.store.other_than(transfer)
                owner = other.transfer_id if other else f"{owner}~foreign"
                version = other.version if other else version
                digest = other.digest if other else _other_content(digest, "foreign")
        return {
            "state": "started",
            "transfer_id": transfer.transfer_id,
            "owner": owner,
            "version": version,
            "blocks": transfer.num_blocks,
            "payload_bytes": size,
            "modelled_bytes": transfer.modelled_bytes,
            "digest": digest,
        }


async def _send(writer: asyncio.StreamWriter, message: dict[str, object]) -> None:
    writer.write(encode_frame(message))
    await writer.drain()


async def _send_blocks(writer: asyncio.StreamWriter, size: int, served: Served) -> None:
    chunk = bytes(min(_CHUNK, size))
    while served.wire_bytes < size:
        piece = chunk[: size - served.wire_bytes]
        writer.write(piece)
        await writer.drain()
        served.wire_bytes += len(piece)


def _other_content(digest: int, why: str) -> int:
    """A different 64-bit content digest for corrupted blocks (the same in every process)."""
    return int.from_bytes(hashlib.blake2b(f"{why}:{digest}".encode(), digest_size=8).digest(), "big")
