"""The Kubernetes control plane's build step (scripts/kube_cluster.sh, scripts/kube_cluster.py): its throw-away
module, its cache key, a failed build recorded with its log, and what the Kubernetes tests do without a build
(skip with how to make one; in CI, fail with the build log's tail).

Nothing here compiles: ``go`` is a stand-in script and the cache is a temporary folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.supervised_server import load_script

REPO = Path(__file__).resolve().parents[1]
TOOLS = ("bash", "sh", "id", "dirname", "cat", "printf", "sed", "tail")
#: Kubernetes' go.mod replaces its staging modules with local paths; an excerpt of v1.34.4's
KUBE_GO_MOD = """module k8s.io/kubernetes

go 1.24.0

require (
\tk8s.io/api v0.0.0
\tk8s.io/client-go v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tk8s.io/kube-scheduler => ./staging/src/k8s.io/kube-scheduler
)
"""
A_FIXTURE_TEST = "tests/kubernetes/test_cluster_fixtures.py::test_the_api_server_is_the_built_version_on_loopback"


def _script() -> ModuleType:
    return load_script("kube_cluster")


def test_the_throwaway_module_maps_every_staging_module_to_its_published_version() -> None:
    script = _script()
    modules = script.staging_modules(KUBE_GO_MOD)
    assert modules == ["k8s.io/api", "k8s.io/client-go", "k8s.io/kube-scheduler"]
    go_mod = script.throwaway_go_mod(modules)
    assert f"require k8s.io/kubernetes {script.KUBERNETES}" in go_mod
    for module in modules:
        assert f"\t{module} => {module} {script.STAGING}\n" in go_mod
    assert "./staging" not in go_mod


def test_the_cache_key_changes_with_any_version(monkeypatch: pytest.MonkeyPatch) -> None:
    script = _script()
    key = script.build_key()
    assert key.startswith(f"{script.KUBERNETES}-")
    for name, other in (("ETCD", "v3.6.15"), ("KWOK", "v0.7.0"), ("STAGING", "v0.34.3")):
        with monkeypatch.context() as patched:
            patched.setattr(script, name, other)
            assert script.build_key() != key, name


def test_kube_cluster_dir_overrides_the_cache_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBE_CLUSTER_DIR", str(tmp_path))
    script = _script()
    assert script.Cache.here().folder == tmp_path / script.build_key()
    assert script.Cache.here().product == tmp_path / script.build_key() / "bin"


def _fake_go(folder: Path) -> Path:
    """A ``go`` that is new enough and fails every download, as with no network."""
    folder.mkdir()
    go = folder / "go"
    go.write_text(
        "#!/bin/sh\n"
        'if [ "$1 $2" = "env GOVERSION" ]; then echo go1.26.8; exit 0; fi\n'
        'echo "go: k8s.io/kubernetes@v1.34.4: dial tcp: lookup proxy.golang.org: no such host" >&2\n'
        "exit 1\n"
    )
    go.chmod(0o755)
    return folder


def _step(tmp_path: Path, script: str, fake_go: Path) -> subprocess.CompletedProcess[str]:
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        if found:
            (folder / tool).symlink_to(found)
    (folder / "python3").symlink_to(sys.executable)
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    env = {
        "PATH": f"{fake_go}:{folder}",
        "HOME": str(tmp_path),
        "VENV": str(tmp_path / "venv"),
        "DRILL_SETUP_OFFLINE": "1",
        "KUBE_CLUSTER_DIR": str(tmp_path / "cache"),
    }
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail; source scripts/setup.sh; {script}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_failed_build_stops_setup_and_a_background_one_records_its_failure(tmp_path: Path) -> None:
    """``./dev setup``'s step stops with exit 1 and the reason; ``./dev test``'s starts the build detached and
    returns at once, and a waiter gets the recorded failure with the log's tail."""
    fake_go = _fake_go(tmp_path / "go")
    done = _step(tmp_path, "setup_kube_cluster; echo carried-on", fake_go)
    assert done.returncode == 1, done
    assert "carried-on" not in done.stdout
    assert "building the Kubernetes control plane failed" in done.stderr
    assert "no such host" in done.stderr and "-m 'not kubernetes'" in done.stderr
    shutil.rmtree(tmp_path / "cache")
    shutil.rmtree(tmp_path / "bin")
    shutil.rmtree(tmp_path / "venv")
    done = _step(tmp_path, "start_kube_cluster_build; echo carried-on", fake_go)
    assert done.returncode == 0, done
    assert "building the Kubernetes control plane in the background" in done.stderr and "carried-on" in done.stdout
    waited = subprocess.run(
        [sys.executable, "scripts/kube_cluster.py", "wait", "60"],
        cwd=REPO,
        env={"PATH": f"{fake_go}:/usr/bin:/bin", "HOME": str(tmp_path), "KUBE_CLUSTER_DIR": str(tmp_path / "cache")},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert waited.returncode == 1, waited
    assert "the Kubernetes control plane build failed" in waited.stderr and "no such host" in waited.stderr


def _failed_entry(root: Path) -> None:
    script = _script()
    cache = script.Cache(root / script.build_key())
    cache.folder.mkdir(parents=True)
    cache.log.write_text("k8s.io/apiserver/pkg/server: compile: signal: killed\n")
    cache.write_status("failed", error="go build exited with 1")


def _run_a_fixture_test(root: Path, ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"KUBE_CLUSTER_DIR": str(root)}
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", A_FIXTURE_TEST],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_a_build_the_kubernetes_tests_skip_saying_how_to_make_one(tmp_path: Path) -> None:
    done = _run_a_fixture_test(tmp_path / "cache", ci=False)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "1 skipped" in done.stdout and "python3 scripts/kube_cluster.py build" in done.stdout


def test_in_ci_a_failed_build_fails_the_kubernetes_tests_with_its_log(tmp_path: Path) -> None:
    _failed_entry(tmp_path / "cache")
    done = _run_a_fixture_test(tmp_path / "cache", ci=True)
    assert done.returncode == 1, done.stdout[-2000:]
    assert "compile: signal: killed" in done.stdout
    assert "1 error" in done.stdout and "skipped" not in done.stdout
