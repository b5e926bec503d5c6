"""The harness's stand-in for a Kubernetes Service when it drives a cluster from outside: a TCP forwarder.

A Service sends each new connection to one of the pods behind it that serve (kube-proxy's rules, kept in step with
the pods by the EndpointSlice controller). From outside the cluster the harness does the same itself: it listens on
a free loopback port, keeps the list of serving pods fresh by asking the API server every ``refresh_s``, and
splices each accepted connection, byte for byte, to the next pod in turn (round robin) through a ``dial``:

* ``access: endpoint``: the address in the pod's ``llm-drill.dev/endpoint`` annotation (what the tests' binder writes
  for a simulated pod; any proxy in front of a pod may write it too);
* ``access: port_forward``: the API server's port-forward to the pod's port (written, not exercised here: the
  simulated node of the tests has no kubelet to forward to).

Unlike kube-proxy's iptables mode, which may still send a connection to a pod in the moment before its next sync,
a pod whose connect is refused is skipped for the next one in turn (at most once round the list); a connection
already spliced to a pod that dies is reset, as it would be in a cluster. docs/kubernetes.md says what this proves.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass

from drill.errors import DrillError

__all__ = ["PodEndpoint", "ServiceForwarder", "dial_address"]

log = logging.getLogger(__name__)

_CHUNK = 64 * 1024


@dataclass(frozen=True)
class PodEndpoint:
    """One serving pod as the forwarder reaches it."""

    pod: str
    address: str  # what ``dial`` understands: host:port, or the pod's port for a port-forward


class ServiceForwarder:
    """Listen on ``host``:free port; splice each connection to the next serving pod of ``endpoints()``."""

    def __init__(
        self,
        endpoints: Callable[[], list[PodEndpoint]],
        dial: Callable[[PodEndpoint], socket.socket],
        *,
        host: str = "127.0.0.1",
        refresh_s: float = 0.25,
    ) -> None:
        self._endpoints, self._dial, self._refresh_s = endpoints, dial, refresh_s
        self._current: list[PodEndpoint] = []
        self._lock = threading.Lock()
        self._turn = itertools.count()
        self._stop = threading.Event()
        self._listener = socket.create_server((host, 0))
        self._listener.settimeout(0.2)
        self.address = "{}:{}".format(*self._listener.getsockname()[:2])
        self._threads: list[threading.Thread] = []
        self._open: set[socket.socket] = set()

    def start(self) -> ServiceForwarder:
        self.refresh()
        for name, fn in (("accept", self._accept_loop), ("refresh", self._refresh_loop)):
            thread = threading.Thread(target=fn, name=f"kube-service-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def refresh(self) -> list[PodEndpoint]:
        """Ask for the serving pods now; keep the last list when the API server does not answer."""
        try:
            found = self._endpoints()
        except DrillError as exc:
            log.warning("kube service: endpoints not refreshed: %s", exc)
            return self.current()
        with self._lock:
            self._current = found
        return found

    def current(self) -> list[PodEndpoint]:
        with self._lock:
            return list(self._current)

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        with self._lock:
            sockets, self._open = list(self._open), set()
        for sock in sockets:
            _close(sock)
        for thread in self._threads:
            thread.join(timeout=2.0)

    def _refresh_loop(self) -> None:
        while not self._stop.wait(self._refresh_s):
            self.refresh()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(client,), name="kube-service-conn", daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = self._connect()
        if upstream is None:
            _close(client)
            return
        with self._lock:
            self._open.update((client, upstream))
        back = threading.Thread(target=_pump, args=(upstream, client), name="kube-service-pump", daemon=True)
        back.start()
        _pump(client, upstream)
        back.join()
        with self._lock:
            self._open.difference_update((client, upstream))
        _close(client)
        _close(upstream)

    def _connect(self) -> socket.socket | None:
        """A connection to the next serving pod in turn; a refusing pod is skipped (once round the list)."""
        pods = self.current()
        start = next(self._turn)
        for i in range(len(pods)):
            endpoint = pods[(start + i) % len(pods)]
            try:
                return self._dial(endpoint)
            except (OSError, DrillError) as exc:
                log.info("kube service: %s (%s) refused: %s", endpoint.pod, endpoint.address, exc)
        return None


def dial_address(endpoint: PodEndpoint, timeout_s: float = 5.0) -> socket.socket:
    """A TCP connection to ``host:port``."""
    host, _, port = endpoint.address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=timeout_s)
    sock.settimeout(None)
    return sock


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until EOF (then half-close ``dst``) or an error (then close both)."""
    try:
        while chunk := src.recv(_CHUNK):
            dst.sendall(chunk)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
    except OSError:
        _close(src)
        _close(dst)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
