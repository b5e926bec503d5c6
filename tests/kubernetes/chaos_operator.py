"""A stand-in for Chaos Mesh's controller, for the tests only. It is NOT Chaos Mesh.

Chaos Mesh's own controller-manager and chaos-daemon need a container runtime on real nodes (the daemon enters a
container's network namespace to run ``tc``/``iptables``); KWOK's simulated pods have neither. So the tests install
Chaos Mesh's real CRDs (``crds/``: the API server validates every object against Chaos Mesh's own schema) and run
this small controller, which does what Chaos Mesh's does at the API, and applies the action to the bound replicas
(tests/kubernetes/binder.py) at the seam they have: the Toxiproxy proxy in front of each replica.

- It adds Chaos Mesh's finalizer (``chaos-mesh/records``) to each new ``NetworkChaos``/``PodChaos``, selects the
  pods (``spec.selector``: namespaces, labelSelectors, pods; ``spec.mode``: one, all, fixed, fixed-percent,
  random-max-percent), applies the action, and writes the status the way Chaos Mesh does (its API types,
  ``api/v1alpha1/common_types.go``): ``status.conditions`` (``Selected``, ``AllInjected``, ``AllRecovered``,
  ``Paused``: ``"True"``/``"False"``) and ``status.experiment`` (``desiredPhase`` ``Run``/``Stop``,
  ``containerRecords`` with ``id`` ``<namespace>/<pod>``, ``selectorKey`` ``.``, ``phase`` ``Injected``/``Not
  Injected``, ``injectedCount``, ``recoveredCount`` and ``events`` ``Succeeded``/``Failed`` ``Apply``/``Recover``).
- ``spec.duration`` elapsed: it recovers and sets ``desiredPhase: Stop``. Deleted (``deletionTimestamp``): it
  recovers, then removes its finalizer, so the object is gone only once the fault is reverted.

What each action does here (and what Chaos Mesh does on a real node):

- NetworkChaos ``delay``: a Toxiproxy ``latency`` toxic (latency, jitter) on the replica's proxy (Chaos Mesh: netem
  delay on the pod's interface). ``direction`` ``to`` (default) delays what the pod sends (the proxy's downstream),
  ``from`` what it receives (upstream), ``both`` both.
- NetworkChaos ``partition``: ``timeout`` toxics (timeout 0: no byte passes, connections stay open) both ways
  (Chaos Mesh: iptables DROP).
- NetworkChaos ``loss``: a ``timeout`` toxic whose toxicity is the loss share, rolled per connection: an
  approximation (Toxiproxy works on connections, not packets; Chaos Mesh drops that share of packets, which TCP
  retransmits).
- NetworkChaos ``bandwidth``: a ``bandwidth`` toxic at ``spec.bandwidth.rate`` (Chaos Mesh: a tc tbf qdisc).
- PodChaos ``pod-kill``: deletes the pod through the API (``spec.gracePeriod``, default 0); nothing to recover.
- PodChaos ``pod-failure``: the replica's proxy is disabled (connections refused) until recovered (Chaos Mesh
  swaps the containers' image for a pause image).
- Anything else (``netem``, ``duplicate``, ``corrupt``, ``container-kill``, an ``externalTargets`` or ``target``
  selector): the record says ``Failed`` with why and ``AllInjected`` stays ``"False"``; never a silent success.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from drill.backends.toxiproxy import ToxiproxyClient
from drill.errors import ToxiproxyError
from tests.kubernetes.binder import BoundReplica
from tests.kubernetes.controlplane import JSON, Api, ApiError, ControlPlane, ControlPlaneError

GROUP = "chaos-mesh.org"
VERSION = "v1alpha1"
FINALIZER = "chaos-mesh/records"
KINDS = {"NetworkChaos": "networkchaos", "PodChaos": "podchaos"}  # kind -> plural
CRD_FOLDER = Path(__file__).resolve().parent / "crds"
POLL_S = 0.15

#: (namespace, pod) -> its bound replica, or None when no binder holds one
FindReplica = Callable[[str, str], BoundReplica | None]


class Unsupported(Exception):
    """An action or selector this stand-in does not implement; the record says Failed with this message."""


def install_crds(plane: ControlPlane) -> list[str]:
    """Apply the vendored CRDs with kubectl and wait until they are Established; their names."""
    names = []
    for path in sorted(CRD_FOLDER.glob("*.yaml")):
        plane.kubectl("apply", "--server-side", "-f", str(path))
        names.append(f"{path.stem.split('_', 1)[1]}.{GROUP}")
    for name in names:
        plane.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
    return names


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def duration_s(text: str) -> float:
    """A Go duration (``30s``, ``1m30s``, ``500ms``) in seconds."""
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise Unsupported(f"cannot read the duration {text!r}")
    return sum(float(number) * units[unit] for number, unit in parts)


def _rate_kbps(text: str) -> int:
    """Chaos Mesh's bandwidth rate (``1mbps``, ``100kbps``, ``10bps``: bits per second) in Toxiproxy's KB/s."""
    found = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(bps|kbps|mbps|gbps)", text.strip().lower())
    if not found:
        raise Unsupported(f"cannot read the bandwidth rate {text!r}")
    bits = float(found.group(1)) * {"bps": 1, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9}[found.group(2)]
    return max(1, int(bits / 8 / 1000))


@dataclass
class Experiment:
    """What the operator did for one chaos object (by UID)."""

    kind: str
    namespace: str
    name: str
    pods: list[str]  # the selected pods' names (in ``namespace``-qualified ids in the status)
    applied: dict[str, list[str]] = field(default_factory=dict)  # pod id -> toxic names / "disabled" / "killed"
    failed: dict[str, str] = field(default_factory=dict)  # pod id -> why
    injected_at: float = 0.0
    recovered: bool = False


@dataclass
class ChaosOperator:
    """See the module's docstring. ``start()`` runs it in a thread over every namespace; ``stop()`` ends it."""

    plane: ControlPlane
    toxiproxy: ToxiproxyClient
    find_replica: FindReplica
    seed: int = 0
    experiments: dict[str, Experiment] = field(default_factory=dict)  # by object UID
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> ChaosOperator:
        self._random = random.Random(self.seed)
        self._thread = threading.Thread(target=self._run, name="chaos-operator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        api = self.plane.api()
        try:
            while not self._stop.is_set():
                for kind, plural in KINDS.items():
                    try:
                        for item in api.items(f"/apis/{GROUP}/{VERSION}/{plural}"):
                            self._reconcile(api, kind, plural, item)
                    except (ApiError, ControlPlaneError, ToxiproxyError, OSError) as exc:
                        self.errors.append(f"{kind}: {exc}")
                self._stop.wait(POLL_S)
        finally:
            api.close()

    # -- one object ---------------------------------------------------------------------------------------------

    def _reconcile(self, api: Api, kind: str, plural: str, item: JSON) -> None:
        meta = item["metadata"]
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{meta['namespace']}/{plural}/{meta['name']}"
        uid = meta["uid"]
        experiment = self.experiments.get(uid)
        if meta.get("deletionTimestamp"):
            if FINALIZER in meta.get("finalizers", []):
                if experiment is not None and not experiment.recovered:
                    self._recover(experiment)
                rest = [f for f in meta["finalizers"] if f != FINALIZER]
                api.patch(path, {"metadata": {"finalizers": rest, "resourceVersion": meta["resourceVersion"]}})
            return
        if experiment is None:
            if FINALIZER not in meta.get("finalizers", []):
                finalizers = [*meta.get("finalizers", []), FINALIZER]
                api.patch(path, {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}})
                return  # the next tick sees it with the finalizer
            experiment = self._inject(api, kind, item)
            self.experiments[uid] = experiment
            api.patch(path, {"status": self._status(experiment, "Run")})
            return
        duration = item["spec"].get("duration")
        if not experiment.recovered and duration and not experiment.failed:
            try:
                over = time.monotonic() - experiment.injected_at >= duration_s(duration)
            except Unsupported:
                over = False
            if over:
                self._recover(experiment)
                api.patch(path, {"status": self._status(experiment, "Stop")})

    def _select(self, api: Api, item: JSON) -> list[str]:
        spec, namespace = item["spec"], item["metadata"]["namespace"]
        selector = spec.get("selector", {})
        if spec.get("target") or spec.get("externalTargets"):
            raise Unsupported("a target or externalTargets selector (partition between two sets of pods)")
        if selector.get("pods"):
            chosen = [f"{ns}/{pod}" for ns, pods in sorted(selector["pods"].items()) for pod in pods]
        else:
            labels = ",".join(f"{k}={v}" for k, v in sorted(selector.get("labelSelectors", {}).items()))
            chosen = []
            for ns in selector.get("namespaces") or [namespace]:
                pods = api.items(f"/api/v1/namespaces/{ns}/pods", labelSelector=labels)
                chosen += sorted(
                    f"{ns}/{pod['metadata']['name']}"
                    for pod in pods
                    if pod.get("status", {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")
                )
        return self._by_mode(chosen, spec.get("mode", "one"), spec.get("value"))

    def _by_mode(self, pods: list[str], mode: str, value: str | None) -> list[str]:
        if mode == "all" or not pods:
            return pods
        if mode == "one":
            return [self._random.choice(pods)]
        number = int(value or "0")
        if mode == "fixed":
            count = number
        elif mode == "fixed-percent":
            count = len(pods) * number // 100
        else:  # random-max-percent
            count = self._random.randint(0, len(pods) * number // 100)
        return self._random.sample(pods, min(count, len(pods)))

    def _inject(self, api: Api, kind: str, item: JSON) -> Experiment:
        meta = item["metadata"]
        experiment = Experiment(kind, meta["namespace"], meta["name"], [], injected_at=time.monotonic())
        try:
            experiment.pods = self._select(api, item)
        except Unsupported as exc:
            experiment.failed["."] = str(exc)
            return experiment
        for pod_id in experiment.pods:
            try:
                experiment.applied[pod_id] = self._apply(api, kind, item, pod_id)
            except (Unsupported, ToxiproxyError, ApiError) as exc:
                experiment.failed[pod_id] = str(exc)
        return experiment

    def _apply(self, api: Api, kind: str, item: JSON, pod_id: str) -> list[str]:
        spec, (namespace, pod) = item["spec"], pod_id.split("/", 1)
        action = spec["action"]
        if kind == "PodChaos" and action == "pod-kill":
            api.delete(f"/api/v1/namespaces/{namespace}/pods/{pod}", grace_s=int(spec.get("gracePeriod", 0)))
            return ["killed"]
        replica = self.find_replica(namespace, pod)
        if replica is None or replica.proxy is None:
            raise Unsupported(f"pod {pod_id} has no bound replica behind a proxy (the tests' binder)")
        if kind == "PodChaos" and action == "pod-failure":
            self.toxiproxy.disable(replica.proxy)
            return ["disabled"]
        if kind == "NetworkChaos":
            return self._network(spec, replica.proxy, item["metadata"]["uid"][:8])
        raise Unsupported(f"the action {action!r} of {kind} is not implemented by the test stand-in")

    def _network(self, spec: JSON, proxy: str, tag: str) -> list[str]:
        action = spec["action"]
        streams = {"to": ["downstream"], "from": ["upstream"], "both": ["upstream", "downstream"]}
        direction = streams[spec.get("direction", "to")]
        if action == "delay":
            delay = spec["delay"]
            attributes = {"latency": int(duration_s(delay["latency"]) * 1000)}
            if delay.get("jitter"):
                attributes["jitter"] = int(duration_s(delay["jitter"]) * 1000)
            plan = [("latency", attributes, stream, 1.0) for stream in direction]
        elif action == "partition":
            plan = [("timeout", {"timeout": 0}, stream, 1.0) for stream in ("upstream", "downstream")]
        elif action == "loss":
            share = float(spec["loss"]["loss"]) / 100
            plan = [("timeout", {"timeout": 0}, stream, share) for stream in direction]
        elif action == "bandwidth":
            plan = [("bandwidth", {"rate": _rate_kbps(spec["bandwidth"]["rate"])}, s, 1.0) for s in direction]
        else:
            raise Unsupported(f"the NetworkChaos action {action!r} is not implemented by the test stand-in")
        names = []
        for toxic, attributes, stream, toxicity in plan:
            name = f"chaos-{tag}-{toxic}-{stream}"
            self.toxiproxy.add_toxic(proxy, toxic, attributes, name=name, stream=stream, toxicity=toxicity)
            names.append(name)
        return names

    def _recover(self, experiment: Experiment) -> None:
        for pod_id, applied in experiment.applied.items():
            namespace, pod = pod_id.split("/", 1)
            replica = self.find_replica(namespace, pod)
            if replica is None or replica.proxy is None:
                continue  # the pod (and its proxy) is gone: nothing left to revert
            try:
                for what in applied:
                    if what == "disabled":
                        self.toxiproxy.enable(replica.proxy)
                    elif what != "killed":
                        self.toxiproxy.delete_toxic(replica.proxy, what)
            except ToxiproxyError as exc:
                self.errors.append(f"recovering {pod_id}: {exc}")
        experiment.recovered = True

    # -- the status, as Chaos Mesh writes it --------------------------------------------------------------------

    def _status(self, experiment: Experiment, desired: str) -> JSON:
        stamp = _now()
        records = []
        for pod_id in experiment.pods:
            events = []
            if pod_id in experiment.applied:
                events.append({"type": "Succeeded", "operation": "Apply", "timestamp": stamp})
            if pod_id in experiment.failed:
                message = experiment.failed[pod_id]
                events.append({"type": "Failed", "operation": "Apply", "timestamp": stamp, "message": message})
            injected = pod_id in experiment.applied and not experiment.recovered
            if experiment.recovered and pod_id in experiment.applied:
                events.append({"type": "Succeeded", "operation": "Recover", "timestamp": stamp})
            records.append({
                "id": pod_id,
                "selectorKey": ".",
                "phase": "Injected" if injected else "Not Injected",
                "injectedCount": 1 if pod_id in experiment.applied else 0,
                "recoveredCount": 1 if experiment.recovered and pod_id in experiment.applied else 0,
                "events": events,
            })  # fmt: skip
        all_injected = bool(experiment.pods) and not experiment.failed and not experiment.recovered
        conditions = [
            ("Selected", bool(experiment.pods), None),
            ("AllInjected", all_injected, next(iter(experiment.failed.values()), None)),
            ("AllRecovered", experiment.recovered, None),
            ("Paused", False, None),
        ]
        return {
            "conditions": [
                {"type": kind, "status": "True" if ok else "False", **({"reason": why} if why else {})}
                for kind, ok, why in conditions
            ],
            "experiment": {"desiredPhase": desired, "containerRecords": records},
        }
