"""The exec methods' pre-flight: before anything starts, each serving pod is asked, through ``pods/exec``, for
its container's main process, and a drill whose ``replica_crash`` or ``replica_pause`` has ``method: exec`` is
refused (exit 2, located at the fault's ``method``) when a pod cannot take it: the API server cannot exec into the
pod (no kubelet answers, e.g. a simulated node), the image has no shell with ``kill``, the exec'd user may not
signal the process, or the signal would not reach it (the server is PID 1: the kernel drops SIGKILL and SIGSTOP
sent to a PID namespace's init from inside it). The faults themselves are :mod:`faults.kube_exec`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic import BaseModel

from drill.backends.kubernetes import KubeClient, PodInfo
from drill.errors import KubernetesAccessError, KubernetesError

__all__ = ["exec_signal", "refuse_unreachable"]

#: the faults with an exec method, and the signal each sends (pause: SIGSTOP, then SIGCONT at revert)
EXEC_FAULTS = frozenset({"replica_crash", "replica_pause"})


def exec_signal(kind: str, params: BaseModel) -> str | None:
    """The signal a fault sends through exec; None when it uses no exec method."""
    method = getattr(params, "method", None)
    if kind not in EXEC_FAULTS or getattr(method, "value", method) != "exec":
        return None
    if kind == "replica_pause":
        return "SIGSTOP"
    sig = getattr(params, "signal", "SIGKILL")
    return str(getattr(sig, "value", sig))


def refuse_unreachable(
    client: KubeClient, pods: Sequence[PodInfo], faults: Iterable[tuple[str, BaseModel]], fault_at: Sequence[str]
) -> None:
    """Raise :class:`KubernetesAccessError` (exit 2, nothing touched) naming the first fault and pod an exec method
    cannot act on, and why."""
    for index, (kind, params) in enumerate(faults):
        signal_name = exec_signal(kind, params)
        if signal_name is None:
            continue
        container = getattr(params, "container", None)
        for pod in pods:
            why, status = _why_not(client, pod, container, signal_name)
            if why is None:
                continue
            where = f"{fault_at[index]}: error: " if index < len(fault_at) else ""
            raise KubernetesAccessError(
                f"{where}faults[{index}].params.method: {kind} method exec cannot send {signal_name} in pod "
                f"{client.namespace}/{pod.name}: {why}",
                operation="preflight",
                status=status,
                hint="nothing was touched; method exec needs a kubelet that runs the exec and a server under an init "
                "(tini, dumb-init) with a shell in its image; else use method: pod (crash) (docs/kubernetes.md)",
            )


def _why_not(
    client: KubeClient, pod: PodInfo, container: str | None, signal_name: str
) -> tuple[str | None, int | None]:
    try:
        main = client.main_process(pod.name, container)
    except KubernetesError as exc:
        return exc.message, exc.status
    return main.refusal(signal_name), None
