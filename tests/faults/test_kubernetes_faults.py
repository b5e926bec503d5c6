"""The Kubernetes faults without a cluster: what they need, the Chaos Mesh object they create, their params' errors
(the API itself is driven in tests/kubernetes/)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from drill import registry
from drill.api import (
    Capability,
    FaultContext,
    FaultTargets,
    KubeAccess,
    KubernetesError,
    ReplicaRef,
    RevertError,
    TargetInfo,
)
from faults.kubernetes import ChaosMesh, ChaosMeshParams, ReplicaScaleDown, ScaleDownParams
from faults.lifecycle import ReplicaCrash, ReplicaCrashParams

ACCESS = KubeAccess(namespace="serving", workload_kind="Deployment", workload="llm", selector={"app": "llm"})
TARGET = TargetInfo(kind="kubernetes", base_url="http://127.0.0.1:1", kubernetes=ACCESS)
POD0 = ReplicaRef(name="llm-a", index=0, url="http://127.0.0.1:2", pod="llm-a", pod_uid="u-a")


def _ctx(fault_id: str = "f1_Delay") -> FaultContext:
    return FaultContext(fault_id=fault_id, target=TARGET, targets=FaultTargets(replicas=[POD0]))


def test_each_fault_needs_the_kubernetes_api_and_chaos_mesh_its_operator() -> None:
    crash = ReplicaCrash(ReplicaCrashParams(method="pod"))
    assert crash.needs_for(crash.params) == {Capability.KUBERNETES}
    assert ReplicaScaleDown.needs == {Capability.KUBERNETES}
    assert ChaosMesh.needs == {Capability.KUBERNETES, Capability.CHAOS_MESH}
    assert {"chaos_mesh", "replica_scale_down"} <= set(registry.faults.kinds())


def test_the_network_chaos_object_selects_the_replicas_pods_and_is_named_from_the_fault_id() -> None:
    fault = ChaosMesh(ChaosMeshParams(action="delay", latency_ms=300, jitter_ms=5))
    body = fault.body(_ctx())
    assert body["apiVersion"] == "chaos-mesh.org/v1alpha1" and body["kind"] == "NetworkChaos"
    assert body["metadata"]["name"] == "drill-f1-delay"  # a DNS name: lower case, no '_'
    assert body["metadata"]["namespace"] == "serving"
    assert body["spec"] == {
        "action": "delay",
        "mode": "all",
        "selector": {"pods": {"serving": ["llm-a"]}},
        "delay": {"latency": "300ms", "jitter": "5ms"},
    }
    loss = ChaosMesh(ChaosMeshParams(action="loss", loss_percent=25)).body(_ctx())
    assert loss["spec"]["loss"] == {"loss": "25"}
    kill = ChaosMesh(ChaosMeshParams(experiment="PodChaos", action="pod-kill")).body(_ctx())
    assert kill["kind"] == "PodChaos" and kill["spec"]["action"] == "pod-kill" and "delay" not in kill["spec"]


@pytest.mark.parametrize(("experiment", "action"), [("NetworkChaos", "pod-kill"), ("PodChaos", "delay")])
def test_an_action_of_the_other_kind_is_refused(experiment: str, action: str) -> None:
    with pytest.raises(ValidationError, match=f"is not an action of {experiment}"):
        ChaosMeshParams(experiment=experiment, action=action)


def test_a_scale_down_reverts_only_from_a_journaled_count() -> None:
    fault = ReplicaScaleDown(ScaleDownParams(remove=1))
    with pytest.raises(RevertError, match="no replica count was journaled"):
        fault.revert(_ctx())


def test_a_fault_on_another_target_says_it_is_not_on_kubernetes() -> None:
    ctx = FaultContext(fault_id="f", target=TargetInfo(kind="embedded", base_url="http://x"), targets=FaultTargets())
    with pytest.raises(KubernetesError, match="not on Kubernetes"):
        _ = ctx.kubernetes


@pytest.mark.parametrize(
    ("kind", "params"),
    [
        ("slow_replica", {"method": "chaos_mesh", "latency_ms": 300}),
        ("partition", {"method": "chaos_mesh"}),
        ("link_reset", {"method": "chaos_mesh", "loss_percent": 50}),
    ],
)
def test_the_network_faults_chaos_mesh_method_needs_the_api_and_the_operator(kind: str, params: dict) -> None:
    fault_cls = registry.faults.get(kind)
    fault = fault_cls(fault_cls.Params.model_validate(params))
    assert fault.needs_for(fault.params) == {Capability.KUBERNETES, Capability.CHAOS_MESH}
    toxiproxy = fault_cls(fault_cls.Params.model_validate({k: v for k, v in params.items() if k == "latency_ms"}))
    assert fault.needs_for(toxiproxy.params) != fault.needs_for(fault.params)
    assert Capability.TOXIPROXY_REPLICA in toxiproxy.needs_for(toxiproxy.params)


@pytest.mark.parametrize(
    ("kind", "params", "message"),
    [
        ("slow_replica", {"method": "chaos_mesh", "bandwidth_kbps": 10}, "belong"),
        ("slow_replica", {"method": "chaos_mesh"}, "needs latency_ms"),
        ("partition", {"method": "chaos_mesh", "mode": "refuse"}, "no refuse mode"),
        ("link_reset", {"method": "chaos_mesh", "after_ms": 100}, "has no reset"),
        ("link_reset", {"loss_percent": 50}, "belongs to method chaos_mesh"),
    ],
)
def test_what_chaos_mesh_cannot_do_is_refused_in_the_params(kind: str, params: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        registry.faults.get(kind).Params.model_validate(params)
