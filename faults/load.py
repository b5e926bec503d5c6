"""``queue_flood``: a burst of extra requests on top of the scenario's load."""

from __future__ import annotations

from pydantic import Field

from drill.api import Capability, Fault, FaultContext, FaultNotLanded, FaultParams, InjectError, LandingProof, Realism
from faults._toxics import artefact, poll

__all__ = ["QueueFlood", "QueueFloodParams"]

_SEND_WAIT_S = 5.0


class QueueFloodParams(FaultParams):
    rate_multiplier: float = Field(
        4.0,
        gt=1,
        le=1000,
        description=("total arrival rate as a multiple of the scenario's (4 = three times more on top of it)"),
    )
    prompt_multiplier: float = Field(1.0, gt=0, le=100, description="burst prompts are this many times longer")


class QueueFlood(Fault):
    """A burst on top of the scenario's open-loop load, for the fault's whole window.

    It drives the drill's load driver, not the server: while the fault is active, extra
    Poisson arrivals come at ``rate_multiplier - 1`` times the chosen pools' scheduled rate,
    with prompts ``prompt_multiplier`` times longer; their records carry ``burst=drill-<id>``.
    The burst lasts as long as the fault (``duration``); ``selector.pools`` chooses the pools
    (default: every pool). This is how an unbounded waiting queue (vLLM's default) shows: the
    queue grows and requests wait until they time out, or the stack refuses the excess fast.

    verify: the driver reports the burst active and its first requests sent (waits up to 5 s).

    .. code-block:: yaml

        faults:
          - name: flood
            kind: queue_flood
            start: 15s
            duration: 60s
            params: {rate_multiplier: 4.0, prompt_multiplier: 1.0}
            selector: {pools: [interactive]}
    """

    kind = "queue_flood"
    Params = QueueFloodParams
    params: QueueFloodParams
    needs = frozenset({Capability.LOAD_CONTROL})
    realism = Realism.REAL
    scope = "pools"
    summary = "a burst of extra arrivals on top of the scenario's load (rate and prompt multipliers)"
    revert_semantics = (
        "ends the burst; idempotent. After a runner crash there is nothing to revert: the load "
        "generator dies with the runner."
    )

    def _burst(self, ctx: FaultContext) -> str:
        return artefact(ctx)

    def inject(self, ctx: FaultContext) -> None:
        if ctx.load is None:
            raise InjectError(
                "queue_flood drives the drill's load driver, and there is none here",
                fault=ctx.fault_id,
                hint="use it inside `drill run`; `drill fault inject` has no load to multiply",
            )
        p: QueueFloodParams = self.params
        ctx.load.start_burst(
            self._burst(ctx),
            rate_multiplier=p.rate_multiplier,
            prompt_multiplier=p.prompt_multiplier,
            pools=list(ctx.targets.pools),
        )

    def verify(self, ctx: FaultContext) -> LandingProof:
        if ctx.load is None:
            raise FaultNotLanded("no load driver to ask about the burst", fault=ctx.fault_id)
        load, burst = ctx.load, self._burst(ctx)
        status = poll(lambda: _sending(load.burst_status(burst)), min(ctx.timeout_s, _SEND_WAIT_S), 0.1)
        if status is None:
            last = load.burst_status(burst)
            raise FaultNotLanded(
                f"burst {burst} is not sending: the driver reports active={last.get('active', 0):g}, "
                f"sent={last.get('sent', 0):g} after {_SEND_WAIT_S:g}s",
                fault=ctx.fault_id,
                hint="is the scenario's rate zero for these pools right now?",
            )
        pools = ", ".join(ctx.targets.pools) or "every pool"
        return LandingProof(
            summary=f"burst {burst} active on {pools}: {status['sent']:g} extra requests sent, "
            f"{status['offered_rate']:.1f} req/s offered",
            observations={k: float(v) for k, v in status.items()},
        )

    def revert(self, ctx: FaultContext) -> None:
        if ctx.load is None:
            ctx.note("queue_flood: no load driver in this process (it died with the runner); nothing to end")
            return
        ctx.load.end_burst(self._burst(ctx))


def _sending(status: dict[str, float]) -> dict[str, float] | None:
    return status if status.get("active", 0) >= 1 and status.get("sent", 0) > 0 else None
