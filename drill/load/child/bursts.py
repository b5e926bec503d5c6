"""Bursts of extra arrivals for the ``queue_flood`` fault (``drill.api.LoadControl``).

A burst is started by the harness through the driver's control channel and runs
inside each load-generating process next to the schedule: while it is active,
extra Poisson arrivals come at ``rate_multiplier - 1`` times the chosen pools'
current scheduled rate (split evenly over distributed workers), with prompts
``prompt_multiplier`` times longer. Their records carry ``burst=<id>``. Lengths
are drawn from a stream seeded by the run's seed and the burst id.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import gevent
from gevent.event import Event

from drill.load.lengths import sample_length
from drill.load.schedule import PlannedRequest

if TYPE_CHECKING:  # pragma: no cover
    from drill.load.child.openloop import OpenLoop, _Job
    from drill.spec.scenario import Pool

__all__ = ["BurstParams", "Burst"]

_IDLE_RECHECK_S = 0.1


@dataclass(frozen=True)
class BurstParams:
    """What a ``start_burst`` control message asks of each load-generating process."""

    burst_id: str
    rate_multiplier: float
    prompt_multiplier: float = 1.0
    pools: tuple[str, ...] = ()  # empty: every pool

    @classmethod
    def from_dict(cls, data: dict) -> BurstParams:
        return cls(
            str(data["burst_id"]),
            float(data["rate_multiplier"]),
            float(data.get("prompt_multiplier", 1.0)),
            tuple(data.get("pools") or ()),
        )


class Burst:
    """One running burst in one process: a greenlet issuing Poisson arrivals until stopped."""

    def __init__(self, params: BurstParams, loop: OpenLoop, rng: random.Random) -> None:
        self.params = params
        self.loop = loop
        self.rng = rng
        self.pools = [p for p in (params.pools or tuple(loop.pools)) if p in loop.pools]
        self.sent = 0
        self.offered_rate = 0.0
        self.active = False
        self._ended = Event()
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        self.active = True
        self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        """End the burst (idempotent); its in-flight requests run on."""
        self.active = False
        self._ended.set()

    def status(self) -> dict[str, float]:
        return {"active": 1 if self.active else 0, "sent": self.sent, "offered_rate": round(self.offered_rate, 3)}

    def rate_now(self) -> tuple[float, list[float]]:
        """This process's extra rate (requests/s) now, and the chosen pools' scheduled rates."""
        t = self.loop.offset_now()
        rates = [self.loop.schedule.rate_at(p, t) for p in self.pools]
        factor = max(0.0, self.params.rate_multiplier - 1.0) / self.loop.partition[1]
        return factor * sum(rates), rates

    def _run(self) -> None:
        self.loop.started.wait()
        next_at = time.perf_counter()
        while self.active and not self.loop.stopping.is_set():
            rate, pool_rates = self.rate_now()
            self.offered_rate = rate
            if rate <= 0:
                self._ended.wait(_IDLE_RECHECK_S)
                next_at = time.perf_counter()
                continue
            next_at += self.rng.expovariate(rate)
            job = self._next_job(pool_rates)
            delay = next_at - time.perf_counter()
            if delay > 0 and self._ended.wait(delay):
                break
            if not self.active or self.loop.stopping.is_set():
                break
            self.loop.launch(job, next_at)
            self.sent += 1
        self.offered_rate = 0.0

    def _next_job(self, pool_rates: list[float]) -> _Job:
        pool_name = self.rng.choices(self.pools, weights=pool_rates)[0]
        pool = self.loop.pools[pool_name]
        inp, out = self._lengths(pool)
        inp = max(1, round(inp * self.params.prompt_multiplier))
        index = self.sent
        planned = PlannedRequest(index, self.loop.offset_now(), pool_name, inp, out)
        logical_id = f"{pool_name}-{self.params.burst_id}-{self.loop.partition[0]}-{index}"
        return self.loop.job(planned, logical_id, burst=self.params.burst_id)

    def _lengths(self, pool: Pool) -> tuple[int, int]:
        """Lengths from the pool's distributions; a trace-driven pool reuses a scheduled request's."""
        try:
            return sample_length(pool.input_tokens, self.rng), sample_length(pool.output_tokens, self.rng)
        except ValueError:
            same: list[PlannedRequest | None] = [r for r in self.loop.schedule.requests if r.pool == pool.name] or [
                None
            ]
            pick = self.rng.choice(same)
            return (pick.input_tokens, pick.output_tokens) if pick is not None else (1, 1)
