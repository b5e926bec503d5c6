"""Binds each simulated pod to a real local replica process, so a drill through the Kubernetes API has real traffic.

KWOK's pods run nothing. :class:`PodReplicaBinder` watches the pods matching a label selector in a namespace; for
every pod that becomes Running it starts one embedded-stack replica process (``python -m
drill.stack.replica.api_server --launch FILE``, the process the embedded stack runs) on a free loopback port and
annotates the pod ``llm-drill.dev/endpoint: http://127.0.0.1:PORT`` once it listens. With a Toxiproxy client, the
endpoint is a Toxiproxy proxy in front of the replica (``kube-<namespace>-<pod>``), the seam the chaos stand-in
(tests/kubernetes/chaos_operator.py) injects network faults at, as Chaos Mesh does at the pod's interface.
When the pod goes away, its replica is stopped: SIGKILL when the pod vanished without a grace period (``grace
0``: a crash), SIGTERM when it was deleted gracefully (``deletionGracePeriodSeconds`` > 0). A replacement pod (a
new UID) gets a new replica. So deleting a pod through the API really takes a replica away, and the Deployment
really brings one back.

Each replica takes the lowest replica index no live replica holds (its spans' ``service.name`` is
``drill-replica-<index>``), so a replacement reuses the slot of the replica it replaces.
"""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from drill.backends.toxiproxy import ToxiproxyClient
from drill.errors import ToxiproxyError
from drill.stack.config import StackConfig
from drill.stack.launch import ReplicaLaunch
from drill.stack.lifeline import die_with_parent
from tests.kubernetes.controlplane import JSON, Api, ApiError, ControlPlane, ControlPlaneError

ENDPOINT_ANNOTATION = "llm-drill.dev/endpoint"
REPO = Path(__file__).resolve().parents[2]
POLL_S = 0.15
STOP_TIMEOUT_S = 10.0


@dataclass
class BoundReplica:
    """One pod's replica process. ``url`` (what the pod is annotated with: the proxy's when there is one) is set once
    it listens; ``replica_url`` is the process's own address."""

    namespace: str
    pod: str
    uid: str
    index: int
    process: subprocess.Popen[bytes]
    ready_file: Path
    log: Path
    url: str | None = None
    replica_url: str | None = None
    proxy: str | None = None  # the Toxiproxy proxy's name
    stopped_with: str | None = None  # "SIGKILL" | "SIGTERM" once stopped

    @property
    def pid(self) -> int:
        return self.process.pid


@dataclass(frozen=True)
class BinderEvent:
    """What the binder did, in order: ``started``, ``bound`` (annotated), ``stopped`` (with the signal) or
    ``failed`` (the replica exited before it listened, or annotating failed)."""

    kind: str
    pod: str
    uid: str
    at: float
    detail: str = ""


@dataclass
class PodReplicaBinder:
    """See the module's docstring. ``start()`` runs the loop in a thread; ``stop()`` ends it and stops every
    replica. ``stack_config`` configures each replica (its ``replicas`` count is ignored: one process per pod)."""

    plane: ControlPlane
    namespace: str
    selector: str
    folder: Path
    stack_config: StackConfig = field(default_factory=StackConfig)
    otlp_endpoint: str | None = None
    toxiproxy: ToxiproxyClient | None = None
    admin_token: str = field(default_factory=lambda: secrets.token_hex(12))
    replicas: dict[str, BoundReplica] = field(default_factory=dict)  # by pod UID, live ones
    events: list[BinderEvent] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    # -- the loop -----------------------------------------------------------------------------------------------

    def start(self) -> PodReplicaBinder:
        self.folder.mkdir(parents=True, exist_ok=True)
        # The replicas are forked from this thread: PR_SET_PDEATHSIG fires when it exits, so it stops them first.
        self._thread = threading.Thread(target=self._run, name=f"binder-{self.namespace}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=STOP_TIMEOUT_S * 2)

    def _run(self) -> None:
        api = self.plane.api()
        try:
            while not self._stop.is_set():
                try:
                    self._tick(api)
                except (ApiError, ControlPlaneError, ToxiproxyError, OSError) as exc:
                    self.errors.append(str(exc))
                self._stop.wait(POLL_S)
        finally:
            for replica in list(self.replicas.values()):
                self._stop_replica(replica, signal.SIGTERM)
            api.close()

    def _tick(self, api: Api) -> None:
        pods = api.items(f"/api/v1/namespaces/{self.namespace}/pods", labelSelector=self.selector)
        seen: dict[str, JSON] = {pod["metadata"]["uid"]: pod for pod in pods}
        for uid, replica in list(self.replicas.items()):
            pod = seen.get(uid)
            if pod is None:  # gone from the API: grace 0 (or its grace period already ended)
                self._stop_replica(replica, signal.SIGKILL)
            elif pod["metadata"].get("deletionTimestamp"):
                grace = pod["metadata"].get("deletionGracePeriodSeconds") or 0
                self._stop_replica(replica, signal.SIGTERM if grace > 0 else signal.SIGKILL)
        for uid, pod in seen.items():
            if uid not in self.replicas and _running(pod) and uid not in self._done_uids():
                self._start_replica(pod)
        for replica in self.replicas.values():
            if replica.url is None:
                self._check_ready(api, replica)

    def _done_uids(self) -> set[str]:
        return {event.uid for event in self.events if event.kind in ("stopped", "failed")}

    # -- one replica --------------------------------------------------------------------------------------------

    def _free_index(self) -> int:
        taken = {replica.index for replica in self.replicas.values()}
        return next(index for index in range(len(taken) + 1) if index not in taken)

    def _start_replica(self, pod: JSON) -> None:
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        stem = self.folder / f"{name}-{uid[:8]}"
        launch = ReplicaLaunch(
            name=name,
            index=self._free_index(),
            port=0,
            config=self.stack_config,
            admin_token=self.admin_token,
            otlp_endpoint=self.otlp_endpoint,
            ledger_path=stem.with_suffix(".ledger.jsonl"),
            log_path=stem.with_suffix(".log"),
            ready_file=stem.with_suffix(".ready.json"),
        )
        launch_file = stem.with_suffix(".launch.json")
        launch_file.write_text(launch.model_dump_json(), encoding="utf-8")
        out = stem.with_suffix(".out.log")
        with open(out, "ab") as handle:
            process = subprocess.Popen(
                [sys.executable, "-m", "drill.stack.replica.api_server", "--launch", str(launch_file)],
                stdin=subprocess.DEVNULL,
                stdout=handle,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                preexec_fn=die_with_parent(),
            )
        assert launch.ready_file is not None
        with self._lock:
            self.replicas[uid] = BoundReplica(self.namespace, name, uid, launch.index, process, launch.ready_file, out)
            self._event("started", name, uid, f"pid {process.pid}, index {launch.index}")

    def _check_ready(self, api: Api, replica: BoundReplica) -> None:
        if replica.process.poll() is not None:
            with self._lock:
                del self.replicas[replica.uid]
                self._event("failed", replica.pod, replica.uid, f"exited {replica.process.returncode}: {replica.log}")
            return
        try:
            ready = json.loads(replica.ready_file.read_text(encoding="utf-8"))
            replica_url, port = str(ready["url"]), int(ready["port"])
        except (OSError, ValueError, KeyError):
            return  # not listening yet
        url = replica_url
        if self.toxiproxy is not None:
            proxy = self.toxiproxy.create_proxy(f"kube-{self.namespace}-{replica.pod}", f"127.0.0.1:{port}")
            replica.proxy, url = proxy.name, f"http://127.0.0.1:{proxy.listen_port}"
        path = f"/api/v1/namespaces/{self.namespace}/pods/{replica.pod}"
        try:
            api.patch(path, {"metadata": {"uid": replica.uid, "annotations": {ENDPOINT_ANNOTATION: url}}})
        except ApiError as exc:  # the pod went away (404) or was replaced under its name (409: another UID)
            if exc.status not in (404, 409):
                raise
            return
        with self._lock:
            replica.url, replica.replica_url = url, replica_url
            self._event("bound", replica.pod, replica.uid, url)

    def _stop_replica(self, replica: BoundReplica, how: signal.Signals) -> None:
        process = replica.process
        if process.poll() is None:
            process.send_signal(how)
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if replica.proxy is not None and self.toxiproxy is not None:
            try:
                self.toxiproxy.delete_proxy(replica.proxy)
            except ToxiproxyError as exc:
                self.errors.append(str(exc))
        with self._lock:
            replica.stopped_with = how.name
            self.replicas.pop(replica.uid, None)
            self._event("stopped", replica.pod, replica.uid, how.name)

    def _event(self, kind: str, pod: str, uid: str, detail: str = "") -> None:
        self.events.append(BinderEvent(kind, pod, uid, time.monotonic(), detail))

    # -- what the tests ask ---------------------------------------------------------------------------------------

    def endpoints(self) -> dict[str, str]:
        """Pod name -> endpoint URL of every live, bound replica."""
        with self._lock:
            return {r.pod: r.url for r in self.replicas.values() if r.url is not None}

    def wait_bound(self, count: int, timeout_s: float = 60.0) -> dict[str, str]:
        """The endpoints once exactly ``count`` replicas are bound; ControlPlaneError (with the binder's errors and
        the replicas' logs) after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            bound = self.endpoints()
            if len(bound) == count and all(r.url for r in self.replicas.values()):
                return bound
            if time.monotonic() > deadline:
                failed = [event for event in self.events if event.kind == "failed"]
                raise ControlPlaneError(
                    f"{len(bound)} of {count} replicas bound after {timeout_s:g} s in {self.namespace} "
                    f"({self.selector}); errors: {self.errors[-3:]}; failed: {failed[-3:]}"
                )
            time.sleep(0.05)

    def by_pod(self, pod: str) -> BoundReplica | None:
        with self._lock:
            return next((r for r in self.replicas.values() if r.pod == pod), None)


def _running(pod: JSON) -> bool:
    return pod.get("status", {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")
