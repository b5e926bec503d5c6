"""The KV transfer's wire format between a decode worker (the reader) and a prefill worker (the holder).

Frames are a 4-byte big-endian length and a JSON object; block bytes follow a ``started`` frame raw. One
transfer is one TCP connection (through the (prefill, decode) pair's Toxiproxy proxy when there is one)::

    decode  -> prefill   {"op": "read", "transfer_id": T, "consumer": "replica-1"}
    prefill -> decode    {"state": "started", "transfer_id": T, "owner": T, "version": v, "blocks": n,
                          "payload_bytes": b, "digest": d}          (or {"state": "error", "reason": ...})
    prefill -> decode    b bytes of blocks
    prefill -> decode    {"state": "done"}                            (or {"state": "error", ...})
    decode  -> prefill   {"op": "consumed"}                           (the holder frees the blocks)

This is the pull model of vLLM's NixlConnector (the decode worker reads the prefill worker's blocks, named by
the ``kv_transfer_params`` the prefill answer carried); the bytes are real, scaled by ``kv_transfer.byte_scale``.
"""

from __future__ import annotations

import asyncio
import json
import math
import struct

from drill.errors import StackError

__all__ = [
    "KV_HEADER",
    "KV_SPAN",
    "MAX_FRAME_BYTES",
    "MAX_PAYLOAD_BYTES",
    "KvWireError",
    "decode_frame",
    "encode_frame",
    "link_seconds",
    "payload_bytes",
    "read_frame",
]

#: The span each side of a transfer records (the prefill and the decode worker, and the P/D router from the header
#: below).
KV_SPAN = "kv_transfer"
#: A decode answer's header: how its KV load went (``state=<state>;seconds=<s>``).
KV_HEADER = "x-drill-kv-transfer"
LENGTH = struct.Struct(">I")
MAX_FRAME_BYTES = 64 * 1024
MAX_PAYLOAD_BYTES = 8 * 1024 * 1024


class KvWireError(StackError, ConnectionError):
    """The other side sent something that is not a KV transfer frame, or closed mid-frame."""


def encode_frame(message: dict[str, object]) -> bytes:
    """One frame: length prefix and compact JSON."""
    body = json.dumps(message, separators=(",", ":")).encode()
    return LENGTH.pack(len(body)) + body


def decode_frame(body: bytes) -> dict[str, object]:
    """The JSON object of a frame's body; KvWireError when it is not one."""
    try:
        message = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise KvWireError(f"KV frame is not JSON: {body[:80]!r}") from exc
    if not isinstance(message, dict):
        raise KvWireError(f"KV frame is not a JSON object: {body[:80]!r}")
    return message


async def read_frame(reader: asyncio.StreamReader) -> dict[str, object]:
    """Read one frame; KvWireError on end of stream or an oversized frame."""
    try:
        head = await reader.readexactly(LENGTH.size)
        (size,) = LENGTH.unpack(head)
        if size > MAX_FRAME_BYTES:
            raise KvWireError(f"KV frame of {size} bytes (at most {MAX_FRAME_BYTES})")
        return decode_frame(await reader.readexactly(size))
    except asyncio.IncompleteReadError as exc:
        raise KvWireError("the KV link closed mid-transfer") from exc


def link_seconds(modelled_bytes: int, link_gbps: float) -> float:
    """How long ``modelled_bytes`` of KV cache take on the modelled link (``bytes × 8 / link_gbps``): the least a
    transfer takes, as the reader holds it (:mod:`drill.stack.kv.kv_client`) and the holder counts it down."""
    return modelled_bytes * 8 / (link_gbps * 1e9)


def payload_bytes(modelled_bytes: int, byte_scale: float) -> int:
    """Bytes actually sent for ``modelled_bytes`` of KV cache: ``ceil(bytes × scale)``, capped at 8 MiB."""
    if modelled_bytes <= 0:
        return 0
    return min(MAX_PAYLOAD_BYTES, math.ceil(modelled_bytes * byte_scale))
