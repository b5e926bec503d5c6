"""Toxiproxy proxies the harness makes in front of an external target's replicas (``upstream: host:port``).

An ``openai`` target's replica may name its server's address (``upstream``) instead of a proxy made by
hand. :func:`plan_proxies` plans one proxy per such replica: its name (``drill-<run id>-<replica>``),
its listen address (loopback; port 0: the server picks one) and its upstream; and, when the target gives
no ``toxiproxy_url``, the Toxiproxy server the harness starts itself (the real ``toxiproxy-server`` that
``./dev setup`` installs, on a port chosen by :meth:`HarnessProxyPlan.reserve` before anything starts).

The plan is the target's teardown data: the runner journals it (fsync) *before* the target starts, so
whatever :class:`HarnessProxies` creates is named in the journal first. The runner's shutdown removes
it (:meth:`HarnessProxies.remove`); if the runner dies, the watchdog and ``drill cleanup`` remove it
from the journal alone (:func:`remove_planned`), after the faults' reverts, exactly as they stop an
embedded stack. The harness's own server runs in a session of its own, so a Ctrl-C aimed at the run's
process group cannot take it (and the faults' toxics on it) away before the reverts ran.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from drill.backends.process import ProcessControl, ProcessRef, read_stat
from drill.backends.toxiproxy import ToxiproxyClient, ToxiproxyServer, find_toxiproxy_binary
from drill.errors import ProcessControlError, ToxiproxyError

__all__ = [
    "HarnessProxies",
    "MadeProxy",
    "OwnServer",
    "PlannedProxy",
    "HarnessProxyPlan",
    "describe_planned",
    "parse_address",
    "plan_proxies",
    "remove_planned",
]

LOOPBACK = "127.0.0.1"
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def parse_address(text: str, *, port_zero: bool = False) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as (host, port); ValueError saying what is wrong.

    ``port_zero`` allows port 0 (a listen address whose port the server picks).
    """
    if "://" in text or "/" in text:
        raise ValueError(f"expected host:port (no scheme, no path), e.g. 127.0.0.1:8080, got {text!r}")
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"expected host:port, e.g. 127.0.0.1:8080, got {text!r}")
    number = int(port)
    if not (0 if port_zero else 1) <= number <= 65535:
        raise ValueError(f"port {number} is out of range ({0 if port_zero else 1}-65535) in {text!r}")
    return host, number


def proxy_name(run_id: str, replica: str) -> str:
    """The name of the proxy in front of ``replica``: unique per run, so it never meets one made by hand."""
    return f"drill-{run_id.lower()}-{replica}"


def valid_replica_name(name: str) -> bool:
    """A replica name fit for a proxy name (it is part of Toxiproxy's URL paths)."""
    return bool(_NAME.match(name))


class _Plan(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class OwnServer(_Plan):
    """The Toxiproxy server the harness starts; ``state_file`` holds its PID once it runs."""

    host: str = LOOPBACK
    port: int = 0  # 0 until :meth:`HarnessProxyPlan.reserve`
    state_file: str
    log_file: str

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


class PlannedProxy(_Plan):
    replica: str
    name: str
    listen: str  # host:port; port 0: the server picks one at creation
    upstream: str


class HarnessProxyPlan(_Plan):
    """Every proxy (and the server, if the harness starts one) that a run will make."""

    toxiproxy_url: str | None = None  # the user's server; None: the harness starts ``server``
    server: OwnServer | None = None
    proxies: tuple[PlannedProxy, ...] = ()

    @property
    def url(self) -> str:
        """The Toxiproxy API the proxies live on (the own server's once reserved)."""
        if self.toxiproxy_url:
            return self.toxiproxy_url.rstrip("/")
        return self.server.url if self.server else ""

    def reserve(self) -> HarnessProxyPlan:
        """The plan with a free port for the harness's own server (journaled, so cleanup can find it)."""
        if self.server is None or self.server.port:
            return self
        return self.model_copy(update={"server": self.server.model_copy(update={"port": _unused_port(LOOPBACK)})})


@dataclass(frozen=True)
class MadeProxy:
    """A proxy as created: ``listen`` is the address clients (a router) connect to."""

    replica: str
    name: str
    listen: str
    upstream: str


def plan_proxies(
    run_id: str, run_dir: str, replicas: list[tuple[str, str, str | None]], toxiproxy_url: str | None
) -> HarnessProxyPlan:
    """One proxy per ``(replica name, upstream, listen or None)``; an own server when no ``toxiproxy_url``."""
    proxies = tuple(
        PlannedProxy(replica=name, name=proxy_name(run_id, name), listen=listen or f"{LOOPBACK}:0", upstream=upstream)
        for name, upstream, listen in replicas
    )
    server = None
    if not toxiproxy_url:
        folder = Path(run_dir) / "toxiproxy"
        server = OwnServer(state_file=str(folder / "server.json"), log_file=str(folder / "server.log"))
    return HarnessProxyPlan(toxiproxy_url=toxiproxy_url, server=server, proxies=proxies)


class HarnessProxies:
    """Creates a reserved :class:`HarnessProxyPlan` for one run and removes it again (idempotent)."""

    def __init__(self, plan: HarnessProxyPlan, *, timeout_s: float = 5.0) -> None:
        self.plan = plan
        self.timeout_s = timeout_s
        self._server: ToxiproxyServer | None = None

    def create(self) -> list[MadeProxy]:
        """Start the own server (if planned), then create every proxy; ToxiproxyError when one fails."""
        if self.plan.server is not None:
            self._server = _start_server(self.plan.server)
        with ToxiproxyClient(self.plan.url, timeout_s=self.timeout_s) as client:
            return [_create(client, planned) for planned in self.plan.proxies]

    def remove(self) -> None:
        """Delete the proxies and stop the own server; safe to call after a partial :meth:`create`."""
        server, self._server = self._server, None
        try:
            _delete_proxies(self.plan, self.timeout_s)
        finally:
            if server is not None:
                server.stop()
            if self.plan.server is not None:
                Path(self.plan.server.state_file).unlink(missing_ok=True)


def remove_planned(plan: HarnessProxyPlan, timeout_s: float = 5.0) -> None:
    """Remove what a run's plan names, from the journal alone (the watchdog, ``drill cleanup``)."""
    try:
        _delete_proxies(plan, timeout_s)
    finally:
        if plan.server is not None and plan.server.port:
            _stop_own_server(plan.server, timeout_s)


def describe_planned(plan: HarnessProxyPlan) -> list[str]:
    """What :func:`remove_planned` would remove, one line each (``drill cleanup --dry-run``); reads nothing but
    the server's state file."""
    lines = []
    for p in plan.proxies:
        listen = "" if p.listen.endswith(":0") else f"{p.listen} "
        lines.append(f"remove proxy {p.name} ({listen}-> {p.upstream}) of replica {p.replica} on {plan.url}")
    if plan.server is not None and plan.server.port:
        ref = _recorded_server(plan.server)
        pid = f"pid {ref.pid}" if ref else "found by its command line"
        lines.append(f"stop the harness's Toxiproxy server on {plan.server.url} ({pid})")
    return lines


def _create(client: ToxiproxyClient, planned: PlannedProxy) -> MadeProxy:
    proxy = client.create_proxy(planned.name, planned.upstream, listen=planned.listen)
    return MadeProxy(planned.replica, proxy.name, proxy.listen, proxy.upstream)


def _delete_proxies(plan: HarnessProxyPlan, timeout_s: float) -> None:
    if not plan.url or not plan.proxies:
        return
    with ToxiproxyClient(plan.url, timeout_s=timeout_s) as client:
        for planned in plan.proxies:
            try:
                client.delete_proxy(planned.name, missing_ok=True)
            except ToxiproxyError as exc:
                if plan.server is not None and exc.status is None:
                    return  # the own server is gone: so are its proxies
                raise


def _start_server(spec: OwnServer) -> ToxiproxyServer:
    Path(spec.state_file).parent.mkdir(parents=True, exist_ok=True)
    server = ToxiproxyServer(
        binary=find_toxiproxy_binary(),
        host=spec.host,
        port=spec.port,
        log_path=Path(spec.log_file),
        preexec_fn=os.setsid,  # a session of its own: the run's Ctrl-C must not stop it before the reverts
    ).start()
    info = read_stat(server.pid or 0)
    state = {"pid": server.pid, "start_ticks": info.start_ticks if info else None, "url": server.url}
    Path(spec.state_file).write_text(json.dumps(state) + "\n", encoding="utf-8")
    return server


def _stop_own_server(spec: OwnServer, timeout_s: float) -> None:
    """SIGTERM the harness's server of a dead run, found by its state file or else its command line."""
    control = ProcessControl(timeout_s=timeout_s)
    ref = _server_ref(spec, control)
    if ref is not None:
        try:
            control.kill(ref, signal.SIGTERM)
        except ProcessControlError:  # still there after timeout_s
            control.kill(ref, signal.SIGKILL)
    Path(spec.state_file).unlink(missing_ok=True)


def _recorded_server(spec: OwnServer) -> ProcessRef | None:
    """The server's process as its state file records it; None when the file was never written."""
    try:
        state = json.loads(Path(spec.state_file).read_text(encoding="utf-8"))
        return ProcessRef(int(state["pid"]), int(state["start_ticks"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _server_ref(spec: OwnServer, control: ProcessControl) -> ProcessRef | None:
    ref = _recorded_server(spec)  # None: killed between the server's start and its state file
    if ref is not None:
        return ref
    try:
        info = control.find(process_name=f"-host {spec.host} -port {spec.port}")
    except ProcessControlError:
        return None
    return info.ref if info.cmdline[-2:] == ("-port", str(spec.port)) else None


def _unused_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
