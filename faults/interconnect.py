"""``nccl_degradation``: the links between a replica's GPUs (tensor/pipeline parallel) get slow."""

from __future__ import annotations

import enum
from typing import Literal

from pydantic import Field, model_validator

from drill.api import (
    Capability,
    Fault,
    FaultContext,
    FaultNotLanded,
    FaultParams,
    InjectError,
    LandingProof,
    LinkKind,
    LinkRef,
    Mechanism,
    Realism,
    ReplicaRef,
)
from faults._toxics import Direction, ToxicPlan, add_toxics, artefact, remove_toxics, required, verify_toxics

__all__ = ["NcclDegradation", "NcclDegradationParams", "NcclMethod"]

#: NCCL's environment for slower transports (no NVLink/PCIe P2P, no shared memory, no NVLink SHARP).
DOWNGRADE_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NVLS_ENABLE": "0"}
_LINK_CAPABILITY = {LinkKind.TP: Capability.TOXIPROXY_TP_LINK, LinkKind.PP: Capability.TOXIPROXY_PP_LINK}


class NcclMethod(enum.StrEnum):
    TOXIPROXY = "toxiproxy"  # toxics on the stack's TP/PP link proxies
    NETEM = "netem"  # tc netem on the NCCL socket interface (real hosts)
    TRANSPORT_DOWNGRADE = "transport_downgrade"  # restart with NCCL_P2P_DISABLE=1 ... (real hosts)


class NcclDegradationParams(FaultParams):
    method: NcclMethod = Field(NcclMethod.TOXIPROXY, description="how the links are degraded (see Methods)")
    latency_ms: int = Field(0, ge=0, le=600_000, description="toxiproxy, netem: added delay (ms)")
    jitter_ms: int = Field(0, ge=0, le=600_000, description="toxiproxy, netem: ± random delay (ms)")
    bandwidth_kbps: int | None = Field(None, ge=1, description="toxiproxy, netem: rate cap (KB/s, 1 KB = 1000 B)")
    direction: Direction = Field(Direction.BOTH, description="toxiproxy: which way the bytes are delayed")
    link_kinds: list[LinkKind] = Field([LinkKind.TP], min_length=1, description="toxiproxy: tp and/or pp links")
    interface: str | None = Field(None, description="netem: the NCCL socket interface (NCCL_SOCKET_IFNAME)")
    loss_pct: float = Field(0.0, ge=0, le=100, description="netem: packet loss (%)")
    env: dict[str, str] = Field(
        default_factory=lambda: dict(DOWNGRADE_ENV),
        description="transport_downgrade: environment set on the restarted container",
    )

    @model_validator(mode="after")
    def _fits_method(self) -> NcclDegradationParams:
        shaping = self.latency_ms or self.jitter_ms or self.bandwidth_kbps or self.loss_pct
        if self.method is NcclMethod.NETEM and not self.interface:
            raise ValueError("method netem needs interface (the NCCL_SOCKET_IFNAME of the replica, e.g. eth1)")
        if self.method is not NcclMethod.TRANSPORT_DOWNGRADE and not shaping:
            raise ValueError(f"method {self.method.value} needs latency_ms, jitter_ms, bandwidth_kbps or loss_pct")
        if LinkKind.KV in self.link_kinds:
            raise ValueError("kv links carry KV transfers, not NCCL collectives: use kv_transfer_delay")
        if self.method is NcclMethod.TOXIPROXY and self.loss_pct:
            raise ValueError("loss_pct belongs to method netem (Toxiproxy cannot drop packets)")
        if self.method is NcclMethod.TRANSPORT_DOWNGRADE and not self.env:
            raise ValueError("method transport_downgrade needs env (default: NCCL_P2P_DISABLE=1 ...)")
        return self


class NcclDegradation(Fault):
    """The interconnect between a replica's GPUs degrades: every TP all-reduce or PP hand-off gets slower.

    * ``toxiproxy`` (real mechanism here): latency/jitter/bandwidth toxics on the Toxiproxy proxies the
      reference stack puts on each TP rank link (rank 0 <-> rank i) and PP stage link
      (``link_kinds``; ``selector.links`` narrows further by kind, rank or name). The ranks exchange
      real bytes over TCP each engine step, so TPOT grows as ``drill.stack.interconnect.link_model`` predicts.
    * ``netem`` (real hardware only, not verified): ``tc qdisc add dev <interface> root netem delay
      ... rate ...`` in the replica's container (on this host without one) — affects NCCL's socket
      transport only, not NVLink, P2P/SHM or InfiniBand verbs; on a host-network container the whole host.
    * ``transport_downgrade`` (real hardware only, not verified): the replica's container is
      recreated with ``NCCL_P2P_DISABLE=1``, ``NCCL_SHM_DISABLE=1``, ``NCCL_NVLS_ENABLE=0`` and
      restarted, so NCCL picks slower transports at init. The model reloads: plan the window for
      it. (The container swap is tested against the real Docker engine; the NCCL effect is not.)

    verify: the toxics are listed on every link proxy / the netem qdisc is shown by ``tc`` / the
    running copy of the container carries the environment.

    .. code-block:: yaml

        faults:
          - kind: nccl_degradation
            start: 10s
            duration: 30s
            params: {method: toxiproxy, latency_ms: 2, link_kinds: [tp]}
            selector: {replicas: [0]}
    """

    kind = "nccl_degradation"
    Params = NcclDegradationParams
    params: NcclDegradationParams
    # the toxiproxy method's; the real-host methods act on whole replicas (see __init__)
    scope: Literal["replicas", "links", "pools", "none"] = "links"
    mechanisms = (
        Mechanism(
            name="toxiproxy",
            needs=frozenset({Capability.TOXIPROXY_TP_LINK}),
            realism=Realism.REAL,
            summary="toxics on the stack's TP/PP link proxies (needs follow link_kinds)",
        ),
        Mechanism(
            name="netem",
            needs=frozenset({Capability.NVIDIA_GPU}),
            realism=Realism.HARDWARE_UNVERIFIED,
            summary="tc netem on the NCCL socket interface",
        ),
        Mechanism(
            name="transport_downgrade",
            needs=frozenset({Capability.NVIDIA_GPU, Capability.DOCKER}),
            realism=Realism.HARDWARE_UNVERIFIED,
            summary="container restarted with NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1, NCCL_NVLS_ENABLE=0",
        ),
    )
    summary = "slow TP/PP links: Toxiproxy toxics on the stack's rank links, or netem / NCCL transport downgrade"
    revert_semantics = (
        "toxiproxy: deletes the toxics drill-<fault id>-* from each link proxy. netem: deletes the "
        "netem qdisc whose handle derives from the fault id (nothing else). transport_downgrade: "
        "removes the copy and restarts the original container. Idempotent."
    )

    def __init__(self, params: NcclDegradationParams) -> None:
        super().__init__(params)
        # Toxiproxy acts on links; the real-host methods on whole replicas (an attached target lists no links).
        self.scope = "links" if params.method is NcclMethod.TOXIPROXY else "replicas"

    def needs_for(self, params: FaultParams) -> frozenset[Capability]:
        if isinstance(params, NcclDegradationParams) and params.method is NcclMethod.TOXIPROXY:
            return frozenset(_LINK_CAPABILITY[k] for k in params.link_kinds)
        return super().needs_for(params)

    # -- toxiproxy -------------------------------------------------------------------------------
    def _links(self, ctx: FaultContext) -> list[LinkRef]:
        return [ln for ln in ctx.targets.links if ln.kind in self.params.link_kinds]

    def _proxies(self, ctx: FaultContext) -> list[str]:
        links = self._links(ctx)
        unproxied = [ln.name for ln in links if not ln.proxy]
        if unproxied or not links:
            raise InjectError(
                f"link(s) {', '.join(unproxied) or '(none of kind ' + str(self.params.link_kinds) + ')'}"
                " carry no Toxiproxy proxy",
                fault=ctx.fault_id,
                hint="enable target.config.links.tp_proxies / pp_proxies, or check selector.links",
            )
        return [ln.proxy for ln in links if ln.proxy]  # every one has a proxy (checked above)

    def _plans(self, ctx: FaultContext) -> list[ToxicPlan]:
        p: NcclDegradationParams = self.params
        plans = []
        for stream in p.direction.streams():
            if p.latency_ms or p.jitter_ms:
                plans.append(
                    ToxicPlan(
                        artefact(ctx, "latency", stream),
                        "latency",
                        {"latency": p.latency_ms, "jitter": p.jitter_ms},
                        stream,
                    )
                )
            if p.bandwidth_kbps:
                plans.append(
                    ToxicPlan(artefact(ctx, "bandwidth", stream), "bandwidth", {"rate": p.bandwidth_kbps}, stream)
                )
        return plans

    # -- the fault -------------------------------------------------------------------------------
    def inject(self, ctx: FaultContext) -> None:
        p: NcclDegradationParams = self.params
        if p.method is NcclMethod.TOXIPROXY:
            add_toxics(ctx, self._proxies(ctx), self._plans(ctx))
            return
        for replica in ctx.targets.replicas:
            if p.method is NcclMethod.NETEM:
                ctx.nccl.add_netem(
                    replica.container,
                    required(p.interface, "interface", ctx),
                    artefact(ctx),
                    delay_ms=p.latency_ms,
                    jitter_ms=p.jitter_ms,
                    loss_pct=p.loss_pct,
                    rate_kbit=(p.bandwidth_kbps or 0) * 8,
                )
            else:
                ctx.nccl.restart_with_env(_container(ctx, replica), artefact(ctx), dict(p.env))

    def verify(self, ctx: FaultContext) -> LandingProof:
        p: NcclDegradationParams = self.params
        if p.method is NcclMethod.TOXIPROXY:
            return verify_toxics(ctx, self._proxies(ctx), self._plans(ctx))
        seen: dict[str, str | int | float | bool | None] = {}
        for replica in ctx.targets.replicas:
            seen[replica.name] = self._verify_one(ctx, replica)
        what = "netem qdisc" if p.method is NcclMethod.NETEM else "NCCL transport environment"
        return LandingProof(
            summary=f"{what} in place on {', '.join(seen)} (not verified on hardware)", observations=seen
        )

    def _verify_one(self, ctx: FaultContext, replica: ReplicaRef) -> str:
        p: NcclDegradationParams = self.params
        if p.method is NcclMethod.NETEM:
            line = ctx.nccl.netem_line(replica.container, required(p.interface, "interface", ctx), artefact(ctx))
            if line is None:
                raise FaultNotLanded(
                    f"no netem qdisc of this fault on {p.interface} of {replica.name}", fault=ctx.fault_id
                )
            return line
        env = ctx.nccl.applied_env(_container(ctx, replica), artefact(ctx))
        missing = {k: v for k, v in p.env.items() if env is None or env.get(k) != v}
        if missing:
            raise FaultNotLanded(
                f"{replica.name}: the restarted container lacks {missing}"
                if env is not None
                else f"{replica.name}: no running copy of the container with the NCCL environment",
                fault=ctx.fault_id,
            )
        return " ".join(f"{k}={v}" for k, v in p.env.items())

    def revert(self, ctx: FaultContext) -> None:
        p: NcclDegradationParams = self.params
        if p.method is NcclMethod.TOXIPROXY:
            proxies = [ln.proxy for ln in self._links(ctx) if ln.proxy]
            remove_toxics(ctx, proxies, [plan.name for plan in self._plans(ctx)])
            return
        for replica in ctx.targets.replicas:
            if p.method is NcclMethod.NETEM:
                ctx.nccl.remove_netem(replica.container, required(p.interface, "interface", ctx), artefact(ctx))
            else:
                ctx.nccl.restore(_container(ctx, replica), artefact(ctx))


def _container(ctx: FaultContext, replica: ReplicaRef) -> str:
    if not replica.container:
        raise InjectError(
            f"replica {replica.name} runs in no container; transport_downgrade restarts a container",
            fault=ctx.fault_id,
            hint="give the target's replicas a container",
        )
    return replica.container
