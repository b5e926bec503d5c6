# Sourced by scripts/setup.sh. The Kubernetes control plane for the tests in tests/kubernetes/ (etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, KWOK), built from the Go module proxy by scripts/kube_cluster.py
# and cached outside the checkout (docs/kubernetes-cluster.md).
#   setup_kube_cluster         build it now (./dev setup), unless cached
#   start_kube_cluster_build   start the build in the background at nice 19 (./dev test); the Kubernetes tests
#                              wait for it and fail with the build log's tail if it failed (in CI), skip otherwise

setup_kube_cluster() {
  cached_tool_ready kube_cluster && return 0
  cached_tool_make kube_cluster build \
    "building the Kubernetes control plane from the Go module proxy (about 6 minutes on two cores, once; cached)" \
    "building the Kubernetes control plane failed (what to do is above)"
}

start_kube_cluster_build() {
  cached_tool_ready kube_cluster && return 0
  cached_tool_start kube_cluster "the Kubernetes control plane build"
}
