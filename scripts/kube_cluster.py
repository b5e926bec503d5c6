#!/usr/bin/env python3
"""Build the Kubernetes control plane the tests in ``tests/kubernetes/`` drive, once per machine, and cache it.

No Kubernetes release binary can be downloaded here, but the Go module proxy serves every module's source. This
script builds, with the Go toolchain (``CGO_ENABLED=0``, ``-p=2``):

- ``kube-apiserver``, ``kube-controller-manager``, ``kube-scheduler`` and ``kubectl`` from ``k8s.io/kubernetes``
  :data:`KUBERNETES`. Kubernetes' own ``go.mod`` replaces its 31 ``k8s.io/<staging>`` modules with local paths,
  which ``go install pkg@version`` refuses; so the build runs in a throw-away module whose ``go.mod`` requires
  ``k8s.io/kubernetes`` and maps each of those modules to its published version (``v0.<minor>.<patch>``);
- ``etcd`` :data:`ETCD` (``go.etcd.io/etcd/server/v3``; Debian's etcd 3.4 is older than Kubernetes 1.34 accepts);
- ``kwok`` :data:`KWOK` (Kubernetes WithOut Kubelet: simulated nodes and pods), and its "fast" stages (the
  node's and pods' simulated lifecycle), which ship as YAML in the module's source, not in the binary.

The entry is ``${KUBE_CLUSTER_DIR:-${XDG_CACHE_HOME:-~/.cache}/llm-drill/kubernetes}/<key>/`` with ``bin/`` and
``kwok-stages.yaml``, beside ``build.log`` and ``status.json`` (scripts/cached_build.py keeps the entry, its lock,
the background start and the wait, as for llama-server and vLLM). A Go older than :data:`MIN_GO` on PATH is not
used: Go :data:`GO_VERSION` is then installed from the Go module proxy (scripts/go_toolchain.py) beside the entries.
docs/kubernetes-cluster.md says what it costs and what the tests do with it.

    python3 scripts/kube_cluster.py path          print the cached bin/ folder; exit 1 when it is not built
    python3 scripts/kube_cluster.py build         build it now unless cached (waits for a build already running)
    python3 scripts/kube_cluster.py background    start the build detached, at nice 19, unless cached or running
    python3 scripts/kube_cluster.py wait [SECS]   wait for a running build; exit 1 with the log's tail if it failed
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))  # cached_build.py beside it, also when a test loads this file by its path
import cached_build  # noqa: E402
import go_toolchain  # noqa: E402

KUBERNETES = "v1.34.4"
STAGING = "v0.34.4"  # the published version of each k8s.io/<staging> module of KUBERNETES
ETCD = "v3.6.16"
KWOK = "v0.8.0"
MIN_GO = "1.26.0"  # etcd's and kwok's go.mod say `go 1.26.0`
GO_VERSION = "1.26.8"  # installed when the Go on PATH is older than MIN_GO
GO_ENV = {"CGO_ENABLED": "0", "GOFLAGS": "-p=2", "GOTOOLCHAIN": "local"}  # -p=2: peak ~1.9 GB (the apiserver)
BUILD_FLAGS = ("-trimpath", "-ldflags=-s")
# What Kubernetes' own build stamps into its binaries (hack/lib/version.sh), so the API server's /version and
# `kubectl version` say v1.34.4 instead of v0.0.0-master.
VERSION_PACKAGES = ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
KUBE_LDFLAGS = "-ldflags=-s " + " ".join(
    f"-X {package}.{name}={value}"
    for package in VERSION_PACKAGES
    for name, value in (
        ("gitVersion", KUBERNETES),
        ("gitMajor", KUBERNETES[1:].split(".")[0]),
        ("gitMinor", KUBERNETES.split(".")[1]),
        ("gitTreeState", "clean"),
    )
)
KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
BINARIES = (*KUBE_COMMANDS, "etcd", "kwok")
# kwok's "fast" stages (kustomize/stage/fast in its source): a node becomes Ready at once and keeps its lease, a
# pod scheduled on it becomes Running and Ready at once, and a deleted pod goes away.
KWOK_STAGES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)
BUILD_WAIT_S = 2400.0
WHAT_TO_DO = (
    "  the Kubernetes tests need it: fix the cause above and run ./dev setup again, or point KUBE_CLUSTER_DIR at a\n"
    "  folder holding a built entry, or run the tests with -m 'not kubernetes'"
)


class BuildError(cached_build.CacheError):
    """The build cannot start or did not finish; the message says why and what to do."""


def cache_root() -> Path:
    return cached_build.cache_root("KUBE_CLUSTER_DIR", "kubernetes")


def build_key() -> str:
    """``<kubernetes version>-<12 hex>``: the hash of every version and flag the binaries depend on."""
    facts = [KUBERNETES, STAGING, ETCD, KWOK, *BUILD_FLAGS, KUBE_LDFLAGS, repr(sorted(GO_ENV.items())), *KWOK_STAGES]
    return f"{KUBERNETES}-{hashlib.sha256(chr(0).join(facts).encode()).hexdigest()[:12]}"


class Cache(cached_build.Cache):
    """One key's entry: ``bin/`` (the six binaries) and ``kwok-stages.yaml`` beside build.log and status.json."""

    name = "kube-cluster"
    title = "the Kubernetes control plane"
    noun, doing, done = "build", "building", "built"
    what = "the Kubernetes control plane build"
    error = BuildError
    what_to_do = WHAT_TO_DO

    @classmethod
    def here(cls) -> Cache:
        return cls(cache_root() / build_key())

    @property
    def product(self) -> Path:
        return self.folder / "bin"

    @property
    def stages(self) -> Path:
        return self.folder / "kwok-stages.yaml"

    def finished(self) -> bool:
        return self.stages.is_file() and all(os.access(self.product / name, os.X_OK) for name in BINARIES)


# -- the Go toolchain ---------------------------------------------------------------------------------------------


def go_version(go: str) -> str | None:
    return go_toolchain.version(go, _env())


def find_go(log) -> str:
    """A Go >= MIN_GO: ``go`` on PATH, else /usr/local/go's, else Go GO_VERSION installed into the cache root."""
    installed = cache_root() / f"go{GO_VERSION}" / "bin" / "go"
    for candidate in (shutil.which("go"), "/usr/local/go/bin/go", str(installed)):
        if candidate and os.access(candidate, os.X_OK):
            have = go_version(candidate)
            if have and go_toolchain.at_least(have, MIN_GO):
                return candidate
    _say(log, f"no Go >= {MIN_GO} found: installing Go {GO_VERSION} from the Go module proxy")
    try:
        go_toolchain.install(GO_VERSION, str(installed.parents[1]))
    except SystemExit as exc:  # go_toolchain reports its failures this way
        raise BuildError(f"cannot install Go {GO_VERSION}: {exc}") from exc
    return str(installed)


# -- building -----------------------------------------------------------------------------------------------------


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, **GO_ENV, **(extra or {})}


def _say(log, message: str) -> None:
    cached_build.say(Cache.name, log, message)


def _run(command: list[str], cwd: Path, log, env: dict[str, str] | None = None) -> None:
    cached_build.run_step(command, cwd, log, BuildError, _env(env))


def staging_modules(kubernetes_go_mod: str) -> list[str]:
    """The ``k8s.io/<staging>`` modules Kubernetes' go.mod replaces with ``./staging/src/...`` paths."""
    return re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", kubernetes_go_mod, re.MULTILINE)


def downloaded(go: str, work: Path, module: str, field: str) -> Path:
    """A path ``go mod download -json MODULE`` reports (``GoMod``: its go.mod, ``Dir``: its source), fetched from the
    module proxy into Go's module cache; BuildError with go's output when it cannot."""
    done = subprocess.run(
        [go, "mod", "download", "-json", module], capture_output=True, text=True, check=False, env=_env(), cwd=work
    )
    try:
        return Path(json.loads(done.stdout)[field])
    except (ValueError, KeyError, TypeError) as exc:
        raise BuildError(f"go mod download {module} failed: {done.stdout}{done.stderr}") from exc


def kubernetes_go_mod(go: str, work: Path) -> str:
    """k8s.io/kubernetes' go.mod at KUBERNETES, from the module proxy through ``go mod download``."""
    go_mod = downloaded(go, work, f"k8s.io/kubernetes@{KUBERNETES}", "GoMod")
    try:
        return go_mod.read_text(encoding="utf-8")
    except OSError as exc:
        raise BuildError(f"go mod download k8s.io/kubernetes@{KUBERNETES}: cannot read {go_mod}: {exc}") from exc


def throwaway_go_mod(modules: list[str]) -> str:
    """The throw-away module's go.mod: require k8s.io/kubernetes, each staging module at its published version."""
    replaces = "".join(f"\t{module} => {module} {STAGING}\n" for module in modules)
    return (
        "module drill.local/kubebuild\n\ngo 1.24.0\n\n"
        f"require k8s.io/kubernetes {KUBERNETES}\n\nreplace (\n{replaces})\n"
    )


def _build_kubernetes(go: str, work: Path, bin_dir: Path, log) -> None:
    modules = staging_modules(kubernetes_go_mod(go, work))
    if len(modules) < 20:
        raise BuildError(f"k8s.io/kubernetes {KUBERNETES}'s go.mod names only {len(modules)} staging modules")
    module = work / "kubernetes"
    module.mkdir()
    (module / "go.mod").write_text(throwaway_go_mod(modules), encoding="utf-8")
    packages = [f"k8s.io/kubernetes/cmd/{name}" for name in KUBE_COMMANDS]
    _run([go, "get", *(f"{package}@{KUBERNETES}" for package in packages)], module, log)
    for package in packages:  # one at a time: the apiserver alone peaks at ~1.9 GB
        _say(log, f"compiling {package}")
        _run([go, "build", "-trimpath", KUBE_LDFLAGS, "-o", f"{bin_dir}/", package], module, log)


def _build_etcd(go: str, work: Path, bin_dir: Path, log) -> None:
    module = work / "etcd"
    module.mkdir()
    (module / "go.mod").write_text("module drill.local/etcdbuild\n\ngo 1.26.0\n", encoding="utf-8")
    _run([go, "get", f"go.etcd.io/etcd/server/v3@{ETCD}"], module, log)
    _say(log, f"compiling etcd {ETCD}")
    _run([go, "build", *BUILD_FLAGS, "-o", str(bin_dir / "etcd"), "go.etcd.io/etcd/server/v3"], module, log)


def _build_kwok(go: str, work: Path, bin_dir: Path, stages: Path, log) -> None:
    _say(log, f"compiling kwok {KWOK}")
    _run([go, "install", *BUILD_FLAGS, f"sigs.k8s.io/kwok/cmd/kwok@{KWOK}"], work, log, {"GOBIN": str(bin_dir)})
    source = downloaded(go, work, f"sigs.k8s.io/kwok@{KWOK}", "Dir")
    documents = [(source / path).read_text(encoding="utf-8").strip() for path in KWOK_STAGES]
    header = f"# kwok {KWOK}'s stages, from its source: {', '.join(KWOK_STAGES)} (Apache-2.0)\n"
    stages.write_text(header + "\n---\n".join(documents) + "\n", encoding="utf-8")


def _compile(work: Path, cache: Cache, log) -> tuple[dict[str, object], str]:
    go = find_go(log)
    _say(log, f"with {go} (Go {go_version(go)}); Kubernetes {KUBERNETES}, etcd {ETCD}, kwok {KWOK}")
    staged = work / "bin"
    staged.mkdir()
    stages = work / "kwok-stages.yaml"
    _build_kubernetes(go, work, staged, log)
    _build_etcd(go, work, staged, log)
    _build_kwok(go, work, staged, stages, log)
    missing = [name for name in BINARIES if not os.access(staged / name, os.X_OK)]
    if missing:
        raise BuildError(f"the build made no {', '.join(missing)}")
    shutil.rmtree(cache.product, ignore_errors=True)
    os.replace(staged, cache.product)
    os.replace(stages, cache.stages)
    size = sum((cache.product / name).stat().st_size for name in BINARIES) // (1 << 20)
    return {"go": go_version(go), "mib": size}, f"{len(BINARIES)} binaries, {size} MiB"


def build(cache: Cache) -> Path:
    """Build into the cache unless it is there; one build at a time per key (a second caller waits for it)."""
    return cached_build.make(cache, lambda work, log: _compile(work, cache, log), (urllib.error.URLError,))


def start_background(cache: Cache) -> str:
    """Start ``build`` detached (own session, nice 19, output to the build log); says what it did."""
    return cached_build.start_background(cache, Path(__file__).resolve(), "build")


def wait(cache: Cache, timeout_s: float, tick=None) -> Path:
    """The bin/ folder once a running build has made it; BuildError (with the log's tail) when it failed."""
    return cached_build.wait(cache, timeout_s, tick)


def main(argv: list[str]) -> int:
    cache = Cache.here()
    return cached_build.main(argv, cache, lambda: build(cache), Path(__file__).resolve(), BUILD_WAIT_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
