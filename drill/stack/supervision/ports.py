"""Ephemeral ports for the stack's processes, picked by binding to port 0 and releasing it.

Used by the launcher before it writes the launches. There is a small window in which another
process could take the port; every process of the stack binds with SO_REUSEADDR and the
launcher fails with a clear StackError if a bind fails.
"""

from __future__ import annotations

import socket

__all__ = ["free_port", "free_ports"]


def free_port(host: str = "127.0.0.1") -> int:
    """One currently free TCP port on ``host``."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct free TCP ports on ``host`` (all held open together while picking)."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            socks.append(sock)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()
