"""The tests' Kubernetes control plane and its helpers do what docs/kubernetes-cluster.md says: the real API server
on loopback, a Deployment's pods Running on the simulated node and replaced when deleted, each pod bound to a real
replica process that a grace-0 delete SIGKILLs, and the Chaos Mesh stand-in acting on the replicas and writing
Chaos Mesh's status.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import httpx
import pytest

from drill.backends.toxiproxy import ToxiproxyClient
from tests.kubernetes.binder import ENDPOINT_ANNOTATION
from tests.kubernetes.conftest import BindReplicas, ChaosMesh
from tests.kubernetes.controlplane import NODE_NAME, Api, ApiError, ControlPlane

pytestmark = [pytest.mark.integration, pytest.mark.kubernetes]

LABELS = {"app": "replica"}


def deployment(name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": LABELS},
            "template": {
                "metadata": {"labels": LABELS},
                "spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.11.0"}]},
            },
        },
    }


def running_pods(api: Api, namespace: str) -> dict[str, str]:
    """Pod name -> UID of the Running pods not being deleted."""
    pods = api.items(f"/api/v1/namespaces/{namespace}/pods", labelSelector="app=replica")
    return {
        pod["metadata"]["name"]: pod["metadata"]["uid"]
        for pod in pods
        if pod.get("status", {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")
    }


def completion(url: str) -> float:
    """Seconds one short completion takes through ``url``."""
    start = time.monotonic()
    response = httpx.post(
        f"{url}/v1/completions",
        json={"model": "llama-3-8b", "prompt": "hello", "max_tokens": 2},
        timeout=30.0,
        trust_env=False,
    )
    assert response.status_code == 200, response.text
    return time.monotonic() - start


def test_the_api_server_is_the_built_version_on_loopback(control_plane: ControlPlane) -> None:
    version = control_plane.kubectl("version", "-o", "json").stdout
    assert '"gitVersion": "v1.34.4"' in version
    assert control_plane.server.startswith("https://127.0.0.1:")
    api = control_plane.api()
    try:
        node = api.get(f"/api/v1/nodes/{NODE_NAME}")
    finally:
        api.close()
    assert {address["address"] for address in node["status"]["addresses"]} <= {"127.0.0.1", NODE_NAME}


def test_a_deployment_runs_on_the_simulated_node_and_a_deleted_pod_is_replaced(control_plane: ControlPlane) -> None:
    namespace = control_plane.namespace("deploy")
    api = control_plane.api()
    try:
        api.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment("engine", 2))
        before = api.wait_for("2 Running pods", lambda: (p := running_pods(api, namespace)) and len(p) == 2 and p)
        victim = sorted(before)[0]
        api.delete(f"/api/v1/namespaces/{namespace}/pods/{victim}", grace_s=0)
        after = api.wait_for(
            "a replacement pod",
            lambda: (p := running_pods(api, namespace)) and len(p) == 2 and victim not in p and p,
        )
    finally:
        api.close()
    assert set(after.values()) - set(before.values()), "the replacement has a new UID"
    assert before[victim] not in after.values()


def test_each_pod_gets_a_replica_and_a_grace_0_delete_kills_it(
    control_plane: ControlPlane, bound_replicas: BindReplicas
) -> None:
    namespace = control_plane.namespace("bound")
    api = control_plane.api()
    try:
        binder = bound_replicas(namespace, "app=replica")
        api.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment("engine", 2))
        endpoints = binder.wait_bound(2)
        for pod, url in endpoints.items():
            annotated = api.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")["metadata"]["annotations"]
            assert annotated[ENDPOINT_ANNOTATION] == url
            completion(url)
        victim = sorted(endpoints)[0]
        replica = binder.by_pod(victim)
        assert replica is not None
        api.delete(f"/api/v1/namespaces/{namespace}/pods/{victim}", grace_s=0)
        api.wait_for("the victim's replica to stop", lambda: replica.stopped_with is not None, timeout_s=15)
        assert replica.process.returncode == -signal.SIGKILL
        assert replica.stopped_with == "SIGKILL"
        with pytest.raises(httpx.HTTPError):
            httpx.post(f"{replica.replica_url}/v1/completions", json={"prompt": "x"}, timeout=2.0, trust_env=False)
        again = binder.wait_bound(2)
    finally:
        api.close()
    assert victim not in again
    (new_pod,) = set(again) - set(endpoints)
    completion(again[new_pod])


def _chaos(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def _condition(item: dict[str, Any], kind: str) -> str | None:
    conditions = item.get("status", {}).get("conditions", [])
    return next((c["status"] for c in conditions if c["type"] == kind), None)


def test_chaos_mesh_crds_reject_a_bad_action(control_plane: ControlPlane, chaos_mesh: ChaosMesh) -> None:
    namespace = control_plane.namespace("crd")
    bad = _chaos("NetworkChaos", "bad", {"action": "explode", "mode": "all", "selector": {}})
    api = control_plane.api()
    try:
        with pytest.raises(ApiError, match=r'spec\.action: Unsupported value: "explode"'):
            api.create(f"/apis/chaos-mesh.org/v1alpha1/namespaces/{namespace}/networkchaos", bad)
    finally:
        api.close()
    assert chaos_mesh.crds == ["networkchaos.chaos-mesh.org", "podchaos.chaos-mesh.org"]


def test_network_delay_is_injected_reported_and_reverted_on_delete(
    control_plane: ControlPlane,
    bound_replicas: BindReplicas,
    chaos_mesh: ChaosMesh,
    kube_toxiproxy: ToxiproxyClient,
) -> None:
    namespace = control_plane.namespace("delay")
    api = control_plane.api()
    base = f"/apis/chaos-mesh.org/v1alpha1/namespaces/{namespace}/networkchaos"
    try:
        binder = bound_replicas(namespace, "app=replica")
        api.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment("engine", 1))
        ((pod, url),) = binder.wait_bound(1).items()
        baseline = min(completion(url) for _ in range(3))
        spec = {
            "action": "delay",
            "mode": "all",
            "selector": {"labelSelectors": LABELS},
            "delay": {"latency": "400ms"},
        }
        api.create(base, _chaos("NetworkChaos", "slow", spec))
        injected = api.wait_for(
            "AllInjected", lambda: (o := api.get(f"{base}/slow")) and _condition(o, "AllInjected") == "True" and o
        )
        (record,) = injected["status"]["experiment"]["containerRecords"]
        assert record["id"] == f"{namespace}/{pod}" and record["phase"] == "Injected"
        assert has_finalizer(injected)
        slowed = completion(url)
        replica = binder.by_pod(pod)
        assert replica is not None and replica.proxy is not None
        assert [t.type for t in kube_toxiproxy.toxics(replica.proxy)] == ["latency"]
        api.delete(f"{base}/slow")
        api.wait_for("the NetworkChaos gone", lambda: api.maybe_get(f"{base}/slow") is None)
        assert kube_toxiproxy.toxics(replica.proxy) == []
        recovered = min(completion(url) for _ in range(3))
    finally:
        api.close()
    assert slowed >= baseline + 0.35  # the 400 ms delay on the response
    assert recovered < baseline + 0.2


def has_finalizer(item: dict[str, Any]) -> bool:
    return "chaos-mesh/records" in item["metadata"].get("finalizers", [])


def test_pod_kill_deletes_the_pod_and_its_replica(
    control_plane: ControlPlane, bound_replicas: BindReplicas, chaos_mesh: ChaosMesh
) -> None:
    namespace = control_plane.namespace("kill")
    api = control_plane.api()
    base = f"/apis/chaos-mesh.org/v1alpha1/namespaces/{namespace}/podchaos"
    try:
        binder = bound_replicas(namespace, "app=replica")
        api.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment("engine", 1))
        ((pod, _url),) = binder.wait_bound(1).items()
        replica = binder.by_pod(pod)
        assert replica is not None
        api.create(base, _chaos("PodChaos", "kill", {"action": "pod-kill", "mode": "one", "selector": {}}))
        done = api.wait_for(
            "AllInjected", lambda: (o := api.get(f"{base}/kill")) and _condition(o, "AllInjected") == "True" and o
        )
        assert done["status"]["experiment"]["containerRecords"][0]["id"] == f"{namespace}/{pod}"
        api.wait_for("the killed pod's replica to stop", lambda: replica.stopped_with is not None, timeout_s=15)
        assert replica.process.returncode == -signal.SIGKILL
        ((new_pod, new_url),) = binder.wait_bound(1).items()
        assert new_pod != pod
        completion(new_url)
        api.delete(f"{base}/kill")
        api.wait_for("the PodChaos gone", lambda: api.maybe_get(f"{base}/kill") is None)
    finally:
        api.close()
