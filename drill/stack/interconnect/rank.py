"""A TP rank or PP stage of a replica: ``python -m drill.stack.interconnect.rank --launch FILE|JSON``.

Started by rank 0 (the replica process) through :func:`drill.stack.interconnect.tcp.connect`, it
listens on ``launch.listen``, prints ``ready`` on stdout, accepts one connection from its upstream
peer (rank 0, or the previous stage, possibly through a Toxiproxy proxy) and then serves
messages until that connection closes, when it exits 0. It also dies with its parent
(PR_SET_PDEATHSIG, set by the spawner).

Wire format (stack-contracts.md §8): every message is a header ``!II`` = (payload bytes,
reply bytes) followed by the payload.

* TP rank: after the whole payload has arrived, answer ``reply`` bytes (the all-reduce result).
* PP stage with a next stage: store and forward the whole message to the next stage (a stage
  needs its whole input activation), and pump the next stage's replies back upstream.
* Last PP stage: answer ``reply`` bytes (the sampled tokens going back to stage 0).

Every socket has TCP_NODELAY: without it Nagle + delayed ACKs add ~40 ms per round.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import threading
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from drill.api import LinkKind

__all__ = ["HEADER", "RankLaunch", "main", "recv_exactly", "split_address"]

HEADER = struct.Struct("!II")
_ZEROS = bytes(1 << 20)


class RankLaunch(BaseModel):
    """What one rank process needs: its ``listen`` address and, for a PP stage that is not the
    last, the address through which it reaches the next stage (``next_connect``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: LinkKind
    rank: int
    listen: str
    next_connect: str | None = None
    accept_timeout_s: float = 30.0
    bind_timeout_s: float = 10.0


def split_address(address: str) -> tuple[str, int]:
    """``"127.0.0.1:9000"`` -> ``("127.0.0.1", 9000)``."""
    host, port = address.rsplit(":", 1)
    return host.strip("[]"), int(port)


def recv_exactly(sock: socket.socket, count: int, buffer: bytearray | None = None) -> memoryview:
    """Read exactly ``count`` bytes; raises ConnectionError on end of stream."""
    view = memoryview(buffer if buffer is not None and len(buffer) >= count else bytearray(count))[:count]
    got = 0
    while got < count:
        n = sock.recv_into(view[got:], count - got)
        if n == 0:
            raise ConnectionError("peer closed the link")
        got += n
    return view


def _nodelay(sock: socket.socket) -> socket.socket:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _listen(address: str, timeout_s: float) -> socket.socket:
    """Bind, retrying while a previous incarnation of this rank still holds the port."""
    deadline = time.monotonic() + timeout_s
    while True:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            server.bind(split_address(address))
            server.listen(4)
            return server
        except OSError:
            server.close()
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def _answer(upstream: socket.socket) -> None:
    """TP rank or last PP stage: read each message whole, answer with ``reply`` bytes."""
    buffer = bytearray(1 << 16)
    while True:
        payload_len, reply_len = HEADER.unpack(recv_exactly(upstream, HEADER.size))
        if len(buffer) < payload_len:
            buffer = bytearray(payload_len)
        recv_exactly(upstream, payload_len, buffer)
        upstream.sendall(_ZEROS[:reply_len] if reply_len <= len(_ZEROS) else bytes(reply_len))


def _forward(upstream: socket.socket, downstream: socket.socket) -> None:
    """Middle PP stage: store and forward each whole message to the next stage."""
    while True:
        header = bytes(recv_exactly(upstream, HEADER.size))
        payload_len, _ = HEADER.unpack(header)
        downstream.sendall(header + bytes(recv_exactly(upstream, payload_len)))


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy bytes until ``source`` closes (the next stage's replies going back upstream)."""
    try:
        while data := source.recv(1 << 16):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        sink.close()


def serve(launch: RankLaunch) -> None:
    """Run one rank until its upstream connection closes. Called by :func:`main`."""
    server = _listen(launch.listen, launch.bind_timeout_s)
    server.settimeout(launch.accept_timeout_s)
    print("ready", flush=True)
    upstream, _ = server.accept()
    server.close()
    upstream.settimeout(None)
    _nodelay(upstream)
    try:
        if launch.next_connect is None:
            _answer(upstream)
        else:
            downstream = _nodelay(socket.create_connection(split_address(launch.next_connect), timeout=10))
            downstream.settimeout(None)
            threading.Thread(target=_pump, args=(downstream, upstream), daemon=True).start()
            _forward(upstream, downstream)
    except (ConnectionError, OSError):
        return  # rank 0 went away: this rank's life is over


def _load_launch(value: str) -> RankLaunch:
    text = value if value.lstrip().startswith("{") else Path(value).read_text(encoding="utf-8")
    return RankLaunch.model_validate(json.loads(text))


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``--launch`` is a path to a RankLaunch JSON file, or the JSON itself."""
    parser = argparse.ArgumentParser(prog="python -m drill.stack.interconnect.rank")
    parser.add_argument("--launch", required=True, help="RankLaunch as a JSON file path or inline JSON")
    args = parser.parse_args(argv)
    try:
        serve(_load_launch(args.launch))
    except TimeoutError:
        print("rank: nobody connected in time", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
