"""``link_reset`` and ``partition``: TCP faults between the router and a replica, through Toxiproxy, or on the
kubernetes target through a Chaos Mesh ``NetworkChaos`` on the replica's pod (``method: chaos_mesh``)."""

from __future__ import annotations

import enum

from pydantic import Field, model_validator

from drill.api import (
    Capability,
    Duration,
    Fault,
    FaultContext,
    FaultNotLanded,
    FaultParams,
    LandingProof,
    Mechanism,
    Realism,
    Saved,
    ToxiproxyError,
)
from faults._toxics import Direction, ToxicPlan, add_toxics, artefact, refused, remove_toxics, verify_toxics
from faults.kubernetes import (
    CHAOS_MESH_MECHANISM,
    ChaosAction,
    ChaosExperiment,
    chaos_body,
    create_chaos,
    delete_chaos,
    verify_chaos,
)

__all__ = ["LinkReset", "LinkResetParams", "NetMethod", "Partition", "PartitionMode", "PartitionParams"]


class NetMethod(enum.StrEnum):
    TOXIPROXY = "toxiproxy"  # toxics on (or the state of) the replica's Toxiproxy proxy
    CHAOS_MESH = "chaos_mesh"  # a Chaos Mesh NetworkChaos on the replica's pod (kubernetes target)


_TOXIPROXY = Mechanism(
    name="toxiproxy",
    needs=frozenset({Capability.TOXIPROXY_REPLICA}),
    realism=Realism.REAL,
    summary="the replica's Toxiproxy proxy between the router and the replica",
)
_METHOD = Field(NetMethod.TOXIPROXY, description="toxiproxy, or chaos_mesh on the kubernetes target (see Methods)")
_TIMEOUT = Field(30.0, description="chaos_mesh: how long verify waits for the operator's AllInjected")


def _proxies(ctx: FaultContext) -> list[str]:
    return [r.proxy for r in ctx.targets.replicas if r.proxy]


class LinkResetParams(FaultParams):
    method: NetMethod = _METHOD
    after_ms: int = Field(0, ge=0, le=3_600_000, description="reset a connection this long after data starts (ms)")
    direction: Direction = Field(Direction.DOWNSTREAM, description="which bytes trigger the reset")
    toxicity: float = Field(1.0, ge=0, le=1, description="share of connections reset (rolled per connection)")
    loss_percent: float | None = Field(None, gt=0, le=100, description="chaos_mesh: share of packets dropped (%)")
    timeout: Duration = _TIMEOUT

    @model_validator(mode="after")
    def _fits_method(self) -> LinkResetParams:
        if self.method is NetMethod.CHAOS_MESH and (self.after_ms or self.toxicity != 1.0):
            raise ValueError("method chaos_mesh has no reset: it drops loss_percent of the packets (no after_ms)")
        if self.method is NetMethod.TOXIPROXY and self.loss_percent is not None:
            raise ValueError("loss_percent belongs to method chaos_mesh, not toxiproxy")
        return self


class LinkReset(Fault):
    """Connections between the router and a replica are reset (TCP RST) by Toxiproxy's ``reset_peer``.

    Every connection through the replica's proxy gets an RST ``after_ms`` after its data
    starts (0: at once); ``toxicity`` is the share of connections hit, rolled per connection,
    not per request (keep-alive pools reuse them). Clients see connection resets (vLLM behind
    a gateway: 502s), and retries if the router makes them.

    verify: the ``reset_peer`` toxic ``drill-<fault id>`` is listed on the proxy with these attributes.

    ``method: chaos_mesh`` (kubernetes target): Chaos Mesh's NetworkChaos has no reset action; the closest is
    ``loss`` — ``loss_percent`` (default 100) of the pod's packets dropped, so its connections stall and time out
    rather than reset. Verified only by the operator's ``AllInjected`` status; the object is deleted to revert.

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
    mechanisms = (_TOXIPROXY, CHAOS_MESH_MECHANISM)
    summary = "TCP resets (Toxiproxy reset_peer) between the router and a replica; on Kubernetes, packet loss"
    revert_semantics = (
        "deletes the toxic drill-<fault id> from each proxy (a missing toxic or proxy is fine); chaos_mesh: deletes "
        "the NetworkChaos drill-<fault id> and waits until it is gone"
    )

    def _plans(self, ctx: FaultContext) -> list[ToxicPlan]:
        p: LinkResetParams = self.params
        return [
            ToxicPlan(artefact(ctx, stream), "reset_peer", {"timeout": p.after_ms}, stream, p.toxicity)
            for stream in p.direction.streams()
        ]

    def inject(self, ctx: FaultContext) -> None:
        if self.params.method is NetMethod.CHAOS_MESH:
            loss = {"loss": f"{self.params.loss_percent or 100:g}"}
            create_chaos(
                ctx, ChaosExperiment.NETWORK, chaos_body(ctx, ChaosExperiment.NETWORK, ChaosAction.LOSS, {"loss": loss})
            )
            return
        add_toxics(ctx, _proxies(ctx), self._plans(ctx))

    def verify(self, ctx: FaultContext) -> LandingProof:
        if self.params.method is NetMethod.CHAOS_MESH:
            return verify_chaos(ctx, ChaosExperiment.NETWORK, ChaosAction.LOSS, self.params.timeout)
        return verify_toxics(ctx, _proxies(ctx), self._plans(ctx))

    def revert(self, ctx: FaultContext) -> None:
        if self.params.method is NetMethod.CHAOS_MESH:
            delete_chaos(ctx, ChaosExperiment.NETWORK, self.params.timeout)
            return
        remove_toxics(ctx, _proxies(ctx), [plan.name for plan in self._plans(ctx)])


class PartitionMode(enum.StrEnum):
    BLACKHOLE = "blackhole"  # connections open, no byte passes (Toxiproxy timeout toxic, both directions)
    REFUSE = "refuse"  # the proxy is disabled: connections are refused and cut


class PartitionParams(FaultParams):
    method: NetMethod = _METHOD
    mode: PartitionMode = Field(PartitionMode.BLACKHOLE, description="blackhole: silent link; refuse: link down")
    close_after_ms: int = Field(
        0,
        ge=0,
        le=3_600_000,
        description=("blackhole only: close each silent connection after this long (ms); 0 keeps it open"),
    )
    timeout: Duration = _TIMEOUT

    @model_validator(mode="after")
    def _fits_method(self) -> PartitionParams:
        if self.method is NetMethod.CHAOS_MESH and (self.mode is PartitionMode.REFUSE or self.close_after_ms):
            raise ValueError("method chaos_mesh partitions as a blackhole (packets dropped both ways): no refuse mode")
        return self


class PartitionSaved(Saved):
    enabled: dict[str, bool] = Field(default_factory=dict)  # proxy -> enabled before the fault


class Partition(Fault):
    """The router cannot reach a replica: a silent link (``blackhole``) or a link that is down (``refuse``).

    ``blackhole`` puts a Toxiproxy ``timeout`` toxic on both directions of the replica's proxy:
    connections open, but no byte passes (closed after ``close_after_ms`` if set). Requests hang
    until the client's or the router's timeout — the hardest partition to detect.
    ``refuse`` disables the proxy: open connections are cut and new ones refused at once.

    verify: the two timeout toxics are listed (blackhole), or the proxy reports ``enabled: false``.

    ``method: chaos_mesh`` (kubernetes target): a Chaos Mesh ``NetworkChaos`` ``partition`` (direction both) on the
    replica's pod, a blackhole; verified only by the operator's ``AllInjected`` status, deleted to revert.

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
    mechanisms = (_TOXIPROXY, CHAOS_MESH_MECHANISM)
    summary = "the router cannot reach a replica: silent link (timeout toxics) or link down (proxy disabled)"
    revert_semantics = (
        "blackhole: deletes the toxics drill-<fault id>-upstream/-downstream. refuse: sets each proxy "
        "back to its enabled state before the fault (enabled when unknown). chaos_mesh: deletes the NetworkChaos "
        "drill-<fault id>. Idempotent."
    )

    def _plans(self, ctx: FaultContext) -> list[ToxicPlan]:
        timeout = self.params.close_after_ms
        return [ToxicPlan(artefact(ctx, s), "timeout", {"timeout": timeout}, s) for s in Direction.BOTH.streams()]

    def prepare(self, ctx: FaultContext) -> PartitionSaved:
        if self.params.mode is PartitionMode.BLACKHOLE or self.params.method is NetMethod.CHAOS_MESH:
            return PartitionSaved()
        return PartitionSaved(enabled={p: ctx.toxiproxy.proxy(p).enabled for p in _proxies(ctx)})

    def inject(self, ctx: FaultContext) -> None:
        if self.params.method is NetMethod.CHAOS_MESH:
            spec = {"direction": "both"}
            create_chaos(
                ctx, ChaosExperiment.NETWORK, chaos_body(ctx, ChaosExperiment.NETWORK, ChaosAction.PARTITION, spec)
            )
            return
        if self.params.mode is PartitionMode.BLACKHOLE:
            add_toxics(ctx, _proxies(ctx), self._plans(ctx))
            return
        for proxy in _proxies(ctx):
            ctx.toxiproxy.disable(proxy)

    def verify(self, ctx: FaultContext) -> LandingProof:
        if self.params.method is NetMethod.CHAOS_MESH:
            return verify_chaos(ctx, ChaosExperiment.NETWORK, ChaosAction.PARTITION, self.params.timeout)
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
        if self.params.method is NetMethod.CHAOS_MESH:
            delete_chaos(ctx, ChaosExperiment.NETWORK, self.params.timeout)
            return
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
