"""Helpers of the kubernetes target's tests: a Deployment of simulated pods, a least-privilege kubeconfig, and
``drill run`` in a subprocess as a user runs it (docs/kubernetes.md)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from drill.backends.process import ProcessControl
from tests.kubernetes.controlplane import JSON, Api, ControlPlane, write_kubeconfig

REPO = Path(__file__).resolve().parents[2]
DRILL = Path(sys.executable).with_name("drill")
LABELS = {"app": "llm"}
SELECTOR = "app=llm"
DEPLOYMENT = "llm"
RUN_TIMEOUT_S = 240


#: at most one pod more on one node than on another, never scheduled otherwise: a drained node's pod waits (Pending)
#: for the node's uncordon and goes back to it, so every drain of the contract kit finds the same pods to evict
SPREAD = [
    {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": LABELS},
    }
]


def deployment(namespace: str, replicas: int = 2, spread: bool = False) -> JSON:
    """A Deployment of ``replicas`` pods on the simulated nodes (KWOK runs no container: the binder serves them);
    ``spread``: one pod per node (:data:`SPREAD`)."""
    pod_spec: JSON = {"containers": [{"name": "llm", "image": "vllm/vllm-openai:simulated"}]}
    if spread:
        pod_spec["topologySpreadConstraints"] = SPREAD
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": namespace, "labels": LABELS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": LABELS},
            "template": {
                "metadata": {"labels": LABELS},
                "spec": pod_spec,
            },
        },
    }


def make_deployment(api: Api, namespace: str, replicas: int = 2, spread: bool = False) -> None:
    api.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment(namespace, replicas, spread))


def pods(api: Api, namespace: str) -> list[JSON]:
    """The workload's pods that are Running and not being deleted."""
    return [
        p
        for p in api.items(f"/api/v1/namespaces/{namespace}/pods", labelSelector=SELECTOR)
        if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def uids(api: Api, namespace: str) -> set[str]:
    return {p["metadata"]["uid"] for p in pods(api, namespace)}


def spec_replicas(api: Api, namespace: str) -> int:
    found = api.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{DEPLOYMENT}/scale")
    return int(found["spec"].get("replicas", 0))


def drill_role(drill: Path, sets: list[str]) -> str:
    """``drill kube role DRILL``'s YAML."""
    done = subprocess.run(
        [str(DRILL), "kube", "role", str(drill), *[a for s in sets for a in ("--set", s)]],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def least_privilege_kubeconfig(
    plane: ControlPlane, role_yaml: str, folder: Path, drop: tuple[str, str] = ("", "")
) -> Path:
    """Apply ``role_yaml`` (its ServiceAccount, Role, RoleBinding), minus the verb ``drop = (resource, verb)``, and
    write a kubeconfig with a token of that ServiceAccount (the TokenRequest API, as ``kubectl create token``)."""
    docs = [d for d in yaml.safe_load_all(role_yaml) if d]
    resource, verb = drop
    for rule in (r for d in docs for r in d.get("rules", [])):  # the Role's, and a ClusterRole's (nodes)
        if rule["resources"] == [resource]:
            rule["verbs"] = [v for v in rule["verbs"] if v != verb]
    plane.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    account, namespace = docs[0]["metadata"]["name"], docs[0]["metadata"]["namespace"]
    token = plane.kubectl("create", "token", account, "-n", namespace, "--duration", "1h").stdout.strip()
    return write_kubeconfig(folder / f"{account}.kubeconfig", plane.server, plane.ca_file, token, user=account)


@dataclass
class DrillRun:
    exit_code: int
    run_dir: Path | None
    output: str

    def verdicts(self) -> dict[str, str]:
        assert self.run_dir is not None, self.output[-3000:]
        found = json.loads((self.run_dir / "verdicts.json").read_text())
        return {v["name"]: v["status"] for v in found["checks"]}

    def journal(self) -> list[dict]:
        assert self.run_dir is not None, self.output[-3000:]
        return [json.loads(line) for line in (self.run_dir / "journal.jsonl").read_text().splitlines() if line]

    def events(self, event: str) -> list[dict]:
        return [e for e in self.journal() if e.get("event") == event]


def _argv(drill: Path, out: Path, sets: list[str]) -> list[str]:
    argv = [str(DRILL), "run", str(drill), "--out", str(out), "--no-progress"]
    return argv + [a for s in sets for a in ("--set", s)]


def _run_dir(out: Path) -> Path | None:
    found = [p for p in out.glob("*/*") if (p / "journal.jsonl").exists()]
    return found[0] if len(found) == 1 else None


def run_drill(drill: Path, out: Path, sets: list[str]) -> DrillRun:
    done = subprocess.run(
        _argv(drill, out, sets), capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False, cwd=REPO
    )
    return DrillRun(done.returncode, _run_dir(out), done.stdout + done.stderr)


def kill_runner_after(
    drill: Path, out: Path, sets: list[str], event: str, *, watchdog_too: bool, timeout_s: float = 90.0
) -> DrillRun:
    """Start ``drill run``; SIGKILL it as soon as its journal has ``event`` (e.g. ``fault_injected``); with
    ``watchdog_too``, its watchdog first (as when the machine is lost), so only ``drill cleanup`` is left."""
    process = subprocess.Popen(
        _argv(drill, out, sets), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO
    )
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and process.poll() is None:
            run_dir = _run_dir(out)
            if run_dir is not None and any(
                json.loads(line).get("event") == event
                for line in (run_dir / "journal.jsonl").read_text().splitlines()
                if line.endswith("}")
            ):
                if watchdog_too:
                    _kill_watchdog(run_dir)
                process.send_signal(signal.SIGKILL)
                break
            time.sleep(0.05)
        else:
            process.kill()
            raise AssertionError(f"no {event} in the journal within {timeout_s:g}s: {process.communicate()[0][-3000:]}")
    finally:
        output = process.communicate(timeout=30)[0]
    return DrillRun(process.returncode, _run_dir(out), output)


def _kill_watchdog(run_dir: Path) -> None:
    control = ProcessControl()
    watchdog = control.find(process_name=f"drill.runner.watchdog --run-dir {run_dir}")
    control.kill(watchdog.ref, signal.SIGKILL)
    control.wait_gone(watchdog.ref)


def cleanup(run_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(DRILL), "cleanup", "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
    )
