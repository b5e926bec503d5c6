"""A typed client for the Toxiproxy 2.x REST API, and a manager for the real server binary.

Why not toxiproxy-python: it keeps host and port in class attributes, has no timeouts, no
toxic update and no server-side populate (docs/dependencies.md §2.1). This client follows the
API as measured against Toxiproxy 2.12.0 (docs/dependencies.md §2.3):

* updates use ``PATCH`` (2.6+); toxic attributes are *merged* into the existing ones;
* creating a proxy answers 201, creating a toxic answers **200**;
* a ``User-Agent`` starting with ``Mozilla/`` gets 403 (we send ``llm-drill/<version>``);
* ``toxicity`` is rolled per TCP connection and direction when the toxic starts on it, not per
  HTTP request;
* ``stream``: ``upstream`` = client→server bytes, ``downstream`` = server→client bytes.

Every call has a timeout (``timeout_s``, default 5 s). Every failure raises
:class:`drill.errors.ToxiproxyError` with the HTTP ``status`` (or ``None`` for transport
failures), the ``operation`` and a hint. ``TOXIPROXY_URL`` selects an existing server
(:meth:`ToxiproxyClient.from_env`); otherwise :class:`ToxiproxyServer` starts the real binary.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, Field

from drill.backends.rest import RestClient, user_agent
from drill.errors import NotAvailableError, ToxiproxyError

__all__ = [
    "Proxy",
    "NewProxy",
    "Stream",
    "Toxic",
    "ToxicType",
    "ToxiproxyClient",
    "ToxiproxyServer",
    "find_toxiproxy_binary",
]

DEFAULT_TIMEOUT_S = 5.0
_USER_AGENT = user_agent("toxiproxy client")


class ToxicType(StrEnum):
    """The toxic types of Toxiproxy 2.x; attribute names and units in the comments."""

    LATENCY = "latency"  # latency ms, jitter ms (measured from each chunk's arrival)
    BANDWIDTH = "bandwidth"  # rate KB/s (1 KB = 1000 bytes)
    SLOW_CLOSE = "slow_close"  # delay ms
    TIMEOUT = "timeout"  # timeout ms (0 = hold forever)
    RESET_PEER = "reset_peer"  # timeout ms, then TCP RST
    SLICER = "slicer"  # average_size B, size_variation B, delay µs
    LIMIT_DATA = "limit_data"  # bytes
    NOOP = "noop"


class Stream(StrEnum):
    """Direction a toxic applies to, seen from the proxy's client."""

    UPSTREAM = "upstream"  # client -> server
    DOWNSTREAM = "downstream"  # server -> client


class _ToxiproxyWire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Any:
        """Build from a server answer, dropping keys the server leaks (2.12 adds ``Logger``)."""
        return cls.model_validate({k: v for k, v in data.items() if k in cls.model_fields})


class Toxic(_ToxiproxyWire):
    """One toxic as the server reports it."""

    name: str
    type: ToxicType
    stream: Stream = Stream.DOWNSTREAM
    toxicity: float = 1.0
    attributes: dict[str, int] = Field(default_factory=dict)


class Proxy(_ToxiproxyWire):
    """One proxy as the server reports it; ``listen`` is the actual ``host:port``."""

    name: str
    listen: str
    upstream: str
    enabled: bool = True
    toxics: tuple[Toxic, ...] = ()

    @property
    def listen_port(self) -> int:
        """The TCP port the proxy listens on."""
        return int(self.listen.rsplit(":", 1)[1])


class NewProxy(_ToxiproxyWire):
    """A proxy to create: ``listen`` ``host:0`` lets the server pick a free port."""

    name: str
    upstream: str
    listen: str = "127.0.0.1:0"
    enabled: bool = True


M = TypeVar("M", bound=_ToxiproxyWire)


class ToxiproxyClient(RestClient):
    """Talks to one Toxiproxy server. Thread-safe for concurrent calls (one httpx pool).

    ``base_url`` is e.g. ``http://127.0.0.1:8474``; ``timeout_s`` bounds every call (connect,
    read, write and pool wait). Use as a context manager or call :meth:`close`.
    """

    error = ToxiproxyError
    who = "Toxiproxy"
    timeout_hint = "the server may be hung or overloaded; check its log"
    unreachable_hint = "start one (`drill stack up` does), or point TOXIPROXY_URL at a running server"
    status_hints = {
        400: "check the toxic type, the stream (upstream|downstream) and that attributes are integers",
        403: "Toxiproxy refuses User-Agents starting with 'Mozilla/'",
        404: "it does not exist (already deleted, or a typo); list proxies with GET /proxies",
        409: "it already exists; delete it first, or use populate() which keeps identical proxies",
        500: "the server could not listen there: the address may be in use",
    }

    def __init__(
        self, base_url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, transport: httpx.BaseTransport | None = None
    ) -> None:
        super().__init__(base_url, timeout_s=timeout_s, user_agent=_USER_AGENT, transport=transport)

    @classmethod
    def from_env(cls, default: str | None = None, **kwargs: Any) -> ToxiproxyClient:
        """A client for ``$TOXIPROXY_URL``, else ``default``.

        Raises :class:`NotAvailableError` when neither is set.
        """
        url = os.environ.get("TOXIPROXY_URL") or default
        if not url:
            raise NotAvailableError(
                "no Toxiproxy server configured",
                hint="set TOXIPROXY_URL=http://host:port, or start one with ToxiproxyServer",
            )
        return cls(url, **kwargs)

    # -- server ------------------------------------------------------------------------------
    def version(self) -> str:
        """The server's version string, e.g. ``"2.12.0"`` (``"git"`` for an untagged build)."""
        response = self._request("GET", "/version", "version")
        try:
            return str(response.json()["version"])
        except (ValueError, KeyError, TypeError):  # plain text before 2.7.0
            return response.text.strip()

    def reset(self) -> None:
        """Re-enable every proxy and remove every toxic (``POST /reset``): the panic button."""
        self._request("POST", "/reset", "reset", ok=(204,))

    # -- proxies -----------------------------------------------------------------------------
    def proxies(self) -> dict[str, Proxy]:
        """Every proxy on the server by name."""
        data = self._json("GET", "/proxies", "list proxies")
        return {name: Proxy.from_wire(p) for name, p in data.items()}

    def proxy(self, name: str) -> Proxy:
        """One proxy; raises ToxiproxyError (status 404) when it does not exist."""
        return self._model(Proxy, "GET", f"/proxies/{name}", f"get proxy {name!r}")

    def create_proxy(self, name: str, upstream: str, *, listen: str = "127.0.0.1:0", enabled: bool = True) -> Proxy:
        """Create a proxy; ``listen`` port 0 lets the server pick one (read it from the result)."""
        body = NewProxy(name=name, upstream=upstream, listen=listen, enabled=enabled).model_dump()
        return self._model(Proxy, "POST", "/proxies", f"create proxy {name!r}", json=body, ok=(201,))

    def update_proxy(
        self, name: str, *, enabled: bool | None = None, listen: str | None = None, upstream: str | None = None
    ) -> Proxy:
        """PATCH a proxy. Changing listen/upstream restarts it; ``enabled=False`` drops every link."""
        body = {k: v for k, v in {"enabled": enabled, "listen": listen, "upstream": upstream}.items() if v is not None}
        return self._model(Proxy, "PATCH", f"/proxies/{name}", f"update proxy {name!r}", json=body)

    def enable(self, name: str) -> Proxy:
        """Open the proxy's listener again."""
        return self.update_proxy(name, enabled=True)

    def disable(self, name: str) -> Proxy:
        """Close the proxy's listener and every connection through it ("down")."""
        return self.update_proxy(name, enabled=False)

    def delete_proxy(self, name: str, *, missing_ok: bool = True) -> bool:
        """Delete a proxy. Returns False when it did not exist (and ``missing_ok``)."""
        return self._delete(f"/proxies/{name}", f"delete proxy {name!r}", missing_ok)

    def populate(self, proxies: Iterable[NewProxy]) -> list[Proxy]:
        """Create or keep proxies in one server-side call (``POST /populate``).

        A proxy whose listen and upstream are unchanged is kept with its live connections.
        Raises ToxiproxyError when any proxy failed (the server reports all in one body).
        """
        body = [proxy.model_dump() for proxy in proxies]
        data = self._json("POST", "/populate", "populate", json=body, ok=(201,))
        return [Proxy.from_wire(p) for p in data.get("proxies", [])]

    # -- toxics ------------------------------------------------------------------------------
    def toxics(self, proxy: str) -> list[Toxic]:
        """The toxics on one proxy."""
        data = self._json("GET", f"/proxies/{proxy}/toxics", f"list toxics of {proxy!r}")
        return [Toxic.from_wire(t) for t in data]

    def add_toxic(
        self,
        proxy: str,
        type: ToxicType | str,
        attributes: dict[str, int] | None = None,
        *,
        name: str | None = None,
        stream: Stream | str = Stream.DOWNSTREAM,
        toxicity: float = 1.0,
    ) -> Toxic:
        """Add a toxic; its default name is ``<type>_<stream>``. Units per :class:`ToxicType`."""
        body: dict[str, Any] = {
            "type": str(ToxicType(type)),
            "stream": str(Stream(stream)),
            "toxicity": toxicity,
            "attributes": dict(attributes or {}),
        }
        if name is not None:
            body["name"] = name
        op = f"add {body['type']} toxic to {proxy!r}"
        return self._model(Toxic, "POST", f"/proxies/{proxy}/toxics", op, json=body)

    def update_toxic(
        self, proxy: str, name: str, *, attributes: dict[str, int] | None = None, toxicity: float | None = None
    ) -> Toxic:
        """PATCH a toxic in place; ``attributes`` are merged into the existing ones."""
        body: dict[str, Any] = {}
        if attributes is not None:
            body["attributes"] = dict(attributes)
        if toxicity is not None:
            body["toxicity"] = toxicity
        op = f"update toxic {name!r} of {proxy!r}"
        return self._model(Toxic, "PATCH", f"/proxies/{proxy}/toxics/{name}", op, json=body)

    def delete_toxic(self, proxy: str, name: str, *, missing_ok: bool = True) -> bool:
        """Remove a toxic. Returns False when it (or its proxy) did not exist (and ``missing_ok``)."""
        return self._delete(f"/proxies/{proxy}/toxics/{name}", f"delete toxic {name!r} of {proxy!r}", missing_ok)

    # -- plumbing ----------------------------------------------------------------------------
    def _model(self, model: type[M], method: str, path: str, operation: str, **kwargs: Any) -> M:
        return model.from_wire(self._json(method, path, operation, **kwargs))

    def _delete(self, path: str, operation: str, missing_ok: bool) -> bool:
        try:
            self._request("DELETE", path, operation, ok=(204,))
        except ToxiproxyError as exc:
            if missing_ok and exc.status == 404:
                return False
            raise
        return True


# -- the server ------------------------------------------------------------------------------


def find_toxiproxy_binary() -> Path:
    """Locate the real server: ``$TOXIPROXY_BIN``, ``toxiproxy-server`` on PATH, or next to Python.

    Raises :class:`NotAvailableError` with an install hint when none is found.
    """
    candidates = [
        os.environ.get("TOXIPROXY_BIN"),
        shutil.which("toxiproxy-server"),
        str(Path(sys.executable).parent / "toxiproxy-server"),
    ]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK) and Path(candidate).is_file():
            return Path(candidate)
    raise NotAvailableError(
        "the Toxiproxy server binary (toxiproxy-server) was not found",
        hint="run ./dev setup (go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0), "
        "set TOXIPROXY_BIN to the binary, or TOXIPROXY_URL to a running server",
    )


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class ToxiproxyServer:
    """Runs the real ``toxiproxy-server`` on a free port of ``host`` until :meth:`stop`.

    ``preexec_fn`` runs in the child before exec (the stack passes one that makes the server
    die with its parent). ``log_path`` receives the server's JSON log (default: discarded).
    """

    def __init__(
        self,
        *,
        binary: Path | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        log_path: Path | None = None,
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        self.binary = binary or find_toxiproxy_binary()
        self.host = host
        self.port = port
        self.log_path = log_path
        self._preexec_fn = preexec_fn
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` of the API; valid after :meth:`start`."""
        if self.port is None:
            raise ToxiproxyError("the Toxiproxy server was not started", operation="url")
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._process.pid if self._process else None

    def start(self, timeout_s: float = 10.0) -> ToxiproxyServer:
        """Start the server and wait until ``GET /version`` answers.

        With no fixed port a taken port is retried (3 tries). Raises ToxiproxyError when the
        server exits or does not answer within ``timeout_s``.
        """
        tries = 1 if self.port is not None else 3
        for _attempt in range(tries):
            port = self.port if tries == 1 else _free_port(self.host)
            if self._try_start(port, timeout_s):
                self.port = port
                return self
        raise ToxiproxyError(
            f"toxiproxy-server ({self.binary}) did not start on {self.host}",
            hint=f"see its log: {self.log_path or '(not kept; pass log_path)'}",
            operation="start server",
        )

    def _try_start(self, port: int | None, timeout_s: float) -> bool:
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self._process = subprocess.Popen(
                [str(self.binary), "-host", self.host, "-port", str(port)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=self._preexec_fn,
            )
        finally:
            if not isinstance(log, int):  # a file we opened, not subprocess.DEVNULL
                log.close()
        if self._wait_ready(f"http://{self.host}:{port}", timeout_s):
            return True
        self.stop()
        return False

    def _wait_ready(self, url: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with ToxiproxyClient(url, timeout_s=1.0) as client:
            while time.monotonic() < deadline:
                if self._process is None or self._process.poll() is not None:
                    return False
                try:
                    client.version()
                    return True
                except ToxiproxyError:
                    time.sleep(0.05)
        return False

    def client(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> ToxiproxyClient:
        """A new client for this server (the caller closes it)."""
        return ToxiproxyClient(self.url, timeout_s=timeout_s)

    def stop(self, timeout_s: float = 5.0) -> None:
        """SIGTERM the server, SIGKILL after ``timeout_s``; idempotent."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout_s)

    def __enter__(self) -> ToxiproxyServer:
        return self.start() if self._process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
