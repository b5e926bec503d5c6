"""One CPU for the whole TP/PP link chain: rank 0's exchange thread, the rank processes, the stack's Toxiproxy.

Why: every engine step makes its TP rounds for real (:mod:`drill.stack.interconnect.tcp`), each a
round trip rank 0 → Toxiproxy → rank → Toxiproxy → rank 0. When the kernel spreads these over
several CPUs, a round costs a cross-CPU wake-up in each hop, and how many hops cross CPUs changes
on its own as threads migrate. Measured on an idle 2-CPU machine, 64 rounds of 8 bytes through
Toxiproxy flipped between ~3 ms and ~7.5 ms for seconds at a time (direct, without Toxiproxy: a
steady 1.05 ms); all on one CPU: a steady 2.4 ms. The excess a step adds is measured against a
baseline calibrated once at start-up, so the slow regime was charged to every step as link
slowness that no toxic made (a clean stack's decode steps went from 4.4 ms to 6.6 ms, its
latency up by 65 %, for tens of seconds). On one CPU the round trips are steady and the
calibrated baseline keeps meaning "the clean link".

:func:`link_cpu` picks the same CPU in every process of a stack (the highest one allowed);
:func:`pin_to_link_cpu` pins the calling thread (or, in a ``preexec_fn``, the child) to it.
"""

from __future__ import annotations

import os
from collections.abc import Callable

__all__ = ["link_cpu", "pin_to_link_cpu", "pinned_preexec"]


def link_cpu() -> int | None:
    """The CPU the link chain runs on, or None when there is nothing to choose (one CPU, or no affinity API)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    allowed = os.sched_getaffinity(0)
    return max(allowed) if len(allowed) > 1 else None


def pin_to_link_cpu() -> None:
    """Pin the calling thread (a child, when called in its ``preexec_fn``) to :func:`link_cpu`."""
    cpu = link_cpu()
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


def pinned_preexec(then: Callable[[], None]) -> Callable[[], None]:
    """A ``preexec_fn`` that pins the child to the link CPU, then runs ``then`` (e.g. ``die_with_parent()``)."""

    def preexec() -> None:
        pin_to_link_cpu()
        then()

    return preexec
