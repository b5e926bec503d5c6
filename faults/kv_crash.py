"""``prefill_crash`` and ``decode_crash``: a disaggregated worker's process dies, at a moment a KV transfer is under
way (vLLM #41863: the prefill worker crashes during the handshake), and its supervisor restarts it.

Each is ``replica_crash`` (:mod:`faults.lifecycle`) restricted to workers of one role: the selected workers of
that role, or, when the selector picked none of them (the default selector picks replica 0), the first worker of
that role. Before the signal, inject waits up to ``transfer_wait`` for a transfer to be in flight on a chosen
worker (``GET /admin/kv``), so the kill lands mid-transfer when there is traffic, and says when there was none.
"""

from __future__ import annotations

import dataclasses
import time
from typing import ClassVar

from pydantic import Field

from drill.api import (
    AdminApiError,
    Capability,
    Duration,
    FaultContext,
    FaultParams,
    FaultTargets,
    InjectError,
    LandingProof,
    ReplicaRef,
)
from faults.lifecycle import CrashSaved, ReplicaCrash, ReplicaCrashParams

__all__ = ["DecodeCrash", "PrefillCrash", "WorkerCrashParams"]


class WorkerCrashParams(ReplicaCrashParams):
    transfer_wait: Duration = Field(2.0, ge=0, le=60, description="how long inject waits for a transfer in flight")


class _WorkerCrash(ReplicaCrash):
    role: ClassVar[str] = ""
    Params = WorkerCrashParams
    params: WorkerCrashParams

    def needs_for(self, params: FaultParams) -> frozenset[Capability]:
        return super().needs_for(params) | {Capability.STACK_ADMIN}

    def _workers(self, ctx: FaultContext) -> FaultContext:
        """``ctx`` with its targets narrowed to the workers of this fault's role."""
        picked = [r for r in ctx.targets.replicas if r.role == self.role]
        workers = picked or [r for r in ctx.target.replicas if r.role == self.role][:1]
        if not workers:
            raise InjectError(
                f"the target has no {self.role} worker",
                fault=ctx.fault_id,
                hint="this fault needs a disaggregated stack: target.config.topology: {prefill: 1, decode: 1}",
            )
        return dataclasses.replace(ctx, targets=FaultTargets(replicas=workers))

    def prepare(self, ctx: FaultContext) -> CrashSaved:
        return super().prepare(self._workers(ctx))

    def inject(self, ctx: FaultContext) -> None:
        narrowed = self._workers(ctx)
        if not any(self._wait_for_transfer(narrowed, w) for w in narrowed.targets.replicas):
            ctx.note(f"no KV transfer was in flight within {self.params.transfer_wait:g}s; killing anyway")
        super().inject(narrowed)

    def _wait_for_transfer(self, ctx: FaultContext, worker: ReplicaRef) -> bool:
        deadline = time.monotonic() + self.params.transfer_wait
        while True:
            try:
                state = ctx.stack_admin(worker).kv_state()
            except AdminApiError:
                return False
            if state.in_flight > 0 or time.monotonic() >= deadline:
                return state.in_flight > 0
            time.sleep(0.005)

    def verify(self, ctx: FaultContext) -> LandingProof:
        return super().verify(self._workers(ctx))

    def revert(self, ctx: FaultContext) -> None:
        super().revert(self._workers(ctx))


class PrefillCrash(_WorkerCrash):
    """A prefill worker's process is killed while it holds or sends KV transfers; the supervisor restarts it.

    Transfers it held are gone: decode workers reading them fail (or recompute) at once on the broken connection,
    or, for a read that is never answered, when their lease ends. The router takes the worker out of rotation on
    its first refused connection and back after a good health check.

    On a real deployment: ``replica_crash`` on the prefill worker's replica entry (``process`` with its
    ``pid_file``, ``docker`` with its ``container``, or its pod, labelled ``llm-d.ai/role: prefill`` by llm-d).

    verify: ``/proc`` shows the process gone and, with ``expect_restart``, a new PID within ``restart_timeout``.

    .. code-block:: yaml

        faults:
          - kind: prefill_crash
            start: 10s
            duration: 30s
            params: {signal: SIGKILL, transfer_wait: 2s}
    """

    kind = "prefill_crash"
    role = "prefill"
    summary = "a prefill worker is killed mid-transfer (process signal); the supervisor restarts it"


class DecodeCrash(_WorkerCrash):
    """A decode worker's process is killed while it loads or decodes; the supervisor restarts it.

    Its streams end with an error event (or a 502 from the router); the transfers it was reading stay held on the
    prefill worker until they are freed (``kv_transfer.free_after``).

    On a real deployment: ``replica_crash`` on the decode worker's replica entry, as for ``prefill_crash``.

    verify: ``/proc`` shows the process gone and, with ``expect_restart``, a new PID within ``restart_timeout``.

    .. code-block:: yaml

        faults:
          - kind: decode_crash
            start: 10s
            duration: 30s
            params: {signal: SIGKILL}
            selector: {replicas: [1]}
    """

    kind = "decode_crash"
    role = "decode"
    summary = "a decode worker is killed mid-transfer (process signal); the supervisor restarts it"
