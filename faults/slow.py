"""``slow_replica``: one replica answers slowly — network latency/bandwidth (Toxiproxy, or a Chaos Mesh NetworkChaos on
Kubernetes), a CPU cap, or a GPU clock cap."""

from __future__ import annotations

import enum

from pydantic import Field, model_validator

from drill.api import (
    Capability,
    DockerError,
    Duration,
    Fault,
    FaultContext,
    FaultNotLanded,
    FaultParams,
    LandingProof,
    Mechanism,
    Realism,
    Saved,
)
from faults._admin import cap_clocks, clock_cap_mechanism, clock_fractions, restore_clocks, verify_clocks
from faults._toxics import Direction, ToxicPlan, add_toxics, artefact, remove_toxics, required, verify_toxics
from faults.kubernetes import (
    CHAOS_MESH_MECHANISM,
    ChaosAction,
    ChaosExperiment,
    chaos_body,
    create_chaos,
    delete_chaos,
    verify_chaos,
)

__all__ = ["SlowMethod", "SlowReplica", "SlowReplicaParams"]

CPU_PERIOD_US = 100_000  # Docker's default CFS period


class SlowMethod(enum.StrEnum):
    TOXIPROXY = "toxiproxy"  # latency / jitter / bandwidth on the replica's proxy
    DOCKER_CPU = "docker_cpu"  # CFS quota on the replica's container
    CLOCK_CAP = "clock_cap"  # the reference stack's simulated SM clock cap
    CHAOS_MESH = "chaos_mesh"  # a Chaos Mesh NetworkChaos (delay) on the replica's pod (kubernetes target)


_ONLY = {
    "latency_ms": (SlowMethod.TOXIPROXY, SlowMethod.CHAOS_MESH),
    "jitter_ms": (SlowMethod.TOXIPROXY, SlowMethod.CHAOS_MESH),
    "bandwidth_kbps": (SlowMethod.TOXIPROXY,),
    "cpus": (SlowMethod.DOCKER_CPU,),
    "clock_fraction": (SlowMethod.CLOCK_CAP,),
}


class SlowReplicaParams(FaultParams):
    method: SlowMethod = Field(SlowMethod.TOXIPROXY, description="how the replica is slowed (see Methods)")
    latency_ms: int | None = Field(
        None, ge=0, le=600_000, description="toxiproxy: added delay per chunk; chaos_mesh: per packet (ms)"
    )
    jitter_ms: int | None = Field(None, ge=0, le=600_000, description="toxiproxy, chaos_mesh: ± random delay (ms)")
    timeout: Duration = Field(30.0, description="chaos_mesh: how long verify waits for the operator's AllInjected")
    bandwidth_kbps: int | None = Field(None, ge=1, description="toxiproxy: rate cap (KB/s, 1 KB = 1000 B)")
    direction: Direction = Field(Direction.DOWNSTREAM, description="toxiproxy: which bytes are delayed")
    toxicity: float = Field(1.0, ge=0, le=1, description="toxiproxy: share of connections affected")
    cpus: float | None = Field(None, gt=0, le=1024, description="docker_cpu: CPUs the container may use (0.2 = 20%)")
    clock_fraction: float | None = Field(None, ge=0.01, le=1, description="clock_cap: SM clock, fraction of nominal")

    @model_validator(mode="after")
    def _fits_method(self) -> SlowReplicaParams:
        wrong = [k for k, m in _ONLY.items() if getattr(self, k) is not None and self.method not in m]
        if wrong:
            owners = " or ".join(m.value for m in _ONLY[wrong[0]])
            raise ValueError(f"{', '.join(wrong)} belong(s) to method {owners}, not {self.method.value}")
        if self.method is SlowMethod.CHAOS_MESH and not self.latency_ms:
            raise ValueError("method chaos_mesh needs latency_ms (a NetworkChaos delay)")
        if self.method is SlowMethod.TOXIPROXY and not (self.latency_ms or self.jitter_ms or self.bandwidth_kbps):
            raise ValueError("method toxiproxy needs latency_ms, jitter_ms or bandwidth_kbps")
        if self.method is SlowMethod.DOCKER_CPU and self.cpus is None:
            raise ValueError("method docker_cpu needs cpus (e.g. 0.2)")
        if self.method is SlowMethod.CLOCK_CAP and self.clock_fraction is None:
            raise ValueError("method clock_cap needs clock_fraction (e.g. 0.3)")
        return self


class SlowReplicaSaved(Saved):
    cpu_quota_us: dict[str, int] = Field(default_factory=dict)  # container -> CFS quota before (0: none)
    clock_fraction: dict[str, float] = Field(default_factory=dict)  # replica -> clock fraction before


class SlowReplica(Fault):
    """One replica gets slow while the others are fine: the case a load balancer must notice.

    ``method`` chooses how:

    * ``toxiproxy`` — ``latency_ms`` (± ``jitter_ms``) per chunk and/or a ``bandwidth_kbps`` cap on
      the proxy between the router and the replica (toxics ``drill-<fault id>-latency|bandwidth-<stream>``);
      clients see TTFT and, for a bandwidth cap, TPOT grow. Real mechanism.
    * ``docker_cpu`` — the replica's container may use only ``cpus`` CPUs (CFS quota, at once).
      The reference stack's engine runs on the CPU, so every step slows. Real mechanism.
    * ``clock_cap`` — the stack's simulated SM clock at ``clock_fraction`` of nominal: compute-bound
      work (prefill) slows by 1/fraction, memory-bound decode less (see ``gpu_clock_cap`` for
      ``nvidia-smi -lgc`` on a real GPU). Simulated.
    * ``chaos_mesh`` — on the kubernetes target: a Chaos Mesh ``NetworkChaos`` ``delay`` of ``latency_ms``
      (± ``jitter_ms``) on every packet of the replica's pod, named ``drill-<fault id>``; verified only by the
      operator's ``AllInjected`` status, deleted to revert (docs/kubernetes.md). Real mechanism.

    verify: the toxics are listed / the container's CPU quota is set / the replica's admin API
    reports the clock fraction / the operator says AllInjected.

    .. code-block:: yaml

        faults:
          - name: slow-0
            kind: slow_replica
            start: 10s
            duration: 30s
            params: {method: toxiproxy, latency_ms: 300, jitter_ms: 50}
            selector: {replicas: [0]}
    """

    kind = "slow_replica"
    Params = SlowReplicaParams
    params: SlowReplicaParams
    Saved = SlowReplicaSaved
    mechanisms = (
        Mechanism(
            name="toxiproxy",
            needs=frozenset({Capability.TOXIPROXY_REPLICA}),
            realism=Realism.REAL,
            summary="latency/jitter/bandwidth toxics on the replica's proxy",
        ),
        Mechanism(
            name="docker_cpu",
            needs=frozenset({Capability.DOCKER}),
            realism=Realism.REAL,
            summary="a CFS CPU quota on the replica's container",
        ),
        clock_cap_mechanism("clock_cap"),
        CHAOS_MESH_MECHANISM,
    )
    summary = "one replica gets slow: Toxiproxy latency/bandwidth, a Docker CPU cap, or a (simulated) clock cap"
    revert_semantics = (
        "toxiproxy: deletes the toxics drill-<fault id>-*. docker_cpu: puts back the CPU quota the "
        "container had before (none: removed). clock_cap: puts back the clock fraction from before. "
        "chaos_mesh: deletes the NetworkChaos drill-<fault id> and waits until it is gone. Idempotent."
    )

    # -- toxiproxy -------------------------------------------------------------------------------
    def _plans(self, ctx: FaultContext) -> list[ToxicPlan]:
        p: SlowReplicaParams = self.params
        plans = []
        for stream in p.direction.streams():
            if p.latency_ms or p.jitter_ms:
                plans.append(
                    ToxicPlan(
                        artefact(ctx, "latency", stream),
                        "latency",
                        {"latency": p.latency_ms or 0, "jitter": p.jitter_ms or 0},
                        stream,
                        p.toxicity,
                    )
                )
            if p.bandwidth_kbps:
                plans.append(
                    ToxicPlan(
                        artefact(ctx, "bandwidth", stream), "bandwidth", {"rate": p.bandwidth_kbps}, stream, p.toxicity
                    )
                )
        return plans

    def _proxies(self, ctx: FaultContext) -> list[str]:
        return [r.proxy for r in ctx.targets.replicas if r.proxy]

    # -- the three methods -------------------------------------------------------------------------
    def prepare(self, ctx: FaultContext) -> SlowReplicaSaved:
        method = self.params.method
        if method is SlowMethod.DOCKER_CPU:
            return SlowReplicaSaved(cpu_quota_us={c: ctx.docker.info(c).cpu_quota_us for c in _containers(ctx)})
        if method is SlowMethod.CLOCK_CAP:
            return SlowReplicaSaved(clock_fraction=clock_fractions(ctx))
        return SlowReplicaSaved()

    def inject(self, ctx: FaultContext) -> None:
        p: SlowReplicaParams = self.params
        if p.method is SlowMethod.TOXIPROXY:
            add_toxics(ctx, self._proxies(ctx), self._plans(ctx))
        elif p.method is SlowMethod.CHAOS_MESH:
            delay = {"latency": f"{p.latency_ms or 0}ms", "jitter": f"{p.jitter_ms or 0}ms"}
            body = chaos_body(ctx, ChaosExperiment.NETWORK, ChaosAction.DELAY, {"delay": delay})
            create_chaos(ctx, ChaosExperiment.NETWORK, body)
        elif p.method is SlowMethod.DOCKER_CPU:
            for container in _containers(ctx):
                ctx.docker.set_cpu_limit(container, required(p.cpus, "cpus", ctx))
        else:
            cap_clocks(ctx, required(p.clock_fraction, "clock_fraction", ctx))

    def verify(self, ctx: FaultContext) -> LandingProof:
        p: SlowReplicaParams = self.params
        if p.method is SlowMethod.TOXIPROXY:
            return verify_toxics(ctx, self._proxies(ctx), self._plans(ctx))
        if p.method is SlowMethod.CHAOS_MESH:
            return verify_chaos(ctx, ChaosExperiment.NETWORK, ChaosAction.DELAY, p.timeout)
        if p.method is SlowMethod.DOCKER_CPU:
            return _verify_quota(ctx, _quota_us(required(p.cpus, "cpus", ctx)))
        return verify_clocks(ctx, required(p.clock_fraction, "clock_fraction", ctx))

    def revert(self, ctx: FaultContext) -> None:
        p: SlowReplicaParams = self.params
        saved = ctx.saved if isinstance(ctx.saved, SlowReplicaSaved) else SlowReplicaSaved()
        if p.method is SlowMethod.TOXIPROXY:
            remove_toxics(ctx, self._proxies(ctx), [plan.name for plan in self._plans(ctx)])
        elif p.method is SlowMethod.CHAOS_MESH:
            delete_chaos(ctx, ChaosExperiment.NETWORK, p.timeout)
        elif p.method is SlowMethod.DOCKER_CPU:
            for container in _containers(ctx):
                _restore_quota(ctx, container, saved.cpu_quota_us.get(container, 0))
        else:
            restore_clocks(ctx, saved.clock_fraction)


def _containers(ctx: FaultContext) -> list[str]:
    missing = [r.name for r in ctx.targets.replicas if not r.container]
    if missing:
        raise DockerError(
            f"replica(s) {', '.join(missing)} run in no container",
            operation="find container",
            hint="method docker_cpu needs a target whose replicas are containers",
        )
    return [r.container for r in ctx.targets.replicas if r.container]  # every one has (checked above)


def _quota_us(cpus: float) -> int:
    return max(1000, round(cpus * CPU_PERIOD_US))


def _verify_quota(ctx: FaultContext, quota_us: int) -> LandingProof:
    quotas = {c: ctx.docker.info(c).cpu_quota_us for c in _containers(ctx)}
    wrong = {c: q for c, q in quotas.items() if q != quota_us}
    if wrong:
        raise FaultNotLanded(f"CPU quota is {wrong}, not {quota_us} µs per {CPU_PERIOD_US} µs", fault=ctx.fault_id)
    return LandingProof(
        summary=f"container(s) {', '.join(quotas)} capped at {quota_us / CPU_PERIOD_US:g} CPU",
        observations={f"{c}.cpu_quota_us": q for c, q in quotas.items()},
    )


def _restore_quota(ctx: FaultContext, container: str, quota_us: int) -> None:
    try:
        if quota_us > 0:
            ctx.docker.set_cpu_limit(container, quota_us / CPU_PERIOD_US)
        else:
            ctx.docker.clear_cpu_limit(container)
    except DockerError as exc:
        if "no such container" not in exc.message:  # a removed container holds no quota
            raise
