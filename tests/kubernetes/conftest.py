"""A real Kubernetes control plane for the tests in this folder (docs/kubernetes-cluster.md).

Fixtures (names are stable; the Kubernetes target's tests build on them):

- ``control_plane`` (session): :class:`tests.kubernetes.controlplane.ControlPlane`: etcd, kube-apiserver,
  kube-controller-manager, kube-scheduler and KWOK (two simulated nodes) on loopback, from scripts/kube_cluster.py's
  cached build; ``.kubeconfig`` (admin, token), ``.server``, ``.admin_token``, ``.ca_file``, ``.bin_dir``,
  ``.namespace(name)`` (a fresh namespace), ``.api()`` (a REST client), ``.kubectl(...)``. Started once per
  session, stopped at its end; every component's log stays in the session's tmp folder (``.folder``). A build
  still running (``./dev test`` starts one in the background) is waited for. Without a build the tests are skipped
  saying how to make one, except in CI (``CI`` set), where the build is made now and a failure fails them.
- ``bound_replicas`` (factory): ``bound_replicas(namespace, selector, stack_config=None, otlp_endpoint=None)``
  starts a :class:`tests.kubernetes.binder.PodReplicaBinder`: each Running pod matching ``selector`` gets a real
  embedded-stack replica process behind a Toxiproxy proxy, and the pod the annotation ``llm-drill.dev/endpoint``
  (the proxy's URL); a deleted pod's replica is stopped (SIGKILL for grace 0). ``stack_config`` defaults to
  :data:`FAST_REPLICA` (no simulated weight load). Every binder is stopped after the test.
- ``chaos_mesh`` (session): Chaos Mesh's real ``NetworkChaos`` and ``PodChaos`` CRDs installed, and
  :class:`tests.kubernetes.chaos_operator.ChaosOperator` (a stand-in controller, not Chaos Mesh) running over every
  namespace: it acts on the bound replicas and writes Chaos Mesh's status. ``.crds`` names the CRDs.
- ``kube_toxiproxy`` (session): the Toxiproxy server (client) the binders' proxies live in.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from drill.backends.toxiproxy import ToxiproxyClient, ToxiproxyServer
from drill.stack.config import EngineConfig, StackConfig
from drill.stack.lifeline import die_with_parent
from tests.kubernetes.binder import BoundReplica, PodReplicaBinder
from tests.kubernetes.chaos_operator import ChaosOperator, install_crds
from tests.kubernetes.controlplane import ControlPlane, ControlPlaneError, start_control_plane
from tests.supervised_server import load_script, run_last, say

HERE = Path(__file__).resolve().parent
BUILD_WAIT_S = 2400.0  # a cold build at nice 19 beside the rest of the suite on two cores
FAST_REPLICA = StackConfig(engine=EngineConfig(weight_load_time="0s"))

BindReplicas = Callable[..., PodReplicaBinder]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """This folder's tests run last, so a background build has the suite's time; the first waits for it."""
    run_last(items, HERE, (pytest.mark.kubernetes, pytest.mark.integration), BUILD_WAIT_S + 300)


# -- the build ---------------------------------------------------------------------------------------------------


def cluster_build(config: pytest.Config) -> tuple[Path, Path]:
    """The cached build's ``bin/`` folder and KWOK's stages file; skips (fails in CI) when there is none."""
    script = load_script("kube_cluster")
    cache = script.Cache.here()
    in_ci = bool(os.environ.get("CI"))

    def tell(message: str) -> None:
        say(config, "kubernetes", message)

    if not cache.finished() and not in_ci and not (cache.in_progress() or cache.just_queued()):
        if cache.status().get("state") == "failed":
            pytest.skip(f"the Kubernetes control plane build failed ({cache.log}): run ./dev setup to retry")
        pytest.skip(
            f"the Kubernetes control plane is not built ({cache.folder}): run ./dev setup or "
            "python3 scripts/kube_cluster.py build (about 6 minutes, once)"
        )
    try:
        script.cached_build.obtain(cache, lambda: script.build(cache), BUILD_WAIT_S, tell)
    except script.cached_build.CacheError as exc:
        message = f"no Kubernetes control plane for these tests: {exc}\n{cache.what_to_do}"
        if in_ci:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return cache.product, cache.stages


# -- the control plane -------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def control_plane(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    bin_dir, stages = cluster_build(pytestconfig)
    folder = tmp_path_factory.mktemp("kube-control-plane")
    try:
        plane = start_control_plane(bin_dir, stages, folder)
    except ControlPlaneError as exc:
        pytest.fail(f"the Kubernetes control plane did not start (logs in {folder}): {exc}", pytrace=False)
    say(pytestconfig, "kubernetes", f"control plane at {plane.server} (logs in {folder})")
    try:
        yield plane
    finally:
        plane.stop()


# -- replicas bound to pods --------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def kube_toxiproxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToxiproxyClient]:
    folder = tmp_path_factory.mktemp("kube-toxiproxy")
    server = ToxiproxyServer(log_path=folder / "toxiproxy.log", preexec_fn=die_with_parent()).start()
    client = server.client()
    try:
        yield client
    finally:
        client.close()
        server.stop()


@pytest.fixture(scope="session")
def _kube_binders() -> list[PodReplicaBinder]:
    """Every live binder of the session: where the chaos stand-in finds a pod's replica."""
    return []


def _find_replica(binders: list[PodReplicaBinder]) -> Callable[[str, str], BoundReplica | None]:
    def find(namespace: str, pod: str) -> BoundReplica | None:
        for binder in list(binders):
            if binder.namespace == namespace:
                found = binder.by_pod(pod)
                if found is not None:
                    return found
        return None

    return find


@pytest.fixture()
def bound_replicas(
    control_plane: ControlPlane,
    kube_toxiproxy: ToxiproxyClient,
    _kube_binders: list[PodReplicaBinder],
    tmp_path: Path,
) -> Iterator[BindReplicas]:
    made: list[PodReplicaBinder] = []

    def bind(
        namespace: str, selector: str, stack_config: StackConfig | None = None, otlp_endpoint: str | None = None
    ) -> PodReplicaBinder:
        binder = PodReplicaBinder(
            control_plane,
            namespace,
            selector,
            tmp_path / f"replicas-{namespace}-{len(made)}",
            stack_config=stack_config or FAST_REPLICA,
            otlp_endpoint=otlp_endpoint,
            toxiproxy=kube_toxiproxy,
        )
        made.append(binder)
        _kube_binders.append(binder)
        return binder.start()

    try:
        yield bind
    finally:
        for binder in made:
            binder.stop()
            _kube_binders.remove(binder)


# -- Chaos Mesh's CRDs and the stand-in controller ---------------------------------------------------------------


@dataclass
class ChaosMesh:
    crds: list[str]
    operator: ChaosOperator


@pytest.fixture(scope="session")
def chaos_mesh(
    control_plane: ControlPlane, kube_toxiproxy: ToxiproxyClient, _kube_binders: list[PodReplicaBinder]
) -> Iterator[ChaosMesh]:
    crds = install_crds(control_plane)
    operator = ChaosOperator(control_plane, kube_toxiproxy, _find_replica(_kube_binders)).start()
    try:
        yield ChaosMesh(crds, operator)
    finally:
        operator.stop()
