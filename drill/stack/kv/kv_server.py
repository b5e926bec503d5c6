"""The prefill worker's KV side channel: a TCP server that hands a transfer's blocks to the decode worker reading it.

One connection per transfer (:mod:`drill.stack.kv.wire`). The fault in force (:mod:`drill.stack.kv.kv_faults`)
is applied here, where a real connector's sender would misbehave: refuse the read, drop the connection half-way,
send every block and then a failed completion, send the blocks and never the completion, or send stale or
foreign blocks under the right name.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging

from drill.stack.kv.kv_faults import Corruption, FailPoint, KvFault, KvFaultMode
from drill.stack.kv.transfers import KvStore, Transfer, TransferState
from drill.stack.kv.wire import KvWireError, encode_frame, payload_bytes, read_frame

__all__ = ["KvServer"]

log = logging.getLogger("drill.stack.kv")
_CHUNK = 64 * 1024


class KvServer:
    """Serves reads of ``store``'s transfers on ``host:port`` (0: a free port, see :attr:`port`)."""

    def __init__(self, store: KvStore, *, host: str, port: int, byte_scale: float) -> None:
        self.store = store
        self.host = host
        self.port = port
        self.byte_scale = byte_scale
        self.fault: KvFault | None = None
        self.in_flight = 0
        self._server: asyncio.Server | None = None
        self._stalled: set[asyncio.StreamWriter] = set()

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
        try:
            request = await read_frame(reader)
            transfer = self.store.transfers.get(str(request.get("transfer_id")))
            if transfer is None:
                await _send(writer, {"state": "error", "reason": f"unknown transfer {request.get('transfer_id')!r}"})
                return
            await self._send_transfer(transfer, reader, writer)
        except (KvWireError, ConnectionError) as exc:
            log.info("KV read ended early: %s", exc)
        finally:
            self.in_flight -= 1
            self._stalled.discard(writer)
            writer.close()

    def _fault_for(self, transfer: Transfer) -> KvFault | None:
        fault = self.fault
        return fault if fault is not None and fault.hits(transfer.transfer_id) else None

    async def _send_transfer(
        self, transfer: Transfer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        fault = self._fault_for(transfer)
        if fault is not None and fault.mode is KvFaultMode.FAIL and fault.point is FailPoint.BEFORE_START:
            self.store.move(transfer, TransferState.FAILED)
            await _send(writer, {"state": "error", "reason": "the prefill worker failed to start the transfer"})
            return
        self.store.move(transfer, TransferState.STARTED)
        size = payload_bytes(transfer.modelled_bytes, self.byte_scale)
        await _send(writer, self._started(transfer, fault, size))
        self.store.move(transfer, TransferState.IN_FLIGHT)
        if fault is not None and fault.mode is KvFaultMode.FAIL and fault.point is FailPoint.IN_FLIGHT:
            await _send_blocks(writer, size // 2)
            self.store.move(transfer, TransferState.FAILED)
            writer.transport.abort()  # a reset mid-transfer, as a dying NIC or process gives
            return
        await _send_blocks(writer, size)
        if fault is not None and fault.mode is KvFaultMode.STALL:
            self._stalled.add(writer)
            await reader.read()  # the completion never comes; wait until the reader gives up
            self.store.move(transfer, TransferState.FAILED)
            return
        if fault is not None and fault.mode is KvFaultMode.FAIL:  # after the data moved
            self.store.move(transfer, TransferState.FAILED)
            await _send(writer, {"state": "error", "reason": "the transfer's completion reported a failure"})
            return
        self.store.move(transfer, TransferState.DONE)
        await _send(writer, {"state": "done"})
        try:
            ack = await read_frame(reader)
        except KvWireError:
            ack = {}  # the reader refused the blocks (a failed check) or went away
        consumed = ack.get("op") == "consumed"
        self.store.move(transfer, TransferState.CONSUMED if consumed else TransferState.FAILED)

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


async def _send_blocks(writer: asyncio.StreamWriter, size: int) -> None:
    chunk = bytes(min(_CHUNK, size))
    sent = 0
    while sent < size:
        piece = chunk[: size - sent]
        writer.write(piece)
        await writer.drain()
        sent += len(piece)


def _other_content(digest: int, why: str) -> int:
    """A different 64-bit content digest for corrupted blocks (the same in every process)."""
    return int.from_bytes(hashlib.blake2b(f"{why}:{digest}".encode(), digest_size=8).digest(), "big")
