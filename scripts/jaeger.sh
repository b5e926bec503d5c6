# Sourced by scripts/setup.sh. The real Jaeger (v2 all-in-one) for the jaeger_api trace source's tests, built from
# the Go module proxy by scripts/jaeger_build.py and cached outside the checkout (docs/dependencies.md).
#   setup_jaeger         build it now (./dev setup), unless cached or JAEGER_BIN names one
#   start_jaeger_build   start the build in the background at nice 19 (./dev test); the Jaeger tests wait for it
#                        and fail with the build log's tail if it failed

jaeger_go() {
  # A Go new enough to build Jaeger on PATH (setup_go's, which installs one when it can); fails saying what to do.
  local versions; versions="$("$(cached_tool_python)" scripts/jaeger_build.py versions)" || return 1
  setup_go "${versions#* }" "Jaeger ${versions%% *}" "point the tests at a built one: JAEGER_BIN=/path/to/jaeger"
}

setup_jaeger() {
  cached_tool_ready jaeger_build JAEGER_BIN && return 0
  jaeger_go || return 1
  cached_tool_make jaeger_build build \
    "building Jaeger with Go (about 3 minutes of CPU on a fresh machine, once; cached)" \
    "building Jaeger failed (the log's tail is above)"
}

start_jaeger_build() {
  cached_tool_ready jaeger_build JAEGER_BIN && return 0
  jaeger_go || return 1
  cached_tool_start jaeger_build "the Jaeger build"
}
