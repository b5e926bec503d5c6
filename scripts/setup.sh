# Sourced by ./dev and .ci/run. Idempotent set-up steps for llm-drill.
# Facts behind each step: ../shared/reference/dependency-notes.md (sections 2.2, 3, 5).

VENV="${VENV:-$PWD/.venv}"
TOXIPROXY_VERSION="v2.12.0"

log() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }

setup_python() {
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating virtualenv $VENV"
    python3 -m venv "$VENV"
  fi
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
}

setup_toxiproxy() {
  # The real Toxiproxy server (Go). `go install` names the binary `server`; it goes into the venv as toxiproxy-server.
  if [ -n "${TOXIPROXY_URL:-}" ] || [ -n "${TOXIPROXY_BIN:-}" ]; then return 0; fi
  if [ -x "$VENV/bin/toxiproxy-server" ] || command -v toxiproxy-server >/dev/null 2>&1; then return 0; fi
  if ! command -v go >/dev/null 2>&1; then
    log "Go is not installed: cannot build the Toxiproxy server (set TOXIPROXY_BIN or TOXIPROXY_URL instead)"
    return 0
  fi
  log "installing the Toxiproxy server $TOXIPROXY_VERSION with go install"
  local gobin; gobin="$(mktemp -d)"
  GOBIN="$gobin" go install -ldflags "-X github.com/Shopify/toxiproxy/v2.Version=${TOXIPROXY_VERSION#v}" \
    "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION"
  mv "$gobin/server" "$VENV/bin/toxiproxy-server"
  rmdir "$gobin"
}

JAEGER_VERSION="v1.76.0"
JAEGER_MIN_GO="1.24.6"   # jaeger v1.76.0's go.mod; `go get -tool` needs Go >= 1.24 too

jaeger_go_at_least() {  # jaeger_go_at_least HAVE WANT: true when version HAVE >= WANT
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" = "$2" ]
}

setup_jaeger() {
  # The real Jaeger (v2 all-in-one, module github.com/jaegertracing/jaeger/cmd/jaeger) for the jaeger_api
  # trace source's tests, as $VENV/bin/jaeger. `go install ...@v1.76.0` refuses to build it (its go.mod has
  # a replace directive), so it is built from a throwaway module that requires it as a tool.
  if [ -n "${JAEGER_BIN:-}" ]; then return 0; fi
  local stamp="$VENV/.jaeger-$JAEGER_VERSION"
  if [ -x "$VENV/bin/jaeger" ] && [ -f "$stamp" ]; then return 0; fi
  if ! command -v go >/dev/null 2>&1; then
    log "Go is not installed: cannot build Jaeger $JAEGER_VERSION (install Go >= $JAEGER_MIN_GO, or set JAEGER_BIN)"
    return 1
  fi
  local have; have="$(go env GOVERSION)"; have="${have#go}"
  if ! jaeger_go_at_least "$have" "$JAEGER_MIN_GO"; then
    log "Go $have is too old to build Jaeger $JAEGER_VERSION: it needs Go >= $JAEGER_MIN_GO (or set JAEGER_BIN)"
    return 1
  fi
  log "building Jaeger $JAEGER_VERSION (about 3 minutes on a fresh machine; log in $VENV/jaeger-build.log)"
  local work; work="$(mktemp -d)"
  if ! ( cd "$work" && go mod init jaegerbuild \
         && go get -tool "github.com/jaegertracing/jaeger/cmd/jaeger@$JAEGER_VERSION" \
         && go build -o "$work/jaeger" github.com/jaegertracing/jaeger/cmd/jaeger ) > "$VENV/jaeger-build.log" 2>&1; then
    tail -n 20 "$VENV/jaeger-build.log" >&2
    log "building Jaeger failed; the whole log is $VENV/jaeger-build.log"
    rm -rf "$work"
    return 1
  fi
  mv "$work/jaeger" "$VENV/bin/jaeger"
  rm -rf "$work"
  touch "$stamp"
}

docker_up() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

setup_docker() {
  # The tests' Docker engine: Debian's docker.io, started as dependency-notes.md section 3 describes.
  if [ -n "${DRILL_SKIP_DOCKER:-}" ] || docker_up; then return 0; fi
  local sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  if [ ! -x /usr/sbin/dockerd ] && ! command -v dockerd >/dev/null 2>&1; then
    log "installing the Docker engine (Debian docker.io)"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
  fi
  log "starting dockerd (vfs storage, no iptables, no bridge; host networking only)"
  $sudo sh -c 'nohup dockerd --storage-driver=vfs --iptables=false --bridge=none >/tmp/llm-drill-dockerd.log 2>&1 &'
  for _ in $(seq 1 60); do
    if docker_up; then return 0; fi
    sleep 0.5
  done
  log "dockerd did not come up; see /tmp/llm-drill-dockerd.log (Docker tests will fail)"
}
