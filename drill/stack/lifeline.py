"""Children that die with their parent: no orphans, even when the parent is SIGKILLed.

On Linux a child asks the kernel for ``PR_SET_PDEATHSIG`` = SIGKILL between fork and exec
(:func:`die_with_parent`, a ``preexec_fn``). The signal fires when the *thread* that forked the
child exits, so spawn children only from a thread that lives as long as the process (the main
thread, or the asyncio loop's thread). Elsewhere, and for processes the kernel cannot tie to us
(Docker containers), :func:`watch_fd` watches a pipe or socket whose other end the parent holds:
end of file means the parent is gone.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable

__all__ = ["die_with_parent", "watch_fd"]

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None = None) -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child receive SIGKILL when its parent dies.

    ``parent_pid`` (default: the caller's pid) closes the race where the parent died before
    the request was made: the child then kills itself at once.
    """
    expected = os.getpid() if parent_pid is None else parent_pid

    def preexec() -> None:
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != expected:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def watch_fd(fd: int, on_lost: Callable[[], None]) -> threading.Thread:
    """Call ``on_lost`` (in a daemon thread) once ``fd`` reads end of file or fails.

    Called by a process whose parent holds the other end of a pipe or socket; returns the
    started thread.
    """

    def watch() -> None:
        try:
            while os.read(fd, 4096):
                pass
        except OSError:
            pass
        on_lost()

    thread = threading.Thread(target=watch, name="lifeline", daemon=True)
    thread.start()
    return thread
