"""``drill kube role DRILL`` and ``drill kube load-job``: the manifests a drill on Kubernetes needs.

``role`` prints the least-privilege ServiceAccount, Role and RoleBinding for a drill whose target is ``kubernetes``
(the rules of :mod:`drill.targets.kube_rbac`: exactly what the target and the drill's faults do, in the drill's
namespace); ``kubectl apply -f -`` takes it. ``load-job`` prints a Job of Locust workers (``drill worker``) that
join a ``drill load``/``drill run`` master, so the load comes from inside the cluster. docs/kubernetes.md.
"""

from __future__ import annotations

import re

import click
import yaml

from drill.cli.common import echo, handle_errors
from drill.errors import InputError
from drill.spec.loader import load_drill, resolve_drill_path
from drill.targets.kube_rbac import drill_rules, role_manifests
from drill.targets.kubernetes import KubernetesTargetParams


@click.group("kube")
def kube() -> None:
    """Manifests for a drill against a Kubernetes target: its Role, its load workers."""


def _dns_name(text: str) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return name[:63].rstrip("-") or "llm-drill"


@kube.command("role")
@click.argument("drill")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a field by its key path.")
@click.option("--name", default=None, help="Name of the ServiceAccount, Role, RoleBinding (default: llm-drill-DRILL).")
def role(drill: str, overrides: tuple[str, ...], name: str | None) -> None:
    """Print the ServiceAccount, Role and RoleBinding a drill on the kubernetes target needs (least privilege)."""
    with handle_errors():
        loaded = load_drill(resolve_drill_path(drill), overrides=overrides)
        params = loaded.target_params
        if not isinstance(params, KubernetesTargetParams):
            raise InputError(
                f"{drill}: target.kind is {loaded.drill.target.kind!r}, not 'kubernetes': it needs no Role",
                hint="docs/kubernetes.md shows a drill on the kubernetes target",
            )
        faults = [(f.kind, p) for f, p in zip(loaded.drill.faults, loaded.fault_params, strict=True)]
        rules = drill_rules(params.access.value, params.workload.kind, faults)
        manifests = role_manifests(name or _dns_name(f"llm-drill-{loaded.drill.name}"), params.namespace, rules)
        echo(f"# least privilege for drill {loaded.drill.name} in namespace {params.namespace}")
        echo(yaml.safe_dump_all(manifests, sort_keys=False).rstrip("\n"))


@kube.command("load-job")
@click.option("--master", required=True, metavar="HOST:PORT", help="The drill's load master, as the pods reach it.")
@click.option("--namespace", required=True, help="Where the Job runs.")
@click.option("--image", required=True, help="An image with llm-drill installed (its `drill` on the PATH).")
@click.option("--workers", type=click.IntRange(1, 1000), default=2, show_default=True, help="Worker pods.")
@click.option("--name", default="llm-drill-load", show_default=True, help="The Job's name.")
@click.option("--cpu", default="1", show_default=True, help="Each worker's CPU request and limit (one core each).")
def load_job(master: str, namespace: str, image: str, workers: int, name: str, cpu: str) -> None:
    """Print a Job of Locust workers that join a drill's load master (start it with --expect-workers N
    --master-bind 0.0.0.0:5557)."""
    with handle_errors():
        host, sep, port = master.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise click.BadParameter(f"expected HOST:PORT, got {master!r}", param_hint="--master")
        echo(yaml.safe_dump(job_manifest(name, namespace, image, master, workers, cpu), sort_keys=False).rstrip("\n"))


def job_manifest(name: str, namespace: str, image: str, master: str, workers: int, cpu: str) -> dict:
    """``workers`` pods running ``drill worker --master MASTER``, one core each, never restarted (a worker that
    dies is counted by the master, not replaced mid-drill)."""
    labels = {"app.kubernetes.io/name": "llm-drill-load", "app.kubernetes.io/managed-by": "llm-drill"}
    container = {
        "name": "worker",
        "image": image,
        "command": ["drill", "worker", "--master", master],
        "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": _dns_name(name), "namespace": namespace, "labels": labels},
        "spec": {
            "parallelism": workers,
            "completions": workers,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels},
                "spec": {"restartPolicy": "Never", "containers": [container]},
            },
        },
    }
