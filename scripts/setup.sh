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
