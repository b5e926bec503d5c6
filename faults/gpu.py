"""``gpu_oom`` and ``gpu_clock_cap``: GPU conditions, simulated by the reference stack or made on real GPUs.

The real-GPU methods (``cuda_hog``, ``nvidia_smi``) are **not verified on hardware**: written from
NVIDIA's documented interfaces and tested against a fake ``nvidia-smi`` and a fake CUDA runtime.
"""

from __future__ import annotations

import enum
import functools
from typing import TYPE_CHECKING

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
    ReplicaRef,
    Saved,
)
from faults._admin import (
    cap_clocks,
    clock_cap_mechanism,
    clock_fractions,
    restore_clocks,
    verify_clocks,
    with_admin_retry,
)
from faults._toxics import artefact

if TYPE_CHECKING:
    from drill.api import ReplicaAdminState

__all__ = ["ClockMethod", "GpuClockCap", "GpuOom", "OomMethod"]

MIB_PER_GIB = 1024


# -- gpu_clock_cap ---------------------------------------------------------------------------------


class ClockMethod(enum.StrEnum):
    STACK_ADMIN = "stack_admin"  # the reference stack's simulated SM clock
    NVIDIA_SMI = "nvidia_smi"  # nvidia-smi -lgc / -rgc on this host's GPUs


class GpuClockCapParams(FaultParams):
    method: ClockMethod = Field(ClockMethod.STACK_ADMIN, description="how the clock is capped (see Methods)")
    fraction: float = Field(0.5, ge=0.01, le=1, description="SM clock as a fraction of its maximum")
    gpu_indices: list[int] | None = Field(None, description="nvidia_smi: host GPU indices the replica uses (required)")

    @model_validator(mode="after")
    def _indices_for_smi(self) -> GpuClockCapParams:
        if self.method is ClockMethod.NVIDIA_SMI and not self.gpu_indices:
            raise ValueError("method nvidia_smi needs gpu_indices: the host GPUs (nvidia-smi -i) of the replica")
        if self.method is ClockMethod.STACK_ADMIN and self.gpu_indices is not None:
            raise ValueError("gpu_indices belongs to method nvidia_smi")
        return self


class GpuClockCapSaved(Saved):
    clock_fraction: dict[str, float] = Field(default_factory=dict)  # replica -> fraction before (stack_admin)
    max_sm_mhz: dict[str, float] = Field(default_factory=dict)  # GPU index -> clocks.max.sm (nvidia_smi)


class GpuClockCap(Fault):
    """A replica's GPU runs at a capped SM clock (thermal or power throttling, a bad clock policy).

    ``stack_admin`` (simulated): the reference stack's cost model slows compute by 1/``fraction``
    and memory-bound work by 1/``fraction``^0.3. ``nvidia_smi`` (real hardware only, not verified):
    ``nvidia-smi -i <i> -lgc <f×max>,<f×max>`` on this host for each of ``gpu_indices``, with
    ``<max>`` the GPU's ``clocks.max.sm`` (needs root and a Volta or newer GPU).

    verify: the admin API reports the fraction; or ``nvidia-smi`` shows ``clocks.sm`` at or under
    the cap (+2 %) on every GPU — weak evidence on an idle GPU, whose clock drops anyway.

    .. code-block:: yaml

        faults:
          - kind: gpu_clock_cap
            start: 10s
            duration: 30s
            params: {method: stack_admin, fraction: 0.3}
            selector: {replicas: [0]}
    """

    kind = "gpu_clock_cap"
    Params = GpuClockCapParams
    params: GpuClockCapParams
    Saved = GpuClockCapSaved
    mechanisms = (
        clock_cap_mechanism("stack_admin"),
        Mechanism(
            name="nvidia_smi",
            needs=frozenset({Capability.NVIDIA_GPU}),
            realism=Realism.HARDWARE_UNVERIFIED,
            summary="nvidia-smi -lgc on this host's GPUs, -rgc to revert",
        ),
    )
    summary = "a GPU's SM clock capped: simulated by the stack, or nvidia-smi -lgc on real GPUs"
    revert_semantics = (
        "stack_admin: puts back the clock fraction from before (nominal: cap removed). nvidia_smi: "
        "nvidia-smi -rgc (default clocks; a lock set before the fault is not restored). Idempotent."
    )

    def prepare(self, ctx: FaultContext) -> GpuClockCapSaved:
        if self.params.method is ClockMethod.NVIDIA_SMI:
            gpus = {g.index: g for g in ctx.gpus.query()}
            return GpuClockCapSaved(max_sm_mhz={str(i): gpus[i].clocks_max_sm_mhz for i in self._indices(gpus)})
        return GpuClockCapSaved(clock_fraction=clock_fractions(ctx))

    def _indices(self, gpus: dict) -> list[int]:
        missing = [i for i in self.params.gpu_indices or [] if i not in gpus]  # required with nvidia_smi
        if missing:
            raise FaultNotLanded(f"no GPU {missing} on this host (nvidia-smi lists {sorted(gpus)})")
        return list(self.params.gpu_indices or [])

    def _cap_mhz(self, ctx: FaultContext) -> dict[int, int]:
        saved = ctx.saved if isinstance(ctx.saved, GpuClockCapSaved) else GpuClockCapSaved()
        return {int(i): max(1, round(m * self.params.fraction)) for i, m in saved.max_sm_mhz.items()}

    def inject(self, ctx: FaultContext) -> None:
        if self.params.method is ClockMethod.NVIDIA_SMI:
            for index, mhz in self._cap_mhz(ctx).items():
                ctx.gpus.lock_clocks([index], mhz, mhz)
            return
        cap_clocks(ctx, self.params.fraction)

    def verify(self, ctx: FaultContext) -> LandingProof:
        if self.params.method is ClockMethod.STACK_ADMIN:
            return verify_clocks(ctx, self.params.fraction)
        caps = self._cap_mhz(ctx)
        seen = {g.index: g.clocks_sm_mhz for g in ctx.gpus.query() if g.index in caps}
        over = {i: f"{mhz:g} MHz > {caps[i]} MHz" for i, mhz in seen.items() if not mhz <= caps[i] * 1.02}
        if over or len(seen) != len(caps):
            raise FaultNotLanded(f"SM clock not capped: {over or 'GPU missing'}", fault=ctx.fault_id)
        return LandingProof(
            summary=f"GPU(s) {sorted(seen)} at or under {self.params.fraction:g} of max SM clock "
            "(nvidia-smi; not verified on hardware)",
            observations={f"gpu{i}.clocks_sm_mhz": mhz for i, mhz in seen.items()},
        )

    def revert(self, ctx: FaultContext) -> None:
        if self.params.method is ClockMethod.NVIDIA_SMI:
            ctx.gpus.reset_clocks(list(self.params.gpu_indices or []))
            return
        saved = ctx.saved if isinstance(ctx.saved, GpuClockCapSaved) else GpuClockCapSaved()
        restore_clocks(ctx, saved.clock_fraction)


# -- gpu_oom ---------------------------------------------------------------------------------------


class OomMethod(enum.StrEnum):
    STACK_ADMIN = "stack_admin"  # the reference stack's simulated memory hog
    CUDA_HOG = "cuda_hog"  # a process holding GPU memory through the CUDA runtime


class GpuOomParams(FaultParams):
    method: OomMethod = Field(OomMethod.STACK_ADMIN, description="how the memory is taken (see Methods)")
    gib: float = Field(..., gt=0, le=4096, description="GPU memory another process takes (GiB)")
    device: int = Field(0, ge=0, description="cuda_hog: CUDA device index inside the replica's container")
    hog_lease: Duration = Field(3600.0, description="cuda_hog: the hog frees the memory by itself after this long")
    python: str = Field("python3", description="cuda_hog: Python interpreter in the replica's container")
    cuda_lib: str = Field("", description="cuda_hog: path of libcudart.so (default: searched, then libcuda.so.1)")


class GpuOomSaved(Saved):
    hog_gib: dict[str, float] = Field(default_factory=dict)  # replica -> simulated hog before
    pid: dict[str, int] = Field(default_factory=dict)  # replica -> its pid before (death detection)
    kv_usable: dict[str, int] = Field(default_factory=dict)  # replica -> usable KV blocks before
    used_mib: dict[str, float] = Field(default_factory=dict)  # replica -> GPU memory used before (cuda_hog)


class GpuOom(Fault):
    """Another process takes ``gib`` GiB of a replica's GPU memory: the KV cache shrinks, or the engine dies (OOM).

    ``stack_admin`` (simulated): the reference stack's GPU loses ``gib`` GiB — first the memory vLLM
    leaves free, then KV blocks (running requests are preempted), then the activation reserve;
    a step that cannot get its activations raises PyTorch's CUDA OOM and the engine dies
    (HTTP 500, ``/health`` 503, the supervisor restarts it). ``cuda_hog`` (real hardware only, not
    verified): a process started with ``docker exec`` in the replica's container (on this host
    for a replica without one) allocates ``gib`` GiB with the CUDA runtime and holds it until the
    revert, or until ``hog_lease`` runs out (it frees the GPU even if nothing reverts it).

    verify: the admin API reports the hog (with the KV blocks left), or the engine died of it — its death
    reason (while dead, or ``last_death`` once restarted) is a CUDA OOM with the hog's memory in use; or
    the hog reports holding the memory and ``nvidia-smi`` shows ``memory.used`` grown by at least 90 %
    of ``gib``.

    .. code-block:: yaml

        faults:
          - kind: gpu_oom
            start: 10s
            duration: 20s
            params: {method: stack_admin, gib: 40}
            selector: {replicas: [0]}
    """

    kind = "gpu_oom"
    Params = GpuOomParams
    params: GpuOomParams
    Saved = GpuOomSaved
    mechanisms = (
        Mechanism(
            name="stack_admin",
            needs=frozenset({Capability.STACK_ADMIN}),
            realism=Realism.SIMULATED,
            summary="the reference stack's simulated memory hog",
        ),
        Mechanism(
            name="cuda_hog",
            needs=frozenset({Capability.NVIDIA_GPU}),
            realism=Realism.HARDWARE_UNVERIFIED,
            summary="a CUDA process holding the memory, started through docker exec",
        ),
    )
    summary = "GPU memory taken by another process: KV cache shrinks or CUDA OOM (simulated, or a real CUDA hog)"
    revert_semantics = (
        "stack_admin: puts back the simulated hog from before (usually none; a restarted replica has "
        "none anyway). cuda_hog: SIGTERMs the hog process (SIGKILL after 5 s). Idempotent."
    )

    def _tag(self, ctx: FaultContext) -> str:
        return artefact(ctx)

    def prepare(self, ctx: FaultContext) -> GpuOomSaved:
        if self.params.method is OomMethod.CUDA_HOG:
            return GpuOomSaved(used_mib={r.name: self._used_mib(ctx, r) for r in ctx.targets.replicas})
        states = {r.name: ctx.stack_admin(r).state() for r in ctx.targets.replicas}
        return GpuOomSaved(
            hog_gib={n: s.gpu.memory_hog_gib for n, s in states.items()},
            pid={n: s.pid for n, s in states.items()},
            kv_usable={n: s.gpu.kv_blocks_usable or s.gpu.kv_blocks_total for n, s in states.items()},
        )

    def _used_mib(self, ctx: FaultContext, replica: ReplicaRef) -> float:
        gpus = ctx.gpus.query(replica.container)
        if self.params.device >= len(gpus):
            raise FaultNotLanded(f"replica {replica.name} sees {len(gpus)} GPU(s); no device {self.params.device}")
        return gpus[self.params.device].memory_used_mib

    def inject(self, ctx: FaultContext) -> None:
        p: GpuOomParams = self.params
        for replica in ctx.targets.replicas:
            if p.method is OomMethod.CUDA_HOG:
                ctx.gpus.start_memory_hog(
                    replica.container,
                    tag=self._tag(ctx),
                    gib=p.gib,
                    device=p.device,
                    lease_s=p.hog_lease,
                    cuda_lib=p.cuda_lib,
                    python=p.python,
                )
            else:
                ctx.stack_admin(replica).set_memory_hog(p.gib)

    def verify(self, ctx: FaultContext) -> LandingProof:
        saved = ctx.saved if isinstance(ctx.saved, GpuOomSaved) else GpuOomSaved()
        found = [self._verify_one(ctx, r, saved) for r in ctx.targets.replicas]
        return LandingProof(
            summary="; ".join(e.summary for e in found),
            observations={k: v for e in found for k, v in e.observations.items()},
        )

    def _verify_one(self, ctx: FaultContext, replica: ReplicaRef, saved: GpuOomSaved) -> LandingProof:
        if self.params.method is OomMethod.CUDA_HOG:
            return self._verify_hog(ctx, replica, saved)
        state = with_admin_retry(ctx, ctx.stack_admin(replica).state)
        before = saved.pid.get(replica.name)
        if (before is not None and state.pid != before) or not state.engine_alive:
            return self._verify_death(ctx, replica, state, before)
        if abs(state.gpu.memory_hog_gib - self.params.gib) > 1e-6:
            raise FaultNotLanded(
                f"{replica.name} reports {state.gpu.memory_hog_gib:g} GiB taken, not {self.params.gib:g}",
                fault=ctx.fault_id,
            )
        kv_after = state.gpu.kv_blocks_usable if state.gpu.kv_blocks_usable is not None else state.gpu.kv_blocks_total
        return LandingProof(
            summary=f"{replica.name}: {self.params.gib:g} GiB taken (simulated); usable KV blocks "
            f"{saved.kv_usable.get(replica.name, '?')} -> {kv_after}",
            observations={
                f"{replica.name}.memory_hog_gib": state.gpu.memory_hog_gib,
                f"{replica.name}.kv_blocks_usable": kv_after,
            },
        )

    def _verify_death(
        self, ctx: FaultContext, replica: ReplicaRef, state: ReplicaAdminState, before: int | None
    ) -> LandingProof:
        """A dead or restarted engine is evidence only when it died of CUDA OOM with the hog's memory taken.

        The reason comes from the replica itself: ``engine.dead_reason`` while the dead process lingers,
        ``last_death`` (pid, reason) once the supervisor restarted it. Any other death or restart (a crash,
        an XID, a kill) is not this fault landing.
        """
        pid: int | None
        if state.pid == before or before is None:
            pid, reason, how = state.pid, state.engine.dead_reason, "its engine is dead"
        else:
            death = state.last_death
            pid = death.pid if death is not None else None
            reason = death.reason if death is not None and death.pid == before else None
            how = f"restarted as pid {state.pid}"
        hog = f"{self.params.gib:.2f} GiB memory in use"
        if reason is None or "CUDA out of memory" not in reason or hog not in reason:
            why = f"it died of: {reason}" if reason else "the replica reports no death of pid " + str(before)
            raise FaultNotLanded(
                f"{replica.name}: pid {before} {how}, but not of this memory hog ({why})", fault=ctx.fault_id
            )
        return LandingProof(
            summary=f"{replica.name}: the engine died of CUDA OOM under the "
            f"{self.params.gib:g} GiB hog (pid {pid}: {how})",
            observations={
                f"{replica.name}.pid": state.pid,
                f"{replica.name}.died": True,
                f"{replica.name}.dead_reason": reason,
            },
        )

    def _verify_hog(self, ctx: FaultContext, replica: ReplicaRef, saved: GpuOomSaved) -> LandingProof:
        status = ctx.gpus.hog_status(replica.container, self._tag(ctx), python=self.params.python)
        wanted_mib = self.params.gib * MIB_PER_GIB
        if status is None or status.held < status.wanted:
            held = f"{status.held / 2**30:.2f} GiB" if status else "nothing (no hog running)"
            raise FaultNotLanded(
                f"{replica.name}: the memory hog holds {held} of {self.params.gib:g} GiB", fault=ctx.fault_id
            )
        grown = self._used_mib(ctx, replica) - saved.used_mib.get(replica.name, 0.0)
        if grown < 0.9 * wanted_mib:
            raise FaultNotLanded(
                f"{replica.name}: nvidia-smi memory.used grew by {grown:.0f} MiB, less than 90% of "
                f"{wanted_mib:.0f} MiB",
                fault=ctx.fault_id,
            )
        return LandingProof(
            summary=f"{replica.name}: hog pid {status.pid} holds {status.held / 2**30:.2f} GiB on "
            f"device {status.device} ({status.api}); memory.used +{grown:.0f} MiB "
            "(not verified on hardware)",
            observations={f"{replica.name}.hog_pid": status.pid, f"{replica.name}.used_mib_grown": grown},
        )

    def revert(self, ctx: FaultContext) -> None:
        saved = ctx.saved if isinstance(ctx.saved, GpuOomSaved) else GpuOomSaved()
        for replica in ctx.targets.replicas:
            if self.params.method is OomMethod.CUDA_HOG:
                ctx.gpus.stop_memory_hog(replica.container, self._tag(ctx), python=self.params.python)
                continue
            admin, before = ctx.stack_admin(replica), saved.hog_gib.get(replica.name, 0.0)
            with_admin_retry(
                ctx,
                admin.clear_memory_hog if before <= 0 else functools.partial(admin.set_memory_hog, before),
                gone_ok=True,
            )
