"""The least privilege a Kubernetes drill needs: the rules, the Role that grants them, and the pre-flight.

One table says which verbs on which resources the kubernetes target and each of its faults use
(:func:`drill_rules`); ``drill kube role DRILL`` prints a ServiceAccount, a Role with exactly those rules and the
RoleBinding between them (:func:`role_manifests`), and the target checks them before it touches anything
(:func:`missing_rules`, one ``SelfSubjectAccessReview`` per verb: Kubernetes' ``system:basic-user`` lets every
authenticated user ask). Everything is granted in the drill's namespace, except what ``node_drain`` needs on nodes
(cluster-scoped resources): a ClusterRole with only ``get`` and ``patch`` on ``nodes``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pydantic import BaseModel

from drill.backends.kubernetes import WORKLOAD_SCALE

__all__ = ["CHAOS_MESH", "KubeRule", "chaos_experiment", "drill_rules", "missing_rules", "role_manifests"]

#: Chaos Mesh's API group, version and the kinds the harness creates (chaos-mesh.org/v1alpha1)
CHAOS_MESH = ("chaos-mesh.org", "v1alpha1")
CHAOS_PLURALS = {"NetworkChaos": "networkchaos", "PodChaos": "podchaos"}


@dataclass(frozen=True, order=True)
class KubeRule:
    """Verbs on one resource (``plural`` or ``plural/subresource``) of one API group ("" is the core group)."""

    group: str
    resource: str
    verbs: tuple[str, ...]
    cluster: bool = False  # a cluster-scoped resource (nodes): granted by a ClusterRole

    def describe(self, verb: str) -> str:
        where = " (cluster-wide)" if self.cluster else ""
        return f"'{verb}' on {self.resource}" + (f" ({self.group})" if self.group else "") + where


#: the verbs of a subresource the client reaches through a WebSocket (pods/exec, pods/portforward): the upgrade is a
#: GET, authorized as ``get`` (kubernetes-client/python#2084), and Kubernetes 1.35 also asks for ``create`` on it,
#: the verb of kubectl's SPDY POST (the AuthorizePodWebsocketUpgradeCreatePermission feature gate)
_WEBSOCKET_VERBS = ("create", "get")


def target_rules(access: str, workload_kind: str) -> list[KubeRule]:
    """What the kubernetes target itself does: list the pods, read the workload's scale, maybe port-forward."""
    group, _, plural = WORKLOAD_SCALE[workload_kind]
    rules = [KubeRule("", "pods", ("get", "list")), KubeRule(group, f"{plural}/scale", ("get",))]
    if access == "port_forward":
        rules.append(KubeRule("", "pods/portforward", _WEBSOCKET_VERBS))
    return rules


#: the network faults whose ``method: chaos_mesh`` creates a NetworkChaos
CHAOS_METHOD_FAULTS = frozenset({"slow_replica", "partition", "link_reset"})


def _method(params: BaseModel) -> str:
    return str(getattr(getattr(params, "method", None), "value", getattr(params, "method", "")))


def chaos_experiment(kind: str, params: BaseModel) -> str | None:
    """The Chaos Mesh kind a fault creates (``NetworkChaos``, ``PodChaos``); None for a fault that creates none."""
    if kind == "chaos_mesh":
        return str(getattr(getattr(params, "experiment", None), "value", "NetworkChaos"))
    if kind in CHAOS_METHOD_FAULTS and _method(params) == "chaos_mesh":
        return "NetworkChaos"
    return None


def fault_rules(kind: str, params: BaseModel, workload_kind: str) -> list[KubeRule]:
    """What one fault does through the API (none for a fault that acts elsewhere)."""
    method = _method(params)
    if kind == "replica_crash" and method == "pod":
        return [KubeRule("", "pods", ("delete",))]
    if kind in ("replica_crash", "replica_pause") and method == "exec":  # only an exec method may exec
        return [KubeRule("", "pods/exec", _WEBSOCKET_VERBS)]
    if kind == "replica_scale_down":
        group, _, plural = WORKLOAD_SCALE[workload_kind]
        return [KubeRule(group, f"{plural}/scale", ("get", "patch"))]
    if kind == "node_drain":
        return [
            KubeRule("", "nodes", ("get", "patch"), cluster=True),
            KubeRule("", "pods", ("list",)),
            KubeRule("", "pods/eviction", ("create",)),
        ]
    experiment = chaos_experiment(kind, params)
    if experiment is not None:
        return [KubeRule(CHAOS_MESH[0], CHAOS_PLURALS[experiment], ("create", "get", "list", "delete"))]
    return []


def drill_rules(access: str, workload_kind: str, faults: Iterable[tuple[str, BaseModel]]) -> list[KubeRule]:
    """Every rule a drill needs, merged per resource, verbs sorted."""
    merged: dict[tuple[bool, str, str], set[str]] = {}
    rules = target_rules(access, workload_kind)
    for kind, params in faults:
        rules += fault_rules(kind, params, workload_kind)
    for rule in rules:
        merged.setdefault((rule.cluster, rule.group, rule.resource), set()).update(rule.verbs)
    found = (KubeRule(g, r, tuple(sorted(v)), cluster=c) for (c, g, r), v in merged.items())
    return sorted(found, key=lambda r: (r.cluster, r.group, r.resource))


def missing_rules(
    rules: Iterable[KubeRule], allowed: Callable[[str, str, str, str, bool], tuple[bool, str]]
) -> list[str]:
    """What the credentials may not do, one "'verb' on resource (group)" each; ``allowed(verb, group, resource,
    subresource, cluster)`` asks the API server (:meth:`drill.backends.kubernetes.KubeClient.allowed`)."""
    missing = []
    for rule in rules:
        resource, _, sub = rule.resource.partition("/")
        for verb in rule.verbs:
            ok, _reason = allowed(verb, rule.group, resource, sub, rule.cluster)
            if not ok:
                missing.append(rule.describe(verb))
    return missing


def _rule(rule: KubeRule) -> dict:
    return {"apiGroups": [rule.group], "resources": [rule.resource], "verbs": list(rule.verbs)}


def role_manifests(name: str, namespace: str, rules: Iterable[KubeRule]) -> list[dict]:
    """A ServiceAccount, a Role with exactly the namespaced ``rules`` and the RoleBinding between them, all named
    ``name``; when a rule is cluster-scoped (nodes), a ClusterRole with exactly those and its ClusterRoleBinding,
    named ``name-namespace`` (cluster-scoped names are shared by every namespace)."""
    labels = {"app.kubernetes.io/managed-by": "llm-drill"}
    meta = {"name": name, "namespace": namespace, "labels": labels}
    rules = list(rules)
    role_rules = [_rule(r) for r in rules if not r.cluster]
    manifests: list[dict] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": dict(meta)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": dict(meta), "rules": role_rules},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": dict(meta),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    ]
    cluster_rules = [_rule(r) for r in rules if r.cluster]
    if cluster_rules:
        cluster_meta = {"name": f"{name}-{namespace}", "labels": labels}
        manifests += [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": dict(cluster_meta),
                "rules": cluster_rules,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": dict(cluster_meta),
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": cluster_meta["name"],
                },
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
            },
        ]
    return manifests
