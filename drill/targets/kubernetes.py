"""``kind: kubernetes``: a serving stack running on Kubernetes, driven through the Kubernetes API.

The replicas are the pods of one workload (a Deployment, a StatefulSet or a LeaderWorkerSet) that match
``selector`` in ``namespace``; a pod's role (prefill, decode, router) is its ``role_label``, and router pods are not
replicas. The harness starts and stops nothing in the cluster: faults act through the API (a pod deleted, the
workload scaled, a Chaos Mesh object created), journaled before they act and reverted like every other fault.

How the load reaches the pods is ``access``:

* ``service``: ``service_url``, the Service as the harness sees it (the harness runs in the cluster, e.g. as a Job);
* ``port_forward``: the API server's port-forward to each pod's ``port`` (from outside the cluster);
* ``endpoint``: each pod's ``llm-drill.dev/endpoint`` annotation (``http://host:port``).

For the last two the harness is the Service (:mod:`drill.targets.kube_service`): a loopback listener that sends
each connection to the next serving pod. Before it starts, the target asks the API server whether its credentials
allow every verb the drill needs (:mod:`drill.targets.kube_rbac`) and stops, naming each missing verb and
resource, if they do not; a drill with an exec method is refused, too, when a pod cannot take it
(:mod:`drill.targets.kube_exec_preflight`). docs/kubernetes.md is the user's guide.

.. code-block:: yaml

    target:
      kind: kubernetes
      config:
        kubeconfig: ~/.kube/config
        namespace: serving
        workload: {kind: Deployment, name: vllm}
        selector: {app: vllm}
        access: endpoint
"""

from __future__ import annotations

import enum
import os
import socket
import time
from typing import ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from drill.api import Capability, KubeAccess, ReplicaRef, Target, TargetContext, TargetInfo
from drill.backends.kubernetes import KubeClient, PodInfo
from drill.errors import KubernetesAccessError, TargetError
from drill.spec.validation import SpecModel, at_key
from drill.targets.kube_exec_preflight import refuse_unreachable
from drill.targets.kube_rbac import CHAOS_MESH, CHAOS_PLURALS, chaos_experiment, drill_rules, missing_rules
from drill.targets.kube_service import PodEndpoint, ServiceForwarder, dial_address
from drill.targets.probe import unhealthy_after
from drill.units import Duration

__all__ = ["ENDPOINT_ANNOTATION", "KubernetesTarget", "KubernetesTargetParams"]

#: the pod annotation ``access: endpoint`` reads: where the pod's server answers (``http://host:port``)
ENDPOINT_ANNOTATION = "llm-drill.dev/endpoint"


class Access(enum.StrEnum):
    SERVICE = "service"
    PORT_FORWARD = "port_forward"
    ENDPOINT = "endpoint"


class ChaosOperator(enum.StrEnum):
    NONE = "none"
    CHAOS_MESH = "chaos-mesh"


class WorkloadRef(SpecModel):
    kind: Literal["Deployment", "StatefulSet", "LeaderWorkerSet"] = "Deployment"
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253)


class KubernetesTargetParams(SpecModel):
    namespace: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)
    workload: WorkloadRef
    selector: dict[str, str] = Field(min_length=1)  # the labels of the workload's serving pods
    access: Access = Access.SERVICE
    service_url: str | None = Field(None, pattern=r"^https?://")  # access: service
    port: int | None = Field(None, ge=1, le=65535)  # access: port_forward: the pod's serving port
    kubeconfig: str | None = None  # default: $KUBECONFIG, else ~/.kube/config
    context: str | None = None
    in_cluster: bool = False  # the pod's service account (the harness runs in the cluster)
    role_label: str = "llm-drill.dev/role"  # its value: prefill, decode or router
    model: str | None = None
    health_path: str = "/health"
    metrics_path: str = "/metrics"
    chaos_operator: ChaosOperator = ChaosOperator.NONE  # an installed operator the faults may drive
    api_timeout: Duration = 10.0  # each Kubernetes API call
    startup_timeout: Duration = 120.0  # until every replica the workload asks for serves

    @model_validator(mode="after")
    def _access_needs(self) -> KubernetesTargetParams:
        if self.access is Access.SERVICE and self.service_url is None:
            raise at_key("service_url", "missing: 'access: service' sends the load to the Service's URL")
        if self.access is not Access.SERVICE and self.service_url is not None:
            raise at_key("service_url", f"'access: {self.access.value}' makes its own service; drop 'service_url'")
        if self.access is Access.PORT_FORWARD and self.port is None:
            raise at_key("port", "missing: 'access: port_forward' forwards to this port of each pod")
        if self.in_cluster and (self.kubeconfig or self.context):
            raise at_key("in_cluster", "in the cluster the pod's service account is used: drop kubeconfig/context")
        return self


class KubernetesTarget(Target):
    kind = "kubernetes"
    Params = KubernetesTargetParams
    params: KubernetesTargetParams
    #: the pod label of an router pod's role
    ROUTER_ROLE: ClassVar[str] = "router"

    def __init__(self, params: KubernetesTargetParams, ctx: TargetContext) -> None:
        super().__init__(params, ctx)
        self._client: KubeClient | None = None
        self._service: ServiceForwarder | None = None
        self._pods: list[PodInfo] = []

    @classmethod
    def static_capabilities(cls, params: KubernetesTargetParams) -> frozenset[Capability]:  # type: ignore[override]
        caps = {Capability.KUBERNETES, Capability.LOAD_CONTROL, Capability.SUPERVISOR}
        if params.chaos_operator is ChaosOperator.CHAOS_MESH:
            caps.add(Capability.CHAOS_MESH)
        return frozenset(caps)

    @classmethod
    def hosts(cls, params: KubernetesTargetParams) -> list[tuple[str, str]]:  # type: ignore[override]
        if params.service_url is None:
            return []
        return [(urlsplit(params.service_url).hostname or "", "target.config.service_url")]

    def access(self) -> KubeAccess:
        p = self.params
        return KubeAccess(
            namespace=p.namespace,
            workload_kind=p.workload.kind,
            workload=p.workload.name,
            selector=dict(p.selector),
            kubeconfig=self._kubeconfig(),
            context=p.context,
            in_cluster=p.in_cluster,
        )

    def _kubeconfig(self) -> str | None:
        if self.params.in_cluster:
            return None
        path = self.params.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        return os.path.expanduser(path)

    def describe_plan(self) -> list[str]:
        p = self.params
        lines = [
            f"attach to the pods of {p.workload.kind} {p.namespace}/{p.workload.name} "
            f"({', '.join(f'{k}={v}' for k, v in p.selector.items())}); nothing is started or stopped in the cluster",
            f"check first that the credentials allow every verb the drill needs ({self._where()})",
        ]
        if p.access is Access.SERVICE:
            lines.append(f"load to the Service at {p.service_url}")
        else:
            lines.append(f"load to a loopback listener forwarding each connection to a serving pod ({p.access.value})")
        return lines

    def _where(self) -> str:
        return "the pod's service account" if self.params.in_cluster else f"kubeconfig {self._kubeconfig()}"

    # -- start ------------------------------------------------------------------------------------------
    def start(self) -> TargetInfo:
        p = self.params
        self._client = client = KubeClient(
            p.namespace,
            kubeconfig=self._kubeconfig(),
            context=p.context,
            in_cluster=p.in_cluster,
            timeout_s=p.api_timeout,
        )
        self.preflight(client)
        self._pods = self._wait_serving(client)
        refuse_unreachable(client, self._pods, self.ctx.faults, self.ctx.fault_at)  # exec methods: ask each pod
        if p.access is not Access.SERVICE:
            self._service = ServiceForwarder(self._endpoints, self._dial).start()
        self._wait_healthy(self._base_url() + p.health_path)
        return self.info()

    def preflight(self, client: KubeClient) -> None:
        """Stop before anything starts when the credentials lack a verb the drill needs, or the operator is absent."""
        p = self.params
        rules = drill_rules(p.access.value, p.workload.kind, self.ctx.faults)
        missing = missing_rules(rules, client.allowed)
        if missing:
            raise KubernetesAccessError(
                f"the credentials ({self._where()}) may not, in namespace {p.namespace}: {'; '.join(missing)}",
                operation="preflight",
                status=403,
                hint="nothing was touched; `drill kube role DRILL` prints the Role (and its binding) this drill needs",
            )
        chaos_kinds = {e for kind, params in self.ctx.faults if (e := chaos_experiment(kind, params)) is not None}
        for experiment in sorted(chaos_kinds):
            if not client.installed(*CHAOS_MESH, CHAOS_PLURALS[experiment]):
                raise KubernetesAccessError(
                    f"no Chaos Mesh operator in the cluster: the API server serves no "
                    f"{CHAOS_PLURALS[experiment]}.{CHAOS_MESH[0]} (target.config.chaos_operator: chaos-mesh)",
                    operation="preflight",
                    status=404,
                    hint="install Chaos Mesh (chaos-mesh.org/docs), or drop the chaos_mesh faults and methods",
                )

    def _replica_pods(self, client: KubeClient) -> list[PodInfo]:
        role = self.params.role_label
        return [pod for pod in client.pods(self.params.selector) if pod.labels.get(role) != self.ROUTER_ROLE]

    def _wait_serving(self, client: KubeClient) -> list[PodInfo]:
        """The serving pods once as many serve as the workload asks for (with an endpoint, for that access)."""
        p = self.params
        wanted = client.scale(p.workload.kind, p.workload.name).spec_replicas
        deadline = time.monotonic() + p.startup_timeout
        while True:
            pods = [pod for pod in self._replica_pods(client) if pod.serving and self._reachable(pod)]
            if len(pods) >= max(1, wanted):
                return pods
            if time.monotonic() > deadline:
                raise TargetError(
                    f"{p.workload.kind} {p.namespace}/{p.workload.name}: {len(pods)} of {wanted} pods serve "
                    f"after {p.startup_timeout:g}s",
                    hint=f"kubectl -n {p.namespace} get pods -l {','.join(f'{k}={v}' for k, v in p.selector.items())}",
                )
            time.sleep(0.2)

    def _reachable(self, pod: PodInfo) -> bool:
        return self.params.access is not Access.ENDPOINT or ENDPOINT_ANNOTATION in pod.annotations

    def _endpoints(self) -> list[PodEndpoint]:
        assert self._client is not None, "start() made the client"
        pods = [pod for pod in self._replica_pods(self._client) if pod.serving and self._reachable(pod)]
        return [PodEndpoint(pod.name, self._address(pod)) for pod in pods]

    def _address(self, pod: PodInfo) -> str:
        if self.params.access is Access.ENDPOINT:
            return urlsplit(pod.annotations[ENDPOINT_ANNOTATION]).netloc
        return str(self.params.port)

    def _dial(self, endpoint: PodEndpoint) -> socket.socket:
        if self.params.access is Access.PORT_FORWARD:
            assert self._client is not None, "start() made the client"
            return self._client.port_forward(endpoint.pod, int(endpoint.address))
        return dial_address(endpoint)

    def _base_url(self) -> str:
        if self._service is not None:
            return f"http://{self._service.address}"
        return (self.params.service_url or "").rstrip("/")

    def _wait_healthy(self, url: str) -> None:
        last = unhealthy_after(url, self.params.startup_timeout, poll_s=0.3)
        if last is None:
            return
        raise TargetError(f"the Service at {url} is not healthy after {self.params.startup_timeout:g}s ({last})")

    # -- what faults see ------------------------------------------------------------------------------
    def planned_info(self) -> TargetInfo | None:
        """Unknown before start: the replicas are the pods that serve then."""
        return None

    def info(self) -> TargetInfo:
        p = self.params
        replicas = [self._replica_ref(i, pod) for i, pod in enumerate(self._pods)]
        metrics = {r.name: r.url.rstrip("/") + p.metrics_path for r in replicas if p.access is Access.ENDPOINT}
        return TargetInfo(
            kind=self.kind,
            base_url=self._base_url() or "(the harness's service, made at start)",
            model=p.model,
            runtime="external",
            replicas=replicas,
            metrics_urls=metrics,
            capabilities=self.static_capabilities(p),
            kubernetes=self.access(),
        )

    def _replica_ref(self, index: int, pod: PodInfo) -> ReplicaRef:
        role = pod.labels.get(self.params.role_label)
        url = pod.annotations.get(ENDPOINT_ANNOTATION, "") if self.params.access is Access.ENDPOINT else ""
        return ReplicaRef(
            name=pod.name,
            index=index,
            url=url or self._base_url(),
            role="prefill" if role == "prefill" else "decode" if role == "decode" else None,
            pod=pod.name,
            pod_uid=pod.uid,
        )

    def stop(self) -> None:
        """Close the harness's service and the API client; nothing in the cluster was started, so nothing stops."""
        service, self._service = self._service, None
        if service is not None:
            service.close()
        client, self._client = self._client, None
        if client is not None:
            client.close()
