# Sourced by ./dev. The checks CI runs before the tests (.ci/run); configured in pyproject.toml.
# Every check runs, even after one fails, so one pass lists every finding; lint returns 1 when any failed.

LINT_PATHS=(drill faults tests bench)

lint() {
  local failed=() started=$SECONDS
  lint_step "ruff check" "$VENV/bin/ruff" check --output-format concise "${LINT_PATHS[@]}" || failed+=("ruff check")
  lint_step "ruff format --check" "$VENV/bin/ruff" format --check --output-format concise "${LINT_PATHS[@]}" || failed+=("ruff format")
  lint_step "mypy (drill, faults)" "$VENV/bin/mypy" || failed+=("mypy")
  lint_step "lint-imports (layer contracts)" "$VENV/bin/lint-imports" --no-logo || failed+=("lint-imports")
  if [ "${#failed[@]}" -gt 0 ]; then
    log "lint failed in $((SECONDS - started)) s: ${failed[*]} (fix: ruff check --fix, ruff format; see CONTRIBUTING.md)"
    return 1
  fi
  log "lint clean in $((SECONDS - started)) s"
}

lint_step() {  # lint_step NAME COMMAND...: run COMMAND, say NAME and whether it passed
  local name="$1"; shift
  log "lint: $name"
  "$@"
}
