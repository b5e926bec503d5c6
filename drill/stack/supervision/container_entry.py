"""PID 2 of a replica container: ``python -m drill.stack.supervision.container_entry --lifeline HOST:PORT -- CMD...``.

Docker's init (``init=True``) runs this; it connects to the supervisor's lifeline socket, then
runs ``CMD`` (the replica) as its child. The kernel cannot tie a container to the supervisor's
life, so the socket does it: when the supervisor dies (even by SIGKILL) its end closes, this
process kills the replica and exits 0, and ``restart_policy: on-failure`` leaves the container
stopped. When the replica exits on its own, this exits with the replica's code, so a crash (non
zero) makes Docker restart the container. SIGTERM (``docker stop``) is passed to the replica.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time

from drill.stack.interconnect.rank import split_address
from drill.stack.lifeline import die_with_parent, watch_fd

__all__ = ["main"]


def _connect(address: str, timeout_s: float) -> socket.socket | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return socket.create_connection(split_address(address), timeout=2)
        except OSError:
            time.sleep(0.1)
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the command under the lifeline; returns the command's exit code (0 if the lifeline broke)."""
    parser = argparse.ArgumentParser(prog="python -m drill.stack.supervision.container_entry")
    parser.add_argument("--lifeline", required=True, help="host:port of the supervisor's lifeline socket")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    lifeline = _connect(args.lifeline, timeout_s=10.0)
    if lifeline is None:
        print(f"container_entry: no supervisor at {args.lifeline}; not starting", file=sys.stderr)
        return 0
    child = subprocess.Popen(command, preexec_fn=die_with_parent())

    def lost() -> None:
        print("container_entry: supervisor gone; stopping the replica", file=sys.stderr, flush=True)
        child.kill()
        child.wait()
        os._exit(0)

    lifeline.settimeout(None)
    watch_fd(lifeline.fileno(), lost)
    signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signal.SIGTERM))
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
