"""Drills on the kubernetes target against the real control plane (tests/kubernetes/conftest.py): the replica-crash
drill through the API under a least-privilege ServiceAccount, the pre-flight that refuses less, and the crash
matrix (the runner SIGKILLed during each Kubernetes fault: the watchdog or ``drill cleanup`` restores the workload
and deletes every object the harness made). docs/kubernetes.md says what this proves and what only a real cluster
can."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.kubernetes.conftest import BindReplicas, ChaosMesh
from tests.kubernetes.controlplane import Api, ControlPlane
from tests.kubernetes.kube_drills import (
    REPO,
    SELECTOR,
    cleanup,
    drill_role,
    kill_runner_after,
    least_privilege_kubeconfig,
    make_deployment,
    pods,
    run_drill,
    spec_replicas,
    uids,
)

pytestmark = [pytest.mark.integration, pytest.mark.kubernetes]

CRASH_DRILL = REPO / "docs/examples/kubernetes-replica-crash.yaml"


@pytest.fixture()
def api(control_plane: ControlPlane) -> Iterator[Api]:
    client = control_plane.api()
    yield client
    client.close()


def _workload(control_plane: ControlPlane, api: Api, bind: BindReplicas, name: str) -> str:
    namespace = control_plane.namespace(name)
    make_deployment(api, namespace, 2)
    bind(namespace, SELECTOR).wait_bound(2)
    return namespace


def test_replica_crash_deletes_a_pod_the_deployment_brings_back_and_the_verdicts_are_as_predicted(
    control_plane: ControlPlane, api: Api, bound_replicas: BindReplicas, tmp_path: Path
) -> None:
    namespace = control_plane.namespace("crash")
    make_deployment(api, namespace, 2)
    binder = bound_replicas(namespace, SELECTOR)
    binder.wait_bound(2)
    before = uids(api, namespace)
    sets = [f"target.config.namespace={namespace}"]
    kubeconfig = least_privilege_kubeconfig(control_plane, drill_role(CRASH_DRILL, sets), tmp_path)
    run = run_drill(CRASH_DRILL, tmp_path / "out", [*sets, f"target.config.kubeconfig={kubeconfig}"])
    assert run.exit_code == 0, run.output[-4000:]
    predicted = yaml.safe_load(CRASH_DRILL.read_text())["predicts"]
    assert run.verdicts() == predicted, run.output[-4000:]
    # the pod was deleted through the API, and the landing proof names its replacement's new UID
    (verified,) = run.events("fault_verified")
    after = uids(api, namespace)
    (new,) = after - before
    (deleted,) = before - after
    assert f"uid {deleted}) deleted" in verified["summary"] and f"uid {new})" in verified["summary"], verified
    # the replica behind the deleted pod was killed (grace 0), and a new one serves the replacement
    stops = [e for e in binder.events if e.kind == "stopped" and e.uid == deleted]
    assert [e.detail for e in stops] == ["SIGKILL"], binder.events
    assert any(e.kind == "bound" and e.uid == new for e in binder.events), binder.events
    assert spec_replicas(api, namespace) == 2 and len(pods(api, namespace)) == 2


def test_less_than_the_role_fails_before_anything_starts_naming_the_verb_and_resource(
    control_plane: ControlPlane, api: Api, bound_replicas: BindReplicas, tmp_path: Path
) -> None:
    namespace = _workload(control_plane, api, bound_replicas, "rbac")
    before = uids(api, namespace)
    sets = [f"target.config.namespace={namespace}"]
    role = drill_role(CRASH_DRILL, sets)
    kubeconfig = least_privilege_kubeconfig(control_plane, role, tmp_path, drop=("pods", "delete"))
    run = run_drill(CRASH_DRILL, tmp_path / "out", [*sets, f"target.config.kubeconfig={kubeconfig}"])
    assert run.exit_code == 2, run.output[-4000:]
    said = " ".join(run.output.split())  # the terminal wraps long lines
    assert f"may not, in namespace {namespace}: 'delete' on pods" in said, said[-4000:]
    assert "drill kube role" in said
    assert not run.events("fault_injected") and not run.events("target_ready"), run.journal()
    assert uids(api, namespace) == before


def test_a_drain_runs_under_exactly_its_role_and_without_patch_on_nodes_stops_before_anything_starts(
    control_plane: ControlPlane, api: Api, bound_replicas: BindReplicas, tmp_path: Path
) -> None:
    namespace = _workload(control_plane, api, bound_replicas, "rbac-drain")
    drill = dict(MATRIX_DRILL)
    drill["phases"] = {"warmup": "1s", "baseline": "1s", "fault": "4s", "recovery": "2s", "replay": False}
    fault = {"name": "drain", "start": "0s", "duration": "3s", "selector": {"replicas": [0]}, **FAULTS["node-drain"]}
    drill["faults"] = [fault]
    path = tmp_path / "drain.yaml"
    path.write_text(yaml.safe_dump(drill, sort_keys=False))
    sets = [f"target.config.namespace={namespace}"]
    role = drill_role(path, sets)
    assert "ClusterRole" in role

    kubeconfig = least_privilege_kubeconfig(control_plane, role, tmp_path)  # exactly the printed role
    run = run_drill(path, tmp_path / "out", [*sets, f"target.config.kubeconfig={kubeconfig}"])
    assert run.exit_code == 0, run.output[-4000:]
    [proof] = run.events("fault_verified")
    assert "cordoned; evicted" in json.dumps(proof), proof
    assert [e["by"] for e in run.events("fault_reverted")] == ["runner"], run.journal()
    assert _cordoned(api) == []
    api.wait_for("2 pods serving", lambda: len(pods(api, namespace)) == 2, timeout_s=30)

    kubeconfig = least_privilege_kubeconfig(control_plane, role, tmp_path, drop=("nodes", "patch"))
    before = uids(api, namespace)
    run = run_drill(path, tmp_path / "out-less", [*sets, f"target.config.kubeconfig={kubeconfig}"])
    assert run.exit_code == 2, run.output[-4000:]
    said = " ".join(run.output.split())
    assert "'patch' on nodes (cluster-wide)" in said and "'get' on nodes" not in said, said[-4000:]
    assert not run.events("fault_injected"), run.journal()
    assert uids(api, namespace) == before and _cordoned(api) == []


def test_an_exec_method_stops_before_anything_starts_here_located_saying_the_api_server_cannot_exec(
    control_plane: ControlPlane, api: Api, bound_replicas: BindReplicas, tmp_path: Path
) -> None:
    """What a user gets against this control plane: KWOK's pods have no kubelet, so the API server cannot relay an
    exec to them; the drill stops before any fault, at the fault's method, with the API server's answer."""
    namespace = _workload(control_plane, api, bound_replicas, "exec")
    drill = yaml.safe_load(CRASH_DRILL.read_text())
    drill["faults"][0]["params"] = {"method": "exec", "restart_timeout": "30s"}
    path = tmp_path / "exec.yaml"
    path.write_text(yaml.safe_dump(drill, sort_keys=False))
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if text.strip() == "method: exec")
    sets = [f"target.config.namespace={namespace}"]
    role = drill_role(path, sets)
    assert "pods/exec" in role
    kubeconfig = least_privilege_kubeconfig(control_plane, role, tmp_path)  # exactly the role: RBAC allows the exec
    before = uids(api, namespace)
    run = run_drill(path, tmp_path / "out", [*sets, f"target.config.kubeconfig={kubeconfig}"])
    assert run.exit_code == 2, run.output[-4000:]
    said = " ".join(run.output.split())
    assert f"{path}:{line}:" in said, said[-4000:]
    assert "faults[0].params.method: replica_crash method exec cannot send SIGKILL in pod" in said, said[-4000:]
    # RBAC allowed it (the role's get and create on pods/exec); the API server found no kubelet to relay it to: it
    # refuses the upgrade (500: the pod's simulated node lists no address) or fails the exec (no kubelet at its address)
    no_kubelet = ("refused: HTTP 500: no preferred addresses found", "the exec did not run: Internal error occurred")
    assert any(answer in said for answer in no_kubelet), said[-4000:]
    assert "?command=" not in said and "nothing was touched" in said and "HTTP 403" not in said, said[-4000:]
    assert "Traceback" not in run.output
    assert not run.events("fault_injected") and not run.events("target_ready"), run.journal()
    assert uids(api, namespace) == before


def test_a_slow_replica_through_chaos_mesh_runs_as_a_whole_drill_from_the_cli(
    control_plane: ControlPlane, api: Api, bound_replicas: BindReplicas, chaos_mesh: ChaosMesh, tmp_path: Path
) -> None:
    """``drill run`` of ``slow_replica`` with ``method: chaos_mesh``, as a user runs it: the NetworkChaos is made,
    verified by the operator's status, seen in the requests' latency, and deleted by the runner's revert."""
    namespace = _workload(control_plane, api, bound_replicas, "chaos-drill")
    drill = dict(MATRIX_DRILL)
    slo = {"ttft_p95": "1s"}
    drill["scenario"] = {
        **MATRIX_DRILL["scenario"],
        "arrival": {"process": "poisson", "rate": 4},
        "pools": [{**MATRIX_DRILL["scenario"]["pools"][0], "timeout": "30s", "slo": slo}],
    }
    drill["phases"] = {"warmup": "1s", "baseline": "5s", "fault": "6s", "recovery": "1s", "replay": False}
    params = {"method": "chaos_mesh", "latency_ms": 1500, "timeout": "20s"}
    drill["faults"] = [
        {"name": "slow", "kind": "slow_replica", "start": "0s", "duration": "6s", "selector": {"count": 2}}
        | {"params": params}
    ]
    drill["checks"] = [
        {"kind": "slo", "name": "baseline-slo", "params": {"phase": "baseline", "min_requests": 8}},
        {"kind": "slo", "name": "slowed", "params": {"phase": "fault", "min_requests": 8}},
    ]
    path = tmp_path / "slow.yaml"
    path.write_text(yaml.safe_dump(drill, sort_keys=False))
    sets = [f"target.config.namespace={namespace}", f"target.config.kubeconfig={control_plane.kubeconfig}"]
    run = run_drill(path, tmp_path / "out", sets)
    assert run.exit_code == 1, run.output[-4000:]  # the finding: the fault phase breaks the SLO
    assert run.verdicts() == {"fault_landed": "PASS", "baseline-slo": "PASS", "slowed": "FAIL"}, run.output[-4000:]
    [proof] = run.events("fault_verified")
    assert "NetworkChaos drill-" in proof["summary"] and "(delay) injected" in proof["summary"], proof
    assert [e["by"] for e in run.events("fault_reverted")] == ["runner"], run.journal()
    assert _chaos_objects(api, namespace) == []


# -- the crash matrix ---------------------------------------------------------------------------------------------

MATRIX_DRILL = {
    "name": "kubernetes-crash-matrix",
    "target": {
        "kind": "kubernetes",
        "config": {
            "workload": {"kind": "Deployment", "name": "llm"},
            "selector": {"app": "llm"},
            "access": "endpoint",
            "chaos_operator": "chaos-mesh",
            "startup_timeout": "60s",
        },
    },
    "scenario": {
        "arrival": {"process": "poisson", "rate": 2},
        "pools": [
            {
                "name": "chat",
                "input_tokens": {"dist": "fixed", "value": 32},
                "output_tokens": {"dist": "fixed", "value": 8},
                "retry": {"attempts": 0},
            }
        ],
    },
    "phases": {"warmup": "1s", "baseline": "1s", "fault": "60s", "recovery": "1s", "replay": False},
    "checks": [],
    "otlp": {"host": "127.0.0.1", "port": 0},
}
FAULTS = {
    "pod-delete": {"kind": "replica_crash", "params": {"method": "pod", "restart_timeout": "30s"}},
    "scale-down": {"kind": "replica_scale_down", "params": {"remove": 1, "timeout": "30s"}},
    "node-drain": {"kind": "node_drain", "params": {"timeout": "30s"}},
    "chaos-mesh": {
        "kind": "chaos_mesh",
        "params": {"experiment": "NetworkChaos", "action": "delay", "latency_ms": 50},
    },
}


def _chaos_objects(api: Api, namespace: str) -> list[str]:
    found = []
    for plural in ("networkchaos", "podchaos"):
        found += [
            f"{plural}/{o['metadata']['name']}"
            for o in api.items(f"/apis/chaos-mesh.org/v1alpha1/namespaces/{namespace}/{plural}")
        ]
    return found


def _cordoned(api: Api) -> list[str]:
    return [n["metadata"]["name"] for n in api.items("/api/v1/nodes") if n.get("spec", {}).get("unschedulable")]


@pytest.mark.parametrize(
    ("fault", "by"),
    [("pod-delete", "watchdog"), ("scale-down", "cleanup"), ("node-drain", "watchdog"), ("chaos-mesh", "cleanup")],
)
def test_a_runner_killed_during_a_kubernetes_fault_leaves_the_workload_restored_and_nothing_of_its_own(
    control_plane: ControlPlane,
    api: Api,
    bound_replicas: BindReplicas,
    chaos_mesh: ChaosMesh,
    tmp_path: Path,
    fault: str,
    by: str,
) -> None:
    namespace = _workload(control_plane, api, bound_replicas, f"matrix-{fault}")
    drill = dict(MATRIX_DRILL)
    drill["faults"] = [
        {"name": fault, "start": "0s", "duration": "60s", "selector": {"replicas": [0]}, **FAULTS[fault]}
    ]
    path = tmp_path / "drill.yaml"
    path.write_text(yaml.safe_dump(drill, sort_keys=False))
    sets = [f"target.config.namespace={namespace}", f"target.config.kubeconfig={control_plane.kubeconfig}"]
    run = kill_runner_after(path, tmp_path / "out", sets, "fault_injected", watchdog_too=by == "cleanup")
    assert run.run_dir is not None, run.output
    if fault == "chaos-mesh":
        assert _chaos_objects(api, namespace), "the fault made no object: the matrix would prove nothing"
    if by == "cleanup":
        done = cleanup(run.run_dir)
        assert done.returncode == 0, done.stdout + done.stderr
    api.wait_for("the fault reverted from the journal", lambda: run.events("fault_reverted"), timeout_s=60)
    assert [e["by"] for e in run.events("fault_reverted")] == [by], run.journal()
    assert spec_replicas(api, namespace) == 2
    api.wait_for("2 pods serving", lambda: len(pods(api, namespace)) == 2, timeout_s=60)
    assert _chaos_objects(api, namespace) == []
    assert _cordoned(api) == [], "a node is left cordoned"
