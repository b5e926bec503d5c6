"""The Kubernetes API through the official Python client (``kubernetes`` on PyPI), every call time-bounded.

The only module that imports the client; it does so on first use (``import kubernetes`` loads its whole
generated API, about a second), so ``drill --help``, a fault plugin and the embedded stack never pay for it.

What the harness does through the API, and the Role verbs each needs (``drill kube role`` prints them):

* list, get and watch the pods of a workload (``pods``: get, list): the replicas and their UIDs;
* delete a pod with grace period 0 (``pods``: delete): ``replica_crash`` with ``method: pod``;
* read and patch a workload's scale subresource (``deployments/scale``, ``statefulsets/scale``,
  ``leaderworkersets/scale``: get, patch): ``replica_scale_down``;
* cordon and uncordon a node (``nodes``: get, patch; cluster-scoped: a ClusterRole) and evict its pods through the
  Eviction API (``pods/eviction``: create), which honours PodDisruptionBudgets: ``node_drain``;
* run a command in a pod's container through the ``pods/exec`` subresource (``pods/exec``: create, get: the
  client's WebSocket upgrade is a GET; granted only when a drill uses an exec method): ``replica_crash`` and
  ``replica_pause`` with ``method: exec`` signal the container's main process from inside it;
* create, read and delete Chaos Mesh objects (``networkchaos``, ``podchaos`` of ``chaos-mesh.org``: create, get,
  list, delete): ``chaos_mesh``;
* ask the API server what the credentials may do (``SelfSubjectAccessReview``, which every authenticated user may
  create: Kubernetes' ``system:basic-user`` ClusterRole): the pre-flight.

Every failure raises :class:`drill.errors.KubernetesError` with the operation, the HTTP status the API server
answered (None when none came) and a hint.
"""

from __future__ import annotations

import json
import re
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from drill.errors import KubernetesError

__all__ = ["PodExecResult", "KubeClient", "MainProcess", "PodInfo", "ScaleInfo", "WORKLOAD_SCALE"]

T = TypeVar("T")

#: workload kind -> (API group, version, plural) of its scale subresource
WORKLOAD_SCALE: dict[str, tuple[str, str, str]] = {
    "Deployment": ("apps", "v1", "deployments"),
    "StatefulSet": ("apps", "v1", "statefulsets"),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets"),
}


@dataclass(frozen=True)
class PodInfo:
    """One pod as the API server reports it."""

    name: str
    uid: str
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    ready: bool
    deleting: bool  # metadata.deletionTimestamp is set
    restart_count: int  # the sum over its containers
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    pod_ip: str | None = None
    node: str | None = None  # spec.nodeName: where the scheduler put it

    @property
    def serving(self) -> bool:
        """Running, not being deleted: what a Service would route to (ready, where the pod reports readiness)."""
        return self.phase == "Running" and not self.deleting


@dataclass(frozen=True)
class ScaleInfo:
    """A workload's scale subresource: the replicas asked for and those the controller reports."""

    spec_replicas: int
    status_replicas: int


@dataclass(frozen=True)
class PodExecResult:
    """What a command run through ``pods/exec`` gave: its exit code (None when it did not run at all, e.g. the
    runtime found no such executable: ``message`` says why), its stdout and stderr."""

    command: tuple[str, ...]
    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    message: str = ""  # the status the API server sent on the exec's error channel, when not Success

    @property
    def not_found(self) -> bool:
        """The command (or the shell running it) is not in the image: exit 126/127, or the runtime said so."""
        said = f"{self.message} {self.stderr}".lower()
        return self.exit_code in (126, 127) or "executable file not found" in said or "no such file or dir" in said

    def describe(self) -> str:
        text = " ".join(part for part in (self.message, self.stderr.strip(), self.stdout.strip()) if part)
        code = "did not run" if self.exit_code is None else f"exit {self.exit_code}"
        return f"{code}" + (f": {text[:300]}" if text else "")


#: an init that runs the server as its one child and forwards signals to it: the server is the main process
INITS = frozenset({"tini", "docker-init", "dumb-init", "catatonit"})

#: run by ``sh -c`` in the container, builtins only (read, kill, echo, set): the main process (PID 1, or an init's
#: child), whether this user may signal it (``kill -0``), its ``/proc/PID/status`` and its start time (field 22 of
#: ``/proc/PID/stat``, in clock ticks since boot: with the PID, it names one process, never a later one; the
#: ``children`` file has no final newline, so ``read`` sets the PID and fails: not checked). $1: a PID
#: to read instead of resolving. Exit 3: no main process; 4: kill -0 refused; 5: process $1 is gone.
_MAIN_PROCESS = r"""
pid=$1
read -r init < /proc/1/comm || exit 3
if [ -z "$pid" ]; then
  pid=1
  case "$init" in tini|docker-init|dumb-init|catatonit) pid=; read -r pid _ < /proc/1/task/1/children ;; esac
fi
[ -n "$pid" ] || { echo "PID 1 ($init) has no child" >&2; exit 3; }
[ -e "/proc/$pid" ] || { echo "process $pid is gone" >&2; exit 5; }
kill -0 "$pid" || exit 4
echo "Main:	$pid"
echo "Init:	$init"
while IFS= read -r line; do echo "$line"; done < "/proc/$pid/status"
read -r stat < "/proc/$pid/stat"
set -- ${stat##*) }
echo "Start:	${20}"
"""

#: ``sh -c`` SIGNAL PID START: the signal to that process only if it is still the one that started at START
#: (exit 5: gone or another process now)
_SIGNAL = r"""
read -r stat 2>/dev/null < "/proc/$2/stat" || { echo "process $2 is gone" >&2; exit 5; }
set -- "$1" "$2" "$3" ${stat##*) }
[ "${23}" = "$3" ] || { echo "process $2 is another process now" >&2; exit 5; }
kill -s "$1" "$2"
"""


@dataclass(frozen=True)
class MainProcess:
    """A container's main process as seen from inside it (through exec): PID 1, or the one child of an init
    (:data:`INITS`) running as PID 1."""

    pid: int
    start: str  # its start time (clock ticks since boot): with the PID, it names this process only
    name: str
    state: str  # the first letter of /proc/PID/status State: R, S, D, T (stopped), Z ...
    caught: int  # SigCgt: the mask of the signals it handles
    init: str  # PID 1's name

    def refusal(self, signal_name: str) -> str | None:
        """Why ``signal_name`` sent from inside the container would not reach this process; None when it would.
        The init of a PID namespace (PID 1) gets, from inside its namespace, only the signals it handles: the
        kernel drops the others, SIGKILL and SIGSTOP always (pid_namespaces(7))."""
        number = signal.Signals[signal_name].value
        if self.pid != 1 or self.caught >> (number - 1) & 1:
            return None
        return (
            f"its main process {self.name} is PID 1, the init of the container's PID namespace: the kernel drops a "
            f"{signal_name} sent to it from inside the container (pid_namespaces(7): an init gets only the signals "
            f"it handles{', never SIGKILL or SIGSTOP' if signal_name in ('SIGKILL', 'SIGSTOP') else ''})"
        )


def _kube() -> Any:
    # lazy: the client loads its whole generated API (about a second); only a kubernetes drill needs it
    import kubernetes

    return kubernetes


class KubeClient:
    """The calls the kubernetes target and its faults make, in one namespace, with a timeout on each."""

    def __init__(
        self,
        namespace: str,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        in_cluster: bool = False,
        timeout_s: float = 10.0,
    ) -> None:
        self.namespace = namespace
        self.timeout_s = timeout_s
        self._where = "in-cluster service account" if in_cluster else f"kubeconfig {kubeconfig or '(default)'}"
        k = _kube()
        try:
            if in_cluster:
                k.config.load_incluster_config()
                self._api = k.client.ApiClient()
            else:
                self._api = k.config.new_client_from_config(config_file=kubeconfig, context=context)
        except (k.config.ConfigException, OSError, ValueError, TypeError) as exc:
            raise KubernetesError(
                f"cannot load the Kubernetes credentials from the {self._where}: {exc}",
                operation="config",
                hint="check target.config.kubeconfig (and context), or run inside the cluster with in_cluster: true",
            ) from exc
        self._core = k.client.CoreV1Api(self._api)
        self._apps = k.client.AppsV1Api(self._api)
        self._custom = k.client.CustomObjectsApi(self._api)
        self._authz = k.client.AuthorizationV1Api(self._api)

    @property
    def server(self) -> str:
        """The API server's URL."""
        return str(self._api.configuration.host)

    def close(self) -> None:
        self._api.close()

    # -- the boundary ---------------------------------------------------------------------------------
    def _call(self, operation: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        k = _kube()
        try:
            return fn(*args, _request_timeout=self.timeout_s, **kwargs)
        except k.client.exceptions.ApiException as exc:
            raise KubernetesError(
                f"Kubernetes API: {operation} failed: HTTP {exc.status} {exc.reason}: {_api_message(exc)}",
                operation=operation,
                status=exc.status,
                hint=_hint(exc.status),
            ) from exc
        except Exception as exc:  # urllib3's and the socket's errors: no answer at all
            if isinstance(exc, KubernetesError):
                raise
            raise KubernetesError(
                f"Kubernetes API at {self.server}: {operation} got no answer: {type(exc).__name__}: {exc}",
                operation=operation,
                hint="is the API server up and reachable? check the kubeconfig's server",
            ) from exc

    # -- pods -----------------------------------------------------------------------------------------
    def pods(self, selector: dict[str, str]) -> list[PodInfo]:
        """The pods matching ``selector`` (labels), sorted by name."""
        label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        found = self._call(
            f"list pods {label_selector} in {self.namespace}",
            self._core.list_namespaced_pod,
            self.namespace,
            label_selector=label_selector,
        )
        return sorted((_pod(p) for p in found.items), key=lambda p: p.name)

    def pod(self, name: str) -> PodInfo | None:
        """The pod ``name``; None when it does not exist."""
        try:
            return _pod(self._call(f"get pod {name}", self._core.read_namespaced_pod, name, self.namespace))
        except KubernetesError as exc:
            if exc.status == 404:
                return None
            raise

    def delete_pod(self, name: str, *, grace_s: int = 0, uid: str | None = None) -> bool:
        """Delete the pod (``uid``: only that incarnation of it); False when it was already gone."""
        k = _kube()
        pre = k.client.V1Preconditions(uid=uid) if uid else None
        body = k.client.V1DeleteOptions(grace_period_seconds=grace_s, preconditions=pre)
        try:
            self._call(f"delete pod {name}", self._core.delete_namespaced_pod, name, self.namespace, body=body)
        except KubernetesError as exc:
            if exc.status in (404, 409):  # gone, or another pod of that name now (the precondition failed)
                return False
            raise
        return True

    def pods_on(self, node: str) -> list[PodInfo]:
        """The namespace's pods the scheduler put on ``node``, sorted by name."""
        found = self._call(
            f"list pods on node {node} in {self.namespace}",
            self._core.list_namespaced_pod,
            self.namespace,
            field_selector=f"spec.nodeName={node}",
        )
        return sorted((_pod(p) for p in found.items), key=lambda p: p.name)

    def evict_pod(self, name: str, uid: str | None = None) -> str | None:
        """Evict the pod through the Eviction API (its grace period, PodDisruptionBudgets honoured). None when it
        was evicted or already gone; the API server's reason when a PodDisruptionBudget refused it (HTTP 429)."""
        k = _kube()
        pre = k.client.V1Preconditions(uid=uid) if uid else None
        body = k.client.V1Eviction(
            metadata=k.client.V1ObjectMeta(name=name, namespace=self.namespace),
            delete_options=k.client.V1DeleteOptions(preconditions=pre),
        )
        try:
            self._call(f"evict pod {name}", self._core.create_namespaced_pod_eviction, name, self.namespace, body)
        except KubernetesError as exc:
            if exc.status in (404, 409):  # gone, or another incarnation of that name now
                return None
            if exc.status == 429:  # a PodDisruptionBudget would be violated: reported, never forced
                return str(exc).split(": ", 2)[-1]
            raise
        return None

    # -- nodes (cluster-scoped) -------------------------------------------------------------------------
    def node_unschedulable(self, node: str) -> bool:
        """The node's ``spec.unschedulable`` (cordoned)."""
        found = self._call(f"get node {node}", self._core.read_node, node)
        return bool(found.spec.unschedulable) if found.spec else False

    def cordon(self, node: str, unschedulable: bool = True) -> None:
        """Patch the node's ``spec.unschedulable`` (what ``kubectl cordon`` / ``uncordon`` do)."""
        verb = "cordon" if unschedulable else "uncordon"
        self._call(f"{verb} node {node}", self._core.patch_node, node, {"spec": {"unschedulable": unschedulable}})

    # -- workloads ------------------------------------------------------------------------------------
    def scale(self, kind: str, name: str) -> ScaleInfo:
        """The workload's scale subresource."""
        found = self._scale_call(kind, name, "get", None)
        return ScaleInfo(
            spec_replicas=int(_get(found, "spec", "replicas") or 0),
            status_replicas=int(_get(found, "status", "replicas") or 0),
        )

    def set_scale(self, kind: str, name: str, replicas: int) -> None:
        """Patch the workload's scale subresource to ``replicas``."""
        self._scale_call(kind, name, "patch", {"spec": {"replicas": replicas}})

    def _scale_call(self, kind: str, name: str, verb: str, body: dict | None) -> Any:
        group, version, plural = WORKLOAD_SCALE[kind]
        what = f"{verb} {plural}/{name}/scale in {self.namespace}"
        apps = self._apps
        if kind == "Deployment":
            fn = apps.patch_namespaced_deployment_scale if body else apps.read_namespaced_deployment_scale
        elif kind == "StatefulSet":
            fn = apps.patch_namespaced_stateful_set_scale if body else apps.read_namespaced_stateful_set_scale
        else:
            custom = self._custom
            args = (group, version, self.namespace, plural, name)
            if body:
                return self._call(what, custom.patch_namespaced_custom_object_scale, *args, body)
            return self._call(what, custom.get_namespaced_custom_object_scale, *args)
        return self._call(what, fn, name, self.namespace, body) if body else self._call(what, fn, name, self.namespace)

    # -- custom objects (Chaos Mesh) ------------------------------------------------------------------
    def installed(self, group: str, version: str, plural: str) -> bool:
        """Whether the API server serves ``plural.group`` (a CRD is installed); found by listing at most one."""
        try:
            self._call(
                f"list {plural}.{group}",
                self._custom.list_namespaced_custom_object,
                group,
                version,
                self.namespace,
                plural,
                limit=1,
            )
        except KubernetesError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def create_object(self, group: str, version: str, plural: str, body: dict) -> dict:
        name = body["metadata"]["name"]
        return dict(
            self._call(
                f"create {plural}.{group} {name}",
                self._custom.create_namespaced_custom_object,
                group,
                version,
                self.namespace,
                plural,
                body,
            )
        )

    def get_object(self, group: str, version: str, plural: str, name: str) -> dict | None:
        """The object; None when it does not exist."""
        try:
            found = self._call(
                f"get {plural}.{group} {name}",
                self._custom.get_namespaced_custom_object,
                group,
                version,
                self.namespace,
                plural,
                name,
            )
        except KubernetesError as exc:
            if exc.status == 404:
                return None
            raise
        return dict(found)

    def delete_object(self, group: str, version: str, plural: str, name: str) -> bool:
        """Delete the object; False when it was already gone."""
        try:
            self._call(
                f"delete {plural}.{group} {name}",
                self._custom.delete_namespaced_custom_object,
                group,
                version,
                self.namespace,
                plural,
                name,
            )
        except KubernetesError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    # -- access review --------------------------------------------------------------------------------
    def allowed(
        self, verb: str, group: str, resource: str, subresource: str = "", cluster: bool = False
    ) -> tuple[bool, str]:
        """Whether these credentials may ``verb`` the ``resource`` in the namespace (``cluster``: a cluster-scoped
        resource, e.g. nodes), and the server's reason."""
        k = _kube()
        review = k.client.V1SelfSubjectAccessReview(
            spec=k.client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=k.client.V1ResourceAttributes(
                    namespace=None if cluster else self.namespace,
                    verb=verb,
                    group=group,
                    resource=resource,
                    subresource=subresource,
                )
            )
        )
        answer = self._call(
            f"review access to {verb} {resource}", self._authz.create_self_subject_access_review, review
        )
        status = answer.status
        return bool(status.allowed), str(status.reason or status.evaluation_error or "")

    # -- exec (a kubelet runs it: not exercised here, KWOK has none) ----------------------------------------
    def exec(self, pod: str, command: list[str], container: str | None = None) -> PodExecResult:
        """Run ``command`` in the pod's ``container`` (None: its only one) through the ``pods/exec`` subresource
        (a WebSocket to the API server, which relays it to the pod's kubelet) and wait, up to the call timeout,
        for it to end. A command that ran and failed is an :class:`PodExecResult` with its exit code; an exec the API
        server refused or could not relay is a :class:`KubernetesError` with the status it answered."""
        k = _kube()
        operation = f"exec {command[0]!r} in pod {self.namespace}/{pod}" + (
            f" container {container}" if container else ""
        )
        kwargs: dict[str, Any] = {"command": command, "stdin": False, "stdout": True, "stderr": True, "tty": False}
        if container:
            kwargs["container"] = container
        try:
            stream = self._stream(
                self._core.connect_get_namespaced_pod_exec, pod, self.namespace, _preload_content=False, **kwargs
            )
        except k.client.exceptions.ApiException as exc:
            raise _exec_refused(operation, exc, self.server) from exc
        try:
            stream.run_forever(timeout=self.timeout_s)
            if stream.is_open():
                raise KubernetesError(
                    f"Kubernetes API: {operation} had not ended after {self.timeout_s:g}s",
                    operation="exec",
                    hint="the command hangs in the container, or the kubelet stopped answering",
                )
            out, err = stream.read_stdout(), stream.read_stderr()
            status = stream.read_channel(_ERROR_CHANNEL)
        except Exception as exc:  # websocket-client's and the socket's: the session broke before its status came,
            if isinstance(exc, KubernetesError):  # what a container dying under its exec does
                raise
            return PodExecResult(tuple(command), None, message=f"the exec's connection broke: {exc}")
        finally:
            stream.close()
        code, message = _exec_status(status)
        return PodExecResult(tuple(command), code, str(out or ""), str(err or ""), message)

    def main_process(self, pod: str, container: str | None = None, pid: int | None = None) -> MainProcess:
        """The container's main process (or process ``pid``), read through exec; a :class:`KubernetesError` saying
        why when it cannot be read: the exec refused, no shell in the image, ``kill -0`` refused."""
        found = self.exec(pod, ["sh", "-c", _MAIN_PROCESS, "drill", str(pid or "")], container)
        where = f"pod {self.namespace}/{pod}" + (f" container {container}" if container else "")
        if found.not_found:
            raise KubernetesError(
                f"{where}: the image has no shell with kill (sh -c 'kill -0 ...': {found.describe()})",
                operation="exec",
                hint="method exec needs a POSIX sh in the image (its kill builtin); else use method: pod",
            )
        if found.exit_code == 5:
            raise KubernetesError(f"{where}: process {pid} is gone", operation="exec")
        if found.exit_code == 4:
            raise KubernetesError(
                f"{where}: the exec'd user may not signal the main process (kill -0: {found.describe()})",
                operation="exec",
                hint="run the container's processes as one user, or use method: pod",
            )
        if found.exit_code is None:
            raise KubernetesError(
                f"{where}: the exec did not run: {found.message}",
                operation="exec",
                hint="the API server relays an exec to the pod's kubelet: is there one, does it answer?",
            )
        fields = dict(line.split(":\t", 1) for line in found.stdout.splitlines() if ":\t" in line)
        if found.exit_code != 0 or not {"Main", "Start", "Name", "State"} <= fields.keys():
            raise KubernetesError(f"{where}: cannot read its main process ({found.describe()})", operation="exec")
        return MainProcess(
            pid=int(fields["Main"]),
            start=fields["Start"].strip(),
            name=fields["Name"].strip(),
            state=fields["State"].strip()[:1],
            caught=int(fields.get("SigCgt", "0").strip() or "0", 16),
            init=fields["Init"].strip(),
        )

    def signal_process(self, pod: str, container: str | None, pid: int, start: str, signal_name: str) -> PodExecResult:
        """``kill -s SIGNAL`` to process ``pid`` in the container, only if it is still the one that started at
        ``start`` (exit 5 if not: gone, or another process now)."""
        sig = signal_name.removeprefix("SIG")
        return self.exec(pod, ["sh", "-c", _SIGNAL, "drill", sig, str(pid), start], container)

    def _stream(self, api_method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """The exec transport: ``kubernetes.stream.stream`` (unit tests replace it, and only it)."""
        return _kube().stream.stream(api_method, *args, **kwargs)

    # -- port-forward (outside the cluster; not exercised here: KWOK has no kubelet) --------------------
    def port_forward(self, pod: str, port: int) -> socket.socket:
        """A socket connected to ``port`` of ``pod`` through the API server's port-forward (SPDY/WebSocket)."""
        k = _kube()
        try:
            forward = k.stream.portforward(
                self._core.connect_get_namespaced_pod_portforward, pod, self.namespace, ports=str(port)
            )
            sock: socket.socket = forward.socket(port)
        except Exception as exc:
            raise KubernetesError(
                f"port-forward to {self.namespace}/{pod}:{port} failed: {type(exc).__name__}: {exc}",
                operation="portforward",
                hint="the Role needs 'create' and 'get' on pods/portforward, and the pod a kubelet that answers",
            ) from exc
        return sock


def _pod(p: Any) -> PodInfo:
    statuses = (p.status.container_statuses if p.status else None) or []
    conditions = (p.status.conditions if p.status else None) or []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    return PodInfo(
        name=p.metadata.name,
        uid=p.metadata.uid,
        phase=(p.status.phase if p.status else None) or "Unknown",
        ready=ready,
        deleting=p.metadata.deletion_timestamp is not None,
        restart_count=sum(int(s.restart_count or 0) for s in statuses),
        labels=dict(p.metadata.labels or {}),
        annotations=dict(p.metadata.annotations or {}),
        pod_ip=p.status.pod_ip if p.status else None,
        node=p.spec.node_name if p.spec else None,
    )


#: the exec protocol's channel on which the API server sends the command's final status (a metav1.Status)
_ERROR_CHANNEL = 3
_HANDSHAKE = re.compile(r"Handshake status (\d{3})")
_QUERY = re.compile(r"\?command=[^\"\s]*")


def _exec_status(raw: str | bytes | None) -> tuple[int | None, str]:
    """(exit code, message) from the error channel's Status: Success is 0; ``NonZeroExitCode`` carries the code in
    its ``ExitCode`` cause; any other failure (the runtime could not start the command) has no code, only why."""
    if not raw:
        return None, "the exec ended without a status (the connection was closed)"
    try:
        status = json.loads(raw)
    except ValueError:
        return None, str(raw)[:300]
    if status.get("status") == "Success":
        return 0, ""
    causes = (status.get("details") or {}).get("causes") or []
    for cause in causes:
        if cause.get("reason") == "ExitCode" and str(cause.get("message", "")).isdigit():
            return int(cause["message"]), ""
    message = str(status.get("message") or status.get("reason") or raw)
    return None, _QUERY.sub("?…", message)[:400]  # the URL's query repeats the whole command: left out


def _exec_refused(operation: str, exc: Any, server: str) -> KubernetesError:
    """The WebSocket upgrade failed: the status the API server answered, parsed from the client's reason (the
    client reports every handshake failure as status 0 with the text of the answer)."""
    reason = str(exc.reason or exc.body or "")
    found = _HANDSHAKE.search(reason)
    status = int(found.group(1)) if found else (exc.status or None)
    message = re.search(r'"message":\s*"((?:[^"\\]|\\.)*)"', reason)
    why = message.group(1) if message else reason.split(" -+-+- ")[0][:300]
    if status == 403:
        hint = "the Role needs 'get' and 'create' on pods/exec: `drill kube role DRILL` prints it"
    elif status is None:
        hint = f"is the API server at {server} reachable?"
    else:
        hint = "the API server relays an exec to the pod's kubelet: is there one, does it answer?"
    said = f"HTTP {status}" if status else "no answer"
    return KubernetesError(
        f"Kubernetes API: {operation} refused: {said}: {why}", operation="exec", status=status, hint=hint
    )


def _get(obj: Any, *path: str) -> Any:
    """A field of a typed model or of a dict (custom objects' scale comes back as a dict)."""
    for key in path:
        if obj is None:
            return None
        obj = obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)
    return obj


def _api_message(exc: Any) -> str:
    try:
        return str(json.loads(exc.body).get("message", exc.body))
    except (TypeError, ValueError, AttributeError):
        return str(exc.body or "")


def _hint(status: int | None) -> str | None:
    if status == 403:
        return "the credentials lack this verb on this resource: `drill kube role DRILL` prints the Role a drill needs"
    if status == 401:
        return "the API server refused the credentials: check the kubeconfig's token or certificate"
    if status == 404:
        return "check target.config.namespace and the workload's name (or is the CRD installed?)"
    return None
