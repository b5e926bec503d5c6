"""Shared by the built-in faults that act through the reference stack's admin API (stack-contracts.md §5).

:func:`with_admin_retry` calls the API while a replica may be restarting. The simulated SM clock cap is one
mechanism that two faults offer — ``gpu_clock_cap`` (method ``stack_admin``) and ``slow_replica`` (method
``clock_cap``) — so both declare it with :func:`clock_cap_mechanism` and drive it with the four functions below:
read each replica's clock before, cap it, verify it, put it back.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Literal, TypeVar, overload

from drill.api import (
    AdminApiError,
    Capability,
    FaultContext,
    FaultNotLanded,
    LandingProof,
    Mechanism,
    Realism,
)
from faults._toxics import refused

__all__ = [
    "cap_clocks",
    "clock_cap_mechanism",
    "clock_fractions",
    "restore_clocks",
    "verify_clocks",
    "with_admin_retry",
]

T = TypeVar("T")


@overload
def with_admin_retry(ctx: FaultContext, call: Callable[[], T], *, gone_ok: Literal[False] = False) -> T: ...
@overload
def with_admin_retry(ctx: FaultContext, call: Callable[[], T], *, gone_ok: bool) -> T | None: ...
def with_admin_retry(ctx: FaultContext, call: Callable[[], T], *, gone_ok: bool = False) -> T | None:
    """Call the admin API, retrying while the replica does not answer (it may be restarting).

    Gives up after ``ctx.timeout_s`` seconds, or at once on an HTTP error (the replica answered).
    With ``gone_ok`` (reverts), a replica still refusing connections then returns None: a simulated
    GPU condition lives in the replica process, and no process listens there.
    """
    deadline = time.monotonic() + ctx.timeout_s
    while True:
        try:
            return call()
        except AdminApiError as exc:
            if exc.status is not None:
                raise
            if time.monotonic() >= deadline:
                if gone_ok and refused(exc):
                    ctx.note(f"{exc.message}: no replica process there, so no simulated condition to remove")
                    return None
                raise
            time.sleep(0.1)


# -- the simulated SM clock cap --------------------------------------------------------------------


def clock_cap_mechanism(name: str) -> Mechanism:
    """The simulated clock cap as a fault's method called ``name``."""
    return Mechanism(
        name=name,
        needs=frozenset({Capability.STACK_ADMIN}),
        realism=Realism.SIMULATED,
        summary="the reference stack's simulated SM clock cap",
    )


def clock_fractions(ctx: FaultContext) -> dict[str, float]:
    """Each targeted replica's simulated SM clock now, as a fraction of nominal (what a revert puts back)."""
    return {r.name: ctx.stack_admin(r).state().gpu.clock_fraction for r in ctx.targets.replicas}


def cap_clocks(ctx: FaultContext, fraction: float) -> None:
    """Cap every targeted replica's simulated SM clock at ``fraction`` of nominal."""
    for replica in ctx.targets.replicas:
        ctx.stack_admin(replica).set_clock_cap(fraction)


def verify_clocks(ctx: FaultContext, fraction: float) -> LandingProof:
    """Evidence that every targeted replica's simulated SM clock is at ``fraction``; FaultNotLanded otherwise."""
    seen = clock_fractions(ctx)
    wrong = {name: f for name, f in seen.items() if abs(f - fraction) > 1e-6}
    if wrong:
        raise FaultNotLanded(f"clock fraction is {wrong}, not {fraction:g}", fault=ctx.fault_id)
    return LandingProof(
        summary=f"SM clock of {', '.join(seen)} capped at {fraction:g} of nominal (simulated)",
        observations={f"{name}.clock_fraction": f for name, f in seen.items()},
    )


def restore_clocks(ctx: FaultContext, before: dict[str, float]) -> None:
    """Put each targeted replica's clock back to its fraction ``before`` (nominal, the cap removed, for a replica
    not in it); retries while a replica restarts, and a replica with no process left holds no cap."""
    for replica in ctx.targets.replicas:
        admin = ctx.stack_admin(replica)
        fraction = before.get(replica.name, 1.0)
        restore = admin.clear_clock_cap if fraction >= 1.0 else functools.partial(admin.set_clock_cap, fraction)
        with_admin_retry(ctx, restore, gone_ok=True)
