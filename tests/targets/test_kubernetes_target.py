"""The kubernetes target without a cluster: its config's located errors, the Role a drill needs, the load Job, and the
harness's service stand-in on real loopback sockets (the API server is in tests/kubernetes/)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from drill import registry
from drill.api import TargetContext
from drill.cli.main import cli
from drill.errors import DrillError, KubernetesAccessError
from drill.spec.loader import fault_key_positions, load_drill
from drill.targets.kube_rbac import KubeRule, drill_rules, missing_rules
from drill.targets.kube_service import PodEndpoint, ServiceForwarder, dial_address
from drill.targets.kubernetes import KubernetesTarget, KubernetesTargetParams

SCENARIO = {
    "arrival": {"process": "poisson", "rate": 2},
    "pools": [
        {"name": "chat", "input_tokens": {"dist": "fixed", "value": 8}, "output_tokens": {"dist": "fixed", "value": 2}}
    ],
}
TARGET = {
    "namespace": "serving",
    "workload": {"kind": "Deployment", "name": "llm"},
    "selector": {"app": "llm"},
    "access": "endpoint",
}
CRASH = {"name": "crash", "kind": "replica_crash", "params": {"method": "pod"}, "selector": {"replicas": [0]}}
SCALE = {"name": "scale", "kind": "replica_scale_down", "params": {"remove": 1}}
CHAOS = {"name": "chaos", "kind": "chaos_mesh", "params": {"experiment": "PodChaos", "action": "pod-kill"}}


def _drill_file(tmp_path: Path, config: dict, faults: list | None = None) -> Path:
    drill = {"name": "kube", "target": {"kind": "kubernetes", "config": config}, "scenario": SCENARIO}
    drill |= {"phases": {"baseline": "1s", "fault": "1s", "recovery": "1s"}, "faults": faults or []}
    path = tmp_path / "drill.yaml"
    path.write_text(yaml.safe_dump(drill, sort_keys=False))
    return path


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("change", "located", "says"),
    [
        ({"access": "service"}, "target.config.service_url", "'access: service' sends the load"),
        ({"access": "port_forward"}, "target.config.port", "forwards to this port"),
        ({"service_url": "http://127.0.0.1:1"}, "target.config.service_url", "drop 'service_url'"),
        ({"in_cluster": True, "kubeconfig": "/k"}, "target.config.in_cluster", "service account"),
        ({"access": "portal"}, "target.config.access", "expected one of 'service', 'port_forward' or 'endpoint'"),
        ({"selector": {}}, "target.config.selector", ""),
        ({"workload": {"kind": "DaemonSet", "name": "x"}}, "target.config.workload.kind", "LeaderWorkerSet"),
    ],
)
def test_a_bad_config_is_a_located_error_and_exit_2(tmp_path: Path, change: dict, located: str, says: str) -> None:
    code, out = _cli("validate", str(_drill_file(tmp_path, TARGET | change)))
    assert code == 2, out
    assert "drill.yaml:" in out and f"error: {located}" in out and says in out, out


def test_a_chaos_mesh_fault_without_the_operator_is_refused_at_the_fault(tmp_path: Path) -> None:
    code, out = _cli("validate", str(_drill_file(tmp_path, TARGET, [CHAOS])))
    assert code == 2 and "faults[0].kind: fault 'chaos_mesh' needs kubernetes.chaos_mesh" in out, out
    code, out = _cli("validate", str(_drill_file(tmp_path, TARGET | {"chaos_operator": "chaos-mesh"}, [CHAOS])))
    assert code == 0, out


def test_replica_pause_through_a_pod_is_refused_with_why(tmp_path: Path) -> None:
    pause = {"name": "p", "kind": "replica_pause", "params": {"method": "pod"}}
    code, out = _cli("validate", str(_drill_file(tmp_path, TARGET, [pause])))
    assert code == 2 and "the Kubernetes API has no pause" in out, out


def _role(out: str) -> dict:
    docs = [d for d in yaml.safe_load_all(out) if d]
    cluster = ["ClusterRole", "ClusterRoleBinding"] if "ClusterRole" in out else []
    assert [d["kind"] for d in docs] == ["ServiceAccount", "Role", "RoleBinding", *cluster]
    docs = docs[:3]
    assert {d["metadata"]["namespace"] for d in docs} == {"serving"}
    assert docs[2]["subjects"][0]["name"] == docs[0]["metadata"]["name"] == docs[2]["roleRef"]["name"]
    return {(r["apiGroups"][0], r["resources"][0]): r["verbs"] for r in docs[1]["rules"]}


def test_the_role_has_exactly_what_the_target_and_each_fault_do(tmp_path: Path) -> None:
    config = TARGET | {"chaos_operator": "chaos-mesh"}
    code, out = _cli("kube", "role", str(_drill_file(tmp_path, config)))
    assert code == 0, out
    assert _role(out) == {("", "pods"): ["get", "list"], ("apps", "deployments/scale"): ["get"]}
    code, out = _cli("kube", "role", str(_drill_file(tmp_path, config, [CRASH, SCALE, CHAOS])))
    assert code == 0, out
    assert _role(out) == {
        ("", "pods"): ["delete", "get", "list"],
        ("apps", "deployments/scale"): ["get", "patch"],
        ("chaos-mesh.org", "podchaos"): ["create", "delete", "get", "list"],
    }


def test_an_exec_method_gets_create_on_pods_exec_and_its_refusals_are_located_at_its_method(tmp_path: Path) -> None:
    pause = {"name": "freeze", "kind": "replica_pause", "params": {"method": "exec"}, "selector": {"replicas": [0]}}
    path = _drill_file(tmp_path, TARGET, [SCALE, pause])
    code, out = _cli("kube", "role", str(path))
    assert code == 0, out
    assert _role(out)[("", "pods/exec")] == ["create", "get"]  # the WebSocket upgrade is a GET
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if text.strip() == "method: exec")
    positions = fault_key_positions(load_drill(path), "params", "method")
    assert positions[1].startswith(f"{path}:{line}:") and positions[0].startswith(f"{path}:"), positions


def test_port_forward_and_statefulsets_get_their_own_resources(tmp_path: Path) -> None:
    config = TARGET | {"access": "port_forward", "port": 8000, "workload": {"kind": "StatefulSet", "name": "llm"}}
    code, out = _cli("kube", "role", str(_drill_file(tmp_path, config, [SCALE])))
    assert code == 0, out
    assert _role(out) == {
        ("", "pods"): ["get", "list"],
        ("", "pods/portforward"): ["create", "get"],
        ("apps", "statefulsets/scale"): ["get", "patch"],
    }


def test_role_refuses_a_drill_on_another_target(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump({"name": "e", "target": {"kind": "embedded"}, "scenario": SCENARIO}))
    code, out = _cli("kube", "role", str(path))
    assert code == 2 and "not 'kubernetes'" in out, out


def test_the_pre_flight_names_each_missing_verb_and_resource() -> None:
    rules = drill_rules("endpoint", "Deployment", [])
    rules.append(KubeRule("", "pods", ("delete",)))
    granted = {("get", "", "pods", ""), ("list", "", "pods", "")}

    def allowed(verb: str, group: str, resource: str, sub: str, cluster: bool) -> tuple[bool, str]:
        return (verb, group, resource, sub) in granted, ""

    assert missing_rules(rules, allowed) == ["'get' on deployments/scale (apps)", "'delete' on pods"]
    rules.append(KubeRule("", "nodes", ("patch",), cluster=True))
    assert missing_rules(rules, allowed)[-1] == "'patch' on nodes (cluster-wide)"


def test_the_network_faults_chaos_mesh_method_needs_networkchaos_verbs(tmp_path: Path) -> None:
    slow = {"name": "slow", "kind": "slow_replica", "params": {"method": "chaos_mesh", "latency_ms": 100}}
    cut = {"name": "cut", "kind": "partition", "params": {"method": "chaos_mesh"}}
    code, out = _cli("kube", "role", str(_drill_file(tmp_path, TARGET | {"chaos_operator": "chaos-mesh"}, [slow, cut])))
    assert code == 0, out
    assert _role(out)[("chaos-mesh.org", "networkchaos")] == ["create", "delete", "get", "list"]


def test_a_node_drain_gets_eviction_in_the_namespace_and_only_nodes_cluster_wide(tmp_path: Path) -> None:
    drain = {"name": "drain", "kind": "node_drain", "selector": {"replicas": [0]}}
    code, out = _cli("kube", "role", str(_drill_file(tmp_path, TARGET, [drain])))
    assert code == 0, out
    assert _role(out) == {
        ("", "pods"): ["get", "list"],
        ("", "pods/eviction"): ["create"],
        ("apps", "deployments/scale"): ["get"],
    }
    docs = [d for d in yaml.safe_load_all(out) if d]
    cluster = [d for d in docs if d["kind"] == "ClusterRole"]
    assert [r for d in cluster for r in d["rules"]] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}
    ]
    binding = next(d for d in docs if d["kind"] == "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == cluster[0]["metadata"]["name"]
    assert binding["subjects"][0]["name"] == docs[0]["metadata"]["name"]


def test_the_load_job_runs_n_workers_against_the_master() -> None:
    code, out = _cli(
        "kube", "load-job", "--master", "drill.serving.svc:5557", "--namespace", "serving", "--image", "me/drill:1",
        "--workers", "3",
    )  # fmt: skip
    assert code == 0, out
    job = yaml.safe_load(out)
    assert job["kind"] == "Job" and job["spec"]["parallelism"] == job["spec"]["completions"] == 3
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["drill", "worker", "--master", "drill.serving.svc:5557"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    code, out = _cli("kube", "load-job", "--master", "nohost", "--namespace", "s", "--image", "i")
    assert code == 2 and "HOST:PORT" in out


# -- the service stand-in, on loopback sockets ------------------------------------------------------------------


class _Named:
    """A TCP server that answers each connection with its name and closes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.server.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            conn.recv(16)
            conn.sendall(self.name.encode())
            conn.close()

    def close(self) -> None:
        try:
            self.server.shutdown(socket.SHUT_RDWR)  # stops listening and wakes the accept
        except OSError:
            pass
        self.server.close()


def _ask(address: str) -> str:
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"hi")
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:  # the pod answered and the forwarder closed both ways first (ENOTCONN): the answer is read
            pass
        return sock.recv(64).decode()


@pytest.fixture()
def pods() -> Iterator[list[_Named]]:
    made = [_Named("pod-a"), _Named("pod-b")]
    yield made
    for pod in made:
        pod.close()


def test_the_service_sends_connections_to_the_serving_pods_in_turn(pods: list[_Named]) -> None:
    serving = [PodEndpoint(p.name, p.address) for p in pods]
    service = ServiceForwarder(lambda: list(serving), dial_address, refresh_s=0.05).start()
    try:
        assert sorted(_ask(service.address) for _ in range(4)) == ["pod-a", "pod-a", "pod-b", "pod-b"]
        pods[0].close()  # pod-a dies before the list knows: its refused connect goes to the next pod
        assert {_ask(service.address) for _ in range(4)} == {"pod-b"}
        serving[:] = []  # no pod serves: the connection is closed at once, nothing answers
        service.refresh()
        assert _ask(service.address) == ""
    finally:
        service.close()


def test_the_service_keeps_its_last_list_when_the_api_does_not_answer(pods: list[_Named]) -> None:
    answers: list[list[PodEndpoint] | None] = [[PodEndpoint("pod-b", pods[1].address)]]

    def endpoints() -> list[PodEndpoint]:
        if answers[-1] is None:
            raise DrillError("API server down")
        return list(answers[-1])

    service = ServiceForwarder(endpoints, dial_address, refresh_s=60).start()
    try:
        answers.append(None)
        assert service.refresh() == [PodEndpoint("pod-b", pods[1].address)]
        assert _ask(service.address) == "pod-b"
    finally:
        service.close()


class _NoOperator:
    """The API server's answers at the client seam: every verb allowed, no Chaos Mesh kind served."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def allowed(self, verb: str, group: str, resource: str, sub: str = "", cluster: bool = False) -> tuple[bool, str]:
        return True, ""

    def installed(self, group: str, version: str, plural: str) -> bool:
        self.asked.append(f"{plural}.{group}")
        return False


@pytest.mark.parametrize(("kind", "params"), [("partition", {"method": "chaos_mesh"}), ("partition", {})])
def test_a_chaos_mesh_method_without_the_operator_stops_before_anything_starts(
    tmp_path: Path, kind: str, params: dict
) -> None:
    faults = ((kind, registry.faults.get(kind).Params.model_validate(params)),)
    config = KubernetesTargetParams.model_validate(TARGET | {"chaos_operator": "chaos-mesh"})
    target = KubernetesTarget(config, TargetContext("t", str(tmp_path), faults=faults))
    client = _NoOperator()
    if not params:  # method toxiproxy creates nothing in the cluster: no operator asked for
        target.preflight(client)  # type: ignore[arg-type]
        assert client.asked == []
        return
    with pytest.raises(KubernetesAccessError, match="no Chaos Mesh operator.*networkchaos.chaos-mesh.org") as caught:
        target.preflight(client)  # type: ignore[arg-type]
    assert caught.value.exit_code == 2
