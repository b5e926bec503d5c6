"""``replica_crash`` and ``replica_pause``: a replica's process or container dies, or freezes.

On the kubernetes target, ``method: exec`` signals the container's main process from inside the pod through the
``pods/exec`` subresource (:mod:`faults.kube_exec`); ``method: pod`` (crash only) deletes the pod."""

from __future__ import annotations

import enum
import functools
import signal
import time
from typing import TYPE_CHECKING

from pydantic import Field, model_validator

from drill.api import (
    Capability,
    DockerError,
    Duration,
    Fault,
    FaultContext,
    FaultNotLanded,
    FaultParams,
    InjectError,
    LandingProof,
    Mechanism,
    ProcessControlError,
    Realism,
    ReplicaRef,
    RevertError,
    Saved,
)
from faults._toxics import poll
from faults.kube_exec import (
    EXEC_CRASH,
    EXEC_PAUSE,
    ExecSaved,
    crash_exec,
    prepare_exec,
    revert_pause_exec,
    verify_crash_exec,
    verify_pause_exec,
)
from faults.kubernetes import delete_pods, serving_pods, verify_pods, wait_serving

if TYPE_CHECKING:
    from drill.api import ContainerInfo, ProcessInfo, ProcessRef

__all__ = ["CrashSignal", "LifecycleMethod", "ReplicaCrash", "ReplicaPause"]


class LifecycleMethod(enum.StrEnum):
    PROCESS = "process"  # the replica's local process, by PID file, process name or PID
    DOCKER = "docker"  # the replica's container
    POD = "pod"  # the replica's pod, deleted through the Kubernetes API (replica_crash only)
    EXEC = "exec"  # the main process of the replica's pod's container, signalled through pods/exec


class CrashSignal(enum.StrEnum):
    SIGKILL = "SIGKILL"
    SIGTERM = "SIGTERM"
    SIGABRT = "SIGABRT"
    SIGSEGV = "SIGSEGV"


def _find(ctx: FaultContext, replica: ReplicaRef) -> ProcessInfo:
    """The replica's live process: PID file first (it follows restarts), then name, then the PID at start."""
    pid = replica.pid if not (replica.pid_file or replica.process_name) else None
    return ctx.processes.find(pid=pid, pid_file=replica.pid_file, process_name=replica.process_name)


def _container(ctx: FaultContext, replica: ReplicaRef) -> str:
    if not replica.container:
        raise InjectError(
            f"replica {replica.name} runs in no container",
            fault=ctx.fault_id,
            hint="use method: process for local replicas",
        )
    return replica.container


# -- replica_crash ----------------------------------------------------------------------------------


class ReplicaCrashParams(FaultParams):
    method: LifecycleMethod = Field(LifecycleMethod.PROCESS, description="what is killed (see Methods)")
    signal: CrashSignal = Field(CrashSignal.SIGKILL, description="what kills it (SIGKILL: no clean-up at all)")
    expect_restart: bool = Field(True, description="verify waits for the supervisor / Docker to bring it back")
    restart_timeout: Duration = Field(30.0, description="how long verify and revert wait for it to come back")
    container: str | None = Field(
        None, min_length=1, description="method exec: the pod's container (default: its only one)"
    )

    @model_validator(mode="after")
    def _container_for_exec(self) -> ReplicaCrashParams:
        _exec_only(self.method, self.container)
        return self


def _exec_only(method: LifecycleMethod, container: str | None) -> None:
    if container is not None and method is not LifecycleMethod.EXEC:
        raise ValueError(f"'container' is a param of method exec, not of method {method.value}")


class CrashSaved(Saved):
    pid: dict[str, int] = Field(default_factory=dict)  # replica -> pid killed (host pid for docker)
    start_ticks: dict[str, int] = Field(default_factory=dict)  # replica -> that process's start time
    restart_count: dict[str, int] = Field(default_factory=dict)  # replica -> container RestartCount before
    pod_uid: dict[str, str] = Field(default_factory=dict)  # pod -> its UID when deleted (method: pod)
    serving_uids: list[str] = Field(default_factory=list)  # the UIDs of the pods serving before (method: pod, exec)
    exec: ExecSaved | None = None  # method exec: each pod's main process and restart count before


class ReplicaCrash(Fault):
    """A replica's process dies (``SIGKILL`` by default: an OOM kill, a segfault, a failed NCCL call).

    ``process``: the replica's local process, found by its PID file (or process name), is sent
    ``signal``; a supervisor is expected to start it again. ``docker``: the container's main
    process is killed from the host (``docker kill`` would count as a manual stop, and Docker's
    restart policy would not bring it back); ``restart_policy: on-failure`` restarts it.

    verify: ``/proc`` shows the process gone; with ``expect_restart``, a new PID in the PID file
    (a container ``RestartCount`` one higher, running) within ``restart_timeout``.

    .. code-block:: yaml

        faults:
          - kind: replica_crash
            start: 10s
            duration: 30s            # the window in which recovery is watched
            params: {method: process, signal: SIGKILL, expect_restart: true}
            selector: {replicas: [1]}
    """

    kind = "replica_crash"
    Params = ReplicaCrashParams
    params: ReplicaCrashParams
    Saved = CrashSaved
    mechanisms = (
        Mechanism(
            name="process",
            needs=frozenset({Capability.PROCESS}),
            realism=Realism.REAL,
            summary="a signal to the replica's process (PID file, name or PID)",
        ),
        Mechanism(
            name="docker",
            needs=frozenset({Capability.DOCKER}),
            realism=Realism.REAL,
            summary="the container's main process killed from the host; the restart policy restarts it",
        ),
        Mechanism(
            name="pod",
            needs=frozenset({Capability.KUBERNETES}),
            realism=Realism.REAL,
            summary="the replica's pod deleted through the Kubernetes API (grace 0); its workload makes a new one",
        ),
        EXEC_CRASH,
    )
    summary = "a replica's process, container or pod is killed; the supervisor, Docker or the workload brings it back"
    revert_semantics = (
        "a crash cannot be undone: revert waits (up to restart_timeout) until the replica runs "
        "again and starts an exited container; it fails (exit 4) if the replica stays down."
    )

    def needs_for(self, params: FaultParams) -> frozenset[Capability]:
        needs = super().needs_for(params)
        if (
            isinstance(params, ReplicaCrashParams)
            and params.method is LifecycleMethod.PROCESS
            and params.expect_restart
        ):
            needs |= {Capability.SUPERVISOR}
        return needs

    def prepare(self, ctx: FaultContext) -> CrashSaved:
        if self.params.method is LifecycleMethod.POD:
            return _prepare_pods(ctx)
        if self.params.method is LifecycleMethod.EXEC:
            exec_saved = prepare_exec(ctx, self.params.container, self.params.signal.value)
            return _prepare_pods(ctx).model_copy(update={"exec": exec_saved})
        saved = CrashSaved()
        for replica in ctx.targets.replicas:
            if self.params.method is LifecycleMethod.DOCKER:
                info = ctx.docker.info(_container(ctx, replica))
                saved.restart_count[replica.name] = info.restart_count
                process = ctx.processes.info(info.pid) if info.pid else None
            else:
                process = _find(ctx, replica)
            if process is None:
                raise InjectError(f"replica {replica.name} is not running; nothing to crash", fault=ctx.fault_id)
            saved.pid[replica.name], saved.start_ticks[replica.name] = process.pid, process.start_ticks
        return saved

    def _saved(self, ctx: FaultContext) -> CrashSaved:
        return ctx.saved if isinstance(ctx.saved, CrashSaved) else CrashSaved()

    def inject(self, ctx: FaultContext) -> None:
        if self.params.method is LifecycleMethod.POD:
            delete_pods(ctx, self._saved(ctx).pod_uid)
            return
        if self.params.method is LifecycleMethod.EXEC:
            crash_exec(ctx, self._exec_saved(ctx), self.params.container, self.params.signal.value)
            return
        saved, sig = self._saved(ctx), signal.Signals[self.params.signal.value]
        for replica in ctx.targets.replicas:
            ref = ctx.processes.ref(saved.pid[replica.name], saved.start_ticks[replica.name])
            if not ctx.processes.kill(ref, sig):
                raise InjectError(
                    f"replica {replica.name}'s process {ref.pid} was gone before the kill", fault=ctx.fault_id
                )

    def verify(self, ctx: FaultContext) -> LandingProof:
        seen: dict[str, str | int | float | bool | None] = {}
        if self.params.method is LifecycleMethod.POD:
            saved, p = self._saved(ctx), self.params
            proof = verify_pods(ctx, saved.pod_uid, saved.serving_uids, p.restart_timeout, p.expect_restart)
            return LandingProof(summary=proof, observations={f"{n}.uid": u for n, u in saved.pod_uid.items()})
        if self.params.method is LifecycleMethod.EXEC:
            return verify_crash_exec(ctx, self._exec_saved(ctx), self.params.signal.value, self.params.restart_timeout)
        for replica in ctx.targets.replicas:
            seen[replica.name] = self._verify_one(ctx, replica)
        return LandingProof(summary="; ".join(f"{n}: {v}" for n, v in seen.items()), observations=seen)

    def _exec_saved(self, ctx: FaultContext) -> ExecSaved:
        saved = self._saved(ctx).exec
        if saved is None:
            raise RevertError("no main process was journaled before the fault", fault=ctx.fault_id)
        return saved

    def _verify_one(self, ctx: FaultContext, replica: ReplicaRef) -> str:
        saved, p = self._saved(ctx), self.params
        old = ctx.processes.ref(saved.pid[replica.name], saved.start_ticks[replica.name])
        info = ctx.processes.info(old.pid)
        if info is not None and info.start_ticks == old.start_ticks and not info.state.gone:
            raise FaultNotLanded(
                f"{replica.name}: process {old.pid} is still alive ({info.state.value})", fault=ctx.fault_id
            )
        died = f"process {old.pid} killed ({p.signal.value})"
        if not p.expect_restart:
            return died
        start = time.monotonic()
        back = self._wait_back(ctx, replica, old)
        if back is None:
            raise FaultNotLanded(
                f"{replica.name}: {died}, but it did not come back within {p.restart_timeout:g}s",
                fault=ctx.fault_id,
                hint="is a supervisor or restart policy in place?",
            )
        return f"{died}; back as {back} after {time.monotonic() - start:.1f}s"

    def _wait_back(self, ctx: FaultContext, replica: ReplicaRef, old: ProcessRef) -> str | None:
        timeout = self.params.restart_timeout
        if self.params.method is LifecycleMethod.DOCKER:
            before = self._saved(ctx).restart_count.get(replica.name, 0)
            name = _container(ctx, replica)
            info = poll(lambda: _restarted(ctx, name, before), timeout, 0.1)
            return None if info is None else f"pid {info.pid} (restart count {info.restart_count})"
        try:
            new = ctx.processes.wait_new(
                old, pid_file=replica.pid_file, process_name=replica.process_name, timeout_s=timeout
            )
        except ProcessControlError:
            return None
        return f"pid {new.pid}"

    def revert(self, ctx: FaultContext) -> None:
        if self.params.method in (LifecycleMethod.POD, LifecycleMethod.EXEC):
            wait_serving(ctx, len(self._saved(ctx).serving_uids), self.params.restart_timeout)
            return
        for replica in ctx.targets.replicas:
            if self.params.method is LifecycleMethod.DOCKER:
                self._revert_container(ctx, replica)
            elif poll(functools.partial(_running, ctx, replica), self.params.restart_timeout, 0.1) is None:
                raise RevertError(
                    f"replica {replica.name} is still down {self.params.restart_timeout:g}s after the crash",
                    fault=ctx.fault_id,
                    hint="start it by hand; nothing restarts it",
                )

    def _revert_container(self, ctx: FaultContext, replica: ReplicaRef) -> None:
        name = _container(ctx, replica)
        try:
            info = ctx.docker.info(name)
        except DockerError as exc:
            raise RevertError(
                f"replica {replica.name}'s container {name} is gone: {exc.message}", fault=ctx.fault_id
            ) from exc
        if info.state.value in ("exited", "created", "dead"):
            ctx.docker.start(name)
        if poll(lambda: _state_is(ctx, name, "running"), self.params.restart_timeout, 0.1) is None:
            raise RevertError(
                f"container {name} is not running {self.params.restart_timeout:g}s after the crash", fault=ctx.fault_id
            )


def _prepare_pods(ctx: FaultContext) -> CrashSaved:
    """The UID of each selected replica's pod (it must serve now) and of every pod serving before the crash."""
    serving = {pod.name: pod for pod in serving_pods(ctx)}
    uids: dict[str, str] = {}
    for replica in ctx.targets.replicas:
        pod = serving.get(replica.pod or "")
        if pod is None:
            raise InjectError(
                f"replica {replica.name}'s pod {replica.pod} does not serve; nothing to crash",
                fault=ctx.fault_id,
                hint="a pod replaced since the target started is a new replica: select it by its new name",
            )
        uids[pod.name] = pod.uid
    return CrashSaved(pod_uid=uids, serving_uids=sorted(p.uid for p in serving.values()))


def _restarted(ctx: FaultContext, container: str, before: int) -> ContainerInfo | None:
    info = ctx.docker.info(container)
    return info if info.restart_count > before and info.state.value == "running" else None


def _running(ctx: FaultContext, replica: ReplicaRef) -> ProcessInfo | None:
    try:
        return _find(ctx, replica)
    except ProcessControlError:
        return None


def _state_is(ctx: FaultContext, container: str, state: str) -> ContainerInfo | None:
    info = ctx.docker.info(container)
    return info if info.state.value == state else None


# -- replica_pause ----------------------------------------------------------------------------------


class ReplicaPauseParams(FaultParams):
    method: LifecycleMethod = Field(LifecycleMethod.PROCESS, description="what is frozen (see Methods)")
    container: str | None = Field(
        None, min_length=1, description="method exec: the pod's container (default: its only one)"
    )

    @model_validator(mode="after")
    def _not_a_pod(self) -> ReplicaPauseParams:
        if self.method is LifecycleMethod.POD:
            raise ValueError(
                "method 'pod' cannot pause: the Kubernetes API has no pause; use method: exec (SIGSTOP to the "
                "container's main process through exec, docs/kubernetes.md)"
            )
        _exec_only(self.method, self.container)
        return self


class PauseSaved(Saved):
    pid: dict[str, int] = Field(default_factory=dict)  # replica -> pid stopped (process)
    start_ticks: dict[str, int] = Field(default_factory=dict)
    already: dict[str, bool] = Field(default_factory=dict)  # replica -> stopped/paused before the fault
    exec: ExecSaved | None = None  # method exec: each pod's main process (PID, start time) stopped


class ReplicaPause(Fault):
    """A replica freezes for the fault's window: it holds its connections but answers nothing.

    The failure a health check with a short timeout finds and a TCP connect check does not
    (a GC pause, a stuck driver call, a VM live-migration). ``process``: SIGSTOP to the replica's
    process (its TP ranks keep running), SIGCONT at revert. ``docker``: ``docker pause`` (cgroup
    freezer: every process of the container), ``docker unpause`` at revert. Requests sent
    meanwhile wait in the kernel's backlog and are answered after the revert.

    verify: ``/proc/<pid>/stat`` shows state ``T``; or the container's state is ``paused``.

    .. code-block:: yaml

        faults:
          - kind: replica_pause
            start: 10s
            duration: 15s
            params: {method: docker}
            selector: {replicas: [0]}
    """

    kind = "replica_pause"
    Params = ReplicaPauseParams
    params: ReplicaPauseParams
    Saved = PauseSaved
    mechanisms = (
        Mechanism(
            name="process",
            needs=frozenset({Capability.PROCESS}),
            realism=Realism.REAL,
            summary="SIGSTOP / SIGCONT to the replica's process",
        ),
        Mechanism(
            name="docker",
            needs=frozenset({Capability.DOCKER}),
            realism=Realism.REAL,
            summary="docker pause / unpause of the replica's container",
        ),
        EXEC_PAUSE,
    )
    summary = "a replica freezes (SIGSTOP or docker pause) for the fault's window"
    revert_semantics = (
        "SIGCONT to the same process (by PID and start time) / docker unpause; a replica that was "
        "already stopped or paused before the fault is left so. Idempotent."
    )

    def _docker(self) -> bool:
        return self.params.method is LifecycleMethod.DOCKER

    def prepare(self, ctx: FaultContext) -> PauseSaved:
        if self.params.method is LifecycleMethod.EXEC:
            return PauseSaved(exec=prepare_exec(ctx, self.params.container, "SIGSTOP"))
        saved = PauseSaved()
        for replica in ctx.targets.replicas:
            if self._docker():
                saved.already[replica.name] = ctx.docker.info(_container(ctx, replica)).state.value == "paused"
                continue
            info = _find(ctx, replica)
            saved.pid[replica.name], saved.start_ticks[replica.name] = info.pid, info.start_ticks
            saved.already[replica.name] = info.state.stopped
        return saved

    def _saved(self, ctx: FaultContext) -> PauseSaved:
        return ctx.saved if isinstance(ctx.saved, PauseSaved) else PauseSaved()

    def _ref(self, ctx: FaultContext, replica: ReplicaRef) -> ProcessRef:
        saved = self._saved(ctx)
        return ctx.processes.ref(saved.pid[replica.name], saved.start_ticks[replica.name])

    def _exec_saved(self, ctx: FaultContext) -> ExecSaved | None:
        return self._saved(ctx).exec if self.params.method is LifecycleMethod.EXEC else None

    def inject(self, ctx: FaultContext) -> None:
        if (saved := self._exec_saved(ctx)) is not None:
            crash_exec(ctx, saved, self.params.container, "SIGSTOP")
            return
        for replica in ctx.targets.replicas:
            if self._docker():
                ctx.docker.pause(_container(ctx, replica))
            else:
                ctx.processes.stop(self._ref(ctx, replica))

    def verify(self, ctx: FaultContext) -> LandingProof:
        if (exec_saved := self._exec_saved(ctx)) is not None:
            return verify_pause_exec(ctx, exec_saved, self.params.container)
        seen: dict[str, str | int | float | bool | None] = {}
        for replica in ctx.targets.replicas:
            if self._docker():
                state = ctx.docker.info(_container(ctx, replica)).state.value
            else:
                info = ctx.processes.info(self._ref(ctx, replica).pid)
                state = info.state.value if info else "gone"
            if state not in ("paused", "T"):
                raise FaultNotLanded(f"{replica.name} is {state}, not paused/stopped", fault=ctx.fault_id)
            seen[f"{replica.name}.state"] = state
        how = "container paused" if self._docker() else "process stopped (state T)"
        return LandingProof(summary=f"{how}: {', '.join(r.name for r in ctx.targets.replicas)}", observations=seen)

    def revert(self, ctx: FaultContext) -> None:
        if self.params.method is LifecycleMethod.EXEC:
            revert_pause_exec(ctx, self._saved(ctx).exec, self.params.container)
            return
        saved = self._saved(ctx)
        for replica in ctx.targets.replicas:
            if saved.already.get(replica.name):
                continue
            if not self._docker():
                if replica.name in saved.pid:
                    ctx.processes.cont(self._ref(ctx, replica))
                continue
            _unpause(ctx, _container(ctx, replica))


def _unpause(ctx: FaultContext, container: str) -> None:
    try:
        if ctx.docker.info(container).state.value == "paused":
            ctx.docker.unpause(container)
    except DockerError as exc:
        if "no such container" not in exc.message:  # a removed container is paused no more
            raise
