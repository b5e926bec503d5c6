"""SIGINT/SIGTERM handling that can interrupt a run but never a revert.

Outside a critical section, a signal raises :class:`RunInterrupted` in the
main thread at once, so the runner unwinds to its ``finally`` and reverts.
Inside one (registering + injecting a fault, reverting, tearing down), the
signal is only recorded; leaving the outermost critical section raises it.
Further signals during the final reverts are recorded and ignored: only
SIGKILL stops the runner then, and the watchdog finishes the job.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from drill.errors import RunInterrupted

__all__ = ["SignalGuard"]


class SignalGuard:
    def __init__(self, on_signal: Callable[[str], object] | None = None) -> None:
        self.received: str | None = None
        self._depth = 0
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}
        self._on_signal = on_signal
        self._shutting_down = False

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        first = self.received is None
        self.received = self.received or name
        if self._on_signal is not None:
            self._on_signal(name)
        if first and self._depth == 0 and not self._shutting_down:
            raise RunInterrupted(name)

    @contextmanager
    def critical(self) -> Iterator[None]:
        """Signals arriving inside are deferred until the outermost section ends."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        if self._depth == 0 and self.received and not self._shutting_down:
            raise RunInterrupted(self.received)

    def shutting_down(self) -> None:
        """From now on signals are recorded only: the run is already reverting and stopping."""
        self._shutting_down = True

    def check(self) -> None:
        if self.received and not self._shutting_down:
            raise RunInterrupted(self.received)
