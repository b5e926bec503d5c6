"""The fault contract kit (drill/testing/fault_contract.py) on the kubernetes target: ``replica_scale_down``,
``node_drain`` and ``chaos_mesh`` against the real control plane, with real traffic through the target's service to
bound replicas."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from drill import registry
from drill.api import FaultContext, FaultTargets, KubeAccess, Selector, TargetContext, TargetInfo
from drill.runner.fault_schedule import resolve_targets
from drill.targets.kubernetes import KubernetesTarget, KubernetesTargetParams
from drill.testing.fault_contract import Effect, FaultCase, latency_above, run_fault_contract
from tests.kubernetes.conftest import FAST_REPLICA, BindReplicas, ChaosMesh
from tests.kubernetes.controlplane import NODE_NAMES, ControlPlane
from tests.kubernetes.kube_drills import DEPLOYMENT, SELECTOR, make_deployment, pods, spec_replicas

pytestmark = [pytest.mark.integration, pytest.mark.kubernetes]


@pytest.fixture()
def kube_target(
    control_plane: ControlPlane, bound_replicas: BindReplicas, chaos_mesh: ChaosMesh, tmp_path: Path
) -> Iterator[tuple[str, TargetInfo]]:
    namespace = control_plane.namespace("contract")
    api = control_plane.api()
    make_deployment(api, namespace, 2, spread=True)  # node_drain: one pod per node, back after the uncordon
    api.close()
    bound_replicas(namespace, SELECTOR).wait_bound(2)
    params = KubernetesTargetParams(
        namespace=namespace,
        workload={"kind": "Deployment", "name": DEPLOYMENT},
        selector={"app": "llm"},
        access="endpoint",
        kubeconfig=str(control_plane.kubeconfig),
        chaos_operator="chaos-mesh",
        model=FAST_REPLICA.model,  # what the bound replicas serve: the contract's traffic names it
        startup_timeout="60s",
    )
    target = KubernetesTarget(params, TargetContext("contract", str(tmp_path)))
    info = target.start()
    try:
        yield namespace, info
    finally:
        target.stop()


def _scaled_back(control_plane: ControlPlane, namespace: str) -> Callable[[FaultContext], None]:
    def clean(ctx: FaultContext) -> None:
        api = control_plane.api()
        try:
            assert spec_replicas(api, namespace) == 2
            api.wait_for("2 pods serving", lambda: len(pods(api, namespace)) == 2, timeout_s=30)
        finally:
            api.close()

    return clean


def _uncordoned_and_back(control_plane: ControlPlane, namespace: str) -> Callable[[FaultContext], None]:
    scaled_back = _scaled_back(control_plane, namespace)

    def clean(ctx: FaultContext) -> None:
        api = control_plane.api()
        try:
            cordoned = [n for n in NODE_NAMES if api.get(f"/api/v1/nodes/{n}").get("spec", {}).get("unschedulable")]
        finally:
            api.close()
        assert cordoned == [], f"still cordoned: {cordoned}"
        scaled_back(ctx)

    return clean


def _node_of_a_pod(control_plane: ControlPlane, namespace: str) -> str:
    api = control_plane.api()
    try:
        return str(pods(api, namespace)[0]["spec"]["nodeName"])
    finally:
        api.close()


def _no_effect(base: object, now: object) -> str | None:
    return None  # one replica of two gone at this low rate: the service still answers every request


#: the faults whose contract runs here (tests/faults/test_catalogue.py reads this line)
CONTRACT_KINDS = ["replica_scale_down", "node_drain", "chaos_mesh"]


@pytest.mark.parametrize("kind", CONTRACT_KINDS)
def test_the_kubernetes_faults_keep_the_contract(
    control_plane: ControlPlane, kube_target: tuple[str, TargetInfo], tmp_path: Path, kind: str
) -> None:
    namespace, info = kube_target
    effect: Effect
    if kind == "chaos_mesh":
        params: dict = {"action": "delay", "latency_ms": 400, "timeout": "5s"}
        effect, clean = latency_above(0.3), None
    elif kind == "node_drain":  # a node with one pod: evicted, Pending until the uncordon, back
        params = {"node": _node_of_a_pod(control_plane, namespace), "timeout": "30s"}
        effect, clean = _no_effect, _uncordoned_and_back(control_plane, namespace)
    else:
        params, effect, clean = {"remove": 1, "timeout": "30s"}, _no_effect, _scaled_back(control_plane, namespace)
    case = FaultCase(
        kind,
        params,
        info,
        effect=effect,
        clean=clean,
        selector=Selector(count=2),  # chaos_mesh: every replica slowed, so the median through the service shows it
        traffic={"rate_per_s": 4.0},
        fault_id=kind.replace("_", "-"),
        max_partial_steps=2,
    )
    report = run_fault_contract(case, tmp_path)
    print("\n".join(report.lines()))
    assert len(report.clauses) == 5
    assert report.baseline is not None and report.baseline.error_share < 0.2, report.baseline  # real traffic served


def test_a_drain_a_disruption_budget_refuses_is_reported_not_forced(
    control_plane: ControlPlane, kube_target: tuple[str, TargetInfo]
) -> None:
    namespace, info = kube_target
    api = control_plane.api()
    try:
        budget = {"metadata": {"name": "llm"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "llm"}}}}
        api.create(f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets", budget)
        api.wait_for(  # the disruption controller has computed what the budget allows
            "the budget observed",
            lambda: (
                api.get(f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/llm")
                .get("status", {})
                .get("observedGeneration")
            ),
        )
        node = _node_of_a_pod(control_plane, namespace)
        before = {p["metadata"]["uid"] for p in pods(api, namespace)}
        fault_cls = registry.faults.get("node_drain")
        fault = fault_cls(fault_cls.Params.model_validate({"node": node, "timeout": "10s"}))
        ctx = FaultContext("drain-pdb", info, resolve_targets(fault, Selector(count=1), info, 0), timeout_s=10)
        ctx.saved = fault.prepare(ctx)
        try:
            fault.inject(ctx)
            proof = fault.verify(ctx)
        finally:
            fault.revert(ctx)
        assert "kept by a PodDisruptionBudget (not forced)" in proof.summary, proof.summary
        assert proof.observations["pods_refused"] == 1 and proof.observations["pods_evicted"] == 0, proof
        assert {p["metadata"]["uid"] for p in pods(api, namespace)} == before  # nothing was evicted
        assert not api.get(f"/api/v1/nodes/{node}").get("spec", {}).get("unschedulable")
    finally:
        api.close()


def test_a_drain_of_a_node_cordoned_before_the_drill_leaves_it_cordoned(control_plane: ControlPlane) -> None:
    namespace = control_plane.namespace("drain-cordoned")
    api = control_plane.api()
    make_deployment(api, namespace, 2)
    api.wait_for("2 pods running", lambda: len(pods(api, namespace)) == 2, timeout_s=30)
    node = str(pods(api, namespace)[0]["spec"]["nodeName"])
    api.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}})  # cordoned by someone, before the drill
    try:
        access = KubeAccess(
            namespace=namespace,
            workload_kind="Deployment",
            workload=DEPLOYMENT,
            selector={"app": "llm"},
            kubeconfig=str(control_plane.kubeconfig),
        )
        info = TargetInfo(kind="kubernetes", base_url="http://127.0.0.1:1", kubernetes=access)
        fault_cls = registry.faults.get("node_drain")
        fault = fault_cls(fault_cls.Params.model_validate({"node": node, "timeout": "30s"}))
        ctx = FaultContext("drain-cordoned", info, FaultTargets(), timeout_s=10)
        ctx.saved = fault.prepare(ctx)
        assert ctx.saved.was_cordoned  # type: ignore[attr-defined]
        on_node = {p["metadata"]["uid"] for p in pods(api, namespace) if p["spec"]["nodeName"] == node}
        try:
            fault.inject(ctx)
            proof = fault.verify(ctx)
        finally:  # the revert a watchdog runs: rebuilt from the journaled JSON, in a fresh context
            again = FaultContext("drain-cordoned", info, FaultTargets(), timeout_s=10)
            again.saved = fault_cls.Saved.model_validate_json(ctx.saved.model_dump_json())
            fault.revert(again)
            again.close()
            ctx.close()
        assert f"node {node} cordoned; evicted" in proof.summary, proof.summary
        assert api.get(f"/api/v1/nodes/{node}")["spec"].get("unschedulable") is True, "revert uncordoned it"
        now = pods(api, namespace)
        assert len(now) == 2 and not on_node & {p["metadata"]["uid"] for p in now}
        assert all(p["spec"]["nodeName"] != node for p in now)  # the replacements went to the other node
    finally:
        api.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": False}})
        api.close()


def _health_s(url: str) -> float:
    """Seconds one GET /health of the replica takes; inf when no answer comes within 2 s."""
    start = time.monotonic()
    try:
        httpx.get(url + "/health", timeout=2.0, trust_env=False).raise_for_status()
    except httpx.HTTPError:
        return math.inf
    return time.monotonic() - start


NETWORK_METHODS = {  # each fault's method: chaos_mesh, the NetworkChaos action, how the replica answers during it
    "slow_replica": ({"method": "chaos_mesh", "latency_ms": 600}, "delay", lambda s: 0.6 <= s < math.inf),
    "partition": ({"method": "chaos_mesh"}, "partition", math.isinf),
    "link_reset": ({"method": "chaos_mesh", "loss_percent": 100}, "loss", math.isinf),
}


@pytest.mark.parametrize("kind", list(NETWORK_METHODS))
def test_the_network_faults_through_chaos_mesh_are_injected_verified_by_the_operator_and_deleted(
    control_plane: ControlPlane, kube_target: tuple[str, TargetInfo], kind: str
) -> None:
    namespace, info = kube_target
    params, action, during = NETWORK_METHODS[kind]
    fault_cls = registry.faults.get(kind)
    fault = fault_cls(fault_cls.Params.model_validate(params | {"timeout": "10s"}))
    targets = resolve_targets(fault, Selector(count=1), info, 0)
    ctx = FaultContext(f"net-{kind}", info, targets, timeout_s=10)
    url = targets.replicas[0].url
    assert _health_s(url) < 0.5  # the replica answers at once before the fault
    api = control_plane.api()
    objects = f"/apis/chaos-mesh.org/v1alpha1/namespaces/{namespace}/networkchaos"
    try:
        ctx.saved = fault.prepare(ctx)
        try:
            fault.inject(ctx)
            proof = fault.verify(ctx)
            [made] = api.items(objects)
            took = _health_s(url)
        finally:
            fault.revert(ctx)
        assert made["spec"]["action"] == action and made["spec"]["selector"]["pods"] == {
            namespace: [targets.replicas[0].pod]
        }
        assert "injected" in proof.summary, proof.summary
        assert during(took), f"{kind}: GET /health took {took:.2f}s during the fault"
        assert api.items(objects) == []
        assert _health_s(url) < 0.5, "the replica is still slowed or cut after the revert"
    finally:
        api.close()
