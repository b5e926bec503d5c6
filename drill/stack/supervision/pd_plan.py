"""The KV transfer links of a disaggregated stack, decided with the rest of its plan (:mod:`.stack_plan`).

Each prefill worker listens for KV reads on a port of its own; each (prefill ``p``, decode ``d``) pair gets a
Toxiproxy proxy ``<stack>-kv-p<p>-d<d>`` in front of it when ``kv_transfer.proxies`` is on, and the decode worker
dials the prefill worker through it (its launch's ``kv_peers``). The link is listed on both workers (kind ``kv``,
``rank`` = the other worker's index), so a fault can select it from either side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from drill.stack.config import StackConfig
from drill.stack.supervision.state import LinkState
from drill.stack.topology import WorkerRole

__all__ = ["KvPlan", "kv_ports_needed", "plan_kv", "role_value"]


@dataclass
class KvPlan:
    """Per replica index: its role, KV listen address (prefill), peers it dials (decode), its KV links;
    and the proxies to create as ``(name, listen, upstream)``."""

    roles: dict[int, WorkerRole] = field(default_factory=dict)
    listen: dict[int, str] = field(default_factory=dict)
    peers: dict[int, dict[str, str]] = field(default_factory=dict)
    links: dict[int, list[LinkState]] = field(default_factory=dict)
    proxies: list[tuple[str, str, str]] = field(default_factory=list)


def kv_ports_needed(config: StackConfig) -> int:
    """Ports the KV links take: one per prefill worker, one per proxied pair."""
    topology = config.topology
    if topology is None:
        return 0
    return topology.prefill + (topology.prefill * topology.decode if topology.kv_transfer.proxies else 0)


def plan_kv(config: StackConfig, stack: str, ports: list[int]) -> KvPlan:
    """Take the KV ports from ``ports`` and decide every KV link (an empty plan for an aggregated stack)."""
    plan = KvPlan()
    topology = config.topology
    if topology is None:
        return plan
    host = config.host
    prefill = range(topology.prefill)
    decode = range(topology.prefill, topology.prefill + topology.decode)
    plan.roles = {i: topology.role_of(i) for i in [*prefill, *decode]}
    plan.listen = {p: f"{host}:{ports.pop()}" for p in prefill}
    plan.links = {i: [] for i in plan.roles}
    for d in decode:
        plan.peers[d] = {}
        for p in prefill:
            name = f"{stack}-kv-p{p}-d{d}"
            connect = plan.listen[p]
            if topology.kv_transfer.proxies:
                connect = f"{host}:{ports.pop()}"
                plan.proxies.append((name, connect, plan.listen[p]))
            plan.peers[d][f"replica-{p}"] = connect
            proxy = name if topology.kv_transfer.proxies else None
            for here, other in ((d, p), (p, d)):
                plan.links[here].append(
                    LinkState(name=name, kind="kv", rank=other, proxy=proxy, listen=connect, upstream=plan.listen[p])
                )
    return plan


def role_value(plan: KvPlan, index: int) -> Literal["prefill", "decode"] | None:
    """Replica ``index``'s role as the launches and the state file spell it (None: aggregated)."""
    role = plan.roles.get(index)
    if role is None:
        return None
    return "prefill" if role is WorkerRole.PREFILL else "decode"
