"""The KV-transfer faults of disaggregated prefill/decode: ``kv_transfer_delay``, ``kv_transfer_stall``,
``kv_transfer_fail`` and ``kv_block_corrupt`` (docs/disaggregated.md, "Faults").

``kv_transfer_delay`` puts Toxiproxy toxics on the KV links (the proxies between each prefill and decode worker).
The other three set a KV fault on the prefill workers through the reference stack's admin API
(``PUT /admin/kv/fault``): the worker's KV sender then stalls, fails at a chosen point, or sends stale or foreign
blocks, for ``share`` of the transfers, picked from ``seed`` and the transfer id (the request's ``X-Request-Id``)
alone, so a test knows which requests were hit.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from drill.api import (
    AdminApiError,
    Capability,
    Fault,
    FaultContext,
    FaultNotLanded,
    FaultParams,
    InjectError,
    LandingProof,
    LinkKind,
    Mechanism,
    Realism,
    ReplicaRef,
)
from faults._toxics import Direction, ToxicPlan, add_toxics, artefact, refused, remove_toxics, verify_toxics

__all__ = [
    "KvBlockCorrupt",
    "KvBlockCorruptParams",
    "KvTransferDelay",
    "KvTransferDelayParams",
    "KvTransferFail",
    "KvTransferFailParams",
    "KvTransferStall",
    "KvTransferStallParams",
    "StallMethod",
    "kv_link_proxies",
    "prefill_workers",
]


def prefill_workers(ctx: FaultContext) -> list[ReplicaRef]:
    """The prefill workers a KV fault acts on: those the selector picked, or, when it picked none, every one."""
    picked = [r for r in ctx.targets.replicas if r.role == "prefill"]
    workers = picked or [r for r in ctx.target.replicas if r.role == "prefill"]
    if not workers:
        raise InjectError(
            "the target has no prefill worker",
            fault=ctx.fault_id,
            hint="KV faults need a disaggregated stack: target.config.topology: {prefill: 1, decode: 1}",
        )
    return workers


# -- kv_transfer_delay -----------------------------------------------------------------------------


class KvTransferDelayParams(FaultParams):
    latency_ms: int = Field(0, ge=0, le=600_000, description="added delay per chunk on the KV link (ms)")
    jitter_ms: int = Field(0, ge=0, le=600_000, description="± random delay (ms)")
    bandwidth_kbps: int | None = Field(None, ge=1, description="rate cap on the KV link (KB/s, 1 KB = 1000 B)")
    direction: Direction = Field(
        Direction.DOWNSTREAM, description="downstream: the blocks (prefill -> decode); upstream: the read requests"
    )

    @model_validator(mode="after")
    def _something(self) -> KvTransferDelayParams:
        if not (self.latency_ms or self.jitter_ms or self.bandwidth_kbps):
            raise ValueError("kv_transfer_delay needs latency_ms, jitter_ms or bandwidth_kbps")
        return self


class KvTransferDelay(Fault):
    """The KV link between prefill and decode workers gets slow: every transfer takes longer, so TTFT grows.

    Latency/jitter and/or a bandwidth cap as Toxiproxy toxics on the proxies of the KV links
    (``<stack>-kv-p<p>-d<d>``) of the selected workers (``selector.links`` narrows by name or by the other
    worker's index); the blocks cross those proxies as real bytes (``kv_transfer.byte_scale`` of the modelled ones).

    On a real deployment: a ``slow_replica`` (``toxiproxy``) on a hand-made proxy in front of a KV path that is TCP
    (NIXL with ``UCX_TLS=tcp``, Mooncake's TCP transport); over RDMA (UCX) or NVLink no socket proxy sees the
    blocks, and the same proxy on the handshake port (NIXL's ``VLLM_NIXL_SIDE_CHANNEL_PORT``) slows only the start
    of each transfer (docs/disaggregated.md, "Drilling a real P/D deployment").

    verify: the toxics are listed on every KV link proxy.

    .. code-block:: yaml

        faults:
          - kind: kv_transfer_delay
            start: 10s
            duration: 30s
            params: {latency_ms: 200}
            selector: {replicas: [0]}
    """

    kind = "kv_transfer_delay"
    Params = KvTransferDelayParams
    params: KvTransferDelayParams
    scope: Literal["replicas", "links", "pools", "none"] = "links"
    needs = frozenset({Capability.TOXIPROXY_KV_LINK})
    realism = Realism.REAL
    summary = "slow KV transfers: Toxiproxy latency/bandwidth toxics on the prefill -> decode KV links"
    revert_semantics = "deletes the toxics drill-<fault id>-* from each KV link proxy; idempotent."

    def _proxies(self, ctx: FaultContext) -> list[str]:
        return kv_link_proxies(ctx)

    def _plans(self, ctx: FaultContext) -> list[ToxicPlan]:
        p = self.params
        plans = []
        for stream in p.direction.streams():
            if p.latency_ms or p.jitter_ms:
                attributes = {"latency": p.latency_ms, "jitter": p.jitter_ms}
                plans.append(ToxicPlan(artefact(ctx, "latency", stream), "latency", attributes, stream))
            if p.bandwidth_kbps:
                plans.append(
                    ToxicPlan(artefact(ctx, "bandwidth", stream), "bandwidth", {"rate": p.bandwidth_kbps}, stream)
                )
        return plans

    def inject(self, ctx: FaultContext) -> None:
        add_toxics(ctx, self._proxies(ctx), self._plans(ctx))

    def verify(self, ctx: FaultContext) -> LandingProof:
        return verify_toxics(ctx, self._proxies(ctx), self._plans(ctx))

    def revert(self, ctx: FaultContext) -> None:
        remove_toxics(ctx, kv_link_proxies(ctx, strict=False), [plan.name for plan in self._plans(ctx)])


def kv_link_proxies(ctx: FaultContext, *, strict: bool = True) -> list[str]:
    """The Toxiproxy proxies of the selected KV links (a link is listed on both its workers: once each here).

    ``strict``: InjectError when there is none, or a selected KV link has no proxy.
    """
    links = [ln for ln in ctx.targets.links if ln.kind is LinkKind.KV]
    if strict and (not links or any(ln.proxy is None for ln in links)):
        raise InjectError(
            "no KV link of the selected workers carries a Toxiproxy proxy",
            fault=ctx.fault_id,
            hint="use a disaggregated stack with target.config.topology.kv_transfer.proxies: true",
        )
    return sorted({ln.proxy for ln in links if ln.proxy})


# -- the prefill worker's KV sender ----------------------------------------------------------------


class _KvShareParams(FaultParams):
    share: float = Field(1.0, gt=0, le=1, description="share of the transfers hit (picked by seed and transfer id)")
    seed: int = Field(0, ge=0, description="decides which transfers are hit (with each transfer's id)")


class _SenderFault(Fault):
    """A KV fault set on every prefill worker's KV sender (see the module docstring)."""

    scope: Literal["replicas", "links", "pools", "none"] = "replicas"
    needs = frozenset({Capability.STACK_ADMIN})
    realism = Realism.SIMULATED
    mode: ClassVar[str] = ""
    revert_semantics = (
        "clears the KV fault drill-<fault id> on each prefill worker (another fault in force stays); a worker "
        "that refuses connections holds none (a restarted worker starts without). Idempotent."
    )

    def _body(self, ctx: FaultContext) -> dict[str, Any]:
        params = self.params.model_dump(mode="json", exclude={"method"})
        return {"name": artefact(ctx), "mode": self.mode, **params}

    def inject(self, ctx: FaultContext) -> None:
        body = self._body(ctx)
        for worker in prefill_workers(ctx):
            ctx.stack_admin(worker).set_kv_fault(body)

    def verify(self, ctx: FaultContext) -> LandingProof:
        body = self._body(ctx)
        seen: dict[str, str | int | float | bool | None] = {}
        for worker in prefill_workers(ctx):
            fault = ctx.stack_admin(worker).kv_state().fault
            wrong = {k: v for k, v in body.items() if (fault or {}).get(k) != v}
            if fault is None or wrong:
                raise FaultNotLanded(f"{worker.name}: the KV fault in force is {fault}, not {body}", fault=ctx.fault_id)
            seen[worker.name] = f"{self.mode} on {self.params.model_dump(mode='json')}"
        return LandingProof(summary=f"KV fault {body['name']} in force on {', '.join(seen)}", observations=seen)

    def revert(self, ctx: FaultContext) -> None:
        for worker in prefill_workers(ctx):
            try:
                ctx.stack_admin(worker).clear_kv_fault(artefact(ctx))
            except AdminApiError as exc:
                if not refused(exc):
                    raise
                ctx.note(f"{worker.name} refuses connections: a worker that is down holds no KV fault")


class StallMethod(enum.StrEnum):
    STACK_ADMIN = "stack_admin"  # the reference stack's prefill workers withhold the completion
    TOXIPROXY = "toxiproxy"  # a Toxiproxy timeout toxic (timeout 0) on the KV link proxies: data stops, link stays


class KvTransferStallParams(_KvShareParams):
    method: StallMethod = Field(StallMethod.STACK_ADMIN, description="how the transfers stall (see Methods)")


class KvTransferStall(_SenderFault):
    """A KV transfer starts but its completion never arrives ("in progress forever", NIXL #2047).

    ``stack_admin``: the prefill worker answers the decode worker's read, sends every block, and never sends the
    completion; it holds the connection until the reader gives up (``share`` of the transfers, picked by ``seed``).
    ``toxiproxy``: a ``timeout`` toxic with timeout 0 on the KV link proxies (downstream, ``share`` as the toxic's
    toxicity: a random share of connections): the read goes out, nothing comes back, the connection stays open.

    A decode worker with a ``kv_transfer.lease`` fails (or
    recomputes) the request when the lease ends; one without waits as long as its client does (vLLM #50754).

    On a real deployment: ``partition`` (``mode: blackhole``) on a hand-made proxy in front of a TCP KV path; over
    RDMA (UCX) the same on the handshake port stalls the start of each transfer, not its completion (vLLM #50754,
    SGLang #36108), and ``bounded_completion`` tells whether the decode side's own wait outlasts the clients.

    verify: ``GET /admin/kv`` of every prefill worker shows the fault in force / the toxic is listed on every KV
    link proxy.

    .. code-block:: yaml

        faults:
          - kind: kv_transfer_stall
            start: 10s
            duration: 30s
            params: {share: 0.5, seed: 7}
    """

    kind = "kv_transfer_stall"
    Params = KvTransferStallParams
    params: KvTransferStallParams
    mode: ClassVar[str] = "stall"
    mechanisms = (
        Mechanism(
            name="stack_admin",
            needs=frozenset({Capability.STACK_ADMIN}),
            realism=Realism.SIMULATED,
            summary="the stack's prefill workers send the blocks, never the completion (seeded share of transfers)",
        ),
        Mechanism(
            name="toxiproxy",
            needs=frozenset({Capability.TOXIPROXY_KV_LINK}),
            realism=Realism.REAL,
            summary="a timeout toxic (timeout 0) on the KV link proxies: bytes stop, connections stay open",
        ),
    )
    summary = "KV transfers whose completion never arrives, for a share of them"
    revert_semantics = (
        "stack_admin: clears the KV fault drill-<fault id> on each prefill worker (a worker that refuses "
        "connections holds none). toxiproxy: deletes the toxic drill-<fault id>-timeout from each KV link proxy. "
        "Idempotent."
    )

    def __init__(self, params: KvTransferStallParams) -> None:
        super().__init__(params)
        self.scope = "links" if params.method is StallMethod.TOXIPROXY else "replicas"

    def _toxic(self, ctx: FaultContext) -> list[ToxicPlan]:
        plan = ToxicPlan(artefact(ctx, "timeout"), "timeout", {"timeout": 0}, "downstream", self.params.share)
        return [plan]

    def inject(self, ctx: FaultContext) -> None:
        if self.params.method is StallMethod.TOXIPROXY:
            add_toxics(ctx, kv_link_proxies(ctx), self._toxic(ctx))
            return
        super().inject(ctx)

    def verify(self, ctx: FaultContext) -> LandingProof:
        if self.params.method is StallMethod.TOXIPROXY:
            return verify_toxics(ctx, kv_link_proxies(ctx), self._toxic(ctx))
        return super().verify(ctx)

    def revert(self, ctx: FaultContext) -> None:
        if self.params.method is StallMethod.TOXIPROXY:
            remove_toxics(ctx, kv_link_proxies(ctx, strict=False), [p.name for p in self._toxic(ctx)])
            return
        super().revert(ctx)


class TransferFailPoint(enum.StrEnum):
    BEFORE_START = "before_start"  # the prefill worker refuses the read: nothing moves
    IN_FLIGHT = "in_flight"  # the connection is reset half-way through the blocks
    AFTER_DATA = "after_data"  # every block arrived; the completion reports a failure


class KvTransferFailParams(_KvShareParams):
    point: TransferFailPoint = Field(TransferFailPoint.IN_FLIGHT, description="where the transfer fails")


class KvTransferFail(_SenderFault):
    """A KV transfer fails at a chosen point: before it starts, in flight, or after the data moved
    (TensorRT-LLM RFC #18450's three points; vLLM #41863's crash during the handshake is ``before_start``).

    The decode worker then fails the request (``kv_transfer.failure_policy: fail``) or computes the prefill
    itself (``recompute``, vLLM's ``kv_load_failure_policy``).

    On a real deployment: ``partition`` (``mode: refuse``) on the handshake port fails transfers before they start,
    ``link_reset`` on a proxy in front of a TCP KV path fails them in flight; a failure after the data moved comes
    only from inside a connector (vLLM's KV load failure recovery example, whose connectors fail loads on purpose).

    verify: ``GET /admin/kv`` of every prefill worker shows the fault in force.

    .. code-block:: yaml

        faults:
          - kind: kv_transfer_fail
            start: 10s
            duration: 30s
            params: {point: after_data, share: 1.0}
    """

    kind = "kv_transfer_fail"
    Params = KvTransferFailParams
    params: KvTransferFailParams
    mode: ClassVar[str] = "fail"
    summary = "KV transfers fail before they start, in flight, or after the data moved"


class BlockCorruption(enum.StrEnum):
    STALE = "stale"  # the previous version of the blocks (consumed, then reused)
    FOREIGN = "foreign"  # another transfer's blocks (an out-of-range block id)


class KvBlockCorruptParams(_KvShareParams):
    corruption: BlockCorruption = Field(BlockCorruption.STALE, description="stale (an older version) or foreign blocks")


class KvBlockCorrupt(_SenderFault):
    """A share of the transfers deliver stale or foreign KV blocks under the right name (vLLM #52234, Dynamo #12463).

    A decode worker that checks block versions (``kv_transfer.check_block_versions``) treats them as a failed load;
    one that does not decodes from them and answers HTTP 200 with other tokens. Which transfers are hit follows from
    ``seed`` and each transfer's id (the request's ``X-Request-Id``): ``sha256("<seed>:<id>")`` below ``share``.

    On a real deployment nothing outside a connector corrupts its blocks: run ``output_correctness`` with a golden
    file from a clean run under the suspect condition (a new connector version, prefix caching under eviction
    pressure, a mixed-version rollout); it catches HTTP 200 with wrong tokens on any target.

    verify: ``GET /admin/kv`` of every prefill worker shows the fault in force.

    .. code-block:: yaml

        faults:
          - kind: kv_block_corrupt
            start: 10s
            duration: 30s
            params: {corruption: stale, share: 0.2, seed: 1}
    """

    kind = "kv_block_corrupt"
    Params = KvBlockCorruptParams
    params: KvBlockCorruptParams
    mode: ClassVar[str] = "corrupt"
    summary = "stale or foreign KV blocks for a seeded share of transfers (HTTP 200 with wrong tokens, unchecked)"
