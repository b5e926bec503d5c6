"""The KV transfer on its own: the holder's lifecycle and the reader's lease and block check, over loopback TCP."""

from __future__ import annotations

import asyncio
import time

import pytest

from drill.stack.kv.kv_client import KvReadPlan, KvTransferError, read_transfer
from drill.stack.kv.kv_faults import KvFault
from drill.stack.kv.kv_server import KvServer
from drill.stack.kv.transfers import KvStore, TransferState
from drill.stack.kv.wire import KvWireError, decode_frame, encode_frame, payload_bytes, read_frame

pytestmark = [pytest.mark.anyio, pytest.mark.realtime]  # served in real time: see tests/conftest.py


async def _read(fault: KvFault | None, *, lease_s: float | None = 1.0, check: bool = True, link_gbps: float = 400):
    store = KvStore(block_size=16, kv_bytes_per_token=131_072, free_after_s=60)
    server = KvServer(store, host="127.0.0.1", port=0, byte_scale=1 / 1024)
    await server.start()
    server.fault = fault
    transfer = store.register("t-1", 100, digest=42)
    plan = KvReadPlan(("127.0.0.1", server.port), "t-1", transfer.version, "decode-0", lease_s, check, link_gbps)
    try:
        return await read_transfer(plan), store
    except KvTransferError as exc:
        await asyncio.sleep(0.05)  # let the holder see the reader go
        return exc, store
    finally:
        await server.close()


async def test_a_clean_transfer_goes_through_every_state_and_is_freed() -> None:
    load, store = await _read(None)
    assert not isinstance(load, Exception)
    assert (load.digest, load.blocks, load.modelled_bytes) == (42, 7, 100 * 131_072)
    assert load.payload_bytes == payload_bytes(100 * 131_072, 1 / 1024) == 12_800
    states = ("requested", "started", "in_flight", "done", "consumed", "freed")
    assert all(store.counts[TransferState(s)] == 1 for s in states) and store.pending == 0


async def test_a_transfer_takes_at_least_the_modelled_link_time() -> None:
    load, _ = await _read(None, link_gbps=0.5)  # 13.1 MB at 0.5 Gb/s: 0.21 s
    assert load.seconds >= 100 * 131_072 * 8 / 0.5e9


@pytest.mark.parametrize(
    ("point", "reached"), [("before_start", "requested"), ("in_flight", "in_flight"), ("after_data", "in_flight")]
)
async def test_a_failed_transfer_names_the_state_it_reached(point: str, reached: str) -> None:
    error, store = await _read(KvFault(name="f", mode="fail", point=point))
    assert isinstance(error, KvTransferError) and error.state.value == reached and error.cause == "error"
    assert store.counts[TransferState.FAILED] == 1 and store.pending == 0


async def test_a_holder_that_dies_while_the_modelled_link_still_carries_the_blocks_fails_the_transfer_at_once() -> None:
    """The scaled-down bytes arrive at once; the rest of the modelled link time (2.1 s here) the blocks are still
    on the wire, so a holder that dies then (``prefill_crash``) breaks the transfer, without a lease too."""
    modelled = 100 * 131_072
    size = payload_bytes(modelled, 1 / 1024)

    async def dying_holder(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_frame(reader)
        head = {"state": "started", "owner": "t-1", "version": 1, "blocks": 7, "digest": 42}
        writer.write(encode_frame({**head, "payload_bytes": size, "modelled_bytes": modelled}) + b"\0" * size)
        writer.write(encode_frame({"state": "done"}))
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.transport.abort()  # the process dies: its sockets close

    server = await asyncio.start_server(dying_holder, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    started = time.monotonic()
    try:
        with pytest.raises(KvTransferError, match="closed before the modelled transfer time ended") as caught:
            await read_transfer(KvReadPlan(("127.0.0.1", port), "t-1", 1, "decode-0", None, False, 0.05))
    finally:
        server.close()
    assert caught.value.cause == "error" and time.monotonic() - started < 1.5


async def test_a_stalled_transfer_ends_when_the_lease_does() -> None:
    error, store = await _read(KvFault(name="f", mode="stall"), lease_s=0.2)
    assert isinstance(error, KvTransferError) and error.cause == "lease_expired"
    assert error.state is TransferState.IN_FLIGHT  # started, blocks sent, no completion
    assert store.counts[TransferState.FAILED] == 1


@pytest.mark.parametrize("corruption", ["stale", "foreign"])
async def test_corrupt_blocks_are_caught_only_when_checked(corruption: str) -> None:
    fault = KvFault(name="f", mode="corrupt", corruption=corruption)
    error, _ = await _read(fault, check=True)
    assert isinstance(error, KvTransferError) and error.cause == "block_check"
    load, _ = await _read(fault, check=False)
    assert not isinstance(load, Exception) and load.digest != 42  # served, but other content


def test_a_frame_that_is_not_a_json_object_is_a_wire_error() -> None:
    with pytest.raises(KvWireError):
        decode_frame(b"[1, 2]")
    with pytest.raises(KvWireError):
        decode_frame(b"\xff")


def test_a_transfer_never_read_is_freed_after_its_time() -> None:
    store = KvStore(block_size=16, kv_bytes_per_token=1, free_after_s=10)
    transfer = store.register("t", 5, digest=1)
    assert store.expire(now=transfer.created + 5) == 0 and store.expire(now=transfer.created + 11) == 1
    assert transfer.state is TransferState.FREED and store.pending == 0


def test_registering_an_id_again_takes_a_new_version() -> None:
    store = KvStore(block_size=16, kv_bytes_per_token=1, free_after_s=10)
    assert store.register("t", 5, digest=1).version + 1 == store.register("t", 5, digest=1).version
