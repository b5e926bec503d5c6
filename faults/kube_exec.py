"""``method: exec`` of ``replica_crash`` and ``replica_pause`` on the kubernetes target: the container's main
process signalled from inside its pod, through the API server's ``pods/exec`` subresource (the kubelet runs the
command in the container, as ``kubectl exec`` does).

The main process is the container's PID 1, or the one child of an init running as PID 1 (tini, dumb-init,
catatonit). The init of a PID namespace gets, from inside its namespace, only the signals it handles: the kernel
drops the others, SIGKILL and SIGSTOP always (pid_namespaces(7)). So a crash by SIGKILL, or a pause, needs an image
whose server runs under such an init (``docker run --init``, ``tini --``); a server that is PID 1 is refused before
anything starts, saying why (the kubernetes target's pre-flight asks each pod:
:mod:`drill.targets.kube_exec_preflight`).

Each pod's main process is journaled (PID, start time, name, the pod's restart count, whether it was already
stopped) before the signal; a signal goes only to that process (same PID and start time), never to a later one.
"""

from __future__ import annotations

import time

from pydantic import Field

from drill.api import (
    Capability,
    FaultContext,
    FaultNotLanded,
    InjectError,
    KubernetesError,
    LandingProof,
    Mechanism,
    Realism,
    RevertError,
    Saved,
)
from faults._toxics import poll

__all__ = [
    "EXEC_CRASH",
    "EXEC_PAUSE",
    "ExecSaved",
    "ExecTarget",
    "crash_exec",
    "prepare_exec",
    "revert_pause_exec",
    "verify_crash_exec",
    "verify_pause_exec",
]

EXEC_CRASH = Mechanism(
    name="exec",
    needs=frozenset({Capability.KUBERNETES}),
    realism=Realism.REAL,
    summary="the container's main process killed from inside its pod through pods/exec; the kubelet restarts it",
)
EXEC_PAUSE = Mechanism(
    name="exec",
    needs=frozenset({Capability.KUBERNETES}),
    realism=Realism.REAL,
    summary="SIGSTOP / SIGCONT to the container's main process through pods/exec",
)

#: exit status of the signal command when the journaled process is gone or another one has its PID
_GONE = 5


class ExecTarget(Saved):
    """One pod's main process, as journaled before the signal."""

    pod: str
    uid: str  # the pod's UID: a replacement pod is another pod
    pid: int
    start: str  # its start time (clock ticks since boot): with the PID, this process only
    name: str
    restart_count: int = Field(0, ge=0)  # the pod's, before the fault
    stopped: bool = False  # state T before the fault: a pause's revert leaves it so


class ExecSaved(Saved):
    processes: list[ExecTarget] = Field(default_factory=list)


def prepare_exec(ctx: FaultContext, container: str | None, signal_name: str) -> ExecSaved:
    """Each selected replica's pod's main process, read through exec; InjectError when ``signal_name`` would not
    reach it (the pre-flight refuses that before anything starts; a pod replaced since is asked again here)."""
    found = []
    for replica in ctx.targets.replicas:
        pod = ctx.kubernetes.pod(replica.pod) if replica.pod else None
        if pod is None or not pod.serving:
            raise InjectError(f"replica {replica.name}'s pod {replica.pod} does not serve", fault=ctx.fault_id)
        main = ctx.kubernetes.main_process(pod.name, container)
        refusal = main.refusal(signal_name)
        if refusal is not None:
            raise InjectError(f"pod {pod.name}: {refusal}", fault=ctx.fault_id, hint=_INIT_HINT)
        found.append(
            ExecTarget(
                pod=pod.name,
                uid=pod.uid,
                pid=main.pid,
                start=main.start,
                name=main.name,
                restart_count=pod.restart_count,
                stopped=main.state == "T",
            )
        )
    return ExecSaved(processes=found)


_INIT_HINT = "run the server under an init (tini, dumb-init: its child gets every signal), or use method: pod"


def crash_exec(ctx: FaultContext, saved: ExecSaved, container: str | None, signal_name: str) -> None:
    """``signal_name`` to each journaled process. A session cut without a status is not a failure: the container
    dying ends the exec running in it; verify decides."""
    for target in saved.processes:
        done = ctx.kubernetes.signal_process(target.pod, container, target.pid, target.start, signal_name)
        if done.exit_code == _GONE:
            raise InjectError(
                f"pod {target.pod}: process {target.pid} ({target.name}) was gone before the {signal_name}",
                fault=ctx.fault_id,
            )
        if done.exit_code not in (0, None):
            raise InjectError(
                f"pod {target.pod}: kill -s {signal_name} {target.pid}: {done.describe()}", fault=ctx.fault_id
            )


def verify_crash_exec(ctx: FaultContext, saved: ExecSaved, signal_name: str, timeout_s: float) -> LandingProof:
    """Proof: each pod (the same UID) reports a restart count higher than before within ``timeout_s``."""
    start = time.monotonic()
    seen: dict[str, str | int | float | bool | None] = {}
    for target in saved.processes:
        count = _restarted(ctx, target, max(0.0, timeout_s - (time.monotonic() - start)))
        if count is None:
            raise FaultNotLanded(
                f"pod {target.pod}: {signal_name} sent to process {target.pid} ({target.name}), but its restart "
                f"count is still {target.restart_count} after {timeout_s:g}s",
                fault=ctx.fault_id,
                hint=f"kubectl describe pod {target.pod}: did the process handle the signal and live on?",
            )
        seen[f"{target.pod}.restart_count"] = count
    summary = "; ".join(
        f"pod {t.pod}: process {t.pid} ({t.name}) killed ({signal_name}), restart count "
        f"{t.restart_count} -> {seen[f'{t.pod}.restart_count']}"
        for t in saved.processes
    )
    return LandingProof(summary=f"{summary} after {time.monotonic() - start:.1f}s", observations=seen)


def _restarted(ctx: FaultContext, target: ExecTarget, timeout_s: float) -> int | None:
    deadline = time.monotonic() + timeout_s
    while True:
        pod = ctx.kubernetes.pod(target.pod)
        if pod is not None and pod.uid == target.uid and pod.restart_count > target.restart_count:
            return pod.restart_count
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)


#: How long a SIGSTOP may take to show as state T: the kernel stops a process when it next runs, which on a busy
#: node can be a moment after ``kill`` returned (seen as R, then T).
STOP_SETTLE_S = 3.0


def verify_pause_exec(ctx: FaultContext, saved: ExecSaved, container: str | None) -> LandingProof:
    """Proof: each journaled process (same PID and start time) is in state T, read from /proc through exec."""
    seen: dict[str, str | int | float | bool | None] = {}
    for target in saved.processes:
        state = _stopped_state(ctx, target, container)
        if state != "T":
            raise FaultNotLanded(
                f"pod {target.pod}: process {target.pid} is {state}, not stopped (T) after {STOP_SETTLE_S:g} s",
                fault=ctx.fault_id,
            )
        seen[f"{target.pod}.state"] = state
    names = ", ".join(f"pod {t.pod} process {t.pid} ({t.name})" for t in saved.processes)
    return LandingProof(summary=f"stopped (state T in /proc/PID/status): {names}", observations=seen)


def _stopped_state(ctx: FaultContext, target: ExecTarget, container: str | None) -> str:
    """The journaled process's state once it shows T, or what it shows after :data:`STOP_SETTLE_S` ("another
    process now" at once when the PID was reused)."""
    seen: list[str] = []

    def settled() -> str | None:
        try:
            now = ctx.kubernetes.main_process(target.pod, container, pid=target.pid)
        except KubernetesError as exc:
            raise FaultNotLanded(f"pod {target.pod}: process {target.pid}: {exc.message}", fault=ctx.fault_id) from exc
        seen.append(now.state if now.start == target.start else _REPLACED)
        return seen[-1] if seen[-1] in ("T", _REPLACED) else None

    return poll(settled, STOP_SETTLE_S, 0.1) or seen[-1]


_REPLACED = "another process now"


def revert_pause_exec(ctx: FaultContext, saved: ExecSaved | None, container: str | None) -> None:
    """SIGCONT to each journaled process that was not stopped before the fault, then read it back: not stopped.
    A pod or process that is gone (replaced, restarted) is stopped no more; an exec that fails is a RevertError."""
    for target in saved.processes if saved is not None else []:
        pod = ctx.kubernetes.pod(target.pod)
        if target.stopped or pod is None or pod.uid != target.uid:
            continue
        try:
            done = ctx.kubernetes.signal_process(target.pod, container, target.pid, target.start, "SIGCONT")
            if done.exit_code == _GONE:
                continue
            if done.exit_code != 0:
                raise RevertError(f"pod {target.pod}: kill -s CONT {target.pid}: {done.describe()}", fault=ctx.fault_id)
            now = ctx.kubernetes.main_process(target.pod, container, pid=target.pid)
        except KubernetesError as exc:
            raise RevertError(
                f"pod {target.pod}: process {target.pid} may still be stopped: {exc.message}",
                fault=ctx.fault_id,
                hint=f"kubectl exec {target.pod} -- kill -s CONT {target.pid}",
            ) from exc
        if now.start == target.start and now.state == "T":
            raise RevertError(
                f"pod {target.pod}: process {target.pid} is still stopped after SIGCONT", fault=ctx.fault_id
            )
