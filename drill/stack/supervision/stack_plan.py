"""Deciding a stack's layout before anything starts: ports, names, launches, proxies.

:func:`build_plan` is the *decide* half of ``drill stack up`` (the launcher writes the plan, the
supervisor *applies* it). Every address is fixed here (ephemeral ports picked by binding to 0),
so the router's upstreams, the replicas' peers and the Toxiproxy proxies agree before any
process exists, and a replica restarted by the supervisor comes back on the same addresses.

Names: proxies ``<stack>-replica-<i>`` (router -> replica), ``<stack>-replica-<i>-tp<r>``
(rank 0 <-> TP rank r), ``<stack>-replica-<i>-pp<r>`` (stage r-1 -> stage r); containers
``llm-drill-<stack>-replica-<i>`` labelled ``llm-drill.stack=<stack>``, ``llm-drill.replica=<i>``.
"""

from __future__ import annotations

import secrets
import sys
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from drill.stack.config import Runtime, StackConfig
from drill.stack.launch import PeerLaunch, ReplicaLaunch, RouterLaunch, UpstreamLaunch
from drill.stack.supervision.pd_plan import kv_ports_needed, plan_kv, role_value
from drill.stack.supervision.ports import free_ports
from drill.stack.supervision.state import LinkState, ReplicaEntry, StackState, run_dir

__all__ = ["ProxyPlan", "StackPlan", "build_plan", "container_name", "CONTAINER_LABEL"]

CONTAINER_LABEL = "llm-drill.stack"
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class ProxyPlan(BaseModel):
    """A Toxiproxy proxy to create: ``listen`` forwards to ``upstream``."""

    model_config = _FROZEN

    name: str
    listen: str
    upstream: str


class StackPlan(BaseModel):
    """What the supervisor starts. ``state`` is what the launcher publishes once all answer."""

    model_config = _FROZEN

    state: StackState
    python: str
    toxiproxy_port: int | None  # None: use the external server at state.toxiproxy_url
    proxies: tuple[ProxyPlan, ...]
    router_launch: RouterLaunch
    replica_launches: tuple[ReplicaLaunch, ...]
    lifeline_port: int | None = None  # docker runtime: containers watch this socket

    @property
    def run_dir(self) -> Path:
        return self.state.run_dir

    def launch_path(self, what: str) -> Path:
        """Where ``router`` / ``replica-<i>`` launch JSON is written."""
        return self.run_dir / f"{what}.launch.json"

    @property
    def plan_path(self) -> Path:
        return self.run_dir / "plan.json"

    @property
    def status_path(self) -> Path:
        """The supervisor's status file (``starting``, ``ready``, ``failed``, ``stopped``)."""
        return self.run_dir / "supervisor.status.json"


def container_name(stack: str, index: int) -> str:
    """The Docker container of replica ``index`` of ``stack``."""
    return f"llm-drill-{stack}-replica-{index}"


def _addr(host: str, port: int) -> str:
    return f"{host}:{port}"


def _links(
    config: StackConfig, stack: str, index: int, ports: list[int]
) -> list[tuple[PeerLaunch, LinkState, ProxyPlan | None]]:
    """The TP ranks and PP stages of one replica (at its own engine's TP/PP), each behind a proxy when configured."""
    host, engine, links = config.host, config.engine_of(index), config.links
    result: list[tuple[PeerLaunch, LinkState, ProxyPlan | None]] = []
    kinds: tuple[tuple[Literal["tp", "pp"], int, bool], ...] = (
        ("tp", engine.tensor_parallel_size, links.tp_proxies),
        ("pp", engine.pipeline_parallel_size, links.pp_proxies),
    )
    for kind, count, proxied in kinds:
        for rank in range(1, count):
            listen, proxy_listen = _addr(host, ports.pop()), _addr(host, ports.pop())
            name = f"{stack}-replica-{index}-{kind}{rank}"
            proxy = ProxyPlan(name=name, listen=proxy_listen, upstream=listen) if proxied else None
            connect = proxy_listen if proxied else listen
            proxy_name = name if proxy else None
            peer = PeerLaunch(kind=kind, rank=rank, listen=listen, connect=connect, proxy=proxy_name)
            state = LinkState(name=name, kind=kind, rank=rank, proxy=proxy_name, listen=connect, upstream=listen)
            result.append((peer, state, proxy))
    return _chain_pp(result)


def _chain_pp(
    links: list[tuple[PeerLaunch, LinkState, ProxyPlan | None]],
) -> list[tuple[PeerLaunch, LinkState, ProxyPlan | None]]:
    pp = [i for i, (peer, _, _) in enumerate(links) if peer.kind == "pp"]
    for here, nxt in zip(pp, pp[1:]):
        peer, state, proxy = links[here]
        links[here] = (peer.model_copy(update={"next_connect": links[nxt][0].connect}), state, proxy)
    return links


def _ports_needed(config: StackConfig) -> int:
    engines = [config.engine_of(index) for index in range(config.replicas)]
    links = sum(2 * (e.tensor_parallel_size - 1 + e.pipeline_parallel_size - 1) for e in engines)
    return 3 + 2 * config.replicas + links + kv_ports_needed(config)


def build_plan(
    config: StackConfig,
    *,
    name: str,
    runtime: Runtime,
    state_dir: Path | None,
    otlp_endpoint: str | None,
    toxiproxy_url: str | None,
) -> StackPlan:
    """Decide every port, name and launch of stack ``name`` (nothing is started or written)."""
    ports = free_ports(_ports_needed(config), config.host)
    root, host, token = run_dir(name, state_dir), config.host, secrets.token_urlsafe(18)
    router_port, toxiproxy_port, lifeline_port = ports.pop(), ports.pop(), ports.pop()
    kv = plan_kv(config, name, ports)  # disaggregated: the KV links; nothing for an aggregated stack
    proxies = [ProxyPlan(name=n, listen=listen, upstream=upstream) for n, listen, upstream in kv.proxies]
    launches: list[ReplicaLaunch] = []
    entries: list[ReplicaEntry] = []
    for index in range(config.replicas):
        direct = _addr(host, ports.pop())
        proxy_listen = ports.pop()
        links = _links(config, name, index, ports)
        proxies.extend(proxy for _, _, proxy in links if proxy is not None)
        proxy_name = f"{name}-replica-{index}" if config.links.replica_proxies else None
        url = f"http://{_addr(host, proxy_listen)}" if proxy_name else f"http://{direct}"
        if proxy_name:
            proxies.append(ProxyPlan(name=proxy_name, listen=_addr(host, proxy_listen), upstream=direct))
        log_path = root / f"replica-{index}.log"
        launch = ReplicaLaunch(
            name=f"replica-{index}",
            index=index,
            host=host,
            port=int(direct.rsplit(":", 1)[1]),
            config=config.replica_config(index),  # its role's engine in a disaggregated stack
            admin_token=token,
            otlp_endpoint=otlp_endpoint,
            ledger_path=root / f"replica-{index}.ledger.jsonl",
            log_path=log_path,
            seed=config.seed + index,
            peers=tuple(peer for peer, _, _ in links),
            role=role_value(kv, index),
            kv_listen=kv.listen.get(index),
            kv_peers=kv.peers.get(index, {}),
        )
        launches.append(launch)
        entries.append(
            ReplicaEntry(
                name=launch.name,
                index=index,
                url=url,
                direct_url=f"http://{direct}",
                admin_url=f"http://{direct}",
                pid_file=root / f"replica-{index}.pid",
                proxy=proxy_name,
                container=container_name(name, index) if runtime is Runtime.DOCKER else None,
                links=(*(state for _, state, _ in links), *kv.links.get(index, ())),
                ledger_path=launch.ledger_path,
                log_path=log_path,
                role=launch.role,
            )
        )
    router_launch = RouterLaunch(
        host=host,
        port=router_port,
        admin_token=token,
        otlp_endpoint=otlp_endpoint,
        router=config.router,
        abort_abandoned=config.abort_abandoned,
        ready_file=root / "router.ready.json",
        replicas=tuple(UpstreamLaunch(name=e.name, index=e.index, url=e.url, role=e.role) for e in entries),
    )
    state = StackState(
        name=name,
        runtime=runtime,
        model=config.model_name,
        router=f"http://{_addr(host, router_port)}",
        router_admin_url=f"http://{_addr(host, router_port)}/admin",
        admin_token=token,
        toxiproxy_url=toxiproxy_url or f"http://{_addr(host, toxiproxy_port)}",
        toxiproxy_owned=toxiproxy_url is None,
        otlp_endpoint=otlp_endpoint,
        replicas=tuple(entries),
        run_dir=root,
        created_at=time.time(),
    )
    return StackPlan(
        state=state,
        python=sys.executable,
        toxiproxy_port=None if toxiproxy_url else toxiproxy_port,
        proxies=tuple(proxies),
        router_launch=router_launch,
        replica_launches=tuple(launches),
        lifeline_port=lifeline_port if runtime is Runtime.DOCKER else None,
    )
