"""Toxiproxy toxics shared by the network faults: named from the fault id, verified by listing, removed by name.

Toxic names are ``drill-<fault_id>[-<part>]`` (:func:`artefact`), so a revert rebuilt from the
journal after a crash finds and removes exactly what the fault added, and nothing else.
Units follow Toxiproxy (docs/dependencies.md §2.3): latency and jitter in ms, bandwidth in KB/s
(1 KB = 1000 bytes), timeouts in ms.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from drill.api import FaultContext, FaultNotLanded, InjectError, LandingProof, ToxiproxyError

__all__ = [
    "Direction",
    "ToxicPlan",
    "add_toxics",
    "artefact",
    "poll",
    "refused",
    "remove_toxics",
    "required",
    "verify_toxics",
]

T = TypeVar("T")


class Direction(enum.StrEnum):
    """Which bytes a toxic delays, seen from the proxy's client (Toxiproxy's ``stream``)."""

    DOWNSTREAM = "downstream"  # answers: server -> client
    UPSTREAM = "upstream"  # requests: client -> server
    BOTH = "both"

    def streams(self) -> list[str]:
        """The Toxiproxy streams this direction covers."""
        return ["downstream", "upstream"] if self is Direction.BOTH else [self.value]


def required(value: T | None, param: str, ctx: FaultContext) -> T:
    """A param the fault's validator requires with the chosen method (so never None here; InjectError if it is)."""
    if value is None:
        raise InjectError(f"param {param} is required with this method", fault=ctx.fault_id)
    return value


def artefact(ctx: FaultContext, *parts: str) -> str:
    """The deterministic name of something a fault creates: ``drill-<fault_id>[-<part>...]``."""
    return "-".join(["drill", ctx.fault_id, *parts])


@dataclass(frozen=True)
class ToxicPlan:
    """One toxic to put on each proxy: ``attributes`` are integers in Toxiproxy's units."""

    name: str
    type: str
    attributes: dict[str, int] = field(default_factory=dict)
    stream: str = "downstream"
    toxicity: float = 1.0


def add_toxics(ctx: FaultContext, proxies: list[str], plans: list[ToxicPlan]) -> None:
    """Add every planned toxic to every proxy (raises ToxiproxyError on the first failure)."""
    if not proxies:
        raise InjectError(
            "no Toxiproxy proxy to put the toxic on",
            fault=ctx.fault_id,
            hint="the target must route this traffic through Toxiproxy (target.config.links)",
        )
    for proxy in proxies:
        for plan in plans:
            ctx.toxiproxy.add_toxic(
                proxy, plan.type, plan.attributes, name=plan.name, stream=plan.stream, toxicity=plan.toxicity
            )


def verify_toxics(ctx: FaultContext, proxies: list[str], plans: list[ToxicPlan]) -> LandingProof:
    """Evidence that every planned toxic is listed on every proxy with its attributes; FaultNotLanded otherwise."""
    seen: dict[str, str | int | float | bool | None] = {}
    for proxy in proxies:
        listed = {t.name: t for t in ctx.toxiproxy.toxics(proxy)}
        for plan in plans:
            toxic = listed.get(plan.name)
            if toxic is None:
                raise FaultNotLanded(
                    f"toxic {plan.name} is not on proxy {proxy} (it lists: {', '.join(listed) or 'no toxics'})",
                    fault=ctx.fault_id,
                )
            wrong = {k: v for k, v in plan.attributes.items() if toxic.attributes.get(k) != v}
            if wrong or str(toxic.type) != plan.type or str(toxic.stream) != plan.stream:
                raise FaultNotLanded(
                    f"toxic {plan.name} on {proxy} is {toxic.type} {toxic.stream} "
                    f"{toxic.attributes}, not {plan.type} {plan.stream} {plan.attributes}",
                    fault=ctx.fault_id,
                )
            seen[f"{proxy}/{plan.name}"] = f"{plan.type} {plan.stream} {plan.attributes} toxicity {toxic.toxicity:g}"
    names = ", ".join(sorted({p.name for p in plans}))
    return LandingProof(summary=f"toxic(s) {names} listed on {', '.join(proxies)}", observations=seen)


def remove_toxics(ctx: FaultContext, proxies: list[str], names: list[str]) -> None:
    """Delete the named toxics from every proxy; a missing toxic or proxy is not an error.

    Neither is a Toxiproxy server that refuses connections: toxics live in the server's memory, so a
    server that is not running holds none. A server that does not answer (timeout) is an error.
    """
    try:
        for proxy in proxies:
            for name in names:
                ctx.toxiproxy.delete_toxic(proxy, name, missing_ok=True)
    except ToxiproxyError as exc:
        if not refused(exc):
            raise
        ctx.note(f"Toxiproxy refuses connections ({exc.message}): no server, so no toxic left to remove")


def refused(exc: BaseException) -> bool:
    """True when ``exc`` was caused by a refused TCP connection: nothing listens there (nothing to revert)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def poll(check: Callable[[], T | None], timeout_s: float, interval_s: float = 0.05) -> T | None:
    """Call ``check`` until it returns something other than None, for at most ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result is not None or time.monotonic() >= deadline:
            return result
        time.sleep(interval_s)
