"""One reader for every open SSE stream of a load process: an epoll loop on a single greenlet.

Why: with a greenlet per stream blocking on its own socket, every chunk costs a trip through
gevent's hub — a wake-up, a switch into the stream's greenlet and back — on top of the read
itself. At tens of thousands of chunks per second that overhead is most of the client's CPU, and
a saturated client timestamps chunks late (``bench/load_driver.py``). Here one greenlet waits for
the epoll descriptor to become readable (one hub wake-up for any number of ready streams), then
reads every ready socket in one pass and hands the bytes to that stream's :class:`StreamWatch`,
which timestamps and classifies them inline. The stream's own greenlet sleeps on an event until
its stream ends, and wakes once. Under load more chunks arrive while a pass reads: the reactor takes
them too, for at most :data:`_PASSES_S`, then gives the hub its turn — the arrivals' greenlets and
every timer wait on it, and a flood of streams that never stops arriving must not hold back the
requests due meanwhile (that stalls the open loop, which then sends late).

Runs inside the load-generator child only (gevent-patched). The request's own ``gevent.Timeout``
still bounds it: a timed-out or cancelled request calls :meth:`StreamReactor.unwatch` from its
``finally``.
"""

from __future__ import annotations

import select
import time
from typing import TYPE_CHECKING, Protocol

import gevent
import gevent.monkey
from gevent.event import Event

if TYPE_CHECKING:
    from _socket import socket as RawSocket  # what gevent's socket wraps: ``gevent_socket._sock``

__all__ = ["StreamReactor", "StreamWatch", "reactor"]

_EPOLL = gevent.monkey.get_original("select", "epoll")
_READ_SIZE = 4096  # an SSE event is a few hundred bytes; a large recv buffer costs its allocation every read
#: The longest the reactor reads ready sockets, pass after pass, before the hub runs the other greenlets.
_PASSES_S = 0.002


class StreamWatch(Protocol):
    """What the reactor calls for one stream."""

    def on_data(self, data: bytes, now: float) -> bool:
        """Consume bytes read at ``now`` (perf_counter); return True when the stream is finished."""

    def on_error(self, exc: BaseException) -> None:
        """The socket failed; the stream is over."""


class StreamReactor:
    """Reads every watched socket from one greenlet; see the module docstring."""

    def __init__(self) -> None:
        self._epoll = _EPOLL()
        self._watches: dict[int, tuple[RawSocket, StreamWatch, Event]] = {}
        self._loop = gevent.spawn(self._run)

    def watch(self, raw_socket: RawSocket, stream: StreamWatch) -> Event:
        """Start reading ``raw_socket`` (a non-blocking OS socket) for ``stream``; the event is set at its end."""
        done = Event()
        fd = raw_socket.fileno()
        self._watches[fd] = (raw_socket, stream, done)
        self._epoll.register(fd, select.EPOLLIN | select.EPOLLRDHUP)
        return done

    def unwatch(self, raw_socket: RawSocket) -> None:
        """Stop reading a socket (idempotent; used when a request times out or is cancelled)."""
        try:
            fd = raw_socket.fileno()
        except OSError:
            return
        if self._watches.pop(fd, None) is not None:
            try:
                self._epoll.unregister(fd)
            except (OSError, ValueError):
                pass

    def _run(self) -> None:
        hub = gevent.get_hub()
        watcher = hub.loop.io(self._epoll.fileno(), 1)  # one watcher for the whole run, not one per wait
        poll = self._epoll.poll
        read = self._read
        clock = time.perf_counter
        while True:
            hub.wait(watcher)
            until = clock() + _PASSES_S
            events = poll(0)
            while events:  # under load more chunks arrive while a batch is read: take them too, for a while
                for fd, _events in events:
                    read(fd)
                if clock() >= until:
                    break  # the hub's turn; the watcher fires again at once if sockets are still ready
                events = poll(0)

    def _read(self, fd: int) -> None:
        entry = self._watches.get(fd)
        if entry is None:
            return
        raw, stream, done = entry
        try:
            data = raw.recv(_READ_SIZE)
        except BlockingIOError:
            return
        except OSError as exc:
            self._finish(raw, stream, done, exc)
            return
        now = time.perf_counter()
        try:
            finished = stream.on_data(data, now)
        except BaseException as exc:  # noqa: BLE001 - a parser failure ends that stream only
            self._finish(raw, stream, done, exc)
            return
        if finished:
            self._finish(raw, stream, done, None)

    def _finish(self, raw: RawSocket, stream: StreamWatch, done: Event, error: BaseException | None) -> None:
        self.unwatch(raw)
        if error is not None:
            stream.on_error(error)
        done.set()


_reactor: StreamReactor | None = None


def reactor() -> StreamReactor:
    """The process's reactor, started on first use."""
    global _reactor
    if _reactor is None:
        _reactor = StreamReactor()
    return _reactor
