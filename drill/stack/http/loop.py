"""The event loop a stack process runs on: uvloop when it is installed (libuv's loop: its transports and callbacks
cost a fraction of asyncio's default loop, https://github.com/MagicStack/uvloop), else asyncio's own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["loop_name", "run"]

T = TypeVar("T")


def _uvloop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        # lazy: optional (not on Windows), and loaded only by the process that runs a loop on it
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on uvloop when it is installed."""
    with asyncio.Runner(loop_factory=_uvloop_factory()) as runner:
        return runner.run(main)


def loop_name() -> str:
    """``uvloop`` or ``asyncio``: the loop :func:`run` would use."""
    return "asyncio" if _uvloop_factory() is None else "uvloop"
