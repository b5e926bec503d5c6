"""``replica_crash`` and ``replica_pause`` with ``method: exec``, and the target's exec pre-flight, without a cluster.

The official client (:class:`drill.backends.kubernetes.KubeClient`) runs unchanged; only its two transports are
fakes: the exec stream call (``kubernetes.stream.stream``, :meth:`KubeClient._stream`) answered by a fake kubelet
that keeps one container's processes, and the REST connection pool answering the pod reads with that kubelet's
restart count. The real control plane cannot exec into a simulated pod (tests/kubernetes/); what neither shows, a
real kubelet's exec, is said in docs/kubernetes.md."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from drill import registry
from drill.api import FaultContext, FaultNotLanded, FaultTargets, InjectError, KubeAccess, ReplicaRef, TargetInfo
from drill.backends import kubernetes as kube
from drill.backends.kubernetes import KubeClient
from drill.errors import KubernetesAccessError, KubernetesError, RevertError
from drill.targets.kube_exec_preflight import refuse_unreachable
from drill.targets.kube_rbac import fault_rules
from faults import kube_exec
from faults.lifecycle import PauseSaved, ReplicaCrash, ReplicaCrashParams, ReplicaPause, ReplicaPauseParams

ACCESS = KubeAccess(namespace="serving", workload_kind="Deployment", workload="llm", selector={"app": "llm"})
TARGET = TargetInfo(kind="kubernetes", base_url="http://127.0.0.1:1", kubernetes=ACCESS)
POD = ReplicaRef(name="llm-a", index=0, url="http://127.0.0.1:2", pod="llm-a", pod_uid="uid-a")
SIGKILL_BIT, SIGTERM_BIT = 1 << 8, 1 << 14


@dataclass
class Proc:
    name: str
    start: int
    state: str = "S"
    caught: int = 0
    reads_until_stopped: int = 0  # a SIGSTOP not yet taken: the process reads as R this many more times


@dataclass
class FakeKubelet:
    """One pod's container as a kubelet would exec into it: PID 1 (``init``) and maybe its child, PID 7. The
    kernel's rule is kept: PID 1 gets from inside only the signals it handles. ``refuse``: the API server's answer
    to the exec's upgrade (e.g. 500, no kubelet); ``no_shell``: the runtime finds no ``sh``."""

    init: str = "tini"
    restart_count: int = 0
    procs: dict[int, Proc] = field(default_factory=dict)
    refuse: int | None = None
    no_shell: bool = False
    no_kubelet: bool = False  # the API server upgrades the exec, then cannot reach the pod's kubelet
    stop_lag: int = 0  # reads of /proc that still show R after a SIGSTOP (a busy node stops it when it next runs)
    commands: list[list[str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.procs:
            self.start_container()

    def start_container(self) -> None:
        base = 1000 * (self.restart_count + 1)
        if self.init in kube.INITS:
            self.procs = {1: Proc(self.init, base, caught=SIGTERM_BIT), 7: Proc("vllm", base + 1, caught=SIGTERM_BIT)}
        else:
            self.procs = {1: Proc(self.init, base, caught=SIGTERM_BIT)}

    # the transport: kubernetes.stream.stream(api_method, name, namespace, command=..., ...)
    def stream(self, api_method: Any, pod: str, namespace: str, **kwargs: Any) -> FakeSession:
        assert api_method.__name__ == "connect_get_namespaced_pod_exec" and kwargs["_preload_content"] is False
        command = kwargs["command"]
        self.commands.append(command)
        if self.refuse is not None:
            body = json.dumps({"kind": "Status", "message": f"error dialing backend: pod {pod} has no kubelet"})
            raise ApiException(status=0, reason=f"Handshake status {self.refuse} Error -+-+- {{}} -+-+- b'{body}'")
        if self.no_kubelet:
            url = f"https://10.0.0.9:10250/exec/{namespace}/{pod}/llm?command=sh&command=-c&command=pid%3D"
            why = f'Internal error occurred: error sending request: Post "{url}": dial tcp: connection refused'
            return FakeSession(status={"status": "Failure", "reason": "InternalError", "message": why})
        if self.no_shell:
            return FakeSession(status={"status": "Failure", "message": 'exec: "sh": executable file not found'})
        script, args = command[2], command[4:]
        return self._main(*args) if script == kube._MAIN_PROCESS else self._signal(*args)

    def _main(self, pid_arg: str) -> FakeSession:
        pid = int(pid_arg) if pid_arg else (7 if self.init in kube.INITS else 1)
        proc = self.procs.get(pid)
        if proc is None:
            return FakeSession(stderr=f"process {pid} is gone", code=5)
        lines = [f"Main:\t{pid}", f"Init:\t{self.init}", f"Name:\t{proc.name}", f"State:\t{proc.state} (x)"]
        lines += [f"SigCgt:\t{proc.caught:016x}", f"Start:\t{proc.start}"]
        if proc.reads_until_stopped:
            proc.reads_until_stopped -= 1
            proc.state = "R" if proc.reads_until_stopped else "T"
        return FakeSession(stdout="\n".join(lines) + "\n", code=0)

    def _signal(self, sig: str, pid_arg: str, start: str) -> FakeSession:
        pid = int(pid_arg)
        proc = self.procs.get(pid)
        if proc is None or str(proc.start) != start:
            return FakeSession(stderr="gone", code=5)
        number = {"KILL": 9, "STOP": 19, "CONT": 18, "TERM": 15}[sig]
        if pid == 1 and not proc.caught >> (number - 1) & 1 and sig != "CONT":
            return FakeSession(code=0)  # the kernel drops it: kill succeeds, nothing happens
        if sig in ("KILL", "TERM"):
            self.restart_count += 1
            self.start_container()
            return FakeSession(status=None, broken=True)  # the container died under the exec: the session breaks
        proc.state = "T" if sig == "STOP" else "S"
        if sig == "STOP" and self.stop_lag:
            proc.state, proc.reads_until_stopped = "R", self.stop_lag
        return FakeSession(code=0)

    # the other transport: the REST connection pool, answering GET of the pod, or of the list of the workload's
    def request(self, method: str, url: str, **kwargs: Any) -> SimpleNamespace:
        listed = url.endswith("/namespaces/serving/pods?labelSelector=app%3Dllm")
        assert method == "GET" and (listed or url.endswith("/namespaces/serving/pods/llm-a")), url
        status = {"name": "llm", "image": "vllm", "imageID": "", "ready": True, "restartCount": self.restart_count}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "llm-a", "namespace": "serving", "uid": "uid-a", "labels": {"app": "llm"}},
            "spec": {"containers": [{"name": "llm", "image": "vllm"}]},
            "status": {"phase": "Running", "containerStatuses": [status]},
        }
        body = {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [pod]} if listed else pod
        return SimpleNamespace(
            status=200, reason="OK", data=json.dumps(body).encode(), headers={"content-type": "application/json"}
        )


@dataclass
class FakeSession:
    """What ``stream(..., _preload_content=False)`` returns: a WSClient's reading side."""

    stdout: str = ""
    stderr: str = ""
    code: int | None = None
    status: dict | None = field(default_factory=dict)
    broken: bool = False  # the connection breaks before the status comes

    def __post_init__(self) -> None:
        if self.status == {}:
            causes = [{"reason": "ExitCode", "message": str(self.code)}]
            failure = {"status": "Failure", "reason": "NonZeroExitCode", "details": {"causes": causes}}
            self.status = {"status": "Success"} if self.code == 0 else failure

    def run_forever(self, timeout: float | None = None) -> None:
        if self.broken:
            raise ConnectionResetError("Connection reset by peer")

    def is_open(self) -> bool:
        return False

    def read_stdout(self) -> str:
        return self.stdout

    def read_stderr(self) -> str:
        return self.stderr

    def read_channel(self, channel: int) -> str:
        assert channel == 3
        return json.dumps(self.status) if self.status is not None else ""

    def close(self) -> None:
        pass


def _client(tmp_path: Path, kubelet: FakeKubelet) -> KubeClient:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    client = KubeClient("serving", kubeconfig=str(path), timeout_s=2)
    client._stream = kubelet.stream  # type: ignore[method-assign]
    client._api.rest_client.pool_manager = kubelet  # type: ignore[assignment]
    return client


def _ctx(client: KubeClient, fault_id: str = "f1") -> FaultContext:
    return FaultContext(fault_id, TARGET, FaultTargets(replicas=[POD]), _cache={"kubernetes": client})


def test_a_crash_by_exec_kills_the_servers_process_under_its_init_and_is_proven_by_the_restart_count(
    tmp_path: Path,
) -> None:
    kubelet = FakeKubelet(init="tini")
    ctx = _ctx(_client(tmp_path, kubelet))
    fault = ReplicaCrash(ReplicaCrashParams(method="exec", restart_timeout="2s"))
    ctx.saved = fault.prepare(ctx)
    saved = ctx.saved.exec  # type: ignore[attr-defined]
    assert [(t.pod, t.pid, t.name, t.restart_count) for t in saved.processes] == [("llm-a", 7, "vllm", 0)]
    fault.inject(ctx)
    assert kubelet.commands[-1][:2] == ["sh", "-c"] and kubelet.commands[-1][4:] == ["KILL", "7", "1001"]
    proof = fault.verify(ctx)
    assert "process 7 (vllm) killed (SIGKILL), restart count 0 -> 1" in proof.summary, proof
    fault.revert(ctx)  # the pod serves: nothing to wait for


def test_a_crash_whose_signal_the_process_survived_is_not_landed(tmp_path: Path) -> None:
    kubelet = FakeKubelet(init="tini")
    ctx = _ctx(_client(tmp_path, kubelet))
    fault = ReplicaCrash(ReplicaCrashParams(method="exec", restart_timeout="300ms"))
    ctx.saved = fault.prepare(ctx)
    kubelet.procs[7].start = 5  # another process has its PID now: the journaled one is not signalled
    with pytest.raises(InjectError, match="was gone before the SIGKILL"):
        fault.inject(ctx)
    with pytest.raises(FaultNotLanded, match="restart count is still 0"):
        fault.verify(ctx)


@pytest.mark.parametrize("lag", [3, 1000])
def test_a_stop_that_lands_a_moment_late_is_waited_for_and_one_that_never_does_is_not_landed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lag: int
) -> None:
    monkeypatch.setattr(kube_exec, "STOP_SETTLE_S", 0.5)
    kubelet = FakeKubelet(init="tini", stop_lag=lag)
    fault = ReplicaPause(ReplicaPauseParams(method="exec"))
    ctx = _ctx(_client(tmp_path, kubelet))
    ctx.saved = fault.prepare(ctx)
    fault.inject(ctx)
    if lag < 5:  # R on the first reads, then T: the kernel stopped it when it next ran
        assert "stopped (state T in /proc/PID/status)" in fault.verify(ctx).summary
    else:
        with pytest.raises(FaultNotLanded, match=r"process 7 is R, not stopped \(T\) after 0.5 s"):
            fault.verify(ctx)


def test_a_pause_by_exec_stops_the_process_and_any_revert_continues_it(tmp_path: Path) -> None:
    kubelet = FakeKubelet(init="dumb-init")
    client = _client(tmp_path, kubelet)
    fault = ReplicaPause(ReplicaPauseParams(method="exec"))
    ctx = _ctx(client)
    ctx.saved = fault.prepare(ctx)
    fault.inject(ctx)
    assert kubelet.procs[7].state == "T"
    assert "stopped (state T in /proc/PID/status): pod llm-a process 7 (vllm)" in fault.verify(ctx).summary
    # the revert a watchdog or `drill cleanup` runs: rebuilt from the journaled JSON, in another context
    journaled = PauseSaved.model_validate_json(ctx.saved.model_dump_json())
    again = _ctx(client, "f1")
    again.saved = journaled
    fault.revert(again)
    assert kubelet.procs[7].state == "S"
    fault.revert(again)  # idempotent: a SIGCONT to a running process
    assert kubelet.procs[7].state == "S"


def test_a_pause_revert_leaves_a_process_stopped_before_the_fault_and_fails_loudly_when_exec_breaks(
    tmp_path: Path,
) -> None:
    kubelet = FakeKubelet(init="tini")
    kubelet.procs[7].state = "T"  # stopped by someone else before the drill
    ctx = _ctx(_client(tmp_path, kubelet))
    fault = ReplicaPause(ReplicaPauseParams(method="exec"))
    ctx.saved = fault.prepare(ctx)
    fault.revert(ctx)
    assert kubelet.procs[7].state == "T"

    kubelet.procs[7].state = "S"
    ctx.saved = fault.prepare(ctx)
    fault.inject(ctx)
    kubelet.refuse = 500  # the kubelet stops answering: the process may still be stopped
    with pytest.raises(RevertError, match="may still be stopped") as caught:
        fault.revert(ctx)
    assert caught.value.exit_code == 4 and "kill -s CONT 7" in str(caught.value)


@pytest.mark.parametrize(("fault", "signal"), [("crash", "SIGKILL"), ("pause", "SIGSTOP")])
def test_a_server_that_is_pid_1_is_refused_saying_the_kernel_drops_the_signal(
    tmp_path: Path, fault: str, signal: str
) -> None:
    kubelet = FakeKubelet(init="vllm")  # no init: the server is PID 1
    ctx = _ctx(_client(tmp_path, kubelet))
    made = (
        ReplicaCrash(ReplicaCrashParams(method="exec"))
        if fault == "crash"
        else ReplicaPause(ReplicaPauseParams(method="exec"))
    )
    with pytest.raises(InjectError, match=f"drops a {signal} sent to it from inside.*pid_namespaces") as caught:
        made.prepare(ctx)
    assert "tini" in str(caught.value)
    assert all(command[4:] == [""] for command in kubelet.commands), "nothing was signalled"


def test_sigterm_reaches_a_pid_1_that_handles_it() -> None:
    main = kube.MainProcess(pid=1, start="1", name="vllm", state="S", caught=SIGTERM_BIT, init="vllm")
    assert main.refusal("SIGTERM") is None and main.refusal("SIGKILL") is not None
    child = kube.MainProcess(pid=7, start="1", name="vllm", state="S", caught=0, init="tini")
    assert child.refusal("SIGKILL") is None and child.refusal("SIGSTOP") is None


def _preflight(tmp_path: Path, kubelet: FakeKubelet, kind: str, params: dict) -> KubernetesAccessError:
    client = _client(tmp_path, kubelet)
    fault_cls = registry.faults.get(kind)
    faults = [("queue_flood", registry.faults.get("queue_flood").Params()), (kind, fault_cls.Params(**params))]
    pod = client.pod("llm-a")
    assert pod is not None
    with pytest.raises(KubernetesAccessError) as caught:
        refuse_unreachable(client, [pod], faults, ["d.yaml:9:5", "d.yaml:17:15"])
    assert caught.value.exit_code == 2
    return caught.value


@pytest.mark.parametrize(
    ("kubelet", "says", "status"),
    [
        (FakeKubelet(refuse=500), "refused: HTTP 500: error dialing backend: pod llm-a has no kubelet", 500),
        (
            FakeKubelet(no_kubelet=True),
            'the exec did not run: Internal error occurred: error sending request: Post "https://10.0.0.9:10250/exec/'
            'serving/llm-a/llm?…": dial tcp',
            None,
        ),
        (
            FakeKubelet(no_shell=True),
            "the image has no shell with kill (sh -c 'kill -0 ...': did not run: exec: \"sh\"",
            None,
        ),
        (FakeKubelet(init="vllm"), "PID 1, the init of the container's PID namespace", None),
    ],
)
def test_the_pre_flight_refuses_a_pod_the_exec_cannot_act_on_located_at_the_faults_method(
    tmp_path: Path, kubelet: FakeKubelet, says: str, status: int | None
) -> None:
    error = _preflight(tmp_path, kubelet, "replica_pause", {"method": "exec"})
    text = str(error)
    assert text.startswith(
        "d.yaml:17:15: error: faults[1].params.method: replica_pause method exec cannot send SIGSTOP"
    )
    assert "in pod serving/llm-a" in text and says in text and "nothing was touched" in text, text
    assert error.status == status


def test_the_pre_flight_passes_a_pod_whose_server_runs_under_an_init(tmp_path: Path) -> None:
    client = _client(tmp_path, FakeKubelet(init="catatonit"))
    pod = client.pod("llm-a")
    assert pod is not None
    faults = [("replica_crash", ReplicaCrashParams(method="exec")), ("replica_crash", ReplicaCrashParams())]
    refuse_unreachable(client, [pod], faults, [])


def test_an_exec_the_api_server_forbids_names_the_verb(tmp_path: Path) -> None:
    client = _client(tmp_path, FakeKubelet(refuse=403))
    with pytest.raises(KubernetesError, match="HTTP 403") as caught:
        client.main_process("llm-a")
    assert "'get' and 'create' on pods/exec" in str(caught.value)


def test_only_an_exec_method_gets_pods_exec() -> None:
    exec_rules = fault_rules("replica_pause", ReplicaPauseParams(method="exec"), "Deployment")
    assert [(r.resource, r.verbs) for r in exec_rules] == [("pods/exec", ("create", "get"))]
    assert fault_rules("replica_crash", ReplicaCrashParams(method="pod"), "Deployment")[0].resource == "pods"
    assert fault_rules("replica_pause", ReplicaPauseParams(), "Deployment") == []


@pytest.mark.parametrize("kind", ["replica_crash", "replica_pause"])
def test_container_is_a_param_of_method_exec_only(kind: str) -> None:
    params = registry.faults.get(kind).Params
    assert params.model_validate({"method": "exec", "container": "llm"}).container == "llm"  # type: ignore[attr-defined]
    with pytest.raises(ValidationError, match="'container' is a param of method exec, not of method process"):
        params.model_validate({"container": "llm"})


# -- the scripts against real processes in a real PID namespace ----------------------------------------------------


def _can_make_pid_namespaces() -> bool:
    if not (shutil.which("unshare") and shutil.which("nsenter")):
        return False
    done = subprocess.run(["unshare", "-fp", "--mount-proc", "true"], capture_output=True, check=False)
    return done.returncode == 0


@dataclass
class NamespaceKubelet(FakeKubelet):
    """A container made of a real PID namespace (``unshare --pid``): an exec runs its command there with
    ``nsenter``, as a container runtime does, so the kernel's own rules for signals apply."""

    host_pid: int = 0

    def stream(self, api_method: Any, pod: str, namespace: str, **kwargs: Any) -> FakeSession:
        command = ["nsenter", "-t", str(self.host_pid), "-p", "-m", "--", *kwargs["command"]]
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
        return FakeSession(stdout=done.stdout, stderr=done.stderr, code=done.returncode)


def _ready(pid: int, name: str) -> bool:
    """The namespace's PID 1 runs ``name`` (an init: and has its child)."""
    if Path(f"/proc/{pid}/comm").read_text().strip() != name:
        return False
    return name != "tini" or bool(Path(f"/proc/{pid}/task/{pid}/children").read_text())


@pytest.fixture()
def container(tmp_path: Path) -> Iterator[Callable[[list[str]], NamespaceKubelet]]:
    if not _can_make_pid_namespaces():
        pytest.skip("needs unshare --pid and nsenter (root): the kernel's rule is shown by the fake kubelet otherwise")
    started: list[subprocess.Popen[bytes]] = []

    def start(argv: list[str]) -> NamespaceKubelet:
        process = subprocess.Popen(["unshare", "-fp", "--mount-proc", *argv])
        started.append(process)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # unshare forks the namespace's PID 1: its child
            children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
            if children and _ready(int(children[0]), Path(argv[0]).name):
                return NamespaceKubelet(procs={1: Proc("unused", 0)}, host_pid=int(children[0]))
            time.sleep(0.02)
        raise AssertionError(f"no PID namespace for {argv}")

    yield start
    for process in started:
        process.kill()
        process.wait()


def test_in_a_real_pid_namespace_a_stop_to_its_init_is_dropped_and_one_to_the_inits_child_lands(
    tmp_path: Path, container: Callable[[list[str]], NamespaceKubelet]
) -> None:
    alone = _client(tmp_path, container(["sleep", "60"]))  # the server is PID 1
    main = alone.main_process("llm-a")
    assert (main.pid, main.name, main.state) == (1, "sleep", "S")
    assert main.refusal("SIGSTOP") is not None and main.refusal("SIGKILL") is not None
    assert alone.signal_process("llm-a", None, 1, main.start, "SIGSTOP").exit_code == 0  # kill says yes ...
    time.sleep(0.1)
    assert alone.main_process("llm-a").state == "S"  # ... and the kernel dropped it, as the refusal says

    tini = tmp_path / "tini"  # an init that runs the server as its child
    shutil.copy(shutil.which("sh") or "/bin/sh", tini)
    under_init = container([str(tini), "-c", "sleep 60 & wait"])
    client = _client(tmp_path, under_init)
    child = client.main_process("llm-a")
    assert (child.name, child.init) == ("sleep", "tini") and child.pid != 1 and child.refusal("SIGSTOP") is None
    fault = ReplicaPause(ReplicaPauseParams(method="exec"))
    ctx = _ctx(client)
    ctx.saved = fault.prepare(ctx)
    fault.inject(ctx)
    assert "process" in fault.verify(ctx).summary  # State T, read back through the exec
    fault.revert(ctx)
    assert client.main_process("llm-a").state == "S"
    assert client.signal_process("llm-a", None, child.pid, "1", "SIGKILL").exit_code == 5  # another start: untouched
    assert client.main_process("llm-a").pid == child.pid
