"""Loopback-only by default: a typo must not aim a drill at production.

Every host a drill would touch (the target plugin lists them) must be loopback,
be listed under the drill's ``allowed_hosts``, or be given with ``--allow-host``.
Hosts are compared as written; names are not resolved (DNS could say anything).
"""

from __future__ import annotations

import ipaddress

from drill import registry
from drill.errors import UnsafeTargetError
from drill.spec.loader import LoadedDrill

__all__ = ["check_host_list", "check_hosts", "is_loopback"]


def is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host in ("localhost", "ip6-localhost", "ip6-loopback") or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_hosts(loaded: LoadedDrill, allow: list[str] | tuple[str, ...] = ()) -> None:
    """Raise UnsafeTargetError for the first host of the drill's target outside loopback that is not allowed."""
    target_cls = registry.targets.get(loaded.drill.target.kind)
    check_host_list(target_cls.hosts(loaded.target_params), (*loaded.drill.allowed_hosts, *allow))


def check_host_list(hosts: list[tuple[str, str]], allow: list[str] | tuple[str, ...] = ()) -> None:
    """Raise UnsafeTargetError for the first (host, where) outside loopback that is not in ``allow``."""
    allowed = {h.lower() for h in allow}
    for host, where in hosts:
        if host and not is_loopback(host) and host.lower() not in allowed:
            raise UnsafeTargetError(host, where)
