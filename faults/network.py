"""``link_reset`` and ``partition``: TCP faults between the router and a replica, through Toxiproxy."""

from __future__ import annotations

import enum

from pydantic import Field

from drill.api import (
    Capability,
    Fault,
    FaultContext,
    FaultNotLanded,
    FaultParams,
    LandingProof,
    Realism,
    Saved,
    ToxiproxyError,
)
from faults._toxics import Direction, ToxicPlan, add_toxics, artefact, refused, remove_toxics, verify_toxics

__all__ = ["LinkReset", "LinkResetParams", "Partition", "PartitionMode", "PartitionParams"]


def _proxies(ctx: FaultContext) -> list[str]:
    return [r.proxy for r in ctx.targets.replicas if r.proxy]


class LinkResetParams(FaultParams):
    after_ms: int = Field(0, ge=0, le=3_600_000, description="reset a connection this long after data starts (ms)")
    direction: Direction = Field(Direction.DOWNSTREAM, description="which bytes trigger the reset")
    toxicity: float = Field(1.0, ge=0, le=1, description="share of connections reset (rolled per connection)")


class LinkReset(Fault):
    """Connections between the router and a replica are reset (TCP RST) by Toxiproxy's ``reset_peer``.

    Every connection through the replica's proxy gets an RST ``after_ms`` after its data
    starts (0: at once); ``toxicity`` is the share of connections hit, rolled per connection,
    not per request (keep-alive pools reuse them). Clients see connection resets (vLLM behind
    a gateway: 502s), and retries if the router makes them.

    verify: the ``reset_peer`` toxic ``drill-<fault id>`` is listed on the proxy with these attributes.

    .. code-block:: yaml

        faults:
          - kind: link_reset
            start: 10s
            duration: 20s
            params: {after_ms: 0, toxicity: 1.0}
            selector: {replicas: [0]}
    """

    kind = "link_reset"
    Params = LinkResetParams
    params: LinkResetParams
    needs = frozenset({Capability.TOXIPROXY_REPLICA})
    realism = Realism.REAL
    summary = "TCP resets (Toxiproxy reset_peer) between the router and a replica"
    revert_semantics = "deletes the toxic drill-<fault id> from each proxy; a missing toxic or proxy is fine."

    def _plans(self, ctx: FaultContext) -> list[ToxicPlan]:
        p: LinkResetParams = self.params
        return [
            ToxicPlan(artefact(ctx, stream), "reset_peer", {"timeout": p.after_ms}, stream, p.toxicity)
            for stream in p.direction.streams()
        ]

    def inject(self, ctx: FaultContext) -> None:
        add_toxics(ctx, _proxies(ctx), self._plans(ctx))

    def verify(self, ctx: FaultContext) -> LandingProof:
        return verify_toxics(ctx, _proxies(ctx), self._plans(ctx))

    def revert(self, ctx: FaultContext) -> None:
        remove_toxics(ctx, _proxies(ctx), [plan.name for plan in self._plans(ctx)])


class PartitionMode(enum.StrEnum):
    BLACKHOLE = "blackhole"  # connections open, no byte passes (Toxiproxy timeout toxic, both directions)
    REFUSE = "refuse"  # the proxy is disabled: connections are refused and cut


class PartitionParams(FaultParams):
    mode: PartitionMode = Field(PartitionMode.BLACKHOLE, description="blackhole: silent link; refuse: link down")
    close_after_ms: int = Field(
        0,
        ge=0,
        le=3_600_000,
        description=("blackhole only: close each silent connection after this long (ms); 0 keeps it open"),
    )


class PartitionSaved(Saved):
    enabled: dict[str, bool] = Field(default_factory=dict)  # proxy -> enabled before the fault


class Partition(Fault):
    """The router cannot reach a replica: a silent link (``blackhole``) or a link that is down (``refuse``).

    ``blackhole`` puts a Toxiproxy ``timeout`` toxic on both directions of the replica's proxy:
    connections open, but no byte passes (closed after ``close_after_ms`` if set). Requests hang
    until the client's or the router's timeout — the hardest partition to detect.
    ``refuse`` disables the proxy: open connections are cut and new ones refused at once.

    verify: the two timeout toxics are listed (blackhole), or the proxy reports ``enabled: false``.

    .. code-block:: yaml

        faults:
          - kind: partition
            start: 10s
            duration: 30s
            params: {mode: blackhole}
            selector: {replicas: [replica-1]}
    """

    kind = "partition"
    Params = PartitionParams
    params: PartitionParams
    Saved = PartitionSaved
    needs = frozenset({Capability.TOXIPROXY_REPLICA})
    realism = Realism.REAL
    summary = "the router cannot reach a replica: silent link (timeout toxics) or link down (proxy disabled)"
    revert_semantics = (
        "blackhole: deletes the toxics drill-<fault id>-upstream/-downstream. refuse: sets each proxy "
        "back to its enabled state before the fault (enabled when unknown). Idempotent."
    )

    def _plans(self, ctx: FaultContext) -> list[ToxicPlan]:
        timeout = self.params.close_after_ms
        return [ToxicPlan(artefact(ctx, s), "timeout", {"timeout": timeout}, s) for s in Direction.BOTH.streams()]

    def prepare(self, ctx: FaultContext) -> PartitionSaved:
        if self.params.mode is PartitionMode.BLACKHOLE:
            return PartitionSaved()
        return PartitionSaved(enabled={p: ctx.toxiproxy.proxy(p).enabled for p in _proxies(ctx)})

    def inject(self, ctx: FaultContext) -> None:
        if self.params.mode is PartitionMode.BLACKHOLE:
            add_toxics(ctx, _proxies(ctx), self._plans(ctx))
            return
        for proxy in _proxies(ctx):
            ctx.toxiproxy.disable(proxy)

    def verify(self, ctx: FaultContext) -> LandingProof:
        if self.params.mode is PartitionMode.BLACKHOLE:
            return verify_toxics(ctx, _proxies(ctx), self._plans(ctx))
        states = {p: ctx.toxiproxy.proxy(p).enabled for p in _proxies(ctx)}
        still = [p for p, enabled in states.items() if enabled]
        if still or not states:
            raise FaultNotLanded(f"proxy {', '.join(still) or '(none)'} is still enabled", fault=ctx.fault_id)
        return LandingProof(
            summary=f"proxy {', '.join(states)} disabled: connections refused",
            observations={f"{p}.enabled": e for p, e in states.items()},
        )

    def revert(self, ctx: FaultContext) -> None:
        if self.params.mode is PartitionMode.BLACKHOLE:
            remove_toxics(ctx, _proxies(ctx), [plan.name for plan in self._plans(ctx)])
            return
        saved = ctx.saved.enabled if isinstance(ctx.saved, PartitionSaved) else {}
        for proxy in _proxies(ctx):
            if saved.get(proxy, True):
                _enable(ctx, proxy)


def _enable(ctx: FaultContext, proxy: str) -> None:
    try:
        ctx.toxiproxy.enable(proxy)
    except ToxiproxyError as exc:
        if exc.status != 404 and not refused(exc):  # no proxy (or no server): no traffic to restore
            raise
