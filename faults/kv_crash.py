"""``prefill_crash`` and ``decode_crash``: a disaggregated worker's process dies, at a moment a KV transfer is under
way (vLLM #41863: the prefill worker crashes during the handshake), and its supervisor restarts it.

Each is ``replica_crash`` (:mod:`faults.lifecycle`) restricted to workers of one role: the selected workers of
that role, or, when the selector picked none of them (the default selector picks replica 0), the first worker of
that role. Before the signal, inject waits up to ``transfer_wait`` for a transfer to be in flight on a chosen
worker (``GET /admin/kv``), so the kill lands mid-transfer when there is traffic, and says when there was none.
Where the worker reports how much modelled link time its reads under way have left (a prefill worker does), it
waits for one with at least ``transfer_left`` left: a transfer about to complete could finish between the poll
and the signal on a loaded machine, and the kill would land between transfers. When none has that much within
``transfer_wait``, the kill lands in whatever is in flight then, and the journal says so.
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
    transfer_left: Duration = Field(
        0.05, ge=0, le=60, description="the modelled link time a transfer in flight must have left for the kill"
    )


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
        deadline = time.monotonic() + self.params.transfer_wait
        landed = (self._wait_for_transfer(narrowed, w, deadline) for w in narrowed.targets.replicas)
        said = next((s for s in landed if s), None)
        super().inject(narrowed)  # the signal first: a journal write here could outlast the transfer
        ctx.note(said or f"no KV transfer was in flight within {self.params.transfer_wait:g}s; killed anyway")

    def _wait_for_transfer(self, ctx: FaultContext, worker: ReplicaRef, deadline: float) -> str | None:
        """Poll ``worker`` until a transfer in flight has ``transfer_left`` left (or, at ``deadline``, any is in
        flight): what the kill lands in, in words; None with nothing in flight."""
        while True:
            try:
                state = ctx.stack_admin(worker).kv_state()
            except AdminApiError:
                return None
            left = state.longest_left_s
            enough = left is None or left >= self.params.transfer_left
            if state.in_flight > 0 and (enough or time.monotonic() >= deadline):
                return _in_flight(worker, state.in_flight, left, enough, self.params.transfer_left)
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.005)

    def verify(self, ctx: FaultContext) -> LandingProof:
        return super().verify(self._workers(ctx))

    def revert(self, ctx: FaultContext) -> None:
        super().revert(self._workers(ctx))


def _in_flight(worker: ReplicaRef, count: int, left: float | None, enough: bool, wanted: float) -> str:
    """What the kill lands in: ``count`` transfers in flight on ``worker``, the longest with ``left`` s to go."""
    said = f"killed with {count} KV transfer(s) in flight on {worker.name}"
    if left is None:
        return said
    said += f", the longest with {left * 1000:.0f} ms of its modelled link time left"
    return said if enough else f"{said} (none had {wanted * 1000:.0f} ms left in time)"


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
