"""A real Kubernetes control plane for the tests, on loopback only: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and KWOK (two simulated nodes), from scripts/kube_cluster.py's cached build.

What it is and what it proves: docs/kubernetes-cluster.md. In short: the API server, its admission, RBAC and
storage, the Deployment/ReplicaSet controllers and the scheduler are the real ones; the node and its pods'
lifecycle are KWOK's (no kubelet, no container runtime: a pod is Running once scheduled, nothing runs in it).

:class:`Api` is the small REST client the tests' helpers (the binder, the chaos stand-in) speak to it with, so
they do not depend on the ``kubernetes`` client the target under test uses.
"""

from __future__ import annotations

import json
import secrets
import signal
import socket
import ssl
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from drill.stack.lifeline import die_with_parent

NODE_NAME = "kwok-node-0"
NODE_NAMES = (NODE_NAME, "kwok-node-1")  # two: a drained node's pods have somewhere to go
SERVICE_CIDR = "10.96.0.0/16"
START_TIMEOUT_S = 90.0  # the API server is ready 3-4 s after start on an idle machine; much more on a loaded one
STOP_TIMEOUT_S = 10.0

JSON = dict[str, Any]


class ControlPlaneError(Exception):
    """A component did not start or a request failed; the message says which and shows its log's tail."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


# -- the REST client ------------------------------------------------------------------------------------------------


class ApiError(ControlPlaneError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _message(response: httpx.Response) -> str:
    """The API's own message of a failed request (a Status object), else the body's start."""
    try:
        return str(response.json()["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:500]


class Api:
    """JSON over HTTPS to the API server with a bearer token, checked against the cluster's CA."""

    def __init__(self, server: str, token: str, ca_file: Path, timeout_s: float = 30.0) -> None:
        self.server = server
        self._client = httpx.Client(
            base_url=server,
            verify=ssl.create_default_context(cafile=str(ca_file)),
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout_s,
            trust_env=False,
        )

    def close(self) -> None:
        self._client.close()

    def request(self, method: str, path: str, body: JSON | None = None, **params: str) -> JSON:
        content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        response = self._client.request(
            method,
            path,
            content=None if body is None else json.dumps(body),
            headers={"Content-Type": content_type},
            params=params or None,
        )
        if response.status_code >= 400:
            raise ApiError(response.status_code, f"{method} {path}: {response.status_code} {_message(response)}")
        return dict(response.json()) if response.content else {}

    def get(self, path: str, **params: str) -> JSON:
        return self.request("GET", path, **params)

    def maybe_get(self, path: str) -> JSON | None:
        try:
            return self.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, path: str, body: JSON) -> JSON:
        return self.request("POST", path, body)

    def patch(self, path: str, body: JSON) -> JSON:
        return self.request("PATCH", path, body)

    def delete(self, path: str, grace_s: int | None = None) -> JSON | None:
        body = None if grace_s is None else {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": grace_s}
        try:
            return self.request("DELETE", path, body)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def items(self, path: str, **params: str) -> list[JSON]:
        return list(self.get(path, **params).get("items", []))

    def wait_for(self, what: str, check: Any, timeout_s: float = 30.0, poll_s: float = 0.1) -> Any:
        """``check()``'s first truthy value, polled; ControlPlaneError naming ``what`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"timed out after {timeout_s:g} s waiting for {what}")
            time.sleep(poll_s)


# -- the components -------------------------------------------------------------------------------------------------


@dataclass
class Component:
    """One process of the control plane and its log."""

    name: str
    argv: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent(),  # no orphans, even when pytest is SIGKILLed
            )

    def check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise ControlPlaneError(
                f"{self.name} exited with {self.process.returncode}; its log {self.log}:\n{_tail(self.log)}"
            )

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _openssl(folder: Path, *args: str) -> None:
    done = subprocess.run(["openssl", *args], cwd=folder, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ControlPlaneError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def make_certificates(folder: Path) -> None:
    """A self-signed CA, the API server's serving certificate (127.0.0.1, localhost and the in-cluster names) and
    the service-account signing key pair, with openssl."""
    days = "3"
    _openssl(folder, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
             "-days", days, "-subj", "/CN=llm-drill-test-ca")  # fmt: skip
    _openssl(folder, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key", "-out", "apiserver.csr",
             "-subj", "/CN=kube-apiserver")  # fmt: skip
    names = "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
    (folder / "apiserver.ext").write_text(f"subjectAltName={names}\nextendedKeyUsage=serverAuth\n")
    _openssl(folder, "x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "apiserver.crt", "-days", days, "-extfile", "apiserver.ext")  # fmt: skip
    _openssl(folder, "genrsa", "-out", "sa.key", "2048")
    _openssl(folder, "rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")


def write_kubeconfig(path: Path, server: str, ca_file: Path, token: str, user: str = "admin") -> Path:
    """A kubeconfig (JSON is YAML) for ``server`` with a bearer token, trusting ``ca_file``."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "drill-test", "cluster": {"server": server, "certificate-authority": str(ca_file)}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "drill-test", "context": {"cluster": "drill-test", "user": user}}],
        "current-context": "drill-test",
    }
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    path.chmod(0o600)
    return path


def _node(name: str = NODE_NAME) -> JSON:
    """A simulated node KWOK manages. No taint: the tests' workloads schedule on it without tolerations."""
    capacity = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
        },
        "status": {"allocatable": capacity, "capacity": capacity},
    }


@dataclass
class ControlPlane:
    """A started control plane. ``kubeconfig`` (admin: the static token, in ``system:masters``), ``server``
    (``https://127.0.0.1:PORT``), ``admin_token``, ``ca_file``, ``bin_dir`` (kubectl and the rest), ``folder``
    (certificates, etcd's data and every component's ``<name>.log``)."""

    folder: Path
    bin_dir: Path
    server: str
    admin_token: str
    ca_file: Path
    kubeconfig: Path
    components: list[Component] = field(default_factory=list)
    _namespaces: int = 0

    def api(self, token: str | None = None) -> Api:
        """A REST client (the admin's unless ``token``); the caller closes it."""
        return Api(self.server, token or self.admin_token, self.ca_file)

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        """``kubectl --kubeconfig <admin> ARGS``; ControlPlaneError with its output when it fails and ``check``."""
        done = subprocess.run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if check and done.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)} exited with {done.returncode}: {done.stderr.strip()}")
        return done

    def namespace(self, name: str) -> str:
        """Create a fresh namespace ``<name>-<n>`` (unique in the session) and wait for its ``default``
        ServiceAccount (the controller-manager makes it; pods cannot be created before it exists)."""
        self._namespaces += 1
        fresh = f"{name}-{self._namespaces}"
        api = self.api()
        try:
            api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": fresh}})
            api.wait_for(
                f"the default ServiceAccount of namespace {fresh}",
                lambda: api.maybe_get(f"/api/v1/namespaces/{fresh}/serviceaccounts/default"),
            )
        finally:
            api.close()
        return fresh

    def check_alive(self) -> None:
        for component in self.components:
            component.check_alive()

    def stop(self) -> None:
        for component in reversed(self.components):
            component.stop()


def start_control_plane(bin_dir: Path, stages: Path, folder: Path) -> ControlPlane:
    """Start etcd, the API server, the controller-manager, the scheduler and KWOK in ``folder``; register the
    simulated node and wait until it is Ready. Stops what it started when anything fails."""
    folder.mkdir(parents=True, exist_ok=True)
    make_certificates(folder)
    token = secrets.token_hex(16)
    (folder / "tokens.csv").write_text(f'{token},admin,admin,"system:masters"\n', encoding="utf-8")
    port = free_port()
    server = f"https://127.0.0.1:{port}"
    plane = ControlPlane(folder, bin_dir, server, token, folder / "ca.crt", folder / "admin.kubeconfig")
    write_kubeconfig(plane.kubeconfig, server, plane.ca_file, token)
    try:
        etcd_url = _start_etcd(plane)
        _start_apiserver(plane, port, etcd_url)
        for component in (_controller_manager(plane), _scheduler(plane), _kwok(plane, stages)):
            plane.components.append(component)
            component.start()
        _register_node(plane)
    except BaseException:
        plane.stop()
        raise
    return plane


def _add(plane: ControlPlane, name: str, argv: list[str]) -> Component:
    component = Component(name, argv, plane.folder / f"{name}.log")
    plane.components.append(component)
    component.start()
    return component


def _wait_http(component: Component, url: str, ok: Any, token: str | None = None, verify: Any = False) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    while True:
        component.check_alive()
        try:
            response = httpx.get(url, headers=headers, verify=verify, timeout=5.0, trust_env=False)
            if ok(response):
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise ControlPlaneError(
                f"{component.name} not ready at {url} after {START_TIMEOUT_S:g} s; {component.log}:\n"
                f"{_tail(component.log)}"
            )
        time.sleep(0.2)


def _start_etcd(plane: ControlPlane) -> str:
    client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    etcd = _add(plane, "etcd", [
        str(plane.bin_dir / "etcd"), "--name", "drill", "--data-dir", str(plane.folder / "etcd-data"),
        "--listen-client-urls", client, "--advertise-client-urls", client,
        "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", f"drill={peer}",
        "--unsafe-no-fsync", "--log-level", "warn",
    ])  # fmt: skip
    _wait_http(etcd, f"{client}/health", lambda r: r.status_code == 200 and r.json().get("health") == "true")
    return client


def _start_apiserver(plane: ControlPlane, port: int, etcd_url: str) -> None:
    folder = plane.folder
    apiserver = _add(plane, "kube-apiserver", [
        str(plane.bin_dir / "kube-apiserver"),
        "--etcd-servers", etcd_url,
        "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(port),
        "--tls-cert-file", str(folder / "apiserver.crt"), "--tls-private-key-file", str(folder / "apiserver.key"),
        "--client-ca-file", str(folder / "ca.crt"),
        "--token-auth-file", str(folder / "tokens.csv"),
        "--authorization-mode", "RBAC",
        "--service-account-issuer", "https://kubernetes.default.svc",
        "--service-account-key-file", str(folder / "sa.pub"),
        "--service-account-signing-key-file", str(folder / "sa.key"),
        "--service-cluster-ip-range", SERVICE_CIDR,
        "--endpoint-reconciler-type", "none",  # Endpoints refuse a loopback address
        "--enable-priority-and-fairness=false",
        "--profiling=false",
    ])  # fmt: skip
    _wait_http(
        apiserver,
        f"{plane.server}/readyz",
        lambda r: r.status_code == 200,
        plane.admin_token,
        ssl.create_default_context(cafile=str(plane.ca_file)),
    )


def _controller_manager(plane: ControlPlane) -> Component:
    return Component("kube-controller-manager", [
        str(plane.bin_dir / "kube-controller-manager"),
        "--kubeconfig", str(plane.kubeconfig),
        "--leader-elect=false", "--secure-port=0", "--bind-address", "127.0.0.1",
        "--service-account-private-key-file", str(plane.folder / "sa.key"),
        "--root-ca-file", str(plane.ca_file),
        "--use-service-account-credentials=false",
        "--controllers", "*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller",
    ], plane.folder / "kube-controller-manager.log")  # fmt: skip


def _scheduler(plane: ControlPlane) -> Component:
    return Component("kube-scheduler", [
        str(plane.bin_dir / "kube-scheduler"),
        "--kubeconfig", str(plane.kubeconfig),
        "--leader-elect=false", "--secure-port=0", "--bind-address", "127.0.0.1",
    ], plane.folder / "kube-scheduler.log")  # fmt: skip


def _kwok(plane: ControlPlane, stages: Path) -> Component:
    return Component("kwok", [
        str(plane.bin_dir / "kwok"),
        "--kubeconfig", str(plane.kubeconfig),
        "--config", str(stages),
        "--manage-all-nodes=true",
        "--node-ip", "127.0.0.1",
        "--server-address", f"127.0.0.1:{free_port()}",
    ], plane.folder / "kwok.log")  # fmt: skip


def _register_node(plane: ControlPlane) -> None:
    api = plane.api()
    try:
        for name in NODE_NAMES:  # created together: KWOK readies them at once, start-up time stays flat
            api.create("/api/v1/nodes", _node(name))

        def ready() -> bool:
            plane.check_alive()
            nodes = [api.get(f"/api/v1/nodes/{name}") for name in NODE_NAMES]
            conditions = [node.get("status", {}).get("conditions", []) for node in nodes]
            return all(any(c.get("type") == "Ready" and c.get("status") == "True" for c in cs) for cs in conditions)

        api.wait_for(f"nodes {', '.join(NODE_NAMES)} Ready (KWOK)", ready, timeout_s=START_TIMEOUT_S, poll_s=0.2)
    finally:
        api.close()
