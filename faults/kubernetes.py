"""Faults through the Kubernetes API (the kubernetes target): a pod deleted, a workload scaled down, a node cordoned
and drained, a Chaos Mesh object.

``replica_crash`` with ``method: pod`` (in :mod:`faults.lifecycle`) uses :func:`delete_pods`, :func:`verify_pods`
and :func:`wait_serving` from here. Every object a fault creates is named from ``ctx.fault_id``
(``drill-<fault id>``), so a revert rebuilt from the journal finds exactly it; a scale-down journals the replica
count it found (``prepare``), so a revert after a crash restores it.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from pydantic import Field, model_validator

from drill.api import (
    Capability,
    Duration,
    Fault,
    FaultContext,
    FaultNotLanded,
    FaultParams,
    InjectError,
    KubeAccess,
    KubernetesError,
    LandingProof,
    Mechanism,
    Realism,
    RevertError,
    Saved,
)

if TYPE_CHECKING:
    from drill.api import PodInfo

__all__ = [
    "CHAOS_MESH_MECHANISM",
    "ChaosAction",
    "ChaosExperiment",
    "ChaosMesh",
    "NodeDrain",
    "ReplicaScaleDown",
    "delete_pods",
    "verify_pods",
    "chaos_body",
    "create_chaos",
    "delete_chaos",
    "verify_chaos",
    "wait_serving",
]

T = TypeVar("T")

_CHAOS_GROUP, _CHAOS_VERSION = "chaos-mesh.org", "v1alpha1"
_PLURALS = {"NetworkChaos": "networkchaos", "PodChaos": "podchaos"}


def _poll(check: Callable[[], T | None], timeout_s: float, every_s: float = 0.2) -> T | None:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found is not None or time.monotonic() > deadline:
            return found
        time.sleep(every_s)


def _access(ctx: FaultContext) -> KubeAccess:
    access = ctx.target.kubernetes
    if access is None:
        raise InjectError(f"target {ctx.target.kind!r} is not on Kubernetes", fault=ctx.fault_id)
    return access


def serving_pods(ctx: FaultContext) -> list[PodInfo]:
    """The workload's pods that serve now (Running, not being deleted)."""
    return [pod for pod in ctx.kubernetes.pods(_access(ctx).selector) if pod.serving]


# -- replica_crash, method: pod ------------------------------------------------------------------------


def delete_pods(ctx: FaultContext, uids: dict[str, str]) -> None:
    """Delete each pod (grace period 0: no SIGTERM, no clean-up), only the incarnation whose UID was recorded."""
    for name, uid in uids.items():
        if not ctx.kubernetes.delete_pod(name, grace_s=0, uid=uid):
            raise InjectError(f"pod {name} (uid {uid}) was gone before the delete", fault=ctx.fault_id)


def verify_pods(ctx: FaultContext, uids: dict[str, str], before: list[str], timeout_s: float, back: bool) -> str:
    """Proof: each deleted pod is gone (its name now absent, or another UID); with ``back``, as many pods serve as
    before within ``timeout_s``, at least one with a UID not seen before (the replacement)."""
    for name, uid in uids.items():
        pod = ctx.kubernetes.pod(name)
        if pod is not None and pod.uid == uid and not pod.deleting:
            raise FaultNotLanded(f"pod {name} (uid {uid}) is still there", fault=ctx.fault_id)
    gone = ", ".join(f"pod {n} (uid {u}) deleted" for n, u in uids.items())
    if not back:
        return gone
    start = time.monotonic()

    def replaced() -> list[PodInfo] | None:
        pods = serving_pods(ctx)
        new = [p for p in pods if p.uid not in before]
        return new if len(pods) >= len(before) and len(new) >= len(uids) else None

    new = _poll(replaced, timeout_s)
    if new is None:
        raise FaultNotLanded(
            f"{gone}, but the workload has not brought a new pod back within {timeout_s:g}s",
            fault=ctx.fault_id,
            hint="kubectl get events: is the workload's controller running, is there room on a node?",
        )
    names = ", ".join(f"{p.name} (uid {p.uid})" for p in new)
    return f"{gone}; replaced by {names} after {time.monotonic() - start:.1f}s"


def wait_serving(ctx: FaultContext, count: int, timeout_s: float) -> None:
    """Wait until ``count`` pods serve; RevertError naming the shortfall otherwise."""
    if _poll(lambda: True if len(serving_pods(ctx)) >= count else None, timeout_s) is None:
        access = _access(ctx)
        raise RevertError(
            f"{access.workload_kind} {access.namespace}/{access.workload}: {len(serving_pods(ctx))} of {count} pods "
            f"serve {timeout_s:g}s after the fault",
            fault=ctx.fault_id,
            hint=f"kubectl -n {access.namespace} get pods,events",
        )


# -- replica_scale_down ---------------------------------------------------------------------------------


class ScaleDownParams(FaultParams):
    remove: int = Field(1, ge=1, le=1000, description="replicas taken away from the workload's scale")
    timeout: Duration = Field(60.0, description="how long verify waits for the pods to go, and revert to come back")


class ScaleSaved(Saved):
    replicas: int = Field(0, ge=0)  # the workload's spec.replicas before the fault


class ReplicaScaleDown(Fault):
    """The workload loses capacity: its scale is patched down by ``remove`` replicas, and back at revert.

    The capacity-loss drill on Kubernetes: an autoscaler's mistake, a node pool drained, a quota hit. The
    workload's controller deletes the pods itself (as gracefully as the pods allow), so in-flight requests on them
    see what a real scale-down does.

    verify: the scale subresource says the lower count and no more pods than that serve (within ``timeout``).
    revert: the count journaled before the fault is written back, and revert waits until that many pods serve.

    .. code-block:: yaml

        faults:
          - kind: replica_scale_down
            start: 10s
            duration: 30s
            params: {remove: 1}
    """

    kind = "replica_scale_down"
    Params = ScaleDownParams
    params: ScaleDownParams
    Saved = ScaleSaved
    needs = frozenset({Capability.KUBERNETES})
    realism = Realism.REAL
    scope = "none"
    summary = "the workload's scale is patched down by N replicas through the Kubernetes API"
    revert_semantics = (
        "patches the scale back to the count journaled before the fault and waits (up to timeout) until that many "
        "pods serve; idempotent"
    )

    def describe_targets(self, ctx: FaultContext) -> list[str]:
        access = _access(ctx)
        return [f"{access.workload_kind} {access.namespace}/{access.workload}: scale -{self.params.remove}"]

    def prepare(self, ctx: FaultContext) -> ScaleSaved:
        access = _access(ctx)
        replicas = ctx.kubernetes.scale(access.workload_kind, access.workload).spec_replicas
        if replicas < self.params.remove:
            raise InjectError(
                f"{access.workload} has {replicas} replicas; cannot remove {self.params.remove}", fault=ctx.fault_id
            )
        return ScaleSaved(replicas=replicas)

    def _saved(self, ctx: FaultContext) -> ScaleSaved:
        if not isinstance(ctx.saved, ScaleSaved):
            raise RevertError("no replica count was journaled before the fault", fault=ctx.fault_id)
        return ctx.saved

    def inject(self, ctx: FaultContext) -> None:
        access = _access(ctx)
        ctx.kubernetes.set_scale(access.workload_kind, access.workload, self._saved(ctx).replicas - self.params.remove)

    def verify(self, ctx: FaultContext) -> LandingProof:
        access, before = _access(ctx), self._saved(ctx).replicas
        lower = before - self.params.remove
        spec = ctx.kubernetes.scale(access.workload_kind, access.workload).spec_replicas
        if spec != lower:
            raise FaultNotLanded(f"{access.workload}'s scale is {spec}, not {lower}", fault=ctx.fault_id)
        serving = _poll(lambda: n if (n := len(serving_pods(ctx))) <= lower else None, self.params.timeout)
        if serving is None:
            raise FaultNotLanded(
                f"{access.workload}'s scale is {lower}, but more pods still serve after {self.params.timeout:g}s",
                fault=ctx.fault_id,
            )
        return LandingProof(
            summary=f"{access.workload_kind} {access.workload} scaled {before} -> {lower}; {serving} pods serve",
            observations={"replicas_before": before, "replicas_during": lower, "pods_serving": serving},
        )

    def revert(self, ctx: FaultContext) -> None:
        access, before = _access(ctx), self._saved(ctx).replicas
        ctx.kubernetes.set_scale(access.workload_kind, access.workload, before)
        wait_serving(ctx, before, self.params.timeout)


# -- node_drain -----------------------------------------------------------------------------------------


class NodeDrainParams(FaultParams):
    node: str | None = Field(
        None, min_length=1, description="the node drained; default: the node hosting the selected replica's pod"
    )
    timeout: Duration = Field(60.0, description="how long verify waits for the evicted pods to go, revert to refill")


class DrainSaved(Saved):
    node: str = ""  # the node cordoned
    was_cordoned: bool = False  # spec.unschedulable before the fault: revert leaves such a node cordoned
    pods: dict[str, str] = Field(default_factory=dict)  # the namespace's pods on it (name -> UID) before the fault
    serving: int = Field(0, ge=0)  # the workload's pods serving before the fault


class NodeDrain(Fault):
    """A node is cordoned and drained: what ``kubectl drain`` does before maintenance, an upgrade or a node-pool
    scale-in. The node's ``spec.unschedulable`` is set, then each of the drill namespace's pods on it is evicted
    through the Eviction API, which honours PodDisruptionBudgets: an eviction a budget refuses is reported in the
    proof, never forced. The workload's controller makes replacements, which the scheduler puts on another node.

    verify: the node says unschedulable, and each pod whose eviction was accepted is gone (or being deleted) within
    ``timeout``; the pods a budget kept are named.
    revert: the node is uncordoned (unless it was cordoned before the fault), and revert waits until as many of the
    workload's pods serve as before.

    .. code-block:: yaml

        faults:
          - kind: node_drain
            start: 10s
            duration: 30s
            selector: {replicas: [0]}   # the node hosting replica 0's pod; or params: {node: gpu-node-3}
    """

    kind = "node_drain"
    Params = NodeDrainParams
    params: NodeDrainParams
    Saved = DrainSaved
    needs = frozenset({Capability.KUBERNETES})
    realism = Realism.REAL
    summary = "the node hosting a replica is cordoned and its pods evicted (PodDisruptionBudgets honoured)"
    revert_semantics = (
        "uncordons the node (unless it was cordoned before the fault) and waits (up to timeout) until as many of the "
        "workload's pods serve as before; idempotent"
    )

    def _node(self, ctx: FaultContext) -> str:
        if self.params.node:
            return self.params.node
        for replica in ctx.targets.replicas:
            pod = ctx.kubernetes.pod(replica.pod) if replica.pod else None
            if pod is not None and pod.node:
                return pod.node
        raise InjectError(
            "no selected replica's pod is on a node: nothing to drain",
            fault=ctx.fault_id,
            hint="select a replica whose pod is scheduled, or name the node: params: {node: NAME}",
        )

    def describe_targets(self, ctx: FaultContext) -> list[str]:
        return [f"node {self.params.node or '(the selected replica’s)'}: cordon, evict the namespace's pods"]

    def prepare(self, ctx: FaultContext) -> DrainSaved:
        node = self._node(ctx)
        pods = {p.name: p.uid for p in ctx.kubernetes.pods_on(node) if not p.deleting}
        return DrainSaved(
            node=node,
            was_cordoned=ctx.kubernetes.node_unschedulable(node),
            pods=pods,
            serving=len(serving_pods(ctx)),
        )

    def _saved(self, ctx: FaultContext) -> DrainSaved:
        if not isinstance(ctx.saved, DrainSaved) or not ctx.saved.node:
            raise RevertError("no node was journaled before the fault", fault=ctx.fault_id)
        return ctx.saved

    def inject(self, ctx: FaultContext) -> None:
        saved = self._saved(ctx)
        ctx.kubernetes.cordon(saved.node)
        for name, uid in saved.pods.items():
            ctx.kubernetes.evict_pod(name, uid)  # a refusal (a PodDisruptionBudget) is reported by verify

    def verify(self, ctx: FaultContext) -> LandingProof:
        saved = self._saved(ctx)
        if not ctx.kubernetes.node_unschedulable(saved.node):
            raise FaultNotLanded(f"node {saved.node} is not cordoned (spec.unschedulable false)", fault=ctx.fault_id)

        def kept() -> list[str]:
            return [
                p.name for p in ctx.kubernetes.pods_on(saved.node) if saved.pods.get(p.name) == p.uid and not p.deleting
            ]

        left = _poll(lambda: found if not (found := kept()) else None, min(self.params.timeout, 5.0))
        refused = {name: self._refusal(ctx, name, saved.pods[name]) for name in (kept() if left is None else [])}
        refused = {name: why for name, why in refused.items() if why}
        still = [name for name in kept() if name not in refused]
        if still:
            raise FaultNotLanded(
                f"node {saved.node} cordoned, but pods {', '.join(still)} are still on it, not evicted",
                fault=ctx.fault_id,
                hint=f"kubectl -n {_access(ctx).namespace} describe pods {' '.join(still)}",
            )
        evicted = [name for name in saved.pods if name not in refused]
        summary = f"node {saved.node} cordoned; evicted {', '.join(evicted) or 'no pod'}"
        if refused:
            summary += "; kept by a PodDisruptionBudget (not forced): " + "; ".join(
                f"{n} ({why})" for n, why in refused.items()
            )
        return LandingProof(
            summary=summary,
            observations={
                "node": saved.node,
                "pods_evicted": len(evicted),
                "pods_refused": len(refused),
                "evicted": ", ".join(evicted),
                "refused": ", ".join(sorted(refused)),
            },
        )

    def _refusal(self, ctx: FaultContext, name: str, uid: str) -> str | None:
        """Ask again: the API server's reason when a PodDisruptionBudget still refuses the eviction."""
        return ctx.kubernetes.evict_pod(name, uid)

    def revert(self, ctx: FaultContext) -> None:
        saved = self._saved(ctx)
        if not saved.was_cordoned:
            ctx.kubernetes.cordon(saved.node, unschedulable=False)
        wait_serving(ctx, saved.serving, self.params.timeout)


# -- chaos_mesh -----------------------------------------------------------------------------------------


class ChaosExperiment(enum.StrEnum):
    NETWORK = "NetworkChaos"
    POD = "PodChaos"


class ChaosAction(enum.StrEnum):
    DELAY = "delay"  # NetworkChaos
    LOSS = "loss"  # NetworkChaos
    PARTITION = "partition"  # NetworkChaos
    POD_KILL = "pod-kill"  # PodChaos
    POD_FAILURE = "pod-failure"  # PodChaos


_NETWORK_ACTIONS = {ChaosAction.DELAY, ChaosAction.LOSS, ChaosAction.PARTITION}


class ChaosMeshParams(FaultParams):
    experiment: ChaosExperiment = Field(ChaosExperiment.NETWORK, description="the Chaos Mesh kind created")
    action: ChaosAction = Field(ChaosAction.DELAY, description="its spec.action")
    latency_ms: int = Field(200, ge=1, le=60_000, description="delay: added to every packet of the pod (ms)")
    jitter_ms: int = Field(0, ge=0, le=60_000, description="delay: its jitter (ms)")
    loss_percent: float = Field(50.0, gt=0, le=100, description="loss: the share of packets dropped (%)")
    timeout: Duration = Field(30.0, description="how long verify waits for the operator to say it injected")

    @model_validator(mode="after")
    def _action_of_experiment(self) -> ChaosMeshParams:
        network = self.action in _NETWORK_ACTIONS
        if network != (self.experiment is ChaosExperiment.NETWORK):
            raise ValueError(f"action {self.action.value!r} is not an action of {self.experiment.value}")
        return self


class ChaosMesh(Fault):
    """A Chaos Mesh experiment on the selected replicas' pods: a ``NetworkChaos`` (delay, loss, partition) or a
    ``PodChaos`` (pod-kill, pod-failure) object, created in the target's namespace and deleted to revert.

    Chaos Mesh's operator does the injecting; the harness never assumes it did: verify waits until the object's
    ``status.conditions`` has ``AllInjected`` true (and its ``status.experiment.containerRecords`` name the pods).
    A drill with this fault needs ``target.config.chaos_operator: chaos-mesh``, and the target checks before it
    starts that the API server serves the kind.

    .. code-block:: yaml

        faults:
          - kind: chaos_mesh
            start: 10s
            duration: 20s
            params: {experiment: NetworkChaos, action: delay, latency_ms: 300}
            selector: {replicas: [0]}
    """

    kind = "chaos_mesh"
    Params = ChaosMeshParams
    params: ChaosMeshParams
    needs = frozenset({Capability.KUBERNETES, Capability.CHAOS_MESH})
    realism = Realism.REAL
    summary = "a Chaos Mesh NetworkChaos / PodChaos object on the replicas' pods, verified by the operator's status"
    revert_semantics = "deletes the object drill-<fault id> and waits until it is gone; a missing object is fine"

    def body(self, ctx: FaultContext) -> dict:
        """The object created (Chaos Mesh's v1alpha1 schema)."""
        p = self.params
        spec: dict = {}
        if p.action is ChaosAction.DELAY:
            spec["delay"] = {"latency": f"{p.latency_ms}ms", "jitter": f"{p.jitter_ms}ms"}
        elif p.action is ChaosAction.LOSS:
            spec["loss"] = {"loss": f"{p.loss_percent:g}"}
        elif p.action is ChaosAction.PARTITION:
            spec["direction"] = "both"
        return chaos_body(ctx, p.experiment, p.action, spec)

    def inject(self, ctx: FaultContext) -> None:
        create_chaos(ctx, self.params.experiment, self.body(ctx))

    def verify(self, ctx: FaultContext) -> LandingProof:
        return verify_chaos(ctx, self.params.experiment, self.params.action, self.params.timeout)

    def revert(self, ctx: FaultContext) -> None:
        delete_chaos(ctx, self.params.experiment, self.params.timeout)


# -- a Chaos Mesh object: shared by chaos_mesh and the network faults' method: chaos_mesh ----------------

#: the ``method: chaos_mesh`` of slow_replica, partition and link_reset: a NetworkChaos through the operator
CHAOS_MESH_MECHANISM = Mechanism(
    name="chaos_mesh",
    needs=frozenset({Capability.KUBERNETES, Capability.CHAOS_MESH}),
    realism=Realism.REAL,
    summary="a Chaos Mesh NetworkChaos on the replica's pod, verified by the operator's AllInjected status",
)


def chaos_name(ctx: FaultContext) -> str:
    """The object's name: ``drill-<fault id>``, so a revert rebuilt from the journal finds exactly it."""
    return f"drill-{ctx.fault_id}".lower().replace("_", "-")[:63]


def chaos_body(ctx: FaultContext, experiment: ChaosExperiment, action: ChaosAction, spec: dict) -> dict:
    """A Chaos Mesh object (v1alpha1) of ``action`` on the selected replicas' pods, ``spec`` its action's fields."""
    access = _access(ctx)
    pods = [r.pod for r in ctx.targets.replicas if r.pod]
    selector = {"pods": {access.namespace: pods}}
    name = chaos_name(ctx)
    return {
        "apiVersion": f"{_CHAOS_GROUP}/{_CHAOS_VERSION}",
        "kind": experiment.value,
        "metadata": {
            "name": name,
            "namespace": access.namespace,
            "labels": {"app.kubernetes.io/managed-by": "llm-drill", "llm-drill.dev/fault": name},
        },
        "spec": {"action": action.value, "mode": "all", "selector": selector, **spec},
    }


def create_chaos(ctx: FaultContext, experiment: ChaosExperiment, body: dict) -> None:
    if not [r for r in ctx.targets.replicas if r.pod]:
        raise InjectError("no selected replica names a pod", fault=ctx.fault_id)
    ctx.kubernetes.create_object(_CHAOS_GROUP, _CHAOS_VERSION, _PLURALS[experiment.value], body)


def verify_chaos(ctx: FaultContext, experiment: ChaosExperiment, action: ChaosAction, timeout_s: float) -> LandingProof:
    """Proof from the operator's own status only: ``AllInjected`` true within ``timeout_s``."""
    name, plural = chaos_name(ctx), _PLURALS[experiment.value]
    found = _poll(lambda: _injected(ctx, plural, name), timeout_s)
    if found is None:
        raise FaultNotLanded(
            f"{experiment.value} {name}: the operator has not said AllInjected within {timeout_s:g}s",
            fault=ctx.fault_id,
            hint=f"kubectl describe {plural} {name}: is the Chaos Mesh controller running?",
        )
    return LandingProof(
        summary=f"{experiment.value} {name} ({action.value}) injected: {found}",
        observations={"object": name, "records": found},
    )


def _injected(ctx: FaultContext, plural: str, name: str) -> str | None:
    obj = ctx.kubernetes.get_object(_CHAOS_GROUP, _CHAOS_VERSION, plural, name)
    status = (obj or {}).get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if conditions.get("AllInjected") != "True":
        return None
    records = (status.get("experiment") or {}).get("containerRecords") or []
    return ", ".join(f"{r.get('id')}: {r.get('phase')}" for r in records) or "(no container records)"


def delete_chaos(ctx: FaultContext, experiment: ChaosExperiment, timeout_s: float) -> None:
    """Delete ``drill-<fault id>`` and wait until it is gone; a missing object (or kind) is fine."""
    name, plural = chaos_name(ctx), _PLURALS[experiment.value]
    try:
        ctx.kubernetes.delete_object(_CHAOS_GROUP, _CHAOS_VERSION, plural, name)
    except KubernetesError as exc:
        if exc.status == 404:  # the kind itself is not served: nothing was created
            return
        raise
    gone = _poll(
        lambda: True if ctx.kubernetes.get_object(_CHAOS_GROUP, _CHAOS_VERSION, plural, name) is None else None,
        timeout_s,
    )
    if gone is None:
        raise RevertError(
            f"{plural} {name} is still there {timeout_s:g}s after its delete (a finalizer?)",
            fault=ctx.fault_id,
            hint=f"kubectl describe {plural} {name}",
        )
