# Sourced by scripts/setup.sh. The Kubernetes control plane for the tests in tests/kubernetes/ (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, KWOK), built from the Go module proxy by scripts/kube_cluster.py
# and cached outside the checkout (docs/kubernetes-cluster.md).
#   setup_kube_cluster         build it now (./dev setup), unless cached
#   start_kube_cluster_build   start the build in the background at nice 19 (./dev test); the Kubernetes tests
#                              wait for it and fail with the build log's tail if it failed (in CI), skip otherwise

kube_cluster_python() { if [ -x "$VENV/bin/python" ]; then printf '%s' "$VENV/bin/python"; else printf python3; fi; }

setup_kube_cluster() {
  if "$(kube_cluster_python)" scripts/kube_cluster.py path >/dev/null 2>&1; then return 0; fi
  log "building the Kubernetes control plane from the Go module proxy (about 6 minutes on two cores, once; cached)"
  if ! "$(kube_cluster_python)" scripts/kube_cluster.py build >/dev/null; then
    log "building the Kubernetes control plane failed (what to do is above)"
    return 1
  fi
}

start_kube_cluster_build() {
  if "$(kube_cluster_python)" scripts/kube_cluster.py path >/dev/null 2>&1; then return 0; fi
  local started
  if ! started="$("$(kube_cluster_python)" scripts/kube_cluster.py background)"; then
    log "could not start the Kubernetes control plane build (see above)"
    return 1
  fi
  log "$started"
}
